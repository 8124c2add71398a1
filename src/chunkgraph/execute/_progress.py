"""A rich progress bar fed by run events: tasks done / total, rate and time left.

It is an ordinary event subscriber, so it runs in the thread that called
``run()`` (see ``_events.py``) and never slows the workers. It draws on
stderr, leaving stdout to the program.

Rate. Tasks finished over the seconds they took, by the events' own times
(``Event.time``), not by when their events arrived: a flow on a Dask cluster
reports a batch's tasks together when the batch returns, each at its time on
the worker (``flow.run._batches``), and rich's own estimate (samples stamped on
arrival) read those 25 tasks in a few microseconds as 400,000 tasks/s until the
second batch came back. The rate is over the last ``RATE_WINDOW_S`` (from the
run's start while it is younger): it follows a run whose speed changes, and it
is right from the first batch on. Before any task finishes it is not known
(``-- tasks/s``, no time left shown).
"""

from __future__ import annotations

from collections import deque

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from chunkgraph.execute._events import Event, EventKind

# Seconds of finished tasks the rate is taken over: long enough to smooth the arrival of
# batches (a few seconds each), short enough to follow a run that slows down.
RATE_WINDOW_S = 30.0


class _RateColumn(ProgressColumn):
    """Tasks per second, the bar's own (``ProgressBar.rate``, kept in the task's fields)."""

    def render(self, task: Task) -> Text:
        rate = task.fields.get("rate")
        return Text("-- tasks/s" if rate is None else f"{rate:,.0f} tasks/s")


class _LeftColumn(ProgressColumn):
    """Time left at that rate (``ProgressBar.seconds_left``); ``-:--:--`` while unknown."""

    def render(self, task: Task) -> Text:
        left = task.fields.get("left")
        if left is None:
            return Text("-:--:--")
        minutes, seconds = divmod(round(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}")


class ProgressBar:
    """Event subscriber that shows one bar per run; call ``close()`` when the run ends.

    Args:
        description: The bar's label.
        console: The rich Console drawn on; None: one on standard error.
    """

    def __init__(self, description: str = "tasks", console: Console | None = None) -> None:
        self.description = description
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            _LeftColumn(),
            console=console or Console(stderr=True),
        )
        self._task: TaskID | None = None
        self._closed = False
        self.done = 0
        self.failed = 0
        self.total = 0
        # (event time, tasks done then) over the last RATE_WINDOW_S, oldest first.
        self._samples: deque[tuple[float, int]] = deque()

    @property
    def rate(self) -> float | None:
        """Tasks finished per second over the last ``RATE_WINDOW_S`` (see the module
        doc); None until a task finished."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 > n0 else None

    @property
    def seconds_left(self) -> float | None:
        """The tasks not done over ``rate``; None while the rate is not known."""
        rate = self.rate
        return None if rate is None else max(0, self.total - self.done) / rate

    def _sample(self, when: float) -> None:
        """Count one task done at ``when``; forget samples older than the window (keeping
        one at its edge, the start of the span the rate is over)."""
        samples = self._samples
        samples.append((max(when, samples[-1][0]) if samples else when, self.done))
        while len(samples) > 2 and samples[1][0] <= when - RATE_WINDOW_S:
            samples.popleft()

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind is EventKind.FINISHED:
            self.done += 1
            self._sample(event.time)
            if self._task is not None:
                self._progress.update(self._task, advance=1, rate=self.rate, left=self.seconds_left)
        elif kind is EventKind.FAILED:
            self.failed += 1
            if self._task is not None:
                self._progress.update(
                    self._task, description=f"{self.description} [red]({self.failed} failed)"
                )
        elif kind is EventKind.RUN_STARTED:
            self.total = event.total
            self._samples = deque([(event.time, self.done)])  # the span starts with the run
            self._progress.start()
            self._task = self._progress.add_task(
                self.description, total=event.total, rate=None, left=None
            )
        elif kind is EventKind.RUN_FINISHED:
            self.close()

    def close(self) -> None:
        """Draw the final state and release the terminal; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._progress.refresh()
        self._progress.stop()
