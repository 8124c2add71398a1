"""Adaptive fork-join loops on a persistent work-stealing thread pool.

See ``README.md`` in this folder for the splitting and grain rules.
"""

from chunkgraph._util import usable_cores
from chunkgraph.parallel._activation import ActivationEvent
from chunkgraph.parallel._grain import CostModel, OpKind
from chunkgraph.parallel._loops import parallel_for, parallel_map, parallel_reduce
from chunkgraph.parallel._pool import (
    PoolStats,
    WorkStealingPool,
    get_pool,
    set_workers,
)
from chunkgraph.parallel._runner import PartitionRunner
from chunkgraph.parallel._sort import parallel_sort
from chunkgraph.parallel._splitter import LengthSplitter, Splitter, plan_pieces
from chunkgraph.parallel._topology import Topology

__all__ = [
    "ActivationEvent",
    "CostModel",
    "LengthSplitter",
    "OpKind",
    "PartitionRunner",
    "PoolStats",
    "Splitter",
    "Topology",
    "WorkStealingPool",
    "get_pool",
    "parallel_for",
    "parallel_map",
    "parallel_reduce",
    "parallel_sort",
    "plan_pieces",
    "set_workers",
    "usable_cores",
]
