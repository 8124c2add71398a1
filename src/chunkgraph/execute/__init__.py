"""Running graphs: ``run()``, ``LocalExecutor`` (threads, processes, sync), events, progress."""

from chunkgraph.execute._events import Event, EventKind, Subscriber
from chunkgraph.execute._local import ExecutorKind, LocalExecutor, run
from chunkgraph.execute._progress import ProgressBar
from chunkgraph.execute._scheduler import Scheduler, TaskState
from chunkgraph.execute.pool import ProcessPool

__all__ = [
    "Event",
    "EventKind",
    "ExecutorKind",
    "LocalExecutor",
    "ProcessPool",
    "ProgressBar",
    "Scheduler",
    "Subscriber",
    "TaskState",
    "run",
]
