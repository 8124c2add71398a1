"""Recorder: an event subscriber that keeps what each task did, for run reports.

Pass one to a run (``chunkgraph.run(..., subscribers=[recorder])``, or
``apply(..., subscribers=[recorder])``); afterwards it holds, per task, every
try (worker, start, end, whether it failed), the attempts and the outcome,
plus the run's start and end and the steals:

    RUN_STARTED    a new run: task ids from here on are this run's (a flow may run
                   several graphs, and ids restart in each)
    STARTED        opens a try on ``event.worker`` at ``event.time``
    FINISHED       closes it; the task's outcome is "finished"
    RETRIED        closes it as failed; the task will be tried again
    FAILED         closes it as failed; the outcome is "failed" with the error's text
    CANCELLED      the task never ran: outcome "cancelled"
    STOLEN         one steal of ``event.total`` tasks
    ACTIVATED      the adaptive executor's check: workers active per context and
                   the CPU and I/O readings (``activations``)
    TRANSFERS      a run with GPU tasks: its line of uploads, downloads, bytes
                   moved and spills (``transfers``)
    RUN_FINISHED   the run's end

Times stay ``time.perf_counter()`` values here; the report makes them seconds
from the first run's start. Subscribers run in the calling thread, one event
at a time, so the Recorder needs no lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chunkgraph.execute import Event, EventKind

if TYPE_CHECKING:
    from chunkgraph.parallel import ActivationEvent

# An error's text is kept for the report; a traceback-sized message would make
# report.json unreadable, and the run raises the full error anyway.
ERROR_TEXT_LIMIT = 500


@dataclass(slots=True)
class Try:
    """One try of a task: where, from when to when (``end`` NaN while open), failed or not."""

    worker: str
    start: float
    end: float = math.nan
    failed: bool = False


@dataclass(slots=True)
class TaskRecord:
    """What one task of one run did: its tries, its outcome and, if it failed, why.

    ``outcome`` is "pending" (seen starting, no end yet), "finished", "failed"
    or "cancelled".
    """

    run: int
    task: int
    name: str
    tries: list[Try] = field(default_factory=list)
    outcome: str = "pending"
    error: str = ""

    @property
    def retries(self) -> int:
        """Tries that failed and were followed by another."""
        failed = sum(1 for t in self.tries if t.failed)
        return failed - (1 if self.outcome == "failed" else 0)


class Recorder:
    """An event subscriber keeping each task's tries, outcome and error; see the module doc.

    >>> import chunkgraph as cg
    >>> g = cg.Graph()
    >>> one = g.add(lambda: 1, name="one")
    >>> recorder = Recorder()
    >>> cg.run(g, one, executor="sync", subscribers=[recorder])
    1
    >>> [(r.name, r.outcome) for r in recorder.tasks]
    [('one', 'finished')]
    """

    def __init__(self) -> None:
        self._tasks: dict[tuple[int, int], TaskRecord] = {}
        self.runs = 0
        self.run_start = math.nan  # first RUN_STARTED (perf_counter)
        self.run_end = math.nan  # last RUN_FINISHED
        self.planned = 0  # tasks the runs said they would execute
        self.steals = 0  # STOLEN events
        self.tasks_stolen = 0  # tasks those steals moved
        # (perf_counter time, ActivationEvent) of each ACTIVATED event
        self.activations: list[tuple[float, ActivationEvent]] = []
        self.transfers: list[str] = []  # the TRANSFERS line of each run with GPU tasks

    @property
    def tasks(self) -> list[TaskRecord]:
        """Every task seen, in the order each was first seen."""
        return list(self._tasks.values())

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind is EventKind.RUN_STARTED:
            self.runs += 1
            self.planned += event.total
            if math.isnan(self.run_start):
                self.run_start = event.time
        elif kind is EventKind.RUN_FINISHED:
            self.run_end = event.time
        elif kind is EventKind.STOLEN:
            self.steals += 1
            self.tasks_stolen += event.total
        elif kind is EventKind.ACTIVATED:
            if event.activation is not None:
                self.activations.append((event.time, event.activation))
        elif kind is EventKind.TRANSFERS:
            self.transfers.append(event.name)
        elif kind is EventKind.STARTED:
            self._record(event).tries.append(Try(event.worker, event.time))
        elif kind is EventKind.CANCELLED:
            self._record(event).outcome = "cancelled"
        else:  # FINISHED, RETRIED, FAILED: the end of a try
            record = self._record(event)
            ok = kind is EventKind.FINISHED
            self._close(record, event, failed=not ok)
            if ok:
                record.outcome = "finished"
            elif kind is EventKind.FAILED:
                record.outcome = "failed"
                record.error = _error_text(event.error)

    def _record(self, event: Event) -> TaskRecord:
        key = (self.runs, event.task)
        record = self._tasks.get(key)
        if record is None:
            record = self._tasks[key] = TaskRecord(self.runs, event.task, event.name)
        return record

    @staticmethod
    def _close(record: TaskRecord, event: Event, *, failed: bool) -> None:
        last = record.tries[-1] if record.tries else None
        if last is None or not math.isnan(last.end):
            # An end without a start: a try that failed before it started (its
            # arguments could not be built, say). It takes no time.
            last = Try(event.worker, event.time)
            record.tries.append(last)
        last.end = event.time
        last.failed = failed
        if event.worker and not last.worker:
            last.worker = event.worker


def _error_text(error: BaseException | None) -> str:
    if error is None:
        return ""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."
