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

Why: a central dispatcher costs two thread hand-offs per task (~10 µs each in
CPython); here one lock round trip is shared by a whole batch, so per-task
overhead is the scheduler bookkeeping plus the call itself.

Batch size: ``ready // (2 * workers)``, clamped to ``[1, BATCH_MAX]``, so that
wide graphs amortise the lock while narrow ones (a chain, a reduction tree's
top) keep one task per batch and lose no parallelism. A worker stops its batch
at the first failure, or when the run is stopping, and puts the unstarted
tasks back.

The pool threads persist between runs (``pool_for(workers)``), so a run pays no
thread start-up. A ``run()`` called from inside a task gets a fresh private pool
(the shared one may be fully busy with the outer run, which would deadlock).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from chunkgraph.execute._events import EVENT_FLUSH_SECONDS, EventKind, EventQueue
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.graph import Graph

# Most tasks a worker takes per lock round trip. Larger amortises the lock over
# more tasks, but a worker holding many queued tasks can leave others idle when
# task durations vary, and runs ready tasks slightly out of priority order.
BATCH_MAX = 64

_local = threading.local()


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
        _local.in_pool = True
        while (job := self._jobs.get()) is not None:
            job()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()


_pools: dict[int, ThreadPool] = {}
_pools_lock = threading.Lock()


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def shared_pool(workers: int) -> ThreadPool | None:
    """The persistent pool of this size, or None when called from a pool thread."""
    if getattr(_local, "in_pool", False):
        return None
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPool(workers)
        return pool


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
        self.workers = 1

    def start(self, pool: ThreadPool) -> None:
        self.workers = pool.workers
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
        sched, graph, events = self.scheduler, self.graph, self.events
        results = sched.results
        done: list[tuple[int, Any]] = []
        failed: list[tuple[int, BaseException]] = []
        unstarted: list[int] = []
        while True:
            with self.lock:
                batch = self._report(done, failed, unstarted)
                while not batch:
                    if sched.finished:
                        self.done.set()
                        self.ready_signal.notify_all()
                        return
                    self.idle += 1
                    self.ready_signal.wait()
                    self.idle -= 1
                    batch = self._take()
            done, failed, unstarted = [], [], []
            fn = args = kwargs = value = None
            for i, t in enumerate(batch):
                if sched.stopping or failed:
                    unstarted = batch[i:]
                    break
                fn, args, kwargs = graph.resolve(t, results)
                if events is not None:
                    events.emit(EventKind.STARTED, t, graph.name(t), sched.attempt(t))
                try:
                    value = fn(*args, **kwargs)
                except Exception as error:
                    failed.append((t, error))
                except BaseException as error:  # Ctrl-C or SystemExit inside a task
                    failed.append((t, error))
                    self.interrupt = error
                    sched.stopping = True  # read without the lock: workers stop soon
                else:
                    done.append((t, value))
                    if events is not None:
                        events.emit(EventKind.FINISHED, t, graph.name(t), sched.attempt(t))
            # Drop references to inputs and the last result: the scheduler owns them now.
            fn = args = kwargs = value = None

    def _report(
        self,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
        unstarted: list[int],
    ) -> list[int]:
        """Under the lock: record a batch's outcomes, wake idle workers, take the next batch."""
        sched, events = self.scheduler, self.events
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
                    events.emit(EventKind.RETRIED, t, self.graph.name(t), sched.attempts[t], error=error)
            elif events is not None:
                events.emit(EventKind.FAILED, t, self.graph.name(t), sched.attempts[t], error=error)
        if unstarted:
            sched.put_back(unstarted)
        batch = self._take()
        if self.idle:
            if sched.finished or sched.stopping:
                self.ready_signal.notify_all()
            elif unblocked:
                self.ready_signal.notify(min(self.idle, unblocked))
        return batch

    def _take(self) -> list[int]:
        sched = self.scheduler
        size = max(1, min(BATCH_MAX, len(sched.ready) // (2 * self.workers)))
        return sched.take(size)


def run_threads(
    graph: Graph, scheduler: Scheduler, events: EventQueue | None, workers: int
) -> None:
    """Run ``scheduler`` to completion on ``workers`` threads (persistent when possible)."""
    if scheduler.finished:
        return
    pool = shared_pool(workers)
    private = pool is None
    if pool is None:
        pool = ThreadPool(workers)
    run = ThreadRun(graph, scheduler, events)
    try:
        run.start(pool)
        run.wait()
    finally:
        if private:
            pool.shutdown()
