"""Running a Scheduler on a persistent pool of threads, with batched dispatch.

There is no dispatcher thread. Each worker runs the loop below, touching the
shared Scheduler only under one lock, once per *batch*:

    worker:  lock ─ report the previous batch's outcomes (finish / fail)
                  ─ take the next batch (up to BATCH_MAX ready tasks)
                  ─ nothing ready and not finished? wait on the condition
             unlock ─ run the batch's tasks one by one, outside the lock
             (repeat)

    calling thread: waits for ``finished``, delivering events and enforcing
                    time limits meanwhile; on Ctrl-C it cancels the scheduler,
                    gives running tasks INTERRUPT_GRACE_S, abandons the rest.

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

A thread cannot be killed, so a task that overruns its time limit, or that is
still running when a Ctrl-C's grace ends, has its thread *abandoned*: the run
forgets that worker (its tasks fail with TimeoutError or go back as not run),
the pool starts a fresh thread in its place, and a replacement worker joins the
run if it goes on. The abandoned thread runs its task to the end in the
background (a daemon: it never delays the interpreter's exit), then sees it was
abandoned and exits without touching the run or the pool again. The other
tasks of its batch go back as not run, even those it had finished (it never
reported them).

Each worker's part in the run is a ``_Slot``:

    batch      tasks it took and has not reported yet (under the lock)
    task       the task it is calling now, -1 between calls (set by the worker)
    deadline   when that call's time limit ends (monotonic clock; inf: none)
    abandoned  the run has given up on it; it must not report anything
"""

from __future__ import annotations

import itertools
import math
import os
import queue
import threading
from collections.abc import Callable
from time import monotonic, perf_counter
from typing import Any

from chunkgraph.execute import _interrupts
from chunkgraph.execute._events import EVENT_FLUSH_SECONDS, EventKind, EventQueue
from chunkgraph.execute._limits import TimeoutOf, timeout_error
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

# After Ctrl-C, how long running tasks get to finish before their threads are
# abandoned. Short tasks then end cleanly instead of running on behind the
# caller's back; a longer grace would make the interrupt feel ignored.
INTERRUPT_GRACE_S = 0.25

_ABANDONED = (
    "its thread cannot be killed: it was abandoned (the call may still be running) and replaced"
)


class ThreadPool:
    """Daemon threads that run submitted callables; they live until ``shutdown()``.

    A thread stuck in a job can be ``replace``d: a fresh thread takes its place,
    and the stuck one exits as soon as its job returns.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._names = itertools.count()
        self._threads: list[threading.Thread] = []
        for _ in range(workers):
            self._start_thread()

    def _start_thread(self) -> None:
        name = f"chunkgraph-worker-{next(self._names)}"
        thread = threading.Thread(target=self._loop, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # the finished run (and its results) must not outlive it here
            with self._lock:
                if me not in self._threads:
                    return  # replaced while in that job: the fresh thread serves instead

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def replace(self, thread: threading.Thread) -> None:
        """Count ``thread`` (stuck in a job) out of the pool and start another in its place."""
        with self._lock:
            if thread not in self._threads:
                return
            self._threads.remove(thread)
        self._start_thread()

    def shutdown(self) -> None:
        """End the pool's threads once their jobs are done (abandoned ones end by themselves)."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
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


class _Slot:
    """One worker thread's part in a run (see the module doc)."""

    __slots__ = ("abandoned", "batch", "deadline", "task", "thread")

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.batch: list[int] = []
        self.task = -1
        self.deadline = math.inf
        self.abandoned = False


