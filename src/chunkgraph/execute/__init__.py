"""Running graphs: ``run()``, ``LocalExecutor`` (threads, processes, sync), events, progress."""

from chunkgraph.execute._events import Event, EventKind, Subscriber
from chunkgraph.execute._local import ExecutorKind, LocalExecutor, run
from chunkgraph.execute._process_pool import ProcessPool
from chunkgraph.execute._progress import ProgressBar
from chunkgraph.execute._scheduler import Scheduler, TaskState

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
