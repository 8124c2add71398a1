"""What both readers of a dask graph share: the key type, the three kinds a key can
be, the ``NodeFormat`` each reader implements, and a key's readable name.

``_from_dask`` reads ``dask._task_spec`` nodes and hands a graph of tuple tasks to
``_dask_tuples``; both take this vocabulary from here, so the import runs one way:

    _from_dask  ->  _dask_tuples  ->  _dask_nodes
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Protocol

from chunkgraph.graph._graph import Graph

Key = Hashable

TASK, DATA, ALIAS = 0, 1, 2


class NodeFormat(Protocol):
    """How one graph format's nodes are read: their kind, dependencies and task."""

    nodes: Mapping[Key, Any]  # every key of the graph -> its node

    def kind(self, key: Key) -> tuple[int, Any]:
        """``(TASK, node)``, ``(DATA, value)`` or ``(ALIAS, target key)``."""

    def dependencies(self, key: Key) -> Iterable[Key]:
        """The keys ``key``'s node reads."""

    def add(self, graph: Graph, key: Key, node: Any, resolved: dict[Key, Any]) -> Any:
        """Add task ``node`` to ``graph``; its TaskRef (``resolved`` holds its inputs)."""


def key_name(key: Key) -> str:
    """The readable part of a dask key: ``('sum-partial-3f9a...', 0, 1)`` -> ``sum-partial``."""
    from dask.utils import key_split

    name: str = key_split(key)
    return name
