"""Fusion: every linear chain of tasks becomes one unit of work (Mars' "compose").

An edge a -> b is fused when b is a's only needed consumer, a is b's only
input, a is not a target (its result must be returned, so it cannot vanish
inside a chain), and both occupy the same resources and have the same kind
of cost (one number, or a mapping over the same contexts): a chain runs
where each of its tasks may run. A unit is then a maximal run of fused
edges, its tasks in chain order:

    a ─> b ─> c ─> d      (b, c: one input, one consumer)   =>   [a b c d]
    a ─> b ─┬> c                                             =>   [a b] [c] [d]
            └> d

Fused units are what the planner places and what the executor dispatches
as one call (results between their tasks never leave the worker); events,
errors and progress still name the user's tasks.

Cost: a few numpy passes over the edges, and one Python step per task that
is inside a chain.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from chunkgraph.graph import Graph, needed_mask

IntArray = npt.NDArray[np.int64]


def fuse_chains(graph: Graph, targets: IntArray, *, fuse: bool = True) -> tuple[IntArray, IntArray]:
    """Units as CSR ``(member_ptr, member_idx)`` over the tasks ``targets`` need.

    Units are numbered in the order of their first task's id; with
    ``fuse=False`` every needed task is its own unit.

    >>> g = Graph()
    >>> a = g.add(abs, -1)
    >>> b = g.add(abs, a)
    >>> c, d = g.add(abs, b), g.add(abs, b)
    >>> ptr, idx = fuse_chains(g, g.sinks())
    >>> [idx[ptr[u]:ptr[u + 1]].tolist() for u in range(len(ptr) - 1)]
    [[0, 1], [2], [3]]
    """
    n = len(graph)
    needed = needed_mask(graph, targets.tolist()) if n else np.zeros(0, bool)
    ids = np.flatnonzero(needed).astype(np.int64)
    if not fuse or not len(ids):
        return np.arange(len(ids) + 1, dtype=np.int64), ids
    dep_ptr, dep_idx = graph.dependencies()
    in_degree = np.diff(dep_ptr)
    consumer = np.repeat(np.arange(n, dtype=np.int64), in_degree)
    # Only needed consumers count: the others never run.
    live = needed[consumer]
    out_degree = np.bincount(dep_idx[live], minlength=n)
    single = live & (in_degree[consumer] == 1) & (out_degree[dep_idx] == 1)
    is_target = np.zeros(n, bool)
    is_target[targets] = True
    single &= ~is_target[dep_idx]
    producers, consumers = dep_idx[single], consumer[single]
    if len(producers):
        keep = _same_kind(graph, producers, consumers)
        producers, consumers = producers[keep], consumers[keep]
    if not len(producers):
        return np.arange(len(ids) + 1, dtype=np.int64), ids
    nxt = np.full(n, -1, np.int64)
    nxt[producers] = consumers
    has_prev = np.zeros(n, bool)
    has_prev[consumers] = True
    heads = ids[~has_prev[ids]]
    nxt_list = nxt.tolist()
    members: list[int] = []
    sizes: list[int] = []
    for h in heads.tolist():
        t, size = h, 0
        while t >= 0:
            members.append(t)
            size += 1
            t = nxt_list[t]
        sizes.append(size)
    member_ptr = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=member_ptr[1:])
    return member_ptr, np.asarray(members, dtype=np.int64)


def _same_kind(graph: Graph, a: IntArray, b: IntArray) -> npt.NDArray[np.bool_]:
    """True where tasks a[i] and b[i] have equal resources and the same kind of cost."""
    keep = np.ones(len(a), bool)
    special = set(graph.resources_overrides()) | set(graph.context_seconds())
    if not special:
        return keep
    per_context = graph.context_seconds()
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
        if x in special or y in special:
            cx, cy = per_context.get(x), per_context.get(y)
            same_cost = (cx is None) == (cy is None) and (cx is None or set(cx) == set(cy or ()))
            keep[i] = same_cost and graph.resources(x) == graph.resources(y)
    return keep
