"""``plan()``: the passes in order, and the ``Plan`` they produce.

    plan(graph, contexts)
      fuse_chains      chains -> one unit each (fuse=True)                _fuse
      build_problem    units × contexts: seconds, memory, edge sizes      _problem
      strategy         "heft" | "peft" | "merge" | "auto" -> Schedule     _list_schedule,
                                                                          _partition
      Plan             per task: context, slot, start, finish, subgraph;
                       simulate(), gantt(path), summary()

``auto`` runs every strategy that suits the graph, and HEFT confined to each
context that can run everything (no data moves at all), and keeps the one
whose simulated makespan is best (each already holds the memory caps). Above
20,000 units it runs HEFT alone, above 100,000 one greedy earliest-finish
pass (``_greedy``; budgets are then held by the executor's admission only). One context
needs no placement at all: its plan is the priority order (``_order``), which
is what ``run()`` uses on a machine with one NUMA node, at no cost beyond the
order it always computed; its memory budget is held at run time by the
executor's admission, and its expected times are list-scheduled (with the cap)
only when asked for.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import ConfigError, PlanError
from chunkgraph._util import format_bytes
from chunkgraph.graph import Graph, TaskRef
from chunkgraph.planning._contexts import (
    Context,
    Links,
    check_contexts,
    check_links,
    local_contexts,
)
from chunkgraph.planning._fuse import fuse_chains
from chunkgraph.planning._gantt import draw_gantt
from chunkgraph.planning._greedy import greedy_eft
from chunkgraph.planning._list_schedule import descending, heft, list_schedule, peft
from chunkgraph.planning._order import order
from chunkgraph.planning._partition import merge
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._rank import upward_rank
from chunkgraph.planning._schedule import Schedule
from chunkgraph.planning._simulate import SimResult, simulate

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

Strategy = Literal["auto", "heft", "peft", "merge"]
STRATEGIES: tuple[Strategy, ...] = ("auto", "heft", "peft", "merge")

# ``auto`` tries every strategy up to this many units, and only HEFT above it
# (O(units × contexts × slots)), so a big graph plans in seconds...
AUTO_TRY_ALL_UNITS = 20_000
# ...and above this many, one greedy earliest-finish pass (``_greedy``): HEFT's
# rule without its gap search, a few µs per unit (1,000,000 units: seconds).
AUTO_GREEDY_UNITS = 100_000


@dataclass(frozen=True)
class Subgraph:
    """A unit of dispatch: tasks planned to run together on one context.

    Attributes:
        id: Its index among the plan's subgraphs.
        context: The Context it runs on.
        tasks: Its graph task ids, in planned order.
        start: Its planned start, in seconds from the plan's start.
        finish: Its planned finish, in seconds from the plan's start.
    """

    id: int
    context: Context
    tasks: IntArray  # graph task ids, in planned order
    start: float
    finish: float


class Plan:
    """Which context, slot and time each task of a graph is planned for.

    Arrays are indexed by graph task id; a task the targets do not need has
    context -1. ``order`` is the priority the executor follows (a topological
    order: lower starts first).

    ``chunkgraph.plan`` makes Plans; the constructor is its last step.

    Args:
        graph: The graph planned.
        problem: The units (fused chains) and contexts the passes planned.
        schedule: Where and when each unit runs; None: computed on first use (a
            one-context plan, from ``priority``).
        strategy: The strategy that made it: ``"heft"``, ``"peft"``, ``"merge"``, or
            ``"order"`` (a one-context plan: the priority order).
        memory_cap: The byte budget of each context, in the order of the contexts.
        targets: The ids of the tasks whose results are wanted.
        planning_seconds: How long planning took.
        priority: The task priority the schedule follows (lower first); None: derived
            from the schedule's start times.
    """

    def __init__(
        self,
        graph: Graph,
        problem: Problem,
        schedule: Schedule | None,
        strategy: str,
        memory_cap: FloatArray,
        targets: IntArray,
        planning_seconds: float,
        priority: IntArray | None = None,
    ) -> None:
        self.graph = graph
        self.problem = problem
        self.contexts = problem.contexts
        self.strategy = strategy
        self.memory_cap = memory_cap
        self.targets = targets
        self.planning_seconds = planning_seconds
        self._schedule = schedule
        self._priority = priority
        self._length = len(graph)

    # -- what the executor reads ---------------------------------------------------------

    @property
    def tasks(self) -> int:
        """How many tasks the graph had when it was planned."""
        return self._length

    def fused_through(self, targets: Sequence[int]) -> list[int]:
        """Those of ``targets`` that end no unit: fused into a chain, their results stay
        inside the worker (a run that wants them needs a plan made for them).

        Args:
            targets: Task ids.
        """
        p = self.problem
        ids = np.asarray(targets, dtype=np.int64)
        units = p.unit_of[ids]
        planned = units >= 0
        tails = p.member_idx[p.member_ptr[units[planned] + 1] - 1]
        result: list[int] = ids[planned][tails != ids[planned]].tolist()
        return result

    @property
    def schedule(self) -> Schedule:
        """The unit-level schedule (computed on first use for a one-context plan)."""
        if self._schedule is None:
            p = self.problem
            if np.isinf(self.memory_cap).all() or not (p.memory.any() or p.output_bytes.any()):
                self._schedule = _in_order(p, self._unit_priority())
            else:
                self._schedule = list_schedule(p, self._unit_priority(), memory_cap=self.memory_cap)
        return self._schedule

    def _unit_priority(self) -> IntArray:
        assert self._priority is not None
        p = self.problem
        heads = p.member_idx[p.member_ptr[:-1]]
        return np.argsort(np.argsort(self._priority[heads], kind="stable"), kind="stable")

    @property
    def order(self) -> IntArray:
        """Priority of every task (lower starts first); a topological order."""
        if self._priority is None:
            s, p = self.schedule, self.problem
            start = np.full(self._length, np.inf)
            position = np.zeros(self._length, np.int64)
            sizes = np.diff(p.member_ptr)
            start[p.member_idx] = np.repeat(s.start, sizes)
            topo = np.empty(self._length, np.int64)
            topo[self.graph.topological_order()] = np.arange(self._length)
            position[:] = topo
            keys = np.lexsort((position, start))
            priority = np.empty(self._length, np.int64)
            priority[keys] = np.arange(self._length)
            self._priority = priority
        return self._priority

    @property
    def task_context(self) -> IntArray:
        """Context index of every task (-1: not needed by the targets)."""
        if len(self.contexts) == 1 and self._schedule is None:
            out = np.where(self.problem.unit_of >= 0, 0, -1).astype(np.int64)
            return out
        return self._per_task(self.schedule.context)

    @property
    def task_slot(self) -> IntArray:
        """Slot (0 .. slots-1 of its context) of every task (-1: not needed)."""
        return self._per_task(self.schedule.slot)

    @property
    def task_subgraph(self) -> IntArray:
        """Subgraph id of every task (-1: not needed)."""
        if self._schedule is None:
            return self.problem.unit_of  # one context: each unit is dispatched alone
        return self._per_task(self.schedule.subgraph)

    def _per_task(self, values: IntArray) -> IntArray:
        """A per-unit integer column spread over the units' tasks (-1: not planned)."""
        p = self.problem
        out = np.full(self._length, -1, dtype=np.int64)
        out[p.member_idx] = np.repeat(values, np.diff(p.member_ptr))
        return out

    # -- what a person reads ---------------------------------------------------------------

    def times(self) -> tuple[FloatArray, FloatArray]:
        """Expected (start, finish) of every task; a fused unit's time is split among
        its tasks in proportion to their costs (nan: not needed)."""
        s, p = self.schedule, self.problem
        start = np.full(self._length, np.nan)
        finish = np.full(self._length, np.nan)
        base = np.asarray(self.graph.costs().seconds, dtype=np.float64)
        for u in range(len(p)):
            members = p.members(u)
            if len(members) == 1:
                start[members[0]], finish[members[0]] = s.start[u], s.finish[u]
                continue
            weights = base[members]
            total = float(weights.sum()) or float(len(members))
            share = (weights if weights.sum() else np.ones(len(members))) / total
            edges = s.start[u] + np.concatenate(([0.0], np.cumsum(share))) * (
                s.finish[u] - s.start[u]
            )
            start[members], finish[members] = edges[:-1], edges[1:]
        return start, finish

    @property
    def makespan(self) -> float:
        """The expected end of the run, in seconds."""
        return self.schedule.makespan

    def subgraphs(self) -> list[Subgraph]:
        """The units of dispatch, in order of expected start."""
        s, p = self.schedule, self.problem
        groups: dict[int, list[int]] = {}
        for u in np.argsort(s.start, kind="stable").tolist():
            groups.setdefault(int(s.subgraph[u]), []).append(u)
        out = []
        for sid, units in groups.items():
            tasks = np.concatenate([p.members(u) for u in units])
            out.append(
                Subgraph(
                    sid,
                    self.contexts[int(s.context[units[0]])],
                    tasks,
                    float(s.start[units].min()),
                    float(s.finish[units].max()),
                )
            )
        return sorted(out, key=lambda sg: (sg.start, sg.id))

    def context_of(self, task: TaskRef | int | str) -> Context | None:
        """The context ``task`` is planned on (None: not needed by the targets).

        Args:
            task: A TaskRef of the planned graph, a task id or a name.

        Raises:
            ConfigError: When the task was added to the graph after this plan was made.
        """
        t = self.graph.task_id(task)
        if t >= self._length:
            raise ConfigError(
                f"task {self.graph.name(t)!r} was added after this plan was made; plan again"
            )
        c = int(self.task_context[t])
        return None if c < 0 else self.contexts[c]

    def simulate(self) -> SimResult:
        """Replay the plan with the cost model: makespan, busy time and peak memory per
        context, bytes moved between contexts, and the lower bound."""
        return simulate(self.problem, self.schedule, self.memory_cap, self.targets)

    def gantt(self, path: str | object) -> None:
        """Draw the plan as a PNG, PDF or SVG (``path``'s suffix: .png, .pdf, .svg): one row
        per slot, fused tasks labelled with their names.

        Args:
            path: The file written (a ``str`` or path-like); its suffix picks the format.
        """
        draw_gantt(self, path)

    def summary(self) -> str:
        """A few lines: strategy, tasks and units, makespan against the lower bound, per
        context its busy share, peak memory against its budget."""
        sim = self.simulate()
        p = self.problem
        fused = len(p.member_idx) - len(p)
        lines = [
            f"plan: {len(p.member_idx)} tasks as {len(p)} units ({fused} fused away), "
            f"strategy {self.strategy}, planned in {self.planning_seconds:.3f} s",
            f"makespan {sim.makespan:.4g} s (lower bound {sim.lower_bound:.4g} s, "
            f"{sim.makespan / sim.lower_bound if sim.lower_bound > 0 else 1.0:.2f}x); "
            f"{format_bytes(sim.bytes_moved)} moved between contexts",
        ]
        for c, ctx in enumerate(self.contexts):
            busy = sim.busy[c] / (ctx.slots * sim.makespan) if sim.makespan > 0 else 0.0
            cap = self.memory_cap[c]
            budget = "no budget" if math.isinf(cap) else f"budget {format_bytes(cap)}"
            lines.append(
                f"  {ctx.name:<10} {ctx.kind} x{ctx.slots}: {int((self.task_context == c).sum())} "
                f"tasks, busy {busy:.0%}, peak memory {format_bytes(sim.peak_memory[c])} ({budget})"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        names = ", ".join(c.name for c in self.contexts)
        return f"<Plan: {self._length} tasks on {names}, strategy {self.strategy}>"


def _in_order(problem: Problem, priority: IntArray) -> Schedule:
    """The times of a one-context plan run the way the executor runs it: units start in
    priority order, each on the slot that frees first, once its inputs are done.

    One pass, a heap of slot free times: O(units log slots + edges), where list
    scheduling with insertion would search every idle gap of every slot.
    """
    n = len(problem)
    slots = problem.contexts[0].slots
    seconds = problem.seconds[:, 0].tolist()
    dep_ptr, dep_idx = problem.dep_ptr.tolist(), problem.dep_idx.tolist()
    start = [0.0] * n
    finish = [0.0] * n
    slot = [0] * n
    free = [(0.0, s) for s in range(slots)]
    for u in np.argsort(priority, kind="stable").tolist():
        ready = max((finish[d] for d in dep_idx[dep_ptr[u] : dep_ptr[u + 1]]), default=0.0)
        at, s = heapq.heappop(free)
        start[u] = max(at, ready)
        finish[u] = start[u] + seconds[u]
        slot[u] = s
        heapq.heappush(free, (finish[u], s))
    return Schedule(
        np.zeros(n, np.int64),
        np.asarray(slot, np.int64),
        np.asarray(start),
        np.asarray(finish),
        np.arange(n, dtype=np.int64),
    )


def plan(
    graph: Graph,
    contexts: Sequence[Context] | Context | None = None,
    *,
    strategy: Strategy = "auto",
    fuse: bool = True,
    memory: float | Mapping[str, float] | None = None,
    links: Links = None,
    targets: Sequence[TaskRef | int | str] | None = None,
    gpu_fallback: bool = False,
) -> Plan:
    """Plan ``graph`` on ``contexts``.

    Args:
        graph: The graph to plan.
        contexts: The contexts to plan on: a sequence, one Context, or None for
            ``local_contexts()``.
        strategy: ``"heft"``, ``"peft"``, ``"merge"`` (partitioning by merging along
            the critical path, then list scheduling), or ``"auto"`` (the default: the
            best simulated of them).
        fuse: Run single chains of tasks as one unit.
        memory: A byte budget for every context, or one per context name, instead of
            the contexts' own ``memory``; None: theirs.
        links: A Link for every pair of hosts, or Links by ``(name, name)``; None:
            shared memory within a host, a 10 Gb/s network between hosts.
        targets: The tasks whose results are wanted (TaskRefs, ids or names); None:
            every sink. Only what they need is planned, and they are never fused away.
        gpu_fallback: When no context is a GPU, plan tasks asking for ``{"gpu": ...}``
            on CPU contexts instead of refusing them.

    Returns:
        The Plan: each task's context, slot and time, and the priority order.

    Raises:
        PlanError: When a task can run on no context (no context has its resources, or
            its own memory is above every budget that could run it).
        ConfigError: When an option is invalid (an unknown strategy, a bad budget).

    >>> import chunkgraph as cg
    >>> g = cg.Graph()
    >>> a = g.add(abs, -1, cost=cg.Cost(seconds=2))
    >>> b = g.add(abs, a, cost=cg.Cost(seconds=3))
    >>> p = cg.plan(g, [cg.Context("cpu", slots=2)])
    >>> p.makespan, len(p.problem)  # the chain runs as one fused unit
    (5.0, 1)
    """
    began = time.perf_counter()
    if not isinstance(graph, Graph):
        raise ConfigError(f"plan() takes a Graph first, got {type(graph).__name__}")
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not isinstance(fuse, bool):
        raise ConfigError(f"fuse must be True or False, got {fuse!r}")
    if not isinstance(gpu_fallback, bool):
        raise ConfigError(f"gpu_fallback must be True or False, got {gpu_fallback!r}")
    graph.validate()
    ctx = check_contexts(local_contexts() if contexts is None else contexts)  # type: ignore[arg-type]
    check_links(links, ctx)
    cap = _memory_caps(ctx, memory)
    target_ids = _target_ids(graph, targets)

    member_ptr, member_idx = fuse_chains(graph, target_ids, fuse=fuse)
    problem = build_problem(
        graph, ctx, links, member_ptr=member_ptr, member_idx=member_idx, targets=target_ids,
        gpu_fallback=gpu_fallback,
    )  # fmt: skip
    _check_fits(problem, cap)
    if len(ctx) == 1 and strategy == "auto":
        # One context: placement is trivial and the order is the plan (its budget is
        # held by the executor's admission; the timing is list-scheduled on demand).

        priority = graph.cached("order", order)
        return Plan(graph, problem, None, "order", cap, target_ids,
                    time.perf_counter() - began, priority)  # fmt: skip
    chosen, schedule = _run_strategy(problem, strategy, cap, target_ids)
    return Plan(graph, problem, schedule, chosen, cap, target_ids, time.perf_counter() - began)


def _target_ids(graph: Graph, targets: Sequence[TaskRef | int | str] | None) -> IntArray:
    """Task ids of ``targets`` (default: the sinks); plain ids are checked in one step."""
    if targets is None:
        return graph.sinks().astype(np.int64)
    if isinstance(targets, TaskRef | str | int):
        targets = [targets]
    if isinstance(targets, np.ndarray) or all(type(t) is int for t in targets):
        ids = np.asarray(targets, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(graph)):
            bad = int(ids[(ids < 0) | (ids >= len(graph))][0])
            graph.task_id(bad)  # raises the GraphError that names the range
        return ids
    return np.array([graph.task_id(t) for t in targets], dtype=np.int64)


def _memory_caps(
    contexts: tuple[Context, ...], memory: float | Mapping[str, float] | None
) -> FloatArray:
    caps = np.array([float(c.memory) for c in contexts])
    if memory is None:
        return caps
    if isinstance(memory, Mapping):
        names = {c.name: i for i, c in enumerate(contexts)}
        for name, value in memory.items():
            if name not in names:
                raise ConfigError(
                    f"memory names context {name!r}, which is not one of {sorted(names)}"
                )
            caps[names[name]] = _check_budget(value)
        return caps
    return np.full(len(contexts), _check_budget(memory))


def _check_budget(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise ConfigError(f"memory must be a positive number of bytes, got {value!r}")
    return float(value)


def _check_fits(problem: Problem, cap: FloatArray) -> None:
    """PlanError for a task whose own memory exceeds every context that can run it."""
    if np.isinf(cap).all() or not len(problem):
        return
    can_run = problem.can_run()
    fits = (problem.memory[:, None] <= cap[None, :]) & can_run
    bad = np.flatnonzero(~fits.any(axis=1))
    if len(bad):
        u = int(bad[0])
        # The largest of the contexts that can run it (build_problem made sure there is one).
        largest = int(np.argmax(np.where(can_run[u], cap, -np.inf)))
        raise PlanError(
            f"task {problem.label(u)!r} needs {format_bytes(problem.memory[u])} while it runs, "
            f"more than any context that can run it has; the largest is "
            f"{problem.contexts[largest].name!r} with {format_bytes(cap[largest])}. Raise its "
            "memory budget, or split the task"
        )


def _strategies() -> dict[str, Callable[[Problem, FloatArray], Schedule]]:
    return {"heft": heft, "peft": peft, "merge": merge}


def _run_strategy(
    problem: Problem, strategy: Strategy, cap: FloatArray, targets: IntArray
) -> tuple[str, Schedule]:
    """The chosen strategy's schedule (``auto``: the best replayed makespan of those that
    plan within the budgets). Where a budget binds so hard that a strategy's
    breadth-first priorities leave no room (it opened every branch before closing
    any), the schedule is made again with depth-first priorities (``_order``)."""
    table = _strategies()
    if strategy == "auto" and len(problem) > AUTO_GREEDY_UNITS:
        return "greedy earliest finish", greedy_eft(problem, cap)
    names = [strategy] if strategy != "auto" else (
        list(table) if len(problem) <= AUTO_TRY_ALL_UNITS else ["heft"]
    )  # fmt: skip
    best: tuple[float, str, Schedule] | None = None
    first_error: PlanError | None = None
    for name in names:
        try:
            schedule, label = table[name](problem, cap), name
        except PlanError as error:
            if np.isinf(cap).all():
                raise
            first_error = first_error or error
            try:
                schedule, label = _depth_first(problem, cap), f"{name}, depth-first"
            except PlanError:
                continue
        makespan = simulate(problem, schedule, cap, targets).makespan
        if best is None or makespan < best[0] - 1e-12:
            best = (makespan, label, schedule)
    if strategy == "auto":
        for c, schedule in _one_context_schedules(problem, cap):
            makespan = simulate(problem, schedule, cap, targets).makespan
            if best is None or makespan < best[0] - 1e-12:
                best = (makespan, f"heft on {problem.contexts[c].name} alone", schedule)
    if best is None:
        assert first_error is not None
        raise first_error
    return best[1], best[2]


def _one_context_schedules(problem: Problem, cap: FloatArray) -> list[tuple[int, Schedule]]:
    """HEFT with every unit on one context, for each context that can run them all.

    Moving data is free within a context, so when it costs more than the compute
    it carries (a high communication-to-computation ratio) keeping everything in
    one place beats spreading it; the list schedulers decide task by task and
    rarely find that whole-graph answer.
    """
    if len(problem.contexts) < 2 or len(problem) > AUTO_TRY_ALL_UNITS:
        return []
    everywhere = np.flatnonzero(problem.can_run().all(axis=0))
    out = []
    priority = descending(upward_rank(problem))
    for c in everywhere.tolist():
        fixed = np.full(len(problem), c, dtype=np.int64)
        try:
            out.append((c, list_schedule(problem, priority, memory_cap=cap, fixed_context=fixed)))
        except PlanError:
            continue
    return out


def _depth_first(problem: Problem, cap: FloatArray) -> Schedule:
    """List scheduling by the depth-first priority order: each branch is closed (its
    held results consumed) before the next opens, the order that holds least."""
    priority = problem.graph.cached("order", order)
    heads = problem.member_idx[problem.member_ptr[:-1]]
    unit_priority = np.argsort(np.argsort(priority[heads], kind="stable"), kind="stable")
    return list_schedule(problem, unit_priority.astype(np.int64), memory_cap=cap)
