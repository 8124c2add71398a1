"""Graph checks: ids in range, no cycle, unique names; and a topological order.

``add()`` only accepts refs to tasks that already exist, so every dependency
has a smaller id than its consumer and the id order is topological. Only a
forged ``TaskRef(graph, id)`` can point forward; these checks find those edges
with one vectorised comparison and fall back to Kahn's algorithm (and a
depth-first search that reports the cycle) only when one exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from chunkgraph._errors import GraphError

if TYPE_CHECKING:
    from chunkgraph.graph._graph import Graph, IntArray


def _forward_edges(graph: Graph) -> bool:
    indptr, indices = graph.dependencies()
    consumers = np.repeat(np.arange(len(graph), dtype=np.int64), np.diff(indptr))
    return bool(np.any(indices >= consumers))


def check_ids(graph: Graph) -> None:
    """Raise GraphError if a dependency names a task id that does not exist."""
    indptr, indices = graph.dependencies()
    bad = np.flatnonzero((indices < 0) | (indices >= len(graph)))
    if len(bad):
        consumer = int(np.searchsorted(indptr, bad[0], side="right") - 1)
        raise GraphError(
            f"task {graph.name(consumer)!r} depends on task id {int(indices[bad[0]])}, "
            f"which does not exist (ids are 0..{len(graph) - 1}); was its TaskRef forged?"
        )


def topological_order(graph: Graph) -> IntArray:
    """Ids with every dependency before its consumer; GraphError if there is a cycle."""
    n = len(graph)
    if not _forward_edges(graph):
        return np.arange(n, dtype=np.int64)
    check_ids(graph)
    order = _kahn(graph)
    if len(order) < n:
        cycle = find_cycle(graph)
        path = " -> ".join(repr(graph.name(t)) for t in cycle)
        raise GraphError(f"the graph has a cycle: {path}")
    return order


def _kahn(graph: Graph) -> IntArray:
    dep_ptr, _ = graph.dependencies()
    out_ptr, out_idx = graph.dependents()
    waiting = np.diff(dep_ptr).tolist()
    ptr, idx = out_ptr.tolist(), out_idx.tolist()
    stack = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    while stack:
        t = stack.pop()
        order.append(t)
        for c in idx[ptr[t] : ptr[t + 1]]:
            waiting[c] -= 1
            if waiting[c] == 0:
                stack.append(c)
    return np.asarray(order, dtype=np.int64)


def find_cycle(graph: Graph) -> list[int]:
    """One cycle as a list of ids ``[a, b, ..., a]`` (a consumes b ...), or ``[]``."""
    if not _forward_edges(graph):
        return []
    ptr, idx = (a.tolist() for a in graph.dependencies())
    state = bytearray(len(graph))  # 0 unseen, 1 on the DFS path, 2 finished
    for start in range(len(graph)):
        if state[start]:
            continue
        path = [start]
        cursors = [ptr[start]]
        state[start] = 1
        while path:
            t = path[-1]
            if cursors[-1] == ptr[t + 1]:
                state[t] = 2
                path.pop()
                cursors.pop()
                continue
            d = idx[cursors[-1]]
            cursors[-1] += 1
            if state[d] == 1:
                return [*path[path.index(d) :], d]
            if state[d] == 0:
                state[d] = 1
                path.append(d)
                cursors.append(ptr[d])
    return []


def check_names(graph: Graph, user_names: dict[int, str]) -> None:
    """Raise GraphError if a given name equals another task's automatic name."""
    for tid, name in user_names.items():
        _, _, suffix = name.rpartition("-")
        if not suffix.isdigit():
            continue
        other = int(suffix)
        clash = other != tid and other < len(graph) and other not in user_names
        if clash and graph.name(other) == name:
            raise GraphError(
                f"task name {name!r} (task {tid}) is also the automatic name of task "
                f"{other}; choose another name or name task {other} explicitly"
            )
