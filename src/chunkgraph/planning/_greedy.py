"""Greedy earliest-finish placement: list scheduling in one pass, for graphs too big for HEFT.

HEFT ranks every unit, then searches every idle gap of every slot for each
one; on a million units that is tens of seconds of Python. This pass keeps
HEFT's choice rule (each unit to the context and slot where it finishes
first, transfers counted) and drops the rest:

    for u in topological (id) order:
        ready(c)  = max over inputs d of finish[d] + comm(bytes, context[d], c)
        slot(c)   = the slot of c that frees first (a heap per context)
        finish(c) = max(free time of slot(c), ready(c)) + seconds[u, c]
        place u where finish(c) is least (ties: the lower context index)

No insertion into idle gaps, no rank order (the id order is the order the
graph was built, usually its data order), and no memory budget: above
``AUTO_GREEDY_UNITS`` the executor's admission holds the budgets at run time.
Cost: O(units × contexts × log slots + edges), about 3 µs per unit here.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from chunkgraph.planning._problem import FloatArray, Problem
from chunkgraph.planning._rank import unit_order
from chunkgraph.planning._schedule import Schedule


def greedy_eft(problem: Problem, memory_cap: FloatArray | None = None) -> Schedule:
    """Each unit, in topological order, on the context and slot where it finishes first.

    ``memory_cap`` is accepted for the strategy signature and not planned for.

    >>> from chunkgraph.graph import Cost, Graph
    >>> from chunkgraph.planning._contexts import Context
    >>> from chunkgraph.planning._problem import build_problem
    >>> g = Graph()
    >>> a, b = g.add(abs, 1, cost=Cost(2.0)), g.add(abs, 2, cost=Cost(2.0))
    >>> s = greedy_eft(build_problem(g, [Context("x"), Context("y")]))
    >>> s.context.tolist(), s.finish.tolist()
    ([0, 1], [2.0, 2.0])
    """
    n, k = len(problem), len(problem.contexts)
    seconds = problem.seconds.tolist()
    dep_ptr, dep_idx = problem.dep_ptr.tolist(), problem.dep_idx.tolist()
    dep_bytes = problem.dep_bytes.tolist()
    latency, bandwidth = problem.latency.tolist(), problem.bandwidth.tolist()
    free = [[(0.0, s) for s in range(c.slots)] for c in problem.contexts]
    context = [0] * n
    slot = [0] * n
    start = [0.0] * n
    finish = [0.0] * n
    candidates = range(k)
    for u in unit_order(problem):
        row = seconds[u]
        inputs = range(dep_ptr[u], dep_ptr[u + 1])
        best = (math.inf, 0, 0.0)
        for c in candidates:
            run = row[c]
            if run == math.inf:
                continue
            ready = 0.0
            for j in inputs:
                d = dep_idx[j]
                at = finish[d]
                if context[d] != c:
                    at += latency[context[d]][c] + dep_bytes[j] / bandwidth[context[d]][c]
                if at > ready:
                    ready = at
            begin = max(free[c][0][0], ready)
            if begin + run < best[0]:
                best = (begin + run, c, begin)
        done, c, begin = best
        _, s = heapq.heappop(free[c])
        heapq.heappush(free[c], (done, s))
        context[u], slot[u], start[u], finish[u] = c, s, begin, done
    return Schedule(
        np.asarray(context, np.int64),
        np.asarray(slot, np.int64),
        np.asarray(start, np.float64),
        np.asarray(finish, np.float64),
        np.arange(n, dtype=np.int64),
    )
