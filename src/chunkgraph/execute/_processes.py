"""Running a Scheduler on worker processes (``ProcessPool``), driven from the calling thread.

    calling thread (driver)                         ProcessPool
    ───────────────────────                         ───────────
    take() ─ resolve args ─ submit(fn, args) ─────> worker process runs fn
       ^                                              │ (numpy arrays travel
       │      completed futures (deque) <── callback ─┘  through shared memory)
       └─ finish / fail ─ deliver events ─ wait for the next completion

The driver keeps ``workers * IN_FLIGHT_PER_WORKER`` tasks submitted so that a
worker finds its next task queued when it finishes one. Results come back to
the driver (they are the inputs of later tasks) and are released by the
Scheduler like in thread mode.

A worker that dies fails its future with WorkerDiedError; the pool starts a
fresh worker and the Scheduler counts the death as a try, so the task is
retried when ``retries`` allows. A task with a time limit that runs past it has
its worker killed by the pool, and the try fails with ``TimeoutError``. On the
first failure that is not retried, the driver starts nothing more, cancels
queued futures and waits for running ones. On Ctrl-C (or any error in the
driver, or a KeyboardInterrupt a task raised) the pool is shut down with
``cancel_futures=True``: its workers are terminated and its shared memory
freed before the exception propagates.

STARTED events here mean "submitted to the pool" (the driver does not see the
moment a worker picks a task up).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import CancelledError, Future
from typing import Any

from chunkgraph.execute import _interrupts
from chunkgraph.execute._events import EVENT_FLUSH_SECONDS, EventKind, EventQueue
from chunkgraph.execute._limits import TimeoutOf, timeout_error
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.execute.pool._process_pool import CallTimeoutError, ProcessPool
from chunkgraph.graph import Graph

# Tasks submitted per worker at a time. 1 leaves a worker idle for a round trip
# between tasks; more keeps workers busy but commits tasks to the pool's queue
# early (they can no longer be reordered by priority, and a failure cancels more).
IN_FLIGHT_PER_WORKER = 2


class ProcessDriver:
    """Feeds a Scheduler's tasks to a ProcessPool and records their outcomes."""

    def __init__(
        self,
        graph: Graph,
        scheduler: Scheduler,
        events: EventQueue | None,
        pool: ProcessPool,
        timeout_of: TimeoutOf | None = None,
    ) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.events = events
        self.pool = pool
        self.timeout_of = timeout_of
        self.limit = max(1, pool.size * IN_FLIGHT_PER_WORKER)
        self.in_flight: dict[Future[Any], int] = {}
        self.completed: deque[Future[Any]] = deque()
        self.wake = threading.Event()

    def _on_done(self, future: Future[Any]) -> None:
        self.completed.append(future)  # runs in a pool thread: deque.append is atomic
        self.wake.set()

    def run(self) -> None:
        sched = self.scheduler
        while True:
            _interrupts.check()
            self._submit_ready()
            if sched.finished and not self.in_flight:
                break
            if sched.stopping:
                for future in self.in_flight:
                    future.cancel()
            self.wake.wait(EVENT_FLUSH_SECONDS)
            self.wake.clear()
            self._collect()
            if self.events is not None:
                self.events.drain()

    def _submit_ready(self) -> None:
        sched, graph = self.scheduler, self.graph
        free = self.limit - len(self.in_flight)
        if free <= 0:
            return
        for t in sched.take(free):
            if self.events is not None:
                self.events.emit(EventKind.STARTED, t, graph.name(t), sched.attempt(t))
            try:
                fn, args, kwargs = graph.resolve(t, sched.results)
            except Exception as error:  # rebuilding the arguments failed: the task failed
                self._failed(t, error)
                continue
            timeout = None if self.timeout_of is None else self.timeout_of(t)
            future = self.pool.submit(fn, args, kwargs, timeout=timeout)
            self.in_flight[future] = t
            future.add_done_callback(self._on_done)

    def _failed(self, t: int, error: BaseException) -> None:
        kind = EventKind.RETRIED if self.scheduler.fail(t, error) else EventKind.FAILED
        if self.events is not None:
            self.events.emit(kind, t, self.graph.name(t), self.scheduler.attempts[t], error=error)

    def _collect(self) -> None:
        sched, graph, events = self.scheduler, self.graph, self.events
        while self.completed:
            future = self.completed.popleft()
            t = self.in_flight.pop(future)
            try:
                value = future.result()
            except CancelledError:
                sched.put_back([t])  # never ran; the run is stopping, so it stays READY
            except CallTimeoutError as error:
                consequence = f"its worker process {error.pid} was killed (SIGKILL) and replaced"
                self._failed(t, timeout_error(graph.name(t), error.seconds, consequence))
            except Exception as error:
                self._failed(t, error)
            else:
                sched.finish(t, value)
                if events is not None:
                    events.emit(EventKind.FINISHED, t, graph.name(t), sched.attempt(t))


def run_processes(
    graph: Graph,
    scheduler: Scheduler,
    events: EventQueue | None,
    workers: int,
    timeout_of: TimeoutOf | None = None,
) -> None:
    """Run ``scheduler`` to completion on a fresh ProcessPool of ``workers`` processes."""
    if scheduler.finished:
        return
    pool: ProcessPool | None = None
    try:
        with _interrupts.Deferred():  # no Ctrl-C between the pool's start and `pool =`
            pool = ProcessPool(workers)
        ProcessDriver(graph, scheduler, events, pool, timeout_of).run()
    except BaseException:
        scheduler.cancel()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
