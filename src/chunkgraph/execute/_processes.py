"""The process backend: a Scheduler run on worker processes (``ProcessPool``).

    driver loop (calling thread)                    ProcessPool
    ────────────────────────────                    ───────────
    start(): take() ─ resolve args ─ submit ──────> worker process runs fn
       ^                                              │ (numpy arrays travel
       │      completed futures (deque) <── callback ─┘  through shared memory)
       └─ collect(): Driver.report ─ events ─ wait(): the next completion

``start()`` keeps ``workers * IN_FLIGHT_PER_WORKER`` tasks submitted so that a
worker finds its next task queued when it finishes one. Results come back to
the calling process (they are the inputs of later tasks) and are released by
the Scheduler like in thread mode.

A worker that dies fails its future with WorkerDiedError; the pool starts a
fresh worker and the death is a failed try, retried when ``retries`` allows. A
task with a time limit that runs past it has its worker killed by the pool, and
the try fails with ``TimeoutError``. When the run is stopping (a failure that is
not retried) queued futures are cancelled and running ones finish. On Ctrl-C
(or any error in the loop, or a KeyboardInterrupt a task raised) the pool is
shut down with ``cancel_futures=True``: its workers are terminated and its
shared memory freed before the exception propagates.

STARTED events here mean "submitted to the pool" (the calling process does not
see the moment a worker picks a task up).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import CancelledError, Future
from typing import Any

from chunkgraph.execute._driver import Driver
from chunkgraph.execute._limits import timeout_error
from chunkgraph.execute.pool import CallTimeoutError, ProcessPool

# Tasks submitted per worker at a time. 1 leaves a worker idle for a round trip
# between tasks; more keeps workers busy but commits tasks to the pool's queue
# early (they can no longer be reordered by priority, and a failure cancels more).
IN_FLIGHT_PER_WORKER = 2


class ProcessBackend:
    """The driver's backend on a fresh ProcessPool of ``workers`` processes."""

    tasks_in_caller = False

    def __init__(self, driver: Driver, workers: int) -> None:
        self.driver = driver
        self.workers = workers
        self.pool: ProcessPool | None = None
        self.limit = max(1, workers * IN_FLIGHT_PER_WORKER)
        self.in_flight: dict[Future[Any], int] = {}
        self.completed: deque[Future[Any]] = deque()
        self.wake = threading.Event()
        self.aborted = False

    def _on_done(self, future: Future[Any]) -> None:
        self.completed.append(future)  # runs in a pool thread: deque.append is atomic
        self.wake.set()

    def open(self) -> None:
        self.pool = ProcessPool(self.workers)
        self.limit = max(1, self.pool.size * IN_FLIGHT_PER_WORKER)

    def start(self) -> None:
        driver, pool = self.driver, self.pool
        assert pool is not None
        free = self.limit - len(self.in_flight)
        if free <= 0:
            return
        for t in driver.take(free):
            if driver.events is not None:
                driver.started(t)
            try:
                fn, args, kwargs = driver.call_of(t)
            except Exception as error:  # rebuilding the arguments failed: the task failed
                driver.report([], [(t, error)])
                continue
            timeout = None if driver.timeout_of is None else driver.timeout_of(t)
            future = pool.submit(fn, args, kwargs, timeout=timeout)
            self.in_flight[future] = t
            future.add_done_callback(self._on_done)

    def done(self) -> bool:
        return self.driver.scheduler.finished and not self.in_flight

    def drop_queued(self) -> None:
        for future in self.in_flight:
            future.cancel()  # only those a worker has not started; those still report

    def wait(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def collect(self) -> None:
        driver, name = self.driver, self.driver.graph.name
        done: list[tuple[int, Any]] = []
        failed: list[tuple[int, BaseException]] = []
        unstarted: list[int] = []
        while self.completed:
            future = self.completed.popleft()
            t = self.in_flight.pop(future)
            try:
                done.append((t, future.result()))
            except CancelledError:
                unstarted.append(t)  # never ran; the run is stopping, so it stays READY
            except CallTimeoutError as error:
                consequence = f"its worker process {error.pid} was killed (SIGKILL) and replaced"
                failed.append((t, timeout_error(name(t), error.seconds, consequence)))
            except BaseException as error:  # a KeyboardInterrupt a task raised: see report()
                failed.append((t, error))
        if done or failed or unstarted:
            driver.report(done, failed, unstarted)

    def abort(self) -> None:
        self.driver.scheduler.cancel()
        self.aborted = True

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=self.aborted)
