"""A pool of persistent worker processes; numpy arrays travel through shared memory.

Policy
------
``submit(fn, args, kwargs)`` pickles the call in the caller's thread (arrays
become shared-memory references, see ``_shm``) and, under the pool lock, sends
it straight to the least-loaded worker that has room, or appends it to
``pending``. A worker holds a few calls at once (one running, the rest queued
in its pipe): ``MIN_DEPTH`` when calls are long, up to ``MAX_DEPTH`` when they
are so short that a batch of them runs in ``QUEUE_SECONDS``; calls given to one
worker at one time travel in one pipe write. A call may name the worker slot it
runs in (``submit(..., worker=k)``: calls of one slot share that process's memory,
its caches); it waits for room there, the calls behind it go on, and a replacement
worker takes its dead predecessor's slot. One manager thread does
everything else: it reads results, resolves futures, refills workers, notices
dead workers and replaces them, and carries out shutdown.

::

    caller threads                 manager thread                  workers
    --------------                 --------------                  -------
    submit ──encode, pickle──┐
                             ├──> pending ──dispatch──> task pipe ──> run fn
                             └────────────(room?)────┘                 │
    Future <──set_result── decode <── select(result pipes, sentinels) <┘

State (all under ``_lock``)
---------------------------
``_workers``         the live ``WorkerHandle`` s; each has ``inflight``, the calls sent
                     to it in order. A worker runs its calls first-in first-out,
                     so when it dies the oldest in-flight call is the one that was
                     running: that future fails with ``WorkerDiedError`` (exit code
                     or signal in the message) and the others go back to the front
                     of ``pending``; a fresh worker replaces the dead one.
``_pending``         calls not yet sent to any worker.
``_state``           a :class:`PoolState`; submits are refused once it leaves RUNNING.
``_startup_failures`` workers in a row that died before saying hello; at
                     ``MAX_STARTUP_FAILURES`` the pool is BROKEN and every call fails.
``_call_seconds``    moving average of how long calls ran in workers (sets the depth).

Why these choices
-----------------
* "forkserver" start method: safe when the parent runs threads (plain fork is
  not), and a fresh worker forks from a small server that has already imported
  numpy, so replacing a dead worker costs milliseconds, not a new interpreter.
* A new pool first sweeps the segments of processes that died without
  cleaning up (``_shm.sweep_orphans``: kill -9 of a whole process group leaves
  them, since the workers and the resource tracker die too); its own prefix
  names it as their owner for the pools that come after.
* Only the manager thread resolves futures of dispatched calls, so a result
  and a cancellation can never race on one future; future callbacks run there
  without the pool lock held, and may call ``submit`` again.
* Shutdown with ``cancel_futures=True`` (and Ctrl-C through the context manager
  or the exit hook) terminates workers at once (SIGTERM, SIGKILL after
  ``TERMINATE_GRACE_S``), joins them, fails unfinished futures as cancelled and
  unlinks every segment the pool created, plus any a dying worker left behind.
* A time limit (``submit(..., timeout=)``) counts from when the call started in
  its worker, as far as the pool can tell (see ``WorkerHandle.head_since``).
  The manager wakes at the nearest deadline; a call past it has its worker
  killed (SIGKILL: a call stuck in C code ignores anything gentler) and fails
  with :class:`CallTimeoutError`; the calls queued behind it go to other
  workers, and a fresh worker replaces the killed one. If the call finished
  just before the kill, its result stands and only the queued calls move.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import itertools
import pickle
import selectors
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, InvalidStateError
from typing import Any

from chunkgraph._errors import CallTimeoutError, ConfigError, UsageError, WorkerDiedError
from chunkgraph._util import usable_cores
from chunkgraph.execute import _interrupts
from chunkgraph.execute._limits import check_timeout
from chunkgraph.execute.pool import _worker
from chunkgraph.execute.pool._pickling import dumps
from chunkgraph.execute.pool._segment_names import (
    list_prefix,
    owner_prefix,
    sweep_orphans,
    unlink_name,
    unlink_prefix,
)
from chunkgraph.execute.pool._shm import SHM_MIN_BYTES, SegmentTable, reap_pending
from chunkgraph.execute.pool._worker_handle import (
    Call,
    WorkerHandle,
    describe_exit,
    load,
    start_worker,
    stop_workers,
    terminate_workers,
    worker_context,
)

# Calls a worker holds at once (one running, the rest queued in its pipe): as
# many as its recent calls take QUEUE_SECONDS to run, within [MIN_DEPTH,
# MAX_DEPTH]. Deep queues let tiny calls travel in batches (one pipe write and
# one wakeup for many) and keep a worker busy while the pool reacts; they cost
# balance only when calls are long, and then the depth falls to MIN_DEPTH,
# which still hides the round trip between a result and the next call. So a
# queued call waits behind a busy worker for at most about QUEUE_SECONDS plus
# the running call, even when another worker is idle.
MIN_DEPTH = 2
MAX_DEPTH = 32
QUEUE_SECONDS = 0.002

# Weight of the newest call's duration in the moving average behind the depth:
# small enough that one odd call does not swing it, large enough to follow a
# change of workload within a few dozen calls.
DURATION_SMOOTHING = 0.1

# Workers in a row that die before reporting ready; beyond this the pool stops
# respawning (something in the environment, not a task, is killing them).
MAX_STARTUP_FAILURES = 3


class PoolState(enum.Enum):
    """Lifecycle of a pool; only RUNNING accepts submits."""

    RUNNING = "running"
    DRAINING = "draining"  # shutdown(cancel_futures=False): finish all work, then stop
    CANCELLING = "cancelling"  # shutdown(cancel_futures=True): terminate now
    BROKEN = "broken"  # workers keep dying at startup, or the pool itself failed
    CLOSED = "closed"


def _resolve(future: Future[Any], value: object = None, error: BaseException | None = None) -> None:
    try:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
    except InvalidStateError:  # already cancelled or failed by shutdown
        pass


class ProcessPool:
    """Persistent worker processes with shared-memory numpy arguments and results.

    Args:
        workers: How many worker processes; None: all usable cores.
        start_method: The multiprocessing start method workers start from:
            ``"forkserver"`` (the default) or ``"spawn"``; ``"fork"`` is refused
            (unsafe with threads).
        shm_min_bytes: Numpy arrays of at least this many bytes go through shared
            memory, smaller ones are pickled.

    Raises:
        ConfigError: For a bad ``workers``, ``start_method`` or ``shm_min_bytes``.

    >>> import operator
    >>> with ProcessPool(workers=1) as pool:
    ...     pool.submit(operator.add, (2, 3), {}).result()
    5
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        start_method: str = "forkserver",
        shm_min_bytes: int = SHM_MIN_BYTES,
    ) -> None:
        if workers is None:
            workers = usable_cores()
        if not isinstance(workers, int) or workers < 1:
            raise ConfigError(
                f"workers must be a positive int or None (all cores), got {workers!r}"
            )
        if not isinstance(shm_min_bytes, int) or shm_min_bytes < 0:
            raise ConfigError(
                f"shm_min_bytes must be an int >= 0 (arrays of at least this many bytes go "
                f"through shared memory; default {SHM_MIN_BYTES}), got {shm_min_bytes!r}"
            )
        self._ctx = worker_context(start_method)
        self.size = workers
        # Segments of processes killed outright (kill -9) are removed here, since
        # nothing of theirs survived to do it; see _shm's module doc.
        sweep_orphans()
        self.segment_prefix = owner_prefix()
        self._table = SegmentTable(self.segment_prefix, owner=True, min_bytes=shm_min_bytes)
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._pending: deque[Call] = deque()
        self._workers: list[WorkerHandle] = []
        self._state = PoolState.RUNNING
        self._startup_failures = 0
        self._broken_reason = f"{MAX_STARTUP_FAILURES} workers in a row died before starting"
        self._call_seconds: float | None = None  # moving average of how long calls run
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._manager = threading.Thread(
            target=self._manage, name=f"chunkgraph-pool-{self.segment_prefix}", daemon=True
        )
        managed = False
        try:
            # A Ctrl-C in the middle would leave workers or a manager no one ends:
            # it is held until they are all started and then ends them below.
            with _interrupts.Deferred():
                try:
                    for slot in range(workers):
                        self._workers.append(self._start_worker(slot))
                    self._manager.start()
                except BaseException:
                    terminate_workers(self._workers)
                    raise
                managed = True
                _live_pools.add(self)
        except BaseException:
            if managed:
                self.shutdown(wait=True, cancel_futures=True)
            raise

    # -- public --------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        worker: int | None = None,
    ) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a worker; numpy arrays go through shared memory.

        Args:
            fn: The callable, pickled by reference where it can be.
            args: Its positional arguments.
            kwargs: Its keyword arguments; None: none.
            timeout: Seconds the call may run once started; past that its worker is
                killed and the future fails with ``CallTimeoutError``. None: no limit.
            worker: The worker slot (``0 .. size - 1``, taken modulo ``size``) the call
                runs in, so that calls of one slot share that process's memory (its
                caches); it waits for room there. Where that worker is dead (its
                replacement not yet started), any worker. None: the emptiest worker.

        Returns:
            A Future of the call's value.
        """
        seconds = check_timeout(timeout)
        with self._lock:
            if self._state is not PoolState.RUNNING:
                raise self._refusal()
        future: Future[Any] = Future()
        keep: list[object] = []
        try:
            encoded = (
                fn,
                self._table.encode(args, keep),
                self._table.encode(dict(kwargs or {}), keep),
            )
            message = _worker.frame(next(self._ids), dumps(encoded))
        except Exception as error:
            future.set_exception(error)
            return future
        with self._lock:
            if self._state is not PoolState.RUNNING:
                raise self._refusal()
            slot = None if worker is None else int(worker) % self.size
            self._pending.append(Call(future, message, keep, seconds, slot))
            # Straight to a worker that is nearly idle; deeper queues are topped
            # up by the manager, one batch per worker per round of results.
            self._dispatch(MIN_DEPTH)
        if seconds is not None:
            self._wake()  # the manager may be asleep with no deadline to wake it
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the pool; with ``cancel_futures`` terminate workers now.

        Without cancelling, submitted calls finish first. Either way, once the
        manager thread is done (``wait=True`` waits for it) no worker process
        and no shared-memory segment of this pool remains; arrays already
        returned stay readable (their mapping outlives the segment's name).

        Args:
            wait: Wait for the manager thread to finish (no worker left).
            cancel_futures: Terminate the workers now instead of finishing submitted calls.
        """
        with self._lock:
            if cancel_futures and self._state in (PoolState.RUNNING, PoolState.DRAINING):
                self._state = PoolState.CANCELLING
            elif self._state is PoolState.RUNNING:
                self._state = PoolState.DRAINING
        self._wake()
        if wait and threading.current_thread() is not self._manager:
            self._manager.join()

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # Ctrl-C or SystemExit in the with-body: do not wait for running work.
        interrupted = exc_type is not None and not issubclass(exc_type, Exception)
        self.shutdown(wait=True, cancel_futures=interrupted)

    @property
    def state(self) -> PoolState:
        """Where the pool is in its lifecycle."""
        return self._state

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (changes when a dead one is replaced)."""
        with self._lock:
            return [w.process.pid for w in self._workers if w.process.pid is not None]

    # -- submit side ---------------------------------------------------------------

    def _refusal(self) -> Exception:
        if self._state is PoolState.BROKEN:
            reason = self._broken_reason
            return WorkerDiedError(
                f"process pool is broken: {reason}; check that chunkgraph and numpy "
                "import in a fresh Python process (`python -c 'import chunkgraph'` with this "
                "environment and working directory), then create a new ProcessPool"
            )
        return UsageError(
            f"cannot submit to a process pool that is {self._state.value}; create a new "
            "ProcessPool, or submit before calling shutdown()"
        )

    def _depth(self) -> int:
        return queue_depth(self._call_seconds)

    def _dispatch(self, depth: int) -> None:
        """Give pending calls to the emptiest workers (a call with a slot: to that slot's
        worker while it lives), up to ``depth`` calls each, in one pipe write per worker;
        a call whose worker is full waits, and those behind it go on. Call under the lock."""
        live = [w for w in self._workers if not w.closed]
        by_slot = {w.slot: w for w in live}
        batches: dict[WorkerHandle, list[Call]] = {}
        waiting: list[Call] = []  # calls whose slot's worker is full, in their order
        while self._pending and live:
            call = self._pending[0]
            worker = by_slot.get(call.slot) if call.slot is not None else None
            worker = worker or min(live, key=load)
            if len(worker.inflight) >= depth:
                if all(len(w.inflight) >= depth for w in live):
                    break
                waiting.append(self._pending.popleft())
                continue
            self._pending.popleft()
            if not call.started:
                if not call.future.set_running_or_notify_cancel():
                    call.keep = None  # cancelled before it ran
                    continue
                call.started = True
            if not worker.inflight:
                worker.head_since = time.monotonic()
            worker.inflight.append(call)
            batches.setdefault(worker, []).append(call)
        self._pending.extendleft(reversed(waiting))
        for worker, calls in batches.items():
            try:
                worker.tasks.send_bytes(b"".join([call.message for call in calls]))
            except OSError:
                # The worker is dying: take the calls back; its sentinel will fire.
                for _ in calls:
                    worker.inflight.pop()
                self._pending.extendleft(reversed(calls))
                worker.closed = True

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already closed: the manager has finished
            self._wake_w.send_bytes(b"")

    def _start_worker(self, slot: int) -> WorkerHandle:
        handle = start_worker(self._ctx, self.segment_prefix, self._table.min_bytes)
        handle.slot = slot
        return handle

    # -- manager thread ------------------------------------------------------------

    def _manage(self) -> None:
        # The selector lives as long as this thread, which alone adds and removes
        # workers after __init__: no lock needed around it.
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        with self._lock:
            for worker in self._workers:
                self._watch(worker)
        try:
            while self._serve_once():
                pass
        except BaseException as error:
            # A fault in the pool itself: fail every call with it rather than hang.
            self._break(f"its manager thread failed ({error!r})")
            raise
        finally:
            self._selector.close()
            self._close()

    def _break(self, reason: str) -> None:
        with self._lock:
            self._state = PoolState.BROKEN
            self._broken_reason = reason

    def _watch(self, worker: WorkerHandle) -> None:
        self._selector.register(worker.results, selectors.EVENT_READ, (worker, False))
        self._selector.register(worker.process.sentinel, selectors.EVENT_READ, (worker, True))

    def _serve_once(self) -> bool:
        """One wait-and-handle round; False when the pool should close."""
        events = [key.data for key, _ in self._selector.select(self._until_deadline())]
        finished: list[tuple[Call, int, memoryview]] = []
        for item in events:
            if item is not None and not item[1]:
                finished += self._drain(item[0])
        with self._lock:
            # Refill the workers before resolving futures, so they run meanwhile.
            self._dispatch(self._depth())
        for call, status, body in finished:
            self._resolve(call, status, body)
        for item in events:
            if item is not None and item[1]:
                self._bury(item[0])
        if None in events:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
        self._expire()
        with self._lock:
            state = self._state
            idle = not self._pending and not any(w.inflight for w in self._workers)
        return state is PoolState.RUNNING or (state is PoolState.DRAINING and not idle)

    def _drain(self, worker: WorkerHandle) -> list[tuple[Call, int, memoryview]]:
        """Read every message the worker has sent; returns the finished calls."""
        finished = []
        try:
            while worker.results.poll():
                message = worker.results.recv_bytes()
                _, status, seconds = _worker.STATUS.unpack_from(message)
                body = memoryview(message)[_worker.STATUS.size :]
                with self._lock:
                    # Either way the worker starts its next call now: its clock starts.
                    worker.head_since = time.monotonic()
                    if status == _worker.HELLO:
                        worker.ready = True
                        self._startup_failures = 0
                    elif worker.inflight:  # else failed already by a cancelling shutdown
                        finished.append((worker.inflight.popleft(), status, body))
                        self._learn(seconds)
        except (EOFError, OSError):
            pass  # the sentinel reports the death
        return finished

    def _until_deadline(self) -> float | None:
        """Seconds until the nearest time limit of a running call; None if none has one."""
        with self._lock:
            deadlines = [d for w in self._workers if (d := w.deadline()) is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _expire(self) -> None:
        """Kill every worker whose running call is past its time limit."""
        now = time.monotonic()
        expired = []
        with self._lock:
            for worker in self._workers:
                deadline = worker.deadline()
                if deadline is not None and deadline <= now:
                    worker.timed_out = worker.inflight[0]
                    worker.closed = True  # send it nothing more; _bury takes it from here
                    expired.append(worker)
        for worker in expired:
            worker.process.kill()

    def _learn(self, seconds: float) -> None:
        average = self._call_seconds
        if average is None:
            self._call_seconds = seconds
        else:
            self._call_seconds = average + DURATION_SMOOTHING * (seconds - average)

    def _resolve(self, call: Call, status: int, body: memoryview) -> None:
        value: object = None
        error: BaseException | None = None
        try:
            if status == _worker.OK:
                value = self._table.decode(pickle.loads(body))
            else:
                error = _worker.unpickle_error(bytes(body))
        except Exception as failure:  # a result that cannot be rebuilt here
            error = failure
        call.keep = None
        reap_pending()  # the argument segments just released: unlinked before the caller sees
        _resolve(call.future, value, error)

    def _bury(self, worker: WorkerHandle) -> None:
        """A worker exited: blame its running call, requeue the rest, replace it."""
        for call, status, body in self._drain(worker):  # what it finished before dying
            self._resolve(call, status, body)
        worker.process.join()
        cause = describe_exit(worker.process.exitcode)
        victim: Call | None = None
        self._selector.unregister(worker.results)
        self._selector.unregister(worker.process.sentinel)
        with self._lock:
            self._workers.remove(worker)
            if worker.ready and worker.inflight:
                head = worker.inflight[0]
                # Killed for a time limit, but that call finished after all (its
                # result was drained above): the one now first did not fail, it
                # goes back to pending with the rest.
                if worker.timed_out is None or head is worker.timed_out:
                    victim = worker.inflight.popleft()
            elif not worker.ready:
                self._startup_failures += 1
            self._pending.extendleft(reversed(worker.inflight))
            worker.inflight.clear()
            replace = self._state in (PoolState.RUNNING, PoolState.DRAINING)
            if self._startup_failures >= MAX_STARTUP_FAILURES:
                self._state = PoolState.BROKEN
                replace = False
        worker.tasks.close()
        worker.results.close()
        self._sweep_unreported(worker)
        if victim is not None:
            victim.keep = None
            error: BaseException
            if victim is worker.timed_out and victim.timeout is not None:
                error = CallTimeoutError(victim.timeout, worker.process.pid)
            else:
                error = WorkerDiedError(
                    f"worker process {worker.process.pid} {cause} while running a task; "
                    "a fresh worker replaces it"
                )
            _resolve(victim.future, error=error)
        if replace:
            self._replace(worker.slot)

    def _sweep_unreported(self, worker: WorkerHandle) -> None:
        """Unlink segments a dead worker made for results it never sent."""
        made_by = f"{self.segment_prefix}{worker.process.pid}_"
        received = self._table.linked
        for name in list_prefix(made_by):
            if name not in received:  # received ones may back arrays still in use
                unlink_name(name)

    def _replace(self, slot: int) -> None:
        try:
            fresh = self._start_worker(slot)
        except Exception as error:
            # No way to start workers (fork server gone, out of processes): stop.
            self._break(f"a replacement worker could not start ({error!r})")
            return
        self._watch(fresh)
        with self._lock:
            self._workers.append(fresh)
            self._dispatch(self._depth())

    def _close(self) -> None:
        """Stop or terminate every worker, fail what is left, unlink every segment."""
        with self._lock:
            cancel = self._state is not PoolState.DRAINING
            broken = self._state is PoolState.BROKEN
            workers = list(self._workers)
            leftover = [c for w in workers for c in w.inflight] + list(self._pending)
            self._pending.clear()
            for w in workers:
                w.inflight.clear()
        if cancel:
            terminate_workers(workers)
        else:
            stop_workers(workers)
        for w in workers:
            w.tasks.close()
            w.results.close()
        for call in leftover:
            call.keep = None
            if broken:
                _resolve(call.future, error=self._refusal())
            elif not call.future.cancel():
                _resolve(call.future, error=CancelledError("process pool shut down"))
        with self._lock:
            self._workers.clear()
            if self._state is not PoolState.BROKEN:
                self._state = PoolState.CLOSED
        self._table.unlink_all()
        unlink_prefix(self.segment_prefix)
        self._wake_r.close()
        self._wake_w.close()
        _live_pools.discard(self)


def queue_depth(call_seconds: float | None) -> int:
    """How many calls one worker may hold, given how long calls have been running.

    >>> queue_depth(None), queue_depth(1.0), queue_depth(0.0005), queue_depth(1e-6)
    (2, 2, 4, 32)
    """
    if call_seconds is None:
        return MIN_DEPTH
    fits = int(QUEUE_SECONDS / max(call_seconds, 1e-9))
    return min(MAX_DEPTH, max(MIN_DEPTH, fits))


_live_pools: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


@atexit.register
def _shutdown_live_pools() -> None:
    # A pool still open at interpreter exit (e.g. Ctrl-C outside a with-block):
    # cancel it so no worker or segment outlives the program.
    for pool in list(_live_pools):
        pool.shutdown(wait=True, cancel_futures=True)
