"""The engine's parts, for people who build their own scheduling on them.

Most code needs only ``chunkgraph.run``, ``Graph`` and the flow; these are
the pieces underneath, with stable names but a smaller promise: the
scheduler's state machine, the process pool with shared-memory transport,
the work-stealing thread pool, and the adaptive splitters of the parallel
loops.
"""

from chunkgraph.execute import ProcessPool, Scheduler, TaskState
from chunkgraph.parallel import (
    CostModel,
    LengthSplitter,
    OpKind,
    PoolStats,
    Splitter,
    WorkStealingPool,
    get_pool,
    plan_pieces,
    set_workers,
)

__all__ = [
    "CostModel",
    "LengthSplitter",
    "OpKind",
    "PoolStats",
    "ProcessPool",
    "Scheduler",
    "Splitter",
    "TaskState",
    "WorkStealingPool",
    "get_pool",
    "plan_pieces",
    "set_workers",
]
