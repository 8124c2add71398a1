"""A rich progress bar fed by run events: tasks done / total, rate and time left.

It is an ordinary event subscriber, so it runs in the thread that called
``run()`` (see ``_events.py``) and never slows the workers. It draws on
stderr, leaving stdout to the program.
"""

from __future__ import annotations

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
    TimeRemainingColumn,
)
from rich.text import Text

from chunkgraph.execute._events import Event, EventKind


class _RateColumn(ProgressColumn):
    """Tasks per second, from rich's moving estimate."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- tasks/s" if speed is None else f"{speed:,.0f} tasks/s")


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
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
        )
        self._task: TaskID | None = None
        self._closed = False
        self.done = 0
        self.failed = 0

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind is EventKind.FINISHED:
            self.done += 1
            if self._task is not None:
                self._progress.advance(self._task)
        elif kind is EventKind.FAILED:
            self.failed += 1
            if self._task is not None:
                self._progress.update(
                    self._task, description=f"{self.description} [red]({self.failed} failed)"
                )
        elif kind is EventKind.RUN_STARTED:
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=event.total)
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
