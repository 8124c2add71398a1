"""Task graphs: ``Graph``, ``TaskRef``, ``Cost``, ``Resources`` and the ``@task`` decorator.

See ``_graph.py`` for the storage layout (CSR dependency arrays, cost columns).
"""

from chunkgraph.graph._cost import DEFAULT_RESOURCES, DEFAULT_SECONDS, Cost, Resources
from chunkgraph.graph._graph import CostColumns, Graph, TaskRef
from chunkgraph.graph._task import Task, task

__all__ = [
    "DEFAULT_RESOURCES",
    "DEFAULT_SECONDS",
    "Cost",
    "CostColumns",
    "Graph",
    "Resources",
    "Task",
    "TaskRef",
    "task",
]
