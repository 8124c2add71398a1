"""Initial assignment of the roots to contexts: balance load, keep neighbours together.

Mars assigns the roots of a graph (units with no inputs) before anything
else is planned, so that roots whose results meet downstream start on one
context and their descendants need no transfers:

    quota[c]    the share of the roots context c should take, in proportion to
                its slots among the contexts that can run roots (largest
                remainder, so the quotas add up to the number of roots)
    filled[c]   roots given to c so far

    repeat while a root is unassigned:
        c    = the context with the most unfilled quota (quota - filled)
        BFS over the undirected graph (inputs and consumers) from the
             lowest-id unassigned root that c can run; every unassigned
             root the walk reaches that c can run goes to c, until its
             quota is filled

          r0   r1   r2   r3        two contexts, quota 2 each:
           \\  /     \\  /          the walk from r0 reaches r1 through
            a        b             a, so {r0, r1} -> context 0 and
                                   {r2, r3} -> context 1

Only roots are assigned; every other unit is -1, left to the passes that
follow (``_partition`` reads the answer as a locality hint). A root that no
context with quota left can run goes to the context that can run it with
the most unfilled quota (an overfull one, if need be).

The walk is a plain Python BFS over adjacency lists, one per context's
turn, stopped as soon as the quota is filled.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

from chunkgraph.planning._problem import Problem

IntArray = npt.NDArray[np.int64]


def assign_roots(problem: Problem) -> IntArray:
    """Context index of every root of ``problem`` (-1 for the other units): see the module doc.

    >>> from chunkgraph.graph import Graph
    >>> from chunkgraph.planning._contexts import Context
    >>> from chunkgraph.planning._problem import build_problem
    >>> g = Graph()
    >>> r = [g.add(abs, i) for i in range(4)]
    >>> s = [g.add(max, r[0], r[1]), g.add(max, r[2], r[3])]
    >>> ctx = [Context("a", slots=2), Context("b", slots=2)]
    >>> assign_roots(build_problem(g, ctx)).tolist()
    [0, 0, 1, 1, -1, -1]
    """
    n = len(problem)
    out = np.full(n, -1, dtype=np.int64)
    roots = np.flatnonzero(np.diff(problem.dep_ptr) == 0)
    if not len(roots):
        return out
    can = problem.can_run()
    quota = _quotas(problem, can[roots], len(roots))
    filled = np.zeros(len(quota), dtype=np.int64)
    is_root = np.zeros(n, dtype=bool)
    is_root[roots] = True
    neighbours = _undirected(problem)
    can_rows = can.tolist()
    # Per context, its runnable roots in id order and a cursor past the assigned ones.
    runnable = [roots[can[roots, c]].tolist() for c in range(len(quota))]
    cursor = [0] * len(quota)
    left = len(roots)
    while left:
        c = _next_context(quota, filled, runnable, cursor, out)
        if c < 0:
            break
        while out[runnable[c][cursor[c]]] >= 0:
            cursor[c] += 1
        start = runnable[c][cursor[c]]
        limit = max(int(quota[c] - filled[c]), 1)  # an overfull context takes one at a time
        taken = _walk(start, c, limit, neighbours, is_root, can_rows, out)
        filled[c] += taken
        left -= taken
    return out


def _quotas(problem: Problem, can_roots: npt.NDArray[np.bool_], count: int) -> IntArray:
    """Roots per context, in proportion to slots among contexts that can run a root."""
    slots = np.array([ctx.slots for ctx in problem.contexts], dtype=np.float64)
    slots[~can_roots.any(axis=0)] = 0.0
    exact: npt.NDArray[np.float64] = count * slots / slots.sum()
    quota: IntArray = np.floor(exact).astype(np.int64)
    # Largest remainder (ties: lower index), so the quotas add up to ``count``.
    short = count - int(quota.sum())
    if short:
        order = np.lexsort((np.arange(len(exact)), -(exact - quota)))
        quota[order[:short]] += 1
    return quota


def _next_context(
    quota: IntArray,
    filled: IntArray,
    runnable: list[list[int]],
    cursor: list[int],
    out: IntArray,
) -> int:
    """The context with the most unfilled quota that can still run an unassigned root
    (ties: lower index); -1 when no root is left."""
    best, best_room = -1, 0
    for c in range(len(quota)):
        rows = runnable[c]
        while cursor[c] < len(rows) and out[rows[cursor[c]]] >= 0:
            cursor[c] += 1
        if cursor[c] == len(rows):
            continue
        room = int(quota[c] - filled[c])
        if best < 0 or room > best_room:
            best, best_room = c, room
    return best


def _walk(
    start: int,
    c: int,
    limit: int,
    neighbours: list[list[int]],
    is_root: npt.NDArray[np.bool_],
    can_rows: list[list[bool]],
    out: IntArray,
) -> int:
    """BFS from ``start``; give up to ``limit`` unassigned roots that ``c`` can run to
    ``c``, in the order reached. Returns how many it gave."""
    seen = {start}
    queue = deque([start])
    taken = 0
    while queue and taken < limit:
        u = queue.popleft()
        if is_root[u] and out[u] < 0 and can_rows[u][c]:
            out[u] = c
            taken += 1
        for v in neighbours[u]:
            if v not in seen:
                seen.add(v)
                queue.append(v)
    return taken


def _undirected(problem: Problem) -> list[list[int]]:
    """Each unit's inputs then consumers, as Python lists (the BFS reads them one by one)."""
    dep_ptr = problem.dep_ptr.tolist()
    dep_idx = problem.dep_idx.tolist()
    out_ptr = problem.out_ptr.tolist()
    out_idx = problem.out_idx.tolist()
    return [
        dep_idx[dep_ptr[u] : dep_ptr[u + 1]] + out_idx[out_ptr[u] : out_ptr[u + 1]]
        for u in range(len(problem))
    ]
