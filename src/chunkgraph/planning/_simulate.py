"""``simulate``: replay a Schedule with the cost model, independently of the strategy.

A strategy says where, in which order and when each unit runs; the replay
believes only the first two and recomputes the times, so a strategy's own
bookkeeping is checked rather than trusted:

    slot order   each slot (context, slot) runs its units in order of the
                 schedule's planned start (ties: the lower unit id)
    start[u]     = max(finish of the unit before u on its slot,
                       finish[d] + comm(edge bytes, context[d], context[u])
                       for every input d of u,
                       the planned start of u, where u's context has a budget)
    finish[u]    = start[u] + seconds[u, context[u]]

On a context with a memory budget a unit does not start before its planned
start: a strategy delays units there to keep live memory under the cap (the
executor's admission does the same at run time), and starting them as early
as the slot allows would replay a plan nobody made. Elsewhere the replay is
free to start earlier than planned.

The slot orders and the dependencies together form one graph (an edge from
each unit to the next on its slot, and the data edges); the replay walks it
in a topological order (Kahn's worklist, one Python step per unit and per
edge: about 0.3 s for 100,000 units). Units it can never reach mean a slot
runs a consumer before a producer it waits for, directly or not: a deadlock,
raised as PlanError.

Memory, per context c, is what the list scheduler keeps under the caps; at
time τ the live bytes on c are

    running      Σ memory[u]          for u on c with start[u] <= τ < finish[u]
    held         Σ output_bytes[u]    for u on c from finish[u] until its last
                                      consumer finishes (to the end of the run,
                                      τ included, when keep[u] or u has no consumer)
    copies       Σ edge bytes (d, v)  for v on c and d on another context,
                                      during start[v] <= τ < finish[v]

Every interval is half-open, so at a time where one thing ends and another
begins the release comes first: a consumer finishing at 5 s frees its input
before the unit starting at 5 s on its slot takes memory, and a unit of zero
seconds never adds to the peak. The peak is found by one sweep over the
sorted breakpoints of all contexts at once (numpy: sort, cumulative sum, the
level after the last event at each time).

``lower_bound`` is the larger of two times no schedule can beat:

    critical path   the longest chain of dependencies where each unit takes its
                    best seconds on any context and moving data is free: a
                    consumer starts after its inputs finish, and no unit runs
                    faster than its fastest context
    work / slots    Σ_u min_c seconds[u, c] / Σ_c slots_c: all the work, each
                    unit at its fastest, spread over every slot there is; at
                    most that many units run at once
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import PlanError
from chunkgraph.planning._problem import Problem
from chunkgraph.planning._schedule import Schedule

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class SimResult:
    """What the replay of a plan found (see the module doc for every rule).

    ``busy[c]``: seconds of work on context c, summed over its slots;
    ``peak_memory[c]``: the most bytes live on c at any time; ``bytes_moved``:
    bytes sent along edges between units on different contexts; ``start`` and
    ``finish``: per unit, as replayed; ``cap_violations``: the names of the
    contexts whose peak exceeded their memory cap.
    """

    makespan: float
    busy: FloatArray
    peak_memory: FloatArray
    bytes_moved: float
    lower_bound: float
    start: FloatArray
    finish: FloatArray
    cap_violations: tuple[str, ...]
    slots: IntArray

    @property
    def utilisation(self) -> FloatArray:
        """Per context, the share of its slots' time spent working (0 for an empty run)."""
        if self.makespan <= 0:
            return np.zeros(len(self.busy))
        return self.busy / (self.slots * self.makespan)


