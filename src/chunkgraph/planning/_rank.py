"""Critical-path ranks of every task, from the cost columns.

    top_level[i]    = seconds[i] + max(top_level[d]    for d in dependencies(i))   (0 if none)
    bottom_level[i] = seconds[i] + max(bottom_level[c] for c in dependents(i))     (0 if none)
    path_length[i]  = top_level[i] + bottom_level[i] - seconds[i]

``bottom_level`` is the *upward rank* of list scheduling: the longest chain of
work from the start of ``i`` to the end of the graph. ``path_length`` is the
longest chain that runs through ``i``; the tasks whose ``path_length`` equals
the maximum form the critical path.

Each is one linear pass in topological order over the CSR arrays (a plain loop
over Python lists, about 0.3 µs per edge); a graph without edges is answered
by numpy alone.

The second half ranks the units of a ``Problem`` (tasks or fused chains ×
contexts) for the list schedulers: HEFT's upward and downward ranks with costs
averaged over the contexts, the critical path they define, and PEFT's
optimistic cost table (formulas next to the code).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from chunkgraph.graph import Graph
from chunkgraph.planning._problem import Problem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _longest(seconds: FloatArray, ptr: list[int], idx: list[int], sweep: list[int]) -> FloatArray:
    level = seconds.tolist()
    for t in sweep:
        lo = ptr[t]
        hi = ptr[t + 1]
        if hi - lo == 1:
            level[t] += level[idx[lo]]
        elif hi > lo:
            level[t] += max([level[j] for j in idx[lo:hi]])
    return np.asarray(level, dtype=np.float64)


def bottom_level(graph: Graph) -> FloatArray:
    """Upward rank: longest cost-weighted chain from each task to a sink, itself included.

    Args:
        graph: The graph, its costs' ``seconds`` as the weights.

    Returns:
        One float per task id.

    >>> g = Graph()
    >>> a = g.add(abs, 1)
    >>> b = g.add(abs, a)
    >>> bottom_level(g) / g.costs().seconds
    array([2., 1.])
    """
    seconds = graph.costs().seconds
    ptr, idx = graph.dependents()
    if len(idx) == 0:
        return np.array(seconds, dtype=np.float64)
    sweep = graph.topological_order()[::-1].tolist()
    return _longest(seconds, ptr.tolist(), idx.tolist(), sweep)


def top_level(graph: Graph) -> FloatArray:
    """Longest cost-weighted chain from a root to each task, itself included.

    Args:
        graph: The graph, its costs' ``seconds`` as the weights.

    Returns:
        One float per task id.
    """
    seconds = graph.costs().seconds
    ptr, idx = graph.dependencies()
    if len(idx) == 0:
        return np.array(seconds, dtype=np.float64)
    sweep = graph.topological_order().tolist()
    return _longest(seconds, ptr.tolist(), idx.tolist(), sweep)


def path_length(graph: Graph) -> FloatArray:
    """Longest cost-weighted chain through each task (top + bottom - own seconds).

    Args:
        graph: The graph, its costs' ``seconds`` as the weights.

    Returns:
        One float per task id.
    """
    seconds = graph.costs().seconds
    return top_level(graph) + bottom_level(graph) - seconds


# -- ranks of a Problem (units × contexts) ---------------------------------------------------
#
# The list schedulers rank units, not tasks, with costs averaged over the contexts
# (Topcuoglu, Hariri & Wu 2002; Arabnejad & Barbosa 2014):
#
#     w̄(u)     mean of seconds[u, c] over the contexts that can run u
#     c̄(e)     mean over ordered pairs of different contexts of latency + bytes / bandwidth
#              (``Problem.mean_comm``; 0 with one context)
#     rank_u(u) = w̄(u) + max over consumers v (c̄(u→v) + rank_u(v))       (0 past an exit)
#     rank_d(u) = max over dependencies d (rank_d(d) + w̄(d) + c̄(d→u))    (0 at an entry)
#     OCT(u, k) = max over consumers v of
#                 min over contexts w that can run v (OCT(v, w) + seconds[v, w] + c̄ if w != k)


def mean_seconds(problem: Problem) -> FloatArray:
    """w̄: each unit's mean seconds over the contexts that can run it."""
    finite = np.isfinite(problem.seconds)
    total = np.where(finite, problem.seconds, 0.0).sum(axis=1)
    return np.asarray(total / np.maximum(finite.sum(axis=1), 1), dtype=np.float64)


def edge_mean_comm(problem: Problem, nbytes: FloatArray) -> FloatArray:
    """c̄ of many edges at once: ``Problem.mean_comm`` of each size."""
    k = len(problem.contexts)
    if k == 1:
        return np.zeros(len(nbytes))
    off = ~np.eye(k, dtype=bool)
    latency = float(problem.latency[off].mean())
    inverse = float((1.0 / problem.bandwidth[off]).mean())
    return np.asarray(latency + nbytes * inverse, dtype=np.float64)


