"""``LocalExecutor``: runs a graph on this machine, on threads, processes or the calling thread.

    LocalExecutor.run(graph, targets)
      validate ─ priorities (planning.order, kept by graph.cached) ─ Scheduler
      ─ Driver(...).run(backend) ─┬─ "threads"   ThreadBackend   _threads.py
                                  ├─ "processes" ProcessBackend  _processes.py
                                  └─ "sync"      SyncBackend     _sync.py
      <─ {target: result}, or ExceptionGroup[TaskError]

A run either returns every target's result or raises: when tasks fail for
good it raises one ``ExceptionGroup`` holding a ``TaskError`` per failed task
(its name, its inputs' names, its attempts; the original exception, with its
traceback, as ``__cause__``), never a partial result. Any exception a task
raises is a failed try, ``SystemExit`` included (it must not end the program
that waits for the task); ``KeyboardInterrupt`` is not: it interrupts the run.
A Ctrl-C while a run is active always ends it with ``KeyboardInterrupt``
(see ``_interrupts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph._util import usable_cores
from chunkgraph.execute import _interrupts
from chunkgraph.execute._driver import Backend, Driver
from chunkgraph.execute._events import Subscriber
from chunkgraph.execute._limits import check_timeout, task_timeouts
from chunkgraph.execute._processes import ProcessBackend
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.execute._sync import SyncBackend
from chunkgraph.execute._threads import ThreadBackend
from chunkgraph.graph import Graph
from chunkgraph.planning import order

ExecutorKind = Literal["threads", "processes", "sync"]
EXECUTOR_KINDS: tuple[ExecutorKind, ...] = ("threads", "processes", "sync")


@dataclass(frozen=True)
class LocalExecutor:
    """Runs graphs on this machine.

    ``kind``: "threads" (a persistent thread pool; numpy releases the GIL),
    "processes" (worker processes, numpy arrays through shared memory) or "sync"
    (the calling thread). ``workers``: default all usable cores. ``retries``: extra
    tries per task (a dead worker process counts as a try). ``subscribers``:
    callables receiving every ``Event``. ``timeout``: seconds a try of a task may
    run before it fails with ``TimeoutError`` (a worker process running it is
    killed; a thread, which cannot be killed, is abandoned); None: no limit.
    Refused for "sync", where nothing could stop the calling thread.

    >>> from chunkgraph.graph import Graph
    >>> g = Graph()
    >>> total = g.add(sum, [g.add(abs, -i) for i in range(4)])
    >>> LocalExecutor("sync").run(g, [total.id])
    {4: 6}
    """

    kind: ExecutorKind = "threads"
    workers: int | None = None
    retries: int = 0
    subscribers: tuple[Subscriber, ...] = field(default=())
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTOR_KINDS:
            raise ConfigError(f"executor must be one of {EXECUTOR_KINDS}, got {self.kind!r}")
        if self.workers is not None and (
            not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1
        ):
            raise ConfigError(
                f"workers must be a positive int or None (all cores), got {self.workers!r}"
            )
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {self.retries!r}")
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        if self.timeout is not None and self.kind == "sync":
            raise ConfigError(
                f"timeout={self.timeout:g} cannot be enforced with executor='sync' (tasks run "
                "in the calling thread, which nothing can stop); use executor='threads' or "
                "'processes', or timeout=None"
            )

    @property
    def in_process(self) -> bool:
        """True unless tasks run in worker processes ("processes")."""
        return self.kind != "processes"

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
    ) -> dict[int, Any]:
        """Run the tasks ``targets`` need (default: every sink); returns ``{id: result}``.

        ``subscribers`` receive this run's events besides the executor's own.
        """
        graph.validate()
        target_ids = graph.sinks().tolist() if targets is None else list(targets)
        priority = graph.cached("order", order)  # shared by repeated runs of an unchanged graph
        scheduler = Scheduler(graph, target_ids, priority, retries=self.retries)
        driver = Driver(
            graph, scheduler, (*self.subscribers, *subscribers), task_timeouts(self.timeout)
        )
        with _interrupts.InterruptGuard():
            driver.run(self._backend(driver))
        if scheduler.failures:
            raise _error_group(graph, scheduler)
        return {t: scheduler.results[t] for t in target_ids}

    def _backend(self, driver: Driver) -> Backend:
        workers = self.workers or usable_cores()
        if self.kind == "threads":
            return ThreadBackend(driver, workers)
        if self.kind == "processes":
            return ProcessBackend(driver, workers)
        return SyncBackend(driver)


def _describe(error: BaseException) -> str:
    """``Type: message``, even for an exception whose ``__str__`` itself fails."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return f"{type(error).__name__} (its message could not be shown)"


def _error_group(graph: Graph, scheduler: Scheduler) -> ExceptionGroup[TaskError]:
    dep_ptr, dep_idx = graph.dependencies()
    errors = []
    for t, cause in sorted(scheduler.failures.items()):
        inputs = [graph.name(int(d)) for d in dep_idx[dep_ptr[t] : dep_ptr[t + 1]]]
        error = TaskError(graph.name(t), inputs, scheduler.attempts[t], _describe(cause))
        error.__cause__ = cause
        errors.append(error)
    skipped = len(scheduler.cancelled())
    message = f"{len(errors)} task(s) failed"
    if skipped:
        message += f"; {skipped} task(s) did not run"
    return ExceptionGroup(message, errors)