def simulate(
    problem: Problem,
    schedule: Schedule,
    memory_cap: FloatArray | Sequence[float] | None = None,
    targets: IntArray | Sequence[int] | None = None,
) -> SimResult:
    """Replay ``schedule`` of ``problem``: times, busy seconds, peak memory, transfers.

    ``memory_cap[c]``: the byte budget of context c (None or inf: none);
    ``targets``: graph task ids whose results are held to the end, besides
    ``problem.keep``. Raises PlanError for a schedule that places a unit
    where it cannot run, or whose slot orders deadlock.
    """
    n, k = len(problem), len(problem.contexts)
    context, slot = _check_schedule(problem, schedule)
    slots = np.array([c.slots for c in problem.contexts], dtype=np.int64)
    run = problem.seconds[np.arange(n), context]

    consumer = np.repeat(np.arange(n, dtype=np.int64), np.diff(problem.dep_ptr))
    src, dst = context[problem.dep_idx], context[consumer]
    cross = src != dst
    comm = np.zeros(len(problem.dep_idx))
    if cross.any():
        a, b = src[cross], dst[cross]
        comm[cross] = problem.latency[a, b] + problem.dep_bytes[cross] / problem.bandwidth[a, b]

    prev, nxt = _slot_neighbours(context, slot, schedule.start)
    cap = _caps(memory_cap, k)
    budgeted = np.isfinite(cap)[context]
    release = np.where(budgeted, np.nan_to_num(schedule.start, nan=0.0), 0.0)
    start, finish, done = _replay(run, problem.dep_ptr, problem.dep_idx, comm,
                                  problem.out_ptr, problem.out_idx, prev, nxt,
                                  release)  # fmt: skip
    if not done.all():
        raise _deadlock(problem, schedule, context, slot, prev, done)
    makespan = float(finish.max()) if n else 0.0

    keep = problem.keep.copy()
    if targets is not None and n:
        units = problem.unit_of[np.asarray(targets, dtype=np.int64)]
        keep[units[units >= 0]] = True
    peak = _peak_memory(problem, context, start, finish, keep, consumer, cross, k)
    violations = tuple(problem.contexts[c].name for c in np.flatnonzero(peak > cap).tolist())
    return SimResult(
        makespan=makespan,
        busy=np.bincount(context, weights=run, minlength=k).astype(np.float64),
        peak_memory=peak,
        bytes_moved=float(problem.dep_bytes[cross].sum()),
        lower_bound=lower_bound(problem),
        start=start,
        finish=finish,
        cap_violations=violations,
        slots=slots,
    )


def lower_bound(problem: Problem) -> float:
    """No schedule of ``problem`` ends sooner: max(critical path at each unit's best
    seconds with free transfers, total best seconds / all slots); see the module doc.

    >>> from chunkgraph.graph import Cost, Graph
    >>> from chunkgraph.planning._contexts import Context
    >>> from chunkgraph.planning._problem import build_problem
    >>> g = Graph()
    >>> a = g.add(abs, -1, cost=Cost(seconds=2))
    >>> b, c = g.add(abs, a, cost=Cost(seconds=3)), g.add(abs, a, cost=Cost(seconds=3))
    >>> lower_bound(build_problem(g, [Context("cpu", slots=2)]))  # path a -> b
    5.0
    >>> lower_bound(build_problem(g, [Context("cpu", slots=1)]))  # 8 s of work, one slot
    8.0
    """
    n = len(problem)
    if n == 0:
        return 0.0
    best = np.where(problem.can_run(), problem.seconds, math.inf).min(axis=1)
    none = np.full(n, -1, dtype=np.int64)
    _, finish, done = _replay(best, problem.dep_ptr, problem.dep_idx,
                              np.zeros(len(problem.dep_idx)), problem.out_ptr,
                              problem.out_idx, none, none, np.zeros(n))  # fmt: skip
    if not done.all():  # a cycle between units: build_problem's graph was validated
        raise PlanError("the units' dependencies form a cycle; validate the graph first")
    path = float(finish.max())
    work = float(best.sum()) / sum(c.slots for c in problem.contexts)
    return max(path, work)


