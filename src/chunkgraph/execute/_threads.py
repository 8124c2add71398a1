"""The thread backend: a Scheduler run on a persistent pool of threads, with batched dispatch.

There is no dispatcher thread. Each worker runs the loop below, touching the
driver (and through it the Scheduler) only under one lock, once per *batch*:

    worker:  lock ─ report the previous batch's outcomes (Driver.report)
                  ─ take the next batch (up to BATCH_MAX ready tasks)
                  ─ nothing ready and not finished? wait on the condition
             unlock ─ run the batch's tasks one by one, outside the lock
             (repeat)

    calling thread: the driver's loop (``_driver``): waits until every worker
                    has left, delivering events and enforcing time limits
                    meanwhile; on Ctrl-C it cancels the scheduler, gives running
                    tasks INTERRUPT_GRACE_S, abandons the rest.

Why: a central dispatcher costs two thread hand-offs per task (each a lock
wake-up and a GIL switch, several µs in CPython); here one lock round trip
is shared by a whole batch, so per-task overhead is the scheduler bookkeeping
plus the call itself. So ``start()`` does nothing: the workers take.

Batch size: about ``BATCH_SECONDS`` of work by the measured mean task time,
and at most ``ready // (2 * workers)``, clamped to ``[1, BATCH_MAX]``. Tiny
tasks of wide graphs amortise the lock over up to BATCH_MAX calls; long tasks,
and narrow graphs (a chain, a reduction tree's top), go one task per batch and
lose no parallelism or priority order. A worker stops its batch at the first
failure, or when the run is stopping, and puts the unstarted tasks back.
FINISHED events are emitted when a batch is reported, STARTED ones as each
call starts.

The threads come from ``_thread_pool`` (persistent, lent to one run at a time).
A thread cannot be killed, so a task that overruns its time limit, or that is
still running when a Ctrl-C's grace ends, has its thread *abandoned*: the run
forgets that worker (its tasks fail with TimeoutError or go back as not run),
the pool starts a fresh thread in its place, and a replacement worker joins the
run if it goes on. The abandoned thread runs its task to the end in the
background, then sees it was abandoned and exits without touching the run or
the pool again. The other tasks of its batch go back as not run, even those it
had finished (it never reported them).

Following a plan: each worker serves one context (``Placement.workers`` says
how many per context) and takes from that context's ready heap; the
scheduler steals for it when its context has nothing ready. Fused chains:
after a task, a worker runs the task fused after it at once (``claim_next``),
with the result handed over in place, and reports both with its batch. With
several contexts, or admission by memory and resources, a finished batch
wakes every idle worker (the one that can take the next task may not be the
first to wake).

GPUs (``chunkgraph.gpu._residency``): when the run has tasks on GPU contexts
and a device backend, each GPU context's worker (one per GPU) is bound to
its device for the whole run, and every worker resolves a task's arguments
through the residency, which moves arrays to where the task runs (host
arrays up to a GPU task's device, device arrays down for a CPU task); each
batch's device results are counted against their device's budget when it is
reported (spilling the oldest to host when over). Without a GPU task in the
plan there is no residency and the call path is the plain one.

Each worker's part in the run is a ``_Slot``:

    context    the context it serves
    batch      tasks it took and has not reported yet (under the lock)
    task       the task it is calling now, -1 between calls (set by the worker)
    deadline   when that call's time limit ends (monotonic clock; inf: none)
    abandoned  the run has given up on it; it must not report anything
    resolve    how it turns a task into its call (Graph.resolve, through the
               residency when the run has one)
"""

from __future__ import annotations

import functools
import math
import threading
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Any

from chunkgraph.execute._driver import Driver
from chunkgraph.execute._events import EventKind
from chunkgraph.execute._limits import timeout_error
from chunkgraph.execute._thread_pool import ThreadPool, acquire_pool, release_pool

if TYPE_CHECKING:
    from chunkgraph.gpu._residency import Residency, Resolve

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


class _Slot:
    """One worker thread's part in a run (see the module doc)."""

    __slots__ = ("abandoned", "batch", "context", "deadline", "resolve", "task", "thread")

    def __init__(self, thread: threading.Thread, context: int, resolve: Resolve) -> None:
        self.thread = thread
        self.context = context
        self.resolve = resolve
        self.batch: list[int] = []
        self.task = -1
        self.deadline = math.inf
        self.abandoned = False


