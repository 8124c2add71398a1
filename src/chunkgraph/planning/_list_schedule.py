"""List scheduling of a Problem: HEFT and PEFT, under per-context memory caps.

Policy (Topcuoglu, Hariri & Wu 2002; Arabnejad & Barbosa 2014), one unit at a time:

    ready list ── the unit with the smallest priority[u] whose dependencies are all placed
        │
        v
    every context c that can run it (seconds[u, c] finite; fixed_context[u] if given)
      × every slot of c
        │   data ready   r_c = max over deps d of finish[d] + comm(bytes, context[d], c)
        │   start        the earliest idle gap on the slot at or after r_c that is long
        │                enough for seconds[u, c] ("insertion": a later unit may fill a
        │                hole left before an earlier one) and where the memory fits
        v
    the (c, slot) of least  finish              choose="eft"  (HEFT)
                     or     finish + oct[u, c]  choose="oct"  (PEFT: finish early, but
                                                 not on a context that leaves the rest
                                                 of the graph far from its best)
    ties: the lower context index, then the lower slot

``heft`` ranks by upward rank (``_rank.upward_rank``), ``peft`` by the mean of the
optimistic cost table over the contexts that can run the unit; both take the
larger rank first and, on a tie, the smaller id. Taking ready units (not a fixed
list) lets a caller pass any priority, topological or not.

Memory. ``memory_cap[c]`` is context c's budget in bytes (inf: none). When every
cap is inf, no memory is tracked at all, so a big graph plans at the speed of
the time search alone. Otherwise each context keeps a ``MemoryProfile``
(``_memory``, whose doc states the rules of what is live; ``_simulate`` replays a
Schedule with the same rules) and a placement is taken only where it fits:

    during [start, finish)  memory[u] + the bytes of every input that crosses contexts
    from finish on          output_bytes[u], held until +inf until its last consumer is
                            placed, then trimmed to the latest finish among them
    released                the outputs u is the last consumer of, from
                            max(u's finish, the other consumers' finishes)

Where a unit fits only later, the search moves on along the profile; where it
never fits on a context, that context is skipped. Breadth first while the
budget allows, depth first where it binds: when the unit of highest priority
fits nowhere (the results held so far leave no room at any time), the other
ready units are tried in priority order, first those that release a held
output (they finish a branch), then the rest. When none fits, PlanError names
the unit and the budget. A unit that fit nowhere is not tried again until
something is released or it becomes the last consumer of an input.

A unit held back by memory starts later than its slot and its inputs allow: the
schedule's start times carry that wait, and a run keeps it by admitting a unit
only when its memory is free. A replay that recomputes starts from the slot
order and the inputs alone would start it sooner and could exceed the cap.

Cost: per unit, one numpy pass over its inputs, then per allowed context and
slot a walk over the slot's idle holes from the data-ready time (the first slot
that can start at that time ends the walk over slots). With budgets, each step
of the memory search is a few binary searches and a ``max`` over a slice of the
profile. On 32 slots of two contexts: about 40,000 units a second without budgets,
4,000 with.

State of one run (``_ListScheduler``):

    waiting[u]      dependencies of u not yet placed (u is ready at 0)
    ready           heap of (priority[u], u)
    context/slot/start/finish
                    the answer so far (Schedule arrays)
    slots[c][s]     the idle holes of slot s of context c and when it is idle for good
                    (``_Slot``); holes shorter than the shortest unit are forgotten
    profiles[c]     MemoryProfile of c (None: no caps)
    pending[d]      consumer edges of d not yet placed; last_finish[d] the latest
                    finish among the placed ones
    blocked         ready units known to fit nowhere right now
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import ConfigError, PlanError
from chunkgraph._util import format_bytes
from chunkgraph.planning._memory import MemoryProfile, Release
from chunkgraph.planning._problem import Problem
from chunkgraph.planning._rank import optimistic_cost_table, upward_rank
from chunkgraph.planning._schedule import Schedule

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

Choose = Literal["eft", "oct"]


def heft(problem: Problem, memory_cap: FloatArray) -> Schedule:
    """HEFT: larger upward rank first, each unit where it finishes earliest."""
    return list_schedule(problem, descending(upward_rank(problem)), memory_cap=memory_cap)


def peft(problem: Problem, memory_cap: FloatArray) -> Schedule:
    """PEFT: larger mean optimistic cost first, each unit where finish + OCT is least."""
    table = optimistic_cost_table(problem)
    runs = problem.can_run()
    rank = np.where(runs, table, 0.0).sum(axis=1) / np.maximum(runs.sum(axis=1), 1)
    return list_schedule(problem, descending(rank), memory_cap=memory_cap, choose="oct", oct=table)


def descending(rank: FloatArray) -> IntArray:
    """Priorities (0 first) that take the larger rank first and, on a tie, the smaller id.

    >>> descending(np.array([3.0, 5.0, 3.0])).tolist()
    [1, 0, 2]
    """
    n = len(rank)
    priority = np.empty(n, np.int64)
    priority[np.lexsort((np.arange(n), -rank))] = np.arange(n)
    return priority


def list_schedule(
    problem: Problem,
    priority: npt.ArrayLike,
    *,
    memory_cap: npt.ArrayLike,
    fixed_context: IntArray | None = None,
    choose: Choose = "eft",
    oct: FloatArray | None = None,
    subgraph: IntArray | None = None,
) -> Schedule:
    """Place every unit of ``problem`` by the policy of the module doc.

    ``priority[u]``: smaller is taken first among ready units. ``memory_cap[c]``:
    bytes (inf: none). ``fixed_context[u]``: the context u must run on (< 0: any).
    ``choose``: "eft" or "oct" (needs ``oct``, the ``(units, contexts)`` table).
    ``subgraph``: the units of dispatch to record (default: each unit alone).

    Raises PlanError when a unit fits in no context's memory.
    """
    if choose not in ("eft", "oct"):
        raise ConfigError(f"choose must be 'eft' or 'oct', got {choose!r}")
    k = len(problem.contexts)
    key = None
    if choose == "oct":
        key = optimistic_cost_table(problem) if oct is None else np.asarray(oct, np.float64)
    cap = np.broadcast_to(np.asarray(memory_cap, dtype=np.float64), (k,))
    scheduler = _ListScheduler(problem, np.asarray(priority, np.float64), cap, key, fixed_context)
    schedule = scheduler.run()
    if subgraph is not None:
        schedule.subgraph = np.array(subgraph, dtype=np.int64, copy=True)
    return schedule


class _Slot:
    """One worker's timeline: the idle holes between booked units, and ``end``, from
    which it is idle for good. Holes shorter than ``shortest`` (the shortest unit of
    the problem) can never take a unit and are dropped, so a search walks only the
    holes that could.
    """

    def __init__(self, shortest: float) -> None:
        self.shortest = shortest
        self.hole_start: list[float] = []
        self.hole_end: list[float] = []
        self.end = 0.0

    def gap(self, t: float, duration: float) -> float:
        """The earliest start >= t where the slot is idle for ``duration``."""
        starts, ends = self.hole_start, self.hole_end
        for i in range(bisect.bisect_right(ends, t), len(ends)):
            start = max(t, starts[i])
            if start + duration <= ends[i]:
                return start
        return max(t, self.end)

    def book(self, start: float, finish: float) -> None:
        """Mark [start, finish) busy; it must be idle (``gap`` found it)."""
        if not finish > start:
            return
        if start >= self.end:
            self._hole(len(self.hole_start), self.end, start)
            self.end = finish
            return
        i = bisect.bisect_right(self.hole_start, start) - 1
        lo, hi = self.hole_start.pop(i), self.hole_end.pop(i)
        self._hole(i, finish, hi)
        self._hole(i, lo, start)

    def _hole(self, i: int, start: float, end: float) -> None:
        if end - start >= self.shortest:
            self.hole_start.insert(i, start)
            self.hole_end.insert(i, end)


@dataclass(frozen=True)
class _Placement:
    context: int
    slot: int
    start: float
    finish: float


class _ListScheduler:
    """One run of the list scheduler (state: see the module doc)."""

    def __init__(
        self,
        problem: Problem,
        priority: FloatArray,
        cap: FloatArray,
        key: FloatArray | None,
        fixed_context: IntArray | None,
    ) -> None:
        self.p = problem
        n = len(problem)
        self.priority = priority.tolist()
        self.cap = cap
        self.key = key  # added to the finish to compare placements (None: nothing)
        self.fixed = None if fixed_context is None else np.asarray(fixed_context).tolist()
        self.schedule = Schedule.empty(n)
        self.finish = self.schedule.finish  # read per dependency: one array, no copies
        self.context = self.schedule.context
        positive = problem.seconds[(problem.seconds > 0) & np.isfinite(problem.seconds)]
        shortest = float(positive.min()) if len(positive) else math.inf
        self.slots = [[_Slot(shortest) for _ in range(ctx.slots)] for ctx in problem.contexts]
        self.dep_ptr = problem.dep_ptr.tolist()
        self.dep_idx = problem.dep_idx.tolist()
        self.out_ptr = problem.out_ptr.tolist()
        self.out_idx = problem.out_idx.tolist()
        self.waiting = np.diff(problem.dep_ptr).tolist()
        self.ready = [(self.priority[u], u) for u in range(n) if self.waiting[u] == 0]
        heapq.heapify(self.ready)
        # Memory: only when some context has a budget.
        self.profiles: list[MemoryProfile] | None = None
        if not np.isinf(cap).all():
            self.profiles = [MemoryProfile(c) for c in cap]
        self.pending = np.diff(problem.out_ptr).tolist()
        self.last_finish = [-math.inf] * n
        self.blocked: set[int] = set()

    # -- the loop --------------------------------------------------------------------

    def run(self) -> Schedule:
        while self.ready:
            _, u = self.ready[0]
            where = None if u in self.blocked else self._best(u)
            if where is None:
                u, where = self._fallback(u)
            else:
                heapq.heappop(self.ready)
            self._commit(u, where)
        return self.schedule

    def _fallback(self, top: int) -> tuple[int, _Placement]:
        """The first other ready unit that fits, those that release memory first."""
        if not any(math.isfinite(self.p.seconds[top, c]) for c in self._allowed(top)):
            raise self._cannot_run(top)  # fixed to a context that cannot run it
        # Otherwise memory refused it (without budgets nothing else does).
        self.blocked.add(top)
        others = [u for _, u in sorted(self.ready) if u not in self.blocked]
        releasing = [u for u in others if self._releases_any(u)]
        rest = [u for u in others if not self._releases_any(u)]
        for u in releasing + rest:
            where = self._best(u)
            if where is not None:
                self.ready.remove((self.priority[u], u))
                heapq.heapify(self.ready)
                return u, where
            self.blocked.add(u)
        raise self._no_room(top)

    # -- where one unit goes ---------------------------------------------------------

    def _best(self, u: int) -> _Placement | None:
        """The (context, slot, start) of least key for u, or None if it fits nowhere."""
        p = self.p
        seconds = p.seconds[u]
        arrive = self._data_ready(u)
        contexts = range(len(p.contexts))
        fixed = self.fixed[u] if self.fixed is not None else -1
        if fixed >= 0:
            contexts = range(fixed, fixed + 1)  # the caller's choice, runnable or not
        best: _Placement | None = None
        best_key = math.inf
        for c in contexts:
            duration = float(seconds[c])
            if not math.isfinite(duration):
                continue
            needs = None if self.profiles is None else self._memory_needs(u, c)
            for s in range(p.contexts[c].slots):
                start = self._earliest_start(c, s, float(arrive[c]), duration, needs)
                if start is None:
                    continue  # memory never fits where this slot is idle
                key = start + duration
                if self.key is not None:
                    key += float(self.key[u, c])
                if key < best_key:
                    best, best_key = _Placement(c, s, start, start + duration), key
                if start <= arrive[c]:
                    break  # no later slot can start sooner; ties go to the lower slot
        return best

    def _data_ready(self, u: int) -> FloatArray:
        """Per context: when all of u's inputs can be there."""
        p = self.p
        lo, hi = self.dep_ptr[u], self.dep_ptr[u + 1]
        if hi == lo:
            return np.zeros(len(p.contexts))
        deps = p.dep_idx[lo:hi]
        src = self.context[deps]
        # Same context: latency 0 and bandwidth inf on the diagonal, so no transfer time.
        moved = p.latency[src] + p.dep_bytes[lo:hi, None] / p.bandwidth[src]
        return np.asarray((self.finish[deps][:, None] + moved).max(axis=0), np.float64)

    def _earliest_start(
        self,
        c: int,
        s: int,
        lo: float,
        duration: float,
        needs: tuple[float, float, list[Release]] | None,
    ) -> float | None:
        """Earliest start >= lo on slot s of c (None: the memory never fits there)."""
        slot = self.slots[c][s]
        if needs is None or self.profiles is None:
            return slot.gap(lo, duration)
        during, after, releases = needs
        return self.profiles[c].earliest_fit(
            lo,
            duration,
            during=during,
            after=after,
            releases=releases,
            gap=lambda t: slot.gap(t, duration),
        )

    def _memory_needs(self, u: int, c: int) -> tuple[float, float, list[Release]]:
        """What placing u on c adds and releases on c (module doc, Memory)."""
        p = self.p
        during = float(p.memory[u])
        lo, hi = self.dep_ptr[u], self.dep_ptr[u + 1]
        for e in range(lo, hi):
            if self.context[self.dep_idx[e]] != c:
                during += float(p.dep_bytes[e])
        releases = [
            (self.last_finish[d], float(p.output_bytes[d]))
            for d in self._last_uses(u)
            if self.context[d] == c
        ]
        return during, float(p.output_bytes[u]), releases

    def _last_uses(self, u: int) -> list[int]:
        """The held outputs (not kept, non-empty) whose last unplaced consumer is u."""
        deps = self.dep_idx[self.dep_ptr[u] : self.dep_ptr[u + 1]]
        counts = Counter(deps)
        p = self.p
        return [
            d
            for d, m in counts.items()
            if self.pending[d] == m and not p.keep[d] and p.output_bytes[d] > 0
        ]

    def _releases_any(self, u: int) -> bool:
        return self.profiles is not None and bool(self._last_uses(u))

    # -- placing it ------------------------------------------------------------------

    def _commit(self, u: int, where: _Placement) -> None:
        c, start, finish = where.context, where.start, where.finish
        s = self.schedule
        s.context[u], s.slot[u], s.start[u], s.finish[u] = c, where.slot, start, finish
        self.slots[c][where.slot].book(start, finish)
        if self.profiles is not None:
            self._commit_memory(u, c, start, finish)
        for v in self.out_idx[self.out_ptr[u] : self.out_ptr[u + 1]]:
            self.waiting[v] -= 1
            if self.waiting[v] == 0:
                heapq.heappush(self.ready, (self.priority[v], v))

    def _commit_memory(self, u: int, c: int, start: float, finish: float) -> None:
        assert self.profiles is not None
        p = self.p
        during, after, _ = self._memory_needs(u, c)
        released = self._last_uses(u)
        profile = self.profiles[c]
        profile.add(start, max(finish, start), during)
        profile.add(finish, math.inf, after)
        for e in range(self.dep_ptr[u], self.dep_ptr[u + 1]):
            d = self.dep_idx[e]
            self.pending[d] -= 1
            self.last_finish[d] = max(self.last_finish[d], finish)
            # One consumer of d fewer: another may now be its last and release it.
            self.blocked.difference_update(self.out_idx[self.out_ptr[d] : self.out_ptr[d + 1]])
        for d in released:
            self.profiles[int(self.context[d])].release(self.last_finish[d], p.output_bytes[d])
        if released:
            self.blocked.clear()

    def _no_room(self, u: int) -> PlanError:
        assert self.profiles is not None
        p = self.p
        c = max(self._allowed(u), key=lambda c: (self.cap[c], -c))
        held = self.profiles[c].level(math.inf)
        return PlanError(
            f"no ready task fits in memory: {p.label(u)!r} needs {format_bytes(p.memory[u])} "
            f"while it runs and {format_bytes(p.output_bytes[u])} for its result, and no context "
            f"that can run it has room at any time; the largest is {p.contexts[c].name!r} with a "
            f"budget of {format_bytes(self.cap[c])}, {format_bytes(held)} of it held by results "
            "that "
            "wait for their consumers or are targets. A larger memory budget would help, "
            "or fewer results held at once (fewer targets, smaller outputs, or a reduction "
            "that combines its inputs in smaller groups)"
        )

    def _allowed(self, u: int) -> list[int]:
        """The contexts u may take: its fixed one, or every one that can run it."""
        fixed = self.fixed[u] if self.fixed is not None else -1
        if fixed >= 0:
            return [fixed]
        return [c for c in range(len(self.p.contexts)) if math.isfinite(self.p.seconds[u, c])]

    def _cannot_run(self, u: int) -> PlanError:
        p = self.p
        c = self._allowed(u)[0]
        able = [x.name for x, t in zip(p.contexts, p.seconds[u], strict=True) if math.isfinite(t)]
        return PlanError(
            f"{p.label(u)!r} is fixed to context {p.contexts[c].name!r}, which cannot run it; "
            f"the contexts that can are {able}. Fix it to one of them, or leave it free"
        )
