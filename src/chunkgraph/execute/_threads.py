"""Running a Scheduler on a persistent pool of threads, with batched dispatch.

There is no dispatcher thread. Each worker runs the loop below, touching the
shared Scheduler only under one lock, once per *batch*:

    worker:  lock ─ report the previous batch's outcomes (finish / fail)
                  ─ take the next batch (up to BATCH_MAX ready tasks)
                  ─ nothing ready and not finished? wait on the condition
             unlock ─ run the batch's tasks one by one, outside the lock
             (repeat)

    calling thread: waits for ``finished``, delivering events meanwhile;
                    on Ctrl-C it cancels the scheduler and waits for workers.

Why: a central dispatcher costs two thread hand-offs per task (each a lock
wake-up and a GIL switch, several µs in CPython); here one lock round trip
is shared by a whole batch, so per-task overhead is the scheduler bookkeeping
plus the call itself.

Batch size: about ``BATCH_SECONDS`` of work by the measured mean task time,
and at most ``ready // (2 * workers)``, clamped to ``[1, BATCH_MAX]``. Tiny
tasks of wide graphs amortise the lock over up to BATCH_MAX calls; long tasks,
and narrow graphs (a chain, a reduction tree's top), go one task per batch and
lose no parallelism or priority order. A worker stops its batch at the first
failure, or when the run is stopping, and puts the unstarted tasks back.

The pool threads persist between runs, so a run pays no thread start-up. There
is one persistent pool, lent to one run at a time (``acquire_pool``): a run that
finds it lent out (a ``run()`` inside a task, from whichever thread, or runs
started concurrently from several threads) gets a private pool for its duration,
since waiting for the lent pool's threads could deadlock. Asking for another size
replaces the idle pool, so threads never accumulate per ``workers`` value.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

from chunkgraph.execute._events import EVENT_FLUSH_SECONDS, EventKind, EventQueue
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.graph import Graph

# Most tasks a worker takes per lock round trip. Larger amortises the lock over
# more tasks, but a worker holding many queued tasks can leave others idle when
# task durations vary, and runs ready tasks slightly out of priority order.
BATCH_MAX = 64

# Work a worker commits to per batch, in seconds (from measured task times).
# Tasks longer than this are taken one at a time, so slow tasks keep full
# load balance and strict priority order; tiny tasks are batched up to BATCH_MAX.
BATCH_SECONDS = 0.002

# Weight of the newest batch in the moving average of seconds per task.
BATCH_SMOOTHING = 0.25


class ThreadPool:
    """Daemon threads that run submitted callables; they live until ``shutdown()``."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"chunkgraph-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # the finished run (and its results) must not outlive it here

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()


_shared: ThreadPool | None = None  # the persistent pool; guarded by _shared_lock
_shared_lent = False  # True while one run uses it
_shared_lock = threading.Lock()


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def acquire_pool(workers: int) -> tuple[ThreadPool, bool]:
    """``(pool, shared)``: the persistent pool when it is free, else a private one.

    Release with ``release_pool``. Contract: a shared pool is used by one run at a time.
    """
    global _shared, _shared_lent
    retired = None
    with _shared_lock:
        if _shared_lent:
            return ThreadPool(workers), False
        if _shared is not None and _shared.workers != workers:
            retired, _shared = _shared, None
        if _shared is None:
            _shared = ThreadPool(workers)
        _shared_lent = True
        pool = _shared
    if retired is not None:
        retired.shutdown()  # idle: its threads exit at once
    return pool, True


def release_pool(pool: ThreadPool, shared: bool) -> None:
    """Give back a pool from ``acquire_pool`` (a private one is shut down)."""
    global _shared_lent
    if not shared:
        pool.shutdown()
        return
    with _shared_lock:
        _shared_lent = False


