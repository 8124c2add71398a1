"""The priority order of a graph: which ready task a worker should start first.

Policy (in the spirit of dask's ``order``): a depth-first, post-order walk
from the sinks.

    sinks, longest path first ─┐
                               v
            sink S ── visit dependencies, longest path first, each fully
                      (its whole sub-tree) before the next one,
                      then S itself gets the next number

* Post-order numbering gives every task a smaller number than its consumers,
  so priorities are a topological order.
* Finishing one dependency's whole sub-tree before the next means that when
  workers always start the ready task with the smallest number, a branch is
  completed (and the intermediate results it consumed are freed) before new
  roots are opened: memory stays bounded by the width of the walk, not the
  width of the graph.
* Sinks and siblings are taken in decreasing ``path_length`` (the longest
  cost-weighted chain through the task, see ``_rank.py``), so the critical path
  starts first. Ties go to the smaller id (the build order, which usually
  follows data locality).

Cost: sorting the dependency lists once (numpy lexsort) and one walk over the
edges in Python; a graph with no edges is ordered by numpy alone.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from chunkgraph.graph import Graph
from chunkgraph.planning._rank import path_length

IntArray = npt.NDArray[np.int64]


def order(graph: Graph) -> IntArray:
    """Priority of each task: a permutation of ``range(len(graph))``, lower runs first.

    Every task's priority is larger than its dependencies'.

    Args:
        graph: The graph, its costs' ``seconds`` as the weights of the critical path.

    Returns:
        One int per task id.

    >>> g = Graph()
    >>> a, b = g.add(abs, 1), g.add(abs, 2)
    >>> s1 = g.add(max, a, b)
    >>> c, d = g.add(abs, 3), g.add(abs, 4)
    >>> s2 = g.add(max, c, d)
    >>> order(g).tolist()  # the branch of s1 completes before c and d start
    [0, 1, 2, 3, 4, 5]
    """
    n = len(graph)
    length = path_length(graph)
    sinks = graph.sinks()
    sinks = sinks[np.lexsort((sinks, -length[sinks]))]
    priority = np.empty(n, dtype=np.int64)
    dep_ptr, dep_idx = graph.dependencies()
    if len(dep_idx) == 0:
        priority[sinks] = np.arange(n, dtype=np.int64)
        return priority
    consumer = np.repeat(np.arange(n, dtype=np.int64), np.diff(dep_ptr))
    # Within each task's dependency list: longest path first, then smaller id.
    sorted_idx = dep_idx[np.lexsort((dep_idx, -length[dep_idx], consumer))]
    walk = _post_order(sinks.tolist(), dep_ptr.tolist(), sorted_idx.tolist(), n)
    priority[np.asarray(walk, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    return priority


def _post_order(sinks: list[int], ptr: list[int], idx: list[int], n: int) -> list[int]:
    """Task ids in depth-first post-order from ``sinks``, dependencies in list order."""
    state = bytearray(n)  # 0 unseen, 1 expanded (dependencies pushed), 2 numbered
    walk: list[int] = []
    for sink in sinks:
        stack = [sink]
        while stack:
            t = stack[-1]
            if state[t] == 0:
                state[t] = 1
                lo = ptr[t]
                hi = ptr[t + 1]
                if hi > lo:
                    # Reversed so that the first dependency is on top: visited first.
                    stack.extend([d for d in reversed(idx[lo:hi]) if not state[d]])
                    continue
            stack.pop()
            if state[t] == 1:  # a stale duplicate entry has state 2: skip it
                state[t] = 2
                walk.append(t)
    return walk