def _check_schedule(problem: Problem, schedule: Schedule) -> tuple[IntArray, IntArray]:
    """The schedule's context and slot arrays, checked against the problem."""
    n, k = len(problem), len(problem.contexts)
    context = np.asarray(schedule.context, dtype=np.int64)
    slot = np.asarray(schedule.slot, dtype=np.int64)
    arrays = (context, slot, schedule.start)
    if any(len(x) != n for x in arrays):
        raise PlanError(
            f"the schedule has {len(context)} contexts, {len(slot)} slots and "
            f"{len(schedule.start)} starts for a problem of {n} units; give one of each per unit"
        )
    bad = np.flatnonzero((context < 0) | (context >= k))
    if len(bad):
        u = int(bad[0])
        raise PlanError(
            f"unit {problem.label(u)!r} is placed on context {int(context[u])}, but the "
            f"contexts are 0..{k - 1}; {len(bad)} units have no valid context"
        )
    slots = np.array([c.slots for c in problem.contexts], dtype=np.int64)
    bad = np.flatnonzero((slot < 0) | (slot >= slots[context]))
    if len(bad):
        u, c = int(bad[0]), int(context[bad[0]])
        raise PlanError(
            f"unit {problem.label(u)!r} is placed on slot {int(slot[u])} of "
            f"{problem.contexts[c].name!r}, which has slots 0..{int(slots[c]) - 1}"
        )
    bad = np.flatnonzero(~np.isfinite(problem.seconds[np.arange(n), context]))
    if len(bad):
        u = int(bad[0])
        raise PlanError(
            f"unit {problem.label(u)!r} is placed on {problem.contexts[int(context[u])].name!r}, "
            "which cannot run it (no cost for that context or kind)"
        )
    bad = np.flatnonzero(np.isnan(schedule.start))
    if len(bad):
        raise PlanError(
            f"unit {problem.label(int(bad[0]))!r} has no planned start (nan); the replay "
            "orders each slot by planned start"
        )
    return context, slot


def _slot_neighbours(
    context: IntArray, slot: IntArray, planned: FloatArray
) -> tuple[IntArray, IntArray]:
    """``prev[u]``/``nxt[u]``: the unit before/after u on its slot (-1: none)."""
    n = len(context)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return prev, nxt
    order = np.lexsort((np.arange(n), planned, slot, context))
    a, b = order[:-1], order[1:]
    same = (context[a] == context[b]) & (slot[a] == slot[b])
    prev[b[same]] = a[same]
    nxt[a[same]] = b[same]
    return prev, nxt


