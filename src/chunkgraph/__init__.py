"""chunkgraph: plan and run large parallel workloads: task graphs and chunked n-d volumes.

    >>> import chunkgraph as cg
    >>> with cg.Graph() as g:
    ...     total = cg.task(sum)([cg.task(pow)(i, 2) for i in range(4)])
    >>> cg.run(g, total)
    14

The subpackages are public too: ``chunkgraph.geometry`` (boxes),
``chunkgraph.volume`` (volumes and the subchunkable ``apply`` flow),
``chunkgraph.parallel`` (adaptive fork-join loops), ``chunkgraph.execute``
(executors, events, the process pool) and ``chunkgraph.planning``.
"""

from chunkgraph import execute, geometry, graph, parallel, planning, volume
from chunkgraph._errors import (
    AlignmentError,
    ChunkgraphError,
    ConfigError,
    CorruptChunkError,
    GraphError,
    PlanError,
    TaskError,
    WorkerDiedError,
)
from chunkgraph.execute import Event, EventKind, LocalExecutor, run
from chunkgraph.geometry import Box
from chunkgraph.graph import Cost, Graph, Resources, TaskRef, task
from chunkgraph.parallel import parallel_for, parallel_map, parallel_reduce, parallel_sort
from chunkgraph.volume import ApplyReport, IOStats, Volume

__version__ = "0.1.0"

__all__ = [
    "AlignmentError",
    "ApplyReport",
    "Box",
    "ChunkgraphError",
    "ConfigError",
    "CorruptChunkError",
    "Cost",
    "Event",
    "EventKind",
    "Graph",
    "GraphError",
    "IOStats",
    "LocalExecutor",
    "PlanError",
    "Resources",
    "TaskError",
    "TaskRef",
    "Volume",
    "WorkerDiedError",
    "__version__",
    "execute",
    "geometry",
    "graph",
    "parallel",
    "parallel_for",
    "parallel_map",
    "parallel_reduce",
    "parallel_sort",
    "planning",
    "run",
    "task",
    "volume",
]
