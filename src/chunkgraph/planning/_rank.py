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
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from chunkgraph.graph import Graph

FloatArray = npt.NDArray[np.float64]


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
    """Longest cost-weighted chain from a root to each task, itself included."""
    seconds = graph.costs().seconds
    ptr, idx = graph.dependencies()
    if len(idx) == 0:
        return np.array(seconds, dtype=np.float64)
    sweep = graph.topological_order().tolist()
    return _longest(seconds, ptr.tolist(), idx.tolist(), sweep)


def path_length(graph: Graph) -> FloatArray:
    """Longest cost-weighted chain through each task (top + bottom - own seconds)."""
    seconds = graph.costs().seconds
    return top_level(graph) + bottom_level(graph) - seconds