class ThreadBackend:
    """The driver's backend on ``workers`` pool threads (see the module doc); ``residency``:
    where arrays live when the run has tasks on GPUs (None: no GPU task)."""

    tasks_in_caller = False

    def __init__(self, driver: Driver, workers: int, residency: Residency | None = None) -> None:
        self.driver = driver
        self.residency = residency
        self.scheduler = driver.scheduler
        self.timeout_of = driver.timeout_of
        # Bound once: a worker calls these for every task, outside the lock.
        self._announce = driver.started if driver.events is not None else None
        self._resolve = driver.graph.resolve
        self._results = driver.scheduler.results
        placement = driver.scheduler.placement
        self.per_context = placement.workers if placement is not None else [workers]
        self.workers = sum(self.per_context)
        self.wake_all = placement is not None and (placement.multi or placement.admit)
        self._claim = driver.scheduler.claim_next if placement is not None else None
        self.lock = threading.Lock()
        self.ready_signal = threading.Condition(self.lock)
        self.all_left = threading.Event()  # every worker has left the run
        self.idle = 0
        self.active = 0  # workers that have not left (nor been abandoned)
        self.slots: list[_Slot] = []  # workers in the run, abandoned ones excluded
        self.pool: ThreadPool | None = None
        self.shared = False
        self.broken = False  # a worker hit a fault outside any task: everyone leaves
        # Until measured, assume tasks are long: batches start at one task.
        self.task_seconds = BATCH_SECONDS

    # -- the driver's side (calling thread) -------------------------------------------

    def open(self) -> None:
        self.pool, self.shared = acquire_pool(self.workers)
        if len(self.per_context) == 1:
            self.per_context = [self.pool.workers]
        self.workers = self.active = sum(self.per_context)
        for context, count in enumerate(self.per_context):
            for _ in range(count):
                self.pool.submit(functools.partial(self._work, context))

    def start(self) -> None:
        pass  # workers take their own batches

    def done(self) -> bool:
        return self.all_left.is_set()

    def drop_queued(self) -> None:
        pass  # workers see the run stopping and put their unstarted tasks back

    def wait(self, seconds: float) -> None:
        """Until every worker has left, or ``seconds``, or the nearest time limit."""
        if self.timeout_of is not None:
            nearest = min((slot.deadline for slot in list(self.slots)), default=math.inf)
            seconds = max(0.0, min(seconds, nearest - monotonic()))
        self.all_left.wait(seconds)

    def collect(self) -> None:
        if self.timeout_of is not None:
            self._expire()

    def abort(self) -> None:
        """Start nothing more; give running tasks INTERRUPT_GRACE_S, then abandon them."""
        if self.pool is None:
            return  # never opened
        with self.lock:
            self.scheduler.cancel()
            self.ready_signal.notify_all()
        try:
            self.all_left.wait(INTERRUPT_GRACE_S)
        finally:
            self._abandon_busy()
        # Whoever is left holds no task: it sees the run finished and leaves at once.
        while not self.all_left.wait(INTERRUPT_GRACE_S):
            self._abandon_busy()

    def close(self) -> None:
        if self.pool is not None:
            release_pool(self.pool, self.shared)
        if self.residency is not None:
            finish_residency(self.driver, self.residency)

    def _expire(self) -> None:
        """Fail every call past its time limit and abandon its thread."""
        driver, name, timeout_of = self.driver, self.driver.graph.name, self.timeout_of
        assert timeout_of is not None
        now = monotonic()
        with self.lock:
            for slot in list(self.slots):
                t = slot.task
                if t < 0 or slot.deadline > now:
                    continue
                seconds = timeout_of(t)
                assert seconds is not None
                self._abandon(slot)
                unstarted = [u for u in slot.batch if u != t]
                driver.report([], [(t, timeout_error(name(t), seconds, _ABANDONED))], unstarted)
                if not self.scheduler.finished:
                    self._add_worker(slot.context)
            if self.active == 0:
                self.all_left.set()
            self.ready_signal.notify_all()

    def _abandon_busy(self) -> None:
        """Abandon every worker that holds tasks; they go back as not run."""
        with self.lock:
            for slot in list(self.slots):
                if slot.batch:
                    self._abandon(slot)
                    self.scheduler.put_back(slot.batch)
            if self.active == 0:
                self.all_left.set()
            self.ready_signal.notify_all()

    def _abandon(self, slot: _Slot) -> None:
        """Under the lock: forget ``slot``'s worker; a fresh pool thread replaces its thread."""
        assert self.pool is not None
        slot.abandoned = True
        self.slots.remove(slot)
        self.active -= 1
        self.pool.replace(slot.thread)

    def _add_worker(self, context: int) -> None:
        """Under the lock: one more worker for this run (it runs on a pool thread)."""
        assert self.pool is not None
        self.active += 1
        self.pool.submit(functools.partial(self._work, context))

    # -- the workers' side (pool threads) ---------------------------------------------

    def _work(self, context: int) -> None:
        residency = self.residency
        if residency is None:
            slot = _Slot(threading.current_thread(), context, self._resolve)
        else:
            slot = _Slot(
                threading.current_thread(), context, residency.resolver(context, self._resolve)
            )
        with self.lock:
            self.slots.append(slot)
        try:
            if residency is None:
                self._work_loop(slot)
            else:
                with residency.bound(context):  # a GPU context's worker drives its device
                    self._work_loop(slot)
        except BaseException as error:  # a fault in the bookkeeping itself, not in a task
            with self.lock:
                if slot.abandoned:
                    return
                self.broken = True
                self.driver.stop(error)
                self._leave(slot)

    def _leave(self, slot: _Slot) -> None:
        """Under the lock: this worker is done with the run. The last one out signals
        the driver, so that no worker touches the run once ``run()`` has returned."""
        self.slots.remove(slot)
        self.active -= 1
        if self.active == 0:
            self.all_left.set()
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
                batch = slot.batch = self._report(done, failed, unstarted, elapsed, slot)
                while not batch:
                    if sched.finished or self.broken:
                        self._leave(slot)
                        return
                    self.idle += 1
                    self.ready_signal.wait()
                    self.idle -= 1
                    batch = slot.batch = self._take(slot)
            started = perf_counter()
            claim = self._claim
            handed = -1  # index in done of the result the task now running was handed
            i = 0
            while i < len(batch):
                t = batch[i]
                if sched.stopping or failed or slot.abandoned:
                    unstarted.extend(batch[i:])
                    break
                self._call(slot, t, done, failed)
                if handed >= 0 and not failed:
                    # Its one consumer is done with it: drop it now, not at the report.
                    prev = done[handed][0]
                    done[handed] = (prev, None)
                    self._results[prev] = None
                handed = -1
                if claim is not None and not failed:
                    nxt = claim(t)
                    if nxt >= 0:  # fused after t: run it now, t's result handed over in place
                        self._results[t] = done[-1][1]
                        handed = len(done) - 1
                        batch.insert(i + 1, nxt)  # next, before the rest of the batch
                i += 1
            elapsed = perf_counter() - started

    def _call(
        self,
        slot: _Slot,
        t: int,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
    ) -> None:
        """Run one task outside the lock; its outcome goes to ``done`` or ``failed``."""
        if self._announce is not None:
            self._announce(t)
        if self.timeout_of is not None:
            seconds = self.timeout_of(t)
            slot.deadline = math.inf if seconds is None else monotonic() + seconds
        slot.task = t
        try:
            fn, args, kwargs = slot.resolve(t, self._results)  # Driver.call_of, inlined
            done.append((t, fn(*args, **kwargs)))
        except BaseException as error:  # SystemExit and KeyboardInterrupt too: see report()
            failed.append((t, error))
        finally:
            slot.task = -1
            slot.deadline = math.inf

    def _report(
        self,
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
        unstarted: list[int],
        elapsed: float,
        slot: _Slot,
    ) -> list[int]:
        """Under the lock: record a batch's outcomes, wake idle workers, take the next batch.

        Empties the three lists: the scheduler now owns the results, and a
        worker must not keep them alive while it waits.
        """
        sched = self.scheduler
        ran = len(done) + len(failed)
        if ran:
            # Moving average of seconds per task, for the batch size.
            per_task = elapsed / ran
            self.task_seconds += BATCH_SMOOTHING * (per_task - self.task_seconds)
        residency = self.residency
        if residency is None:
            unblocked = self.driver.report(done, failed, unstarted) if ran or unstarted else 0
        else:
            on_device = [(t, *residency.device_bytes(v)) for t, v in done if v is not None]
            unblocked = self.driver.report(done, failed, unstarted) if ran or unstarted else 0
            for t, device, nbytes in on_device:
                if device >= 0:
                    residency.kept(t, device, nbytes)
        unstarted.clear()
        batch = self._take(slot)
        if self.idle:
            if sched.finished or sched.stopping or (self.wake_all and ran):
                self.ready_signal.notify_all()
            elif unblocked:
                self.ready_signal.notify(min(self.idle, unblocked))
        return batch

    def _take(self, slot: _Slot) -> list[int]:
        """A batch worth about BATCH_SECONDS of work, at most a share of what is ready."""
        sched, c = self.scheduler, slot.context
        by_time = BATCH_SECONDS / self.task_seconds if self.task_seconds > 0 else BATCH_MAX
        by_share = sched.ready_count(c) // (2 * self.per_context[c])
        return sched.take(max(1, min(BATCH_MAX, int(by_time), by_share)), c)


def finish_residency(driver: Driver, residency: Residency) -> None:
    """At the end of a run with GPU tasks: trim the device pools, report the transfers."""
    residency.finish()
    if driver.events is not None:
        driver.events.emit(
            EventKind.TRANSFERS, name=residency.summary(), total=residency.bytes_moved
        )