def _replay(
    run: FloatArray,
    dep_ptr: IntArray,
    dep_idx: IntArray,
    comm: FloatArray,
    out_ptr: IntArray,
    out_idx: IntArray,
    prev: IntArray,
    nxt: IntArray,
    release: FloatArray,
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Earliest (start, finish) of every unit after its slot predecessor and its inputs
    (plus their transfer seconds ``comm``, aligned with ``dep_idx``); ``done`` is False
    for the units a cycle of slot orders and dependencies never lets start."""
    n = len(run)
    waiting = (np.diff(dep_ptr) + (prev >= 0)).tolist()
    dp, di, cm = dep_ptr.tolist(), dep_idx.tolist(), comm.tolist()
    op, oi = out_ptr.tolist(), out_idx.tolist()
    before, after, seconds = prev.tolist(), nxt.tolist(), run.tolist()
    not_before = release.tolist()
    start = [0.0] * n
    finish = [0.0] * n
    done = [False] * n
    ready = [u for u in range(n) if waiting[u] == 0]
    while ready:
        u = ready.pop()
        p = before[u]
        t = finish[p] if p >= 0 else 0.0
        if not_before[u] > t:
            t = not_before[u]
        for j in range(dp[u], dp[u + 1]):
            arrival = finish[di[j]] + cm[j]
            if arrival > t:
                t = arrival
        start[u] = t
        finish[u] = t + seconds[u]
        done[u] = True
        for j in range(op[u], op[u + 1]):
            v = oi[j]
            waiting[v] -= 1
            if waiting[v] == 0:
                ready.append(v)
        v = after[u]
        if v >= 0:
            waiting[v] -= 1
            if waiting[v] == 0:
                ready.append(v)
    return np.array(start), np.array(finish), np.array(done, dtype=bool)


def _deadlock(
    problem: Problem,
    schedule: Schedule,
    context: IntArray,
    slot: IntArray,
    prev: IntArray,
    done: npt.NDArray[np.bool_],
) -> PlanError:
    """Name the first unit of a blocked slot and the input it waits for."""
    stuck = np.flatnonzero(~done)
    first = stuck[(prev[stuck] < 0) | done[np.maximum(prev[stuck], 0)]]
    u = int(first[0])
    inputs = problem.dep_idx[problem.dep_ptr[u] : problem.dep_ptr[u + 1]]
    d = int(inputs[~done[inputs]][0])

    def where(x: int) -> str:
        name = problem.contexts[int(context[x])].name
        return f"{name}/{int(slot[x])} (planned start {float(schedule.start[x]):.4g} s)"

    return PlanError(
        f"the slot orders contradict the dependencies (a deadlock): {problem.label(u)!r} "
        f"runs next on {where(u)} but needs {problem.label(d)!r} on {where(d)}, which can "
        f"never start either; {len(stuck)} of {len(done)} units never start. Each slot "
        "runs its units by planned start: plan starts after the inputs' finishes"
    )


def _peak_memory(
    problem: Problem,
    context: IntArray,
    start: FloatArray,
    finish: FloatArray,
    keep: npt.NDArray[np.bool_],
    consumer: IntArray,
    cross: npt.NDArray[np.bool_],
    k: int,
) -> FloatArray:
    """The most live bytes on each context over the replay (module doc, memory)."""
    n = len(problem)
    if n == 0:
        return np.zeros(k)
    # Held outputs end with their last consumer; kept ones (and sinks) never end.
    last = np.full(n, -math.inf)
    np.maximum.at(last, problem.dep_idx, finish[consumer])
    release = np.where(keep | (np.diff(problem.out_ptr) == 0), math.inf, last)
    cv = consumer[cross]
    begins = np.concatenate((start, finish, start[cv]))
    ends = np.concatenate((finish, release, finish[cv]))
    copies = problem.dep_bytes[cross]
    size = np.concatenate((problem.memory, problem.output_bytes, copies)).astype(np.float64)
    where = np.concatenate((context, context, context[cv]))
    live = (size > 0) & (ends > begins)  # empty intervals are never live
    begins, ends, size, where = begins[live], ends[live], size[live], where[live]
    if not len(size):
        return np.zeros(k)

    times = np.concatenate((begins, ends))
    delta = np.concatenate((size, -size))
    ctx = np.concatenate((where, where))
    order = np.lexsort((times, ctx))
    times, delta, ctx = times[order], delta[order], ctx[order]
    level = np.cumsum(delta)
    # Per context: the running sum restarted at its first event.
    first = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]])
    counts = np.diff(np.r_[first, len(ctx)])
    level -= np.repeat(np.r_[0.0, level[first[1:] - 1]], counts)
    # The level at a time is the one after its last event there (releases come first).
    last_at = np.r_[(times[1:] != times[:-1]) | (ctx[1:] != ctx[:-1]), True]
    peak = np.zeros(k)
    np.maximum.at(peak, ctx[last_at], level[last_at])
    return peak


def _caps(memory_cap: FloatArray | Sequence[float] | None, k: int) -> FloatArray:
    if memory_cap is None:
        return np.full(k, math.inf)
    cap = np.asarray(memory_cap, dtype=np.float64)
    if cap.shape != (k,):
        raise PlanError(f"memory_cap needs one budget per context ({k}), got shape {cap.shape}")
    return cap
