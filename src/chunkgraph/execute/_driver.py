"""The driver: the one loop that runs a Scheduler on a backend, and the outcomes it records.

A *backend* (threads, processes, the calling thread) knows how to start a
task and how to learn its outcome. Everything else a run does is here, once:

    Driver.run(backend)
      RUN_STARTED
      backend.open()                  get workers (held Ctrl-C: see _interrupts.Deferred)
      loop (Ctrl-C held, unless tasks run in this thread):
        Ctrl-C seen?                  raise KeyboardInterrupt (_interrupts.check)
        backend.start()               hand ready tasks to workers (take(), by priority)
        backend.done()?               nothing in flight and the Scheduler finished: stop
        stopping?                     backend.drop_queued(): queued work will not start
        backend.wait(EVENT_FLUSH_SECONDS)
        backend.collect()             outcomes -> report(); time limits enforced
        a task's Ctrl-C recorded?     raise it
        deliver events                (subscribers run here, in the calling thread)
      on any exception: backend.abort() (cancel, stop running work), re-raise
      always:           backend.close() (give workers back)
      CANCELLED for every task that did not run, RUN_FINISHED, last delivery

Ctrl-C at a safe point. While workers run the tasks, the loop holds SIGINT
(``_interrupts.Deferred``) and raises KeyboardInterrupt at the top of its next
turn, at most ``EVENT_FLUSH_SECONDS`` later. Raised wherever the main thread
happened to be, it could land between a lock's acquire and the ``with`` block
that releases it (inside ``threading.Event.wait``, say), and the pool's
manager thread, needing that lock, would hang the run's shutdown forever.
The sync backend runs tasks in this thread, so there Ctrl-C interrupts the
task at once.

Outcomes all go through :meth:`Driver.report`, which owns the Scheduler's
bookkeeping and the events that go with it:

    done (t, value)      finish: dependents may become READY, inputs released    FINISHED
    failed (t, error)    a failed try (an exception, SystemExit, a dead worker,
                         a time limit): READY again while tries remain            RETRIED
                         else FAILED, and the run stops starting tasks            FAILED
    failed (t, KeyboardInterrupt)
                         not a failed try: the run stops and the loop re-raises it
    unstarted (t)        taken but never started: READY again (put back)

Every method that touches the Scheduler must be called under the backend's
lock, or from one thread. The thread backend calls ``take``/``report`` from
its workers, under its lock, once per *batch* of tasks: a hand-off through
this loop for each task would cost more than the tasks it runs (see
``_threads``). The other backends call them from this loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from chunkgraph.execute import _interrupts
from chunkgraph.execute._events import EVENT_FLUSH_SECONDS, EventKind, EventQueue, Subscriber
from chunkgraph.execute._limits import TimeoutOf
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.graph import Graph


class Backend(Protocol):
    """A way of running tasks, driven by :meth:`Driver.run` (see the module doc)."""

    # True when tasks run inside start(), in the caller's thread (a Ctrl-C must
    # then interrupt the task itself; otherwise it is taken at a safe point).
    tasks_in_caller: bool

    def open(self) -> None:
        """Acquire workers. Runs with Ctrl-C held, so it is never cut in the middle."""

    def start(self) -> None:
        """Start ready tasks there is room for (a backend whose workers take
        their own tasks does nothing)."""

    def done(self) -> bool:
        """True when nothing is in flight and nothing more will start."""

    def drop_queued(self) -> None:
        """The run is stopping: cancel work handed over but not started."""

    def wait(self, seconds: float) -> None:
        """Block until an outcome may be waiting, a time limit ends, or ``seconds`` pass."""

    def collect(self) -> None:
        """Report finished work to the driver; fail tries past their time limit."""

    def abort(self) -> None:
        """Stop now (Ctrl-C, an error in the loop): start nothing, end running work."""

    def close(self) -> None:
        """Give the workers back; called once, after the loop or after ``abort``."""


class Driver:
    """One run of ``scheduler``: the loop (:meth:`run`) and the outcome bookkeeping.

    ``events`` is None without subscribers (no Event object is then built);
    ``timeout_of(t)`` is the time limit of a try of ``t`` (None: no limits at all);
    ``stop_error`` is an exception a worker recorded for the loop to re-raise (a
    task's KeyboardInterrupt, a fault in a backend's own bookkeeping).
    """

    def __init__(
        self,
        graph: Graph,
        scheduler: Scheduler,
        subscribers: Sequence[Subscriber] = (),
        timeout_of: TimeoutOf | None = None,
    ) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.events = EventQueue(subscribers) if subscribers else None
        self.timeout_of = timeout_of
        self.stop_error: BaseException | None = None
        if self.events is not None:
            scheduler.on_steal = self._stolen

    def _stolen(self, t: int, victim: int, thief: int, moved: int) -> None:
        assert self.events is not None and self.scheduler.placement is not None
        names = self.scheduler.placement.names
        self.events.emit(
            EventKind.STOLEN, t, f"{self.graph.name(t)}: {names[victim]} -> {names[thief]}",
            total=moved,
        )  # fmt: skip

    # -- the loop -------------------------------------------------------------------

    def run(self, backend: Backend) -> None:
        """Run every needed task on ``backend``; outcomes stay in the Scheduler.

        Raises what stopped the run early (KeyboardInterrupt, an error of the
        backend); failed tasks do not raise here, the caller reads them.
        """
        sched, events = self.scheduler, self.events
        if events is not None:
            events.emit(EventKind.RUN_STARTED, total=sched.total)
        try:
            if not sched.finished:
                self._loop(backend)
        finally:
            if events is not None:
                for t in sched.cancelled():
                    events.emit(EventKind.CANCELLED, t, self.graph.name(t))
                events.emit(EventKind.RUN_FINISHED, total=sched.done)
                events.drain()

    def _loop(self, backend: Backend) -> None:
        sched, events = self.scheduler, self.events
        try:
            with _interrupts.Deferred():  # workers acquired are workers given back
                backend.open()
            held = contextlib.nullcontext() if backend.tasks_in_caller else _interrupts.Deferred()
            with held:
                while True:
                    if isinstance(held, _interrupts.Deferred) and held.seen:
                        held.seen = False  # raised here, not again when the block ends
                        raise KeyboardInterrupt
                    _interrupts.check()
                    backend.start()
                    if backend.done():
                        break
                    if sched.stopping:
                        backend.drop_queued()
                    backend.wait(EVENT_FLUSH_SECONDS)
                    backend.collect()
                    if self.stop_error is not None:
                        raise self.stop_error
                    if events is not None:
                        events.drain()
        except BaseException:
            backend.abort()
            raise
        finally:
            backend.close()
        if self.stop_error is not None:
            raise self.stop_error

    # -- what backends call ---------------------------------------------------------

    def take(self, k: int, context: int = 0) -> list[int]:
        """Up to ``k`` ready tasks of ``context``, highest priority first (none once stopping)."""
        return self.scheduler.take(k, context)

    def call_of(self, t: int) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """Task ``t``'s callable and arguments, its inputs' results in place of TaskRefs."""
        return self.graph.resolve(t, self.scheduler.results)

    def started(self, t: int) -> None:
        """Announce that a try of ``t`` starts (call only when ``events`` is not None)."""
        assert self.events is not None
        self.events.emit(EventKind.STARTED, t, self.graph.name(t), self.scheduler.attempt(t))

    def stop(self, error: BaseException) -> None:
        """Start nothing more; the loop re-raises ``error`` (the first one recorded)."""
        self.scheduler.cancel()
        if self.stop_error is None:
            self.stop_error = error

    def report(
        self,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]] | None = None,
        unstarted: list[int] | None = None,
    ) -> int:
        """Record outcomes (see the module doc); returns how many tasks became READY.

        Empties ``done`` and ``failed``: the Scheduler owns the results now, and a
        backend must not keep them alive while it waits.
        """
        sched, events, name = self.scheduler, self.events, self.graph.name
        unblocked = 0
        for t, value in done:
            unblocked += sched.finish(t, value)
            if events is not None:
                events.emit(EventKind.FINISHED, t, name(t), sched.attempt(t))
        for t, error in failed or ():
            if isinstance(error, KeyboardInterrupt):  # the task's own Ctrl-C: never retried
                sched.fail(t, error, retry=False)
                self.stop(error)
                continue
            retried = sched.fail(t, error)
            if retried:
                unblocked += 1
            if events is not None:
                kind = EventKind.RETRIED if retried else EventKind.FAILED
                events.emit(kind, t, name(t), sched.attempts[t], error=error)
        if unstarted:
            sched.put_back(unstarted)
        done.clear()
        if failed:
            failed.clear()
        return unblocked
