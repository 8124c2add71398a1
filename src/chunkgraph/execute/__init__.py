"""Running graphs: ``run()``, the ``Executor`` protocol, ``LocalExecutor`` (threads,
processes, sync), events, progress. ``pool`` holds the process pool.

``resolve_executor(executor)`` turns what a caller passes as ``executor=`` (a kind
in ``EXECUTOR_KINDS`` or an ``Executor``) into an Executor, or raises ConfigError.
``dask_scheduler`` runs dask collections on chunkgraph (dask is imported only when called).
"""

from chunkgraph.execute._dask_scheduler import dask_scheduler
from chunkgraph.execute._events import Event, EventKind, Subscriber
from chunkgraph.execute._executor import Executor, resolve_executor
from chunkgraph.execute._local import EXECUTOR_KINDS, ExecutorKind, LocalExecutor
from chunkgraph.execute._progress import ProgressBar
from chunkgraph.execute._run import run
from chunkgraph.execute._scheduler import Scheduler, TaskState
from chunkgraph.execute.pool import ProcessPool

__all__ = [
    "EXECUTOR_KINDS",
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
    "dask_scheduler",
    "resolve_executor",
    "run",
]
