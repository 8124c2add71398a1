"""chunkgraph: plan and run large parallel workloads on cores, NUMA nodes, GPUs and clusters."""

from chunkgraph._errors import (
    AlignmentError,
    ChunkgraphError,
    ConfigError,
    GraphError,
    PlanError,
    TaskError,
    WorkerDiedError,
)

__version__ = "0.1.0"

__all__ = [
    "AlignmentError",
    "ChunkgraphError",
    "ConfigError",
    "GraphError",
    "PlanError",
    "TaskError",
    "WorkerDiedError",
    "__version__",
]
