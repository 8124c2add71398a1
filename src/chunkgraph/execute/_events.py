"""Events a run streams to its subscribers: what started, finished, failed, was retried.

Executors never print. They put ``Event`` records on a queue as things happen
(timestamps are taken where it happens, in the worker thread or the driver) and
the thread that called ``run()`` hands them to the subscribers, in order, every
``EVENT_FLUSH_SECONDS`` and once more at the end:

    worker threads / process driver --append--> deque --drain--> subscriber(event)
                                               (calling thread, serially)

So a subscriber never runs concurrently with itself and may be slow without
stalling workers. Without subscribers no Event object is ever built.

``Event.worker`` names where a try ran, for run reports: a STARTED or FINISHED
event emitted by a thread other than the one that called ``run()`` carries
that thread's name (the thread executor's ``chunkgraph-worker-N``). Events
the calling thread emits carry "": there the sync executor runs the task
itself, while the process executor announces it at submission, before any
pool process is chosen, so the worker is not known.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chunkgraph.parallel import ActivationEvent

# How often the calling thread delivers queued events. Shorter gives smoother
# progress bars; longer wakes the calling thread less (it competes with workers
# for the GIL). A tenth of a second is below what a human notices.
EVENT_FLUSH_SECONDS = 0.1


class EventKind(enum.Enum):
    """What an ``Event`` reports: a run's start and end, or one task's transition."""

    RUN_STARTED = "run-started"
    STARTED = "started"
    FINISHED = "finished"
    RETRIED = "retried"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOLEN = "stolen"  # an idle context took planned work of another (``total``: tasks moved)
    ACTIVATED = "activated"  # the adaptive executor's check (``total``: workers active)
    # Once per run with GPU tasks, before RUN_FINISHED: ``name`` is a summary line
    # ("gpu: 3 upload(s), 1 download(s), 4,096 bytes moved, 0 spill(s)"), ``total``
    # the bytes moved between host and devices.
    TRANSFERS = "transfers"
    RUN_FINISHED = "run-finished"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened in a run (see the module doc).

    Attributes:
        kind: What happened, an ``EventKind``.
        task: The task id; -1 for run events.
        name: The task's name ("" where there is none).
        time: A ``time.perf_counter()`` value.
        attempt: The 1-based try.
        total: For RUN_STARTED, the number of tasks the run will execute; for
            RUN_FINISHED, the number that finished.
        error: The exception of a failed or retried try.
        worker: The thread that started or finished the try; "" for the calling
            thread and for other kinds.
        activation: For ACTIVATED, the adaptive executor's ``ActivationEvent``
            (workers active and added per context, the CPU and I/O readings).
        pass_name: The pass of a job that runs several flows (``label``: "find",
            "relabel"), set by the job on the events it hands on; "" otherwise.
    """

    kind: EventKind
    task: int = -1
    name: str = ""
    time: float = 0.0
    attempt: int = 0
    total: int = 0
    error: BaseException | None = None
    worker: str = ""
    activation: ActivationEvent | None = None
    pass_name: str = ""


Subscriber = Callable[[Event], None]


class EventQueue:
    """Thread-safe buffer of Events, drained to subscribers by the calling thread."""

    def __init__(self, subscribers: Iterable[Subscriber]) -> None:
        self.subscribers = tuple(subscribers)
        self._queue: deque[Event] = deque()
        self._caller = threading.current_thread()  # the thread that called run()

    def put(self, event: Event) -> None:
        self._queue.append(event)  # deque.append is atomic: no lock needed

    def emit(
        self,
        kind: EventKind,
        task: int = -1,
        name: str = "",
        attempt: int = 0,
        total: int = 0,
        error: BaseException | None = None,
        activation: ActivationEvent | None = None,
        *,
        worker: str | None = None,
        at: float | None = None,
    ) -> None:
        """Queue an event; ``worker`` and ``at`` (a ``perf_counter`` time) given where the
        try ran elsewhere (a batch on a Dask worker), else this thread and now."""
        if worker is None:
            worker = ""
            if kind is EventKind.STARTED or kind is EventKind.FINISHED:
                thread = threading.current_thread()
                if thread is not self._caller:
                    worker = thread.name
        when = time.perf_counter() if at is None else at
        self._queue.append(Event(kind, task, name, when, attempt, total, error, worker, activation))

    def drain(self) -> None:
        """Deliver every queued event; call only from the thread that called ``run()``."""
        queue = self._queue
        while queue:
            event = queue.popleft()
            for subscriber in self.subscribers:
                subscriber(event)
