"""``run()`` and ``LocalExecutor``: one machine, threads, processes or the calling thread.

    run(graph, targets) ─ validate ─ order (priorities) ─ Scheduler ─┬─ "threads"   _threads.py
                                                                     ├─ "processes" _processes.py
                                                                     └─ "sync"      here
                       <─ targets' results, or ExceptionGroup[TaskError] ─┘

``"sync"`` runs every task in the calling thread in priority order: the
reference behaviour for debugging and deterministic tests.

A run either returns every target's result or raises: when tasks fail for
good it raises one ``ExceptionGroup`` holding a ``TaskError`` per failed task
(its name, its inputs' names, its attempts; the original exception, with its
traceback, as ``__cause__``), never a partial result. Any exception a task
raises is a failed try, ``SystemExit`` included (it must not end the program
that waits for the task); ``KeyboardInterrupt`` is not: it interrupts the run.
A Ctrl-C while ``run()`` is active always ends it with ``KeyboardInterrupt``
(see ``_interrupts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph.execute import _interrupts
from chunkgraph.execute._events import EventKind, EventQueue, Subscriber
from chunkgraph.execute._limits import check_timeout, task_timeouts
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.execute._threads import default_workers, run_threads
from chunkgraph.graph import Graph, TaskRef
from chunkgraph.planning import order

ExecutorKind = Literal["threads", "processes", "sync"]
EXECUTOR_KINDS = ("threads", "processes", "sync")


def _call(graph: Graph, t: int, results: list[Any]) -> Any:
    fn, args, kwargs = graph.resolve(t, results)
    return fn(*args, **kwargs)


def _run_sync(graph: Graph, scheduler: Scheduler, events: EventQueue | None) -> None:
    while True:
        _interrupts.check()
        batch = scheduler.take(1)
        if not batch:
            return
        t = batch[0]
        if events is not None:
            events.emit(EventKind.STARTED, t, graph.name(t), scheduler.attempt(t))
        try:
            value = _call(graph, t, scheduler.results)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # SystemExit too: a failed try, not the end of the program
            kind = EventKind.RETRIED if scheduler.fail(t, error) else EventKind.FAILED
            if events is not None:
                events.emit(kind, t, graph.name(t), scheduler.attempts[t], error=error)
        else:
            scheduler.finish(t, value)
            value = None  # the scheduler owns it now; do not keep it alive here
            if events is not None:
                events.emit(EventKind.FINISHED, t, graph.name(t), scheduler.attempt(t))
        if events is not None:
            events.drain()


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

    def run(self, graph: Graph, targets: Sequence[int] | None = None) -> dict[int, Any]:
        """Run the tasks ``targets`` need (default: every sink); returns ``{id: result}``."""
        graph.validate()
        target_ids = graph.sinks().tolist() if targets is None else list(targets)
        priority = _priority(graph)
        scheduler = Scheduler(graph, target_ids, priority, retries=self.retries)
        with _interrupts.InterruptGuard():
            self._drive(graph, scheduler)
        if scheduler.failures:
            raise _error_group(graph, scheduler)
        return {t: scheduler.results[t] for t in target_ids}

    def _drive(self, graph: Graph, scheduler: Scheduler) -> None:
        events = EventQueue(self.subscribers) if self.subscribers else None
        if events is not None:
            events.emit(EventKind.RUN_STARTED, total=scheduler.total)
        workers = self.workers or default_workers()
        timeout_of = task_timeouts(self.timeout)
        try:
            if self.kind == "threads":
                run_threads(graph, scheduler, events, workers, timeout_of)
            elif self.kind == "processes":
                from chunkgraph.execute._processes import run_processes

                run_processes(graph, scheduler, events, workers, timeout_of)
            else:
                _run_sync(graph, scheduler, events)
        finally:
            if events is not None:
                for t in scheduler.cancelled():
                    events.emit(EventKind.CANCELLED, t, graph.name(t))
                events.emit(EventKind.RUN_FINISHED, total=scheduler.done)
                events.drain()


def _priority(graph: Graph) -> np.ndarray[Any, np.dtype[np.int64]]:
    return graph.cached("order", order)  # shared by repeated runs of an unchanged graph


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


def _target_ids(graph: Graph, targets: object) -> list[int]:
    if isinstance(targets, TaskRef):
        return [graph.task_id(targets)]
    if isinstance(targets, str):
        return [graph.ref(targets).id]
    if isinstance(targets, Mapping):
        return [t for v in targets.values() for t in _target_ids(graph, v)]
    if isinstance(targets, list | tuple):
        return [t for v in targets for t in _target_ids(graph, v)]
    raise ConfigError(
        f"targets must be a TaskRef, a task name, or a list/tuple/dict of them, got {targets!r}"
    )


def _shape_like(targets: object, graph: Graph, results: Mapping[int, Any]) -> Any:
    if isinstance(targets, TaskRef):
        return results[targets.id]
    if isinstance(targets, str):
        return results[graph.ref(targets).id]
    if isinstance(targets, Mapping):
        return {k: _shape_like(v, graph, results) for k, v in targets.items()}
    if isinstance(targets, tuple):
        return tuple(_shape_like(v, graph, results) for v in targets)
    return [_shape_like(v, graph, results) for v in targets]  # type: ignore[attr-defined]


def run(
    graph: Graph,
    targets: TaskRef | str | Sequence[Any] | Mapping[Any, Any] | None = None,
    executor: ExecutorKind = "threads",
    retries: int = 0,
    progress: bool = False,
    workers: int | None = None,
    subscribers: Iterable[Subscriber] = (),
    timeout: float | None = None,
) -> Any:
    """Run ``graph`` and return the results of ``targets``.

    ``targets``: a TaskRef (returns its value), a list/tuple/dict of TaskRefs (the same
    structure of values), or None (a dict ``{sink name: value}`` of every task no other
    task consumes). Failed tasks raise one ``ExceptionGroup`` of ``TaskError``.
    ``timeout``: seconds each try of each task may run (see ``LocalExecutor``).

    >>> from chunkgraph.graph import Graph
    >>> g = Graph()
    >>> parts = [g.add(sum, range(i)) for i in range(4)]
    >>> total = g.add(sum, parts, name="total")
    >>> run(g, total), run(g, [parts[3], total]), run(g)
    (4, [3, 4], {'total': 4})
    """
    if not isinstance(graph, Graph):
        hint = (
            f"; for one task, call run(ref.graph, ref) with ref = {graph!r}"
            if isinstance(graph, TaskRef)
            else ""
        )
        raise ConfigError(f"run() takes a Graph first, got {type(graph).__name__}{hint}")
    subs = list(subscribers)
    bar = None
    try:
        if progress:
            from chunkgraph.execute._progress import ProgressBar

            bar = ProgressBar()
            subs.append(bar)
        local = LocalExecutor(executor, workers, retries, tuple(subs), timeout)
        if targets is None:
            by_id = local.run(graph)
            return {graph.name(t): value for t, value in by_id.items()}
        by_id = local.run(graph, _target_ids(graph, targets))
        return _shape_like(targets, graph, by_id)
    finally:
        if bar is not None:
            bar.close()
