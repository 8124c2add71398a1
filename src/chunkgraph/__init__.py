"""chunkgraph: plan and run large parallel workloads: task graphs and chunked n-d volumes.

    >>> import chunkgraph as cg
    >>> with cg.Graph() as g:
    ...     total = cg.task(sum)([cg.task(pow)(i, 2) for i in range(4)])
    >>> cg.run(g, total)
    14

The subpackages are public too: ``chunkgraph.geometry`` (boxes),
``chunkgraph.graph`` (task graphs), ``chunkgraph.volume`` (chunked storage),
``chunkgraph.flow`` (the subchunkable ``apply`` flow), ``chunkgraph.parallel``
(adaptive fork-join loops), ``chunkgraph.execute`` (executors, events) and
``chunkgraph.planning``; ``chunkgraph.lowlevel`` gathers the engine's parts
for people who build on them (scheduler, process pool, work-stealing pool,
splitters).

Names are imported on first use, so ``import chunkgraph`` is cheap and a
process that only runs task graphs never imports the storage libraries
(zarr, tensorstore).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import (
    AlignmentError,
    CallTimeoutError,
    ChunkgraphError,
    ConfigError,
    CorruptChunkError,
    FlowLockedError,
    FlowOutputError,
    GraphError,
    PlanError,
    RemoteError,
    RemoteTraceback,
    RunEndedError,
    StoreError,
    TaskError,
    UsageError,
    VolumeNotFoundError,
    WorkerDiedError,
)

__version__ = "0.2.0"

# name -> the module that defines it (imported on first access).
_LAZY = {
    "Box": "chunkgraph.geometry",
    "Graph": "chunkgraph.graph",
    "TaskRef": "chunkgraph.graph",
    "Cost": "chunkgraph.graph",
    "Resources": "chunkgraph.graph",
    "task": "chunkgraph.graph",
    "run": "chunkgraph.execute",
    "plan": "chunkgraph.planning",
    "Plan": "chunkgraph.planning",
    "Context": "chunkgraph.planning",
    "Link": "chunkgraph.planning",
    "local_contexts": "chunkgraph.planning",
    "LocalExecutor": "chunkgraph.execute",
    "dask_scheduler": "chunkgraph.execute",
    "DaskExecutor": "chunkgraph.execute",
    "dask_contexts": "chunkgraph.execute",
    "Event": "chunkgraph.execute",
    "EventKind": "chunkgraph.execute",
    "Volume": "chunkgraph.volume",
    "IOStats": "chunkgraph.volume",
    "ApplyReport": "chunkgraph.flow",
    "apply": "chunkgraph.flow",
    "RunOptions": "chunkgraph.flow",
    "downsample": "chunkgraph.jobs",
    "transfer": "chunkgraph.jobs",
    "label": "chunkgraph.jobs",
    "view": "chunkgraph.viewer",
    "parallel_for": "chunkgraph.parallel",
    "parallel_map": "chunkgraph.parallel",
    "parallel_reduce": "chunkgraph.parallel",
    "parallel_sort": "chunkgraph.parallel",
}
_SUBPACKAGES = (
    "execute",
    "flow",
    "geometry",
    "graph",
    "lowlevel",
    "parallel",
    "planning",
    "volume",
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"chunkgraph.{name}")
    else:
        raise AttributeError(f"module 'chunkgraph' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))


if TYPE_CHECKING:
    from chunkgraph import execute, flow, geometry, graph, lowlevel, parallel, planning, volume
    from chunkgraph.execute import (
        DaskExecutor,
        Event,
        EventKind,
        LocalExecutor,
        dask_contexts,
        dask_scheduler,
        run,
    )
    from chunkgraph.flow import ApplyReport, RunOptions, apply
    from chunkgraph.geometry import Box
    from chunkgraph.graph import Cost, Graph, Resources, TaskRef, task
    from chunkgraph.jobs import downsample, label, transfer
    from chunkgraph.parallel import parallel_for, parallel_map, parallel_reduce, parallel_sort
    from chunkgraph.planning import Context, Link, Plan, local_contexts, plan
    from chunkgraph.viewer import view
    from chunkgraph.volume import IOStats, Volume

__all__ = [
    "AlignmentError",
    "ApplyReport",
    "Box",
    "CallTimeoutError",
    "ChunkgraphError",
    "ConfigError",
    "Context",
    "CorruptChunkError",
    "Cost",
    "DaskExecutor",
    "Event",
    "EventKind",
    "FlowLockedError",
    "FlowOutputError",
    "Graph",
    "GraphError",
    "IOStats",
    "Link",
    "LocalExecutor",
    "Plan",
    "PlanError",
    "RemoteError",
    "RemoteTraceback",
    "Resources",
    "RunEndedError",
    "RunOptions",
    "StoreError",
    "TaskError",
    "TaskRef",
    "UsageError",
    "Volume",
    "VolumeNotFoundError",
    "WorkerDiedError",
    "__version__",
    "apply",
    "dask_contexts",
    "dask_scheduler",
    "downsample",
    "execute",
    "flow",
    "geometry",
    "graph",
    "label",
    "local_contexts",
    "lowlevel",
    "parallel",
    "parallel_for",
    "parallel_map",
    "parallel_reduce",
    "parallel_sort",
    "plan",
    "planning",
    "run",
    "task",
    "transfer",
    "view",
    "volume",
]