class ThreadRun:
    """One run of a Scheduler on a ThreadPool; ``wait()`` from the calling thread."""

    def __init__(self, graph: Graph, scheduler: Scheduler, events: EventQueue | None) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.events = events
        self.lock = threading.Lock()
        self.ready_signal = threading.Condition(self.lock)
        self.done = threading.Event()
        self.interrupt: BaseException | None = None
        self.idle = 0
        self.workers = self.active = 1
        self.broken = False  # a worker hit a fault outside any task: everyone leaves
        # Until measured, assume tasks are long: batches start at one task.
        self.task_seconds = BATCH_SECONDS

    def start(self, pool: ThreadPool) -> None:
        self.workers = self.active = pool.workers
        for _ in range(pool.workers):
            pool.submit(self._work)

    def wait(self) -> None:
        """Block until the run is finished, delivering events; Ctrl-C cancels it."""
        try:
            while not self.done.wait(EVENT_FLUSH_SECONDS):
                if self.events is not None:
                    self.events.drain()
        except BaseException:
            with self.lock:
                self.scheduler.cancel()
                self.ready_signal.notify_all()
            self.done.wait()
            raise
        if self.interrupt is not None:
            raise self.interrupt

    def _work(self) -> None:
        try:
            self._work_loop()
        except BaseException as error:  # a fault in the bookkeeping itself, not in a task
            with self.lock:
                if self.interrupt is None:
                    self.interrupt = error
                self.broken = True
                self.scheduler.cancel()
                self._leave()

    def _leave(self) -> None:
        """Under the lock: this worker is done with the run. The last one out signals
        the caller, so that no worker touches the run once ``run()`` has returned."""
        self.active -= 1
        if self.active == 0:
            self.done.set()
        self.ready_signal.notify_all()

    def _work_loop(self) -> None:
        sched = self.scheduler
        done: list[tuple[int, Any]] = []
        failed: list[tuple[int, BaseException]] = []
        unstarted: list[int] = []
        elapsed = 0.0
        while True:
            with self.lock:
                batch = self._report(done, failed, unstarted, elapsed)
                while not batch:
                    if sched.finished or self.broken:
                        self._leave()
                        return
                    self.idle += 1
                    self.ready_signal.wait()
                    self.idle -= 1
                    batch = self._take()
            started = perf_counter()
            for i, t in enumerate(batch):
                if sched.stopping or failed:
                    unstarted.extend(batch[i:])
                    break
                self._call(t, done, failed)
            elapsed = perf_counter() - started

    def _call(
        self, t: int, done: list[tuple[int, Any]], failed: list[tuple[int, BaseException]]
    ) -> None:
        """Run one task outside the lock; its outcome goes to ``done`` or ``failed``."""
        events, graph = self.events, self.graph
        if events is not None:
            events.emit(EventKind.STARTED, t, graph.name(t), self.scheduler.attempt(t))
        try:
            fn, args, kwargs = graph.resolve(t, self.scheduler.results)
            done.append((t, fn(*args, **kwargs)))
        except Exception as error:
            failed.append((t, error))
            return
        except BaseException as error:  # Ctrl-C or SystemExit inside a task
            failed.append((t, error))
            self.interrupt = error
            return
        if events is not None:
            events.emit(EventKind.FINISHED, t, graph.name(t), self.scheduler.attempt(t))

    def _report(
        self,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
        unstarted: list[int],
        elapsed: float,
    ) -> list[int]:
        """Under the lock: record a batch's outcomes, wake idle workers, take the next batch.

        Empties the three lists: the scheduler now owns the results, and a
        worker must not keep them alive while it waits.
        """
        sched, events, name = self.scheduler, self.events, self.graph.name
        ran = len(done) + len(failed)
        if ran:
            # Moving average of seconds per task, for the batch size.
            per_task = elapsed / ran
            self.task_seconds += BATCH_SMOOTHING * (per_task - self.task_seconds)
        unblocked = 0
        for t, value in done:
            unblocked += sched.finish(t, value)
        for t, error in failed:
            if self.interrupt is error:
                sched.fail(t, error)
                sched.cancel()
            elif sched.fail(t, error):
                unblocked += 1
                if events is not None:
                    events.emit(EventKind.RETRIED, t, name(t), sched.attempts[t], error=error)
            elif events is not None:
                events.emit(EventKind.FAILED, t, name(t), sched.attempts[t], error=error)
        if unstarted:
            sched.put_back(unstarted)
        done.clear()
        failed.clear()
        unstarted.clear()
        batch = self._take()
        if self.idle:
            if sched.finished or sched.stopping:
                self.ready_signal.notify_all()
            elif unblocked:
                self.ready_signal.notify(min(self.idle, unblocked))
        return batch

    def _take(self) -> list[int]:
        """A batch worth about BATCH_SECONDS of work, at most a share of what is ready."""
        sched = self.scheduler
        by_time = BATCH_SECONDS / self.task_seconds if self.task_seconds > 0 else BATCH_MAX
        by_share = len(sched.ready) // (2 * self.workers)
        return sched.take(max(1, min(BATCH_MAX, int(by_time), by_share)))


def run_threads(
    graph: Graph, scheduler: Scheduler, events: EventQueue | None, workers: int
) -> None:
    """Run ``scheduler`` to completion on ``workers`` threads (persistent when possible)."""
    if scheduler.finished:
        return
    pool, shared = acquire_pool(workers)
    run = ThreadRun(graph, scheduler, events)
    try:
        run.start(pool)
        run.wait()
    finally:
        release_pool(pool, shared)
