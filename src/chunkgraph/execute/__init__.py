"""Running graphs: ``run()``, the ``Executor`` protocol, ``LocalExecutor`` (threads, adaptive,
processes, sync), events, progress. ``pool`` holds the process pool.

``resolve_executor(executor)`` turns what a caller passes as ``executor=`` (a kind
in ``EXECUTOR_KINDS``, a Dask scheduler address or an ``Executor``) into an
Executor, or raises ConfigError.

On a Dask cluster: ``DaskExecutor`` (one Dask task per planned subgraph),
``dask_contexts(client)`` (a Context per worker, to plan on) and
``dask_links(contexts)``. Dask collections on chunkgraph: ``dask_scheduler``.
Clusters chunkgraph starts: ``cluster("slurm", cores=8, ...)`` (a ``ClusterExecutor``
that owns the cluster), ``start_cluster(ClusterSpec(...))``, or a ``ClusterSpec`` given
as ``executor=`` (started for one run).
Importing them does not import Dask; using them does.
"""

from chunkgraph.execute._breakdown import Breakdown
from chunkgraph.execute._cluster_spec import CLUSTER_KINDS, ClusterSpec, valid_options
from chunkgraph.execute._dask_clusters import ClusterExecutor, cluster, start_cluster
from chunkgraph.execute._dask_contexts import dask_contexts, dask_links
from chunkgraph.execute._dask_executor import DaskExecutor
from chunkgraph.execute._dask_scheduler import dask_scheduler
from chunkgraph.execute._events import Event, EventKind, Subscriber
from chunkgraph.execute._executor import (
    ChecksPaths,
    Executor,
    is_scheduler_address,
    resolve_executor,
)
from chunkgraph.execute._local import EXECUTOR_KINDS, ExecutorKind, LocalExecutor
from chunkgraph.execute._progress import ProgressBar
from chunkgraph.execute._run import run
from chunkgraph.execute._scheduler import Scheduler, TaskState
from chunkgraph.execute.pool import ProcessPool

__all__ = [
    "CLUSTER_KINDS",
    "EXECUTOR_KINDS",
    "Breakdown",
    "ChecksPaths",
    "ClusterExecutor",
    "ClusterSpec",
    "DaskExecutor",
    "Event",
    "EventKind",
    "Executor",
    "ExecutorKind",
    "LocalExecutor",
    "ProcessPool",
    "ProgressBar",
    "Scheduler",
    "Subscriber",
    "TaskState",
    "cluster",
    "dask_contexts",
    "dask_links",
    "dask_scheduler",
    "is_scheduler_address",
    "resolve_executor",
    "run",
    "start_cluster",
    "valid_options",
]
