"""Task graphs: ``Graph``, ``TaskRef``, ``Cost``, ``Resources`` and the ``@task`` decorator.

See ``_graph.py`` for the storage layout (CSR dependency arrays, cost columns).
``from_dask`` converts dask collections and graphs (``_from_dask.py``).
``collect_leaves`` / ``replace_leaves`` / ``has_leaf`` state which containers
chunkgraph looks inside (for TaskRefs here, for shared-memory arrays in the
process pool); see ``_nested.py``.
"""

from chunkgraph.graph._cost import (
    DEFAULT_RESOURCES,
    DEFAULT_SECONDS,
    ContextSeconds,
    Cost,
    Resources,
)
from chunkgraph.graph._from_dask import DaskGraph, from_dask
from chunkgraph.graph._graph import CostColumns, Graph, TaskRef, needed_mask
from chunkgraph.graph._nested import collect_leaves, has_leaf, replace_leaves
from chunkgraph.graph._task import Task, task

__all__ = [
    "DEFAULT_RESOURCES",
    "DEFAULT_SECONDS",
    "ContextSeconds",
    "Cost",
    "CostColumns",
    "DaskGraph",
    "Graph",
    "Resources",
    "Task",
    "TaskRef",
    "collect_leaves",
    "from_dask",
    "has_leaf",
    "needed_mask",
    "replace_leaves",
    "task",
]