class ThreadRun:
    """One run of a Scheduler on a ThreadPool; ``run(pool)`` from the calling thread."""

    def __init__(
        self,
        graph: Graph,
        scheduler: Scheduler,
        events: EventQueue | None,
        timeout_of: TimeoutOf | None = None,
    ) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.events = events
        self.timeout_of = timeout_of
        self.lock = threading.Lock()
        self.ready_signal = threading.Condition(self.lock)
        self.done = threading.Event()
        self.interrupt: BaseException | None = None
        self.idle = 0
        self.workers = 1
        self.active = 0  # workers that have not left (nor been abandoned)
        self.slots: list[_Slot] = []  # workers in the run, abandoned ones excluded
        self.pool: ThreadPool | None = None
        self.broken = False  # a worker hit a fault outside any task: everyone leaves
        # Until measured, assume tasks are long: batches start at one task.
        self.task_seconds = BATCH_SECONDS

    def run(self, pool: ThreadPool) -> None:
        """Run on ``pool``'s threads until finished, delivering events and enforcing
        time limits. Ctrl-C (or a task's KeyboardInterrupt) stops the run within
        about INTERRUPT_GRACE_S, whatever its tasks are doing, and propagates."""
        try:
            with _interrupts.Deferred():  # every worker counted in `active` gets its job
                self.pool = pool
                self.workers = self.active = pool.workers
                for _ in range(pool.workers):
                    pool.submit(self._work)
            while not self.done.wait(self._sleep()):
                _interrupts.check()
                if self.interrupt is not None:
                    raise self.interrupt
                if self.timeout_of is not None:
                    self._expire()
                if self.events is not None:
                    self.events.drain()
        except BaseException:
            self._stop()
            raise
        if self.interrupt is not None:
            raise self.interrupt

    def _sleep(self) -> float:
        """Seconds until the next event delivery or time limit, whichever comes first."""
        if self.timeout_of is None:
            return EVENT_FLUSH_SECONDS
        nearest = min((slot.deadline for slot in list(self.slots)), default=math.inf)
        return max(0.0, min(EVENT_FLUSH_SECONDS, nearest - monotonic()))

    def _expire(self) -> None:
        """Fail every call past its time limit and abandon its thread."""
        sched, events, name = self.scheduler, self.events, self.graph.name
        assert self.timeout_of is not None
        now = monotonic()
        with self.lock:
            for slot in list(self.slots):
                t = slot.task
                if t < 0 or slot.deadline > now:
                    continue
                seconds = self.timeout_of(t)
                assert seconds is not None
                self._abandon(slot)
                sched.put_back([u for u in slot.batch if u != t])
                error = timeout_error(name(t), seconds, _ABANDONED)
                retried = sched.fail(t, error)
                if events is not None:
                    kind = EventKind.RETRIED if retried else EventKind.FAILED
                    events.emit(kind, t, name(t), sched.attempts[t], error=error)
                if not sched.finished:
                    self._add_worker()
            if self.active == 0:
                self.done.set()
            self.ready_signal.notify_all()

    def _stop(self) -> None:
        """Start nothing more; give running tasks INTERRUPT_GRACE_S, then abandon them."""
        with self.lock:
            self.scheduler.cancel()
            self.ready_signal.notify_all()
        try:
            self.done.wait(INTERRUPT_GRACE_S)
        finally:
            self._abandon_busy()
        # Whoever is left holds no task: it sees the run finished and leaves at once.
        while not self.done.wait(INTERRUPT_GRACE_S):
            self._abandon_busy()

    def _abandon_busy(self) -> None:
        """Abandon every worker that holds tasks; they go back as not run."""
        with self.lock:
            for slot in list(self.slots):
                if slot.batch:
                    self._abandon(slot)
                    self.scheduler.put_back(slot.batch)
            if self.active == 0:
                self.done.set()
            self.ready_signal.notify_all()

    def _abandon(self, slot: _Slot) -> None:
        """Under the lock: forget ``slot``'s worker; a fresh pool thread replaces its thread."""
        assert self.pool is not None
        slot.abandoned = True
        self.slots.remove(slot)
        self.active -= 1
        self.pool.replace(slot.thread)

    def _add_worker(self) -> None:
        """Under the lock: one more worker for this run (it runs on a pool thread)."""
        assert self.pool is not None
        self.active += 1
        self.pool.submit(self._work)

    def _work(self) -> None:
        slot = _Slot(threading.current_thread())
        with self.lock:
            self.slots.append(slot)
        try:
            self._work_loop(slot)
        except BaseException as error:  # a fault in the bookkeeping itself, not in a task
            with self.lock:
                if slot.abandoned:
                    return
                if self.interrupt is None:
                    self.interrupt = error
                self.broken = True
                self.scheduler.cancel()
                self._leave(slot)

    def _leave(self, slot: _Slot) -> None:
        """Under the lock: this worker is done with the run. The last one out signals
        the caller, so that no worker touches the run once ``run()`` has returned."""
        self.slots.remove(slot)
        self.active -= 1
        if self.active == 0:
            self.done.set()
        self.ready_signal.notify_all()

    def _work_loop(self, slot: _Slot) -> None:
        sched = self.scheduler
        done: list[tuple[int, Any]] = []
        failed: list[tuple[int, BaseException]] = []
        unstarted: list[int] = []
        elapsed = 0.0
        while True:
            with self.lock:
                if slot.abandoned:
                    return  # the run has accounted for this worker and its tasks
                batch = slot.batch = self._report(done, failed, unstarted, elapsed)
                while not batch:
                    if sched.finished or self.broken:
                        self._leave(slot)
                        return
                    self.idle += 1
                    self.ready_signal.wait()
                    self.idle -= 1
                    batch = slot.batch = self._take()
            started = perf_counter()
            for i, t in enumerate(batch):
                if sched.stopping or failed or slot.abandoned:
                    unstarted.extend(batch[i:])
                    break
                self._call(slot, t, done, failed)
            elapsed = perf_counter() - started

    def _call(
        self,
        slot: _Slot,
        t: int,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
    ) -> None:
        """Run one task outside the lock; its outcome goes to ``done`` or ``failed``."""
        events, graph = self.events, self.graph
        if events is not None:
            events.emit(EventKind.STARTED, t, graph.name(t), self.scheduler.attempt(t))
        if self.timeout_of is not None:
            seconds = self.timeout_of(t)
            slot.deadline = math.inf if seconds is None else monotonic() + seconds
        slot.task = t
        try:
            fn, args, kwargs = graph.resolve(t, self.scheduler.results)
            done.append((t, fn(*args, **kwargs)))
        except KeyboardInterrupt as error:  # the task's own Ctrl-C: the run stops
            failed.append((t, error))
            if not slot.abandoned:
                self.interrupt = error
            return
        except BaseException as error:  # SystemExit included: a failed try, like any error
            failed.append((t, error))
            return
        finally:
            slot.task = -1
            slot.deadline = math.inf
        if events is not None and not slot.abandoned:
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
    graph: Graph,
    scheduler: Scheduler,
    events: EventQueue | None,
    workers: int,
    timeout_of: TimeoutOf | None = None,
) -> None:
    """Run ``scheduler`` to completion on ``workers`` threads (persistent when possible)."""
    if scheduler.finished:
        return
    pool: ThreadPool | None = None
    shared = False
    try:
        with _interrupts.Deferred():  # a pool lent is a pool given back
            pool, shared = acquire_pool(workers)
        ThreadRun(graph, scheduler, events, timeout_of).run(pool)
    finally:
        if pool is not None:
            release_pool(pool, shared)