def unit_order(problem: Problem) -> list[int]:
    """Unit ids, each after its dependencies: the id order, as ``build_problem`` numbers
    units by their first task and a graph's ids are topological unless refs were forged;
    a sweep by in-degree (Kahn) otherwise."""
    n = len(problem)
    consumer = np.repeat(np.arange(n, dtype=np.int64), np.diff(problem.dep_ptr))
    if (problem.dep_idx < consumer).all():
        return list(range(n))
    waiting = np.diff(problem.dep_ptr).tolist()
    out_ptr, out_idx = problem.out_ptr.tolist(), problem.out_idx.tolist()
    ready = [u for u in range(n) if waiting[u] == 0]
    result: list[int] = []
    while ready:
        u = ready.pop()
        result.append(u)
        for v in out_idx[out_ptr[u] : out_ptr[u + 1]]:
            waiting[v] -= 1
            if waiting[v] == 0:
                ready.append(v)
    return result


def upward_rank(problem: Problem) -> FloatArray:
    """HEFT's rank_u: the mean-cost length of the longest path from the start of each unit
    to an exit, its own mean seconds included (see the comment above)."""
    rank = mean_seconds(problem).tolist()
    comm = edge_mean_comm(problem, problem.out_bytes).tolist()
    ptr, idx = problem.out_ptr.tolist(), problem.out_idx.tolist()
    for u in reversed(unit_order(problem)):
        lo, hi = ptr[u], ptr[u + 1]
        if hi > lo:
            rank[u] += max(comm[e] + rank[idx[e]] for e in range(lo, hi))
    return np.asarray(rank, dtype=np.float64)


def downward_rank(problem: Problem) -> FloatArray:
    """rank_d: the mean-cost length of the longest path from an entry to the start of
    each unit (its own seconds excluded)."""
    w = mean_seconds(problem).tolist()
    comm = edge_mean_comm(problem, problem.dep_bytes).tolist()
    ptr, idx = problem.dep_ptr.tolist(), problem.dep_idx.tolist()
    rank = [0.0] * len(problem)
    for u in unit_order(problem):
        lo, hi = ptr[u], ptr[u + 1]
        if hi > lo:
            rank[u] = max(rank[idx[e]] + w[idx[e]] + comm[e] for e in range(lo, hi))
    return np.asarray(rank, dtype=np.float64)


def critical_path(problem: Problem) -> IntArray:
    """The units of a longest mean-cost path, entry to exit: from the entry of largest
    rank_u, each step to the consumer that gives rank_u its maximum (ties: smaller id).
    Every unit on it has rank_u + rank_d equal to the path's length."""
    n = len(problem)
    if n == 0:
        return np.zeros(0, np.int64)
    rank = upward_rank(problem)
    comm = edge_mean_comm(problem, problem.out_bytes)
    entries = np.flatnonzero(np.diff(problem.dep_ptr) == 0)
    u = int(entries[np.argmax(rank[entries])])
    path = [u]
    while problem.out_ptr[u + 1] > problem.out_ptr[u]:
        lo, hi = problem.out_ptr[u], problem.out_ptr[u + 1]
        consumers = problem.out_idx[lo:hi]
        through = comm[lo:hi] + rank[consumers]
        best = np.flatnonzero(through == through.max())
        u = int(consumers[best].min())
        path.append(u)
    return np.asarray(path, dtype=np.int64)


def optimistic_cost_table(problem: Problem) -> FloatArray:
    """PEFT's OCT, ``(units, contexts)``: for each unit and the context it would run on,
    the length of the longest path to an exit when every later unit takes its best
    context and pays c̄ only when it leaves the one before (see the comment above).
    Exits have 0; the unit's own seconds are not included."""
    n, k = problem.seconds.shape
    oct_ = np.zeros((n, k))
    comm = edge_mean_comm(problem, problem.out_bytes)
    ptr, idx = problem.out_ptr, problem.out_idx
    for u in reversed(unit_order(problem)):
        lo, hi = int(ptr[u]), int(ptr[u + 1])
        if hi == lo:
            continue
        consumers = idx[lo:hi]
        # A context that cannot run v has inf seconds, so it never wins the min.
        base = oct_[consumers] + problem.seconds[consumers]  # (edges, k): w == k, no transfer
        moved = base.min(axis=1) + comm[lo:hi]  # the best w, paying c̄ (>= base[w] for w == k)
        oct_[u] = np.minimum(base, moved[:, None]).max(axis=0)
    return oct_
