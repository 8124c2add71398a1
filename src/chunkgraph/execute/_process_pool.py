"""A pool of persistent worker processes; numpy arrays travel through shared memory.

Policy
------
``submit(fn, args, kwargs)`` pickles the call in the caller's thread (arrays
become shared-memory references, see ``_shm``) and, under the pool lock, sends
it straight to the least-loaded worker that has room (each worker holds at most
``TASKS_PER_WORKER`` calls: one running, the rest queued in its pipe), or
appends it to ``pending``. One manager thread does everything else: it reads
results, resolves futures, refills workers, notices dead workers and replaces
them, and carries out shutdown.

::

    caller threads                 manager thread                  workers
    --------------                 --------------                  -------
    submit ──encode, pickle──┐
                             ├──> pending ──dispatch──> task pipe ──> run fn
                             └────────────(room?)────┘                 │
    Future <──set_result── decode <── wait(result pipes, sentinels) <──┘

State (all under ``_lock``)
---------------------------
``_workers``         the live ``_Worker`` s; each has ``inflight``, the calls sent to
                     it in order. A worker runs its calls first-in first-out,
                     so when it dies the oldest in-flight call is the one that was
                     running: that future fails with ``WorkerDiedError`` (exit code
                     or signal in the message) and the others go back to the front
                     of ``pending``; a fresh worker replaces the dead one.
``_pending``         calls not yet sent to any worker.
``_state``           a :class:`PoolState`; submits are refused once it leaves RUNNING.
``_startup_failures`` workers in a row that died before saying hello; at
                     ``MAX_STARTUP_FAILURES`` the pool is BROKEN and every call fails.

Why these choices
-----------------
* "forkserver" start method: safe when the parent runs threads (plain fork is
  not), and a fresh worker forks from a small server that has already imported
  numpy, so replacing a dead worker costs milliseconds, not a new interpreter.
* Only the manager thread resolves futures of dispatched calls, so a result
  and a cancellation can never race on one future; future callbacks run there
  without the pool lock held, and may call ``submit`` again.
* Shutdown with ``cancel_futures=True`` (and Ctrl-C through the context manager
  or the exit hook) terminates workers at once (SIGTERM, SIGKILL after
  ``TERMINATE_GRACE_S``), joins them, fails unfinished futures as cancelled and
  unlinks every segment the pool created, plus any a dying worker left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import itertools
import multiprocessing
import os
import pickle
import secrets
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, InvalidStateError
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, cast

from chunkgraph._errors import ConfigError, WorkerDiedError
from chunkgraph.execute import _worker
from chunkgraph.execute._shm import SHM_MIN_BYTES, SegmentTable, unlink_prefix

# Calls a worker may hold at once (one running, the rest waiting in its pipe).
# 2 hides the round trip between one result and the next call for tiny tasks;
# more would bind queued calls to a busy worker while another one idles, and a
# worker death sends them back to the queue anyway.
TASKS_PER_WORKER = 2

# Seconds a worker gets to exit after SIGTERM before SIGKILL. Workers do no
# cleanup of their own on SIGTERM, so this only covers a slow kernel.
TERMINATE_GRACE_S = 1.0

# Seconds a clean shutdown waits for a worker to exit after its stop message.
STOP_TIMEOUT_S = 5.0

# Workers in a row that die before reporting ready; beyond this the pool stops
# respawning (something in the environment, not a task, is killing them).
MAX_STARTUP_FAILURES = 3

_Context = ForkServerContext | SpawnContext

_WORKER_PRELOAD = ["numpy", "chunkgraph.execute._worker"]


class PoolState(enum.Enum):
    """Lifecycle of a pool; only RUNNING accepts submits."""

    RUNNING = "running"
    DRAINING = "draining"  # shutdown(cancel_futures=False): finish all work, then stop
    CANCELLING = "cancelling"  # shutdown(cancel_futures=True): terminate now
    BROKEN = "broken"  # workers keep dying at startup
    CLOSED = "closed"


class _Call:
    """One submitted call: its future, its wire message, what pins its segments."""

    __slots__ = ("future", "keep", "message", "started")

    def __init__(self, future: Future[Any], message: bytes, keep: list[object]) -> None:
        self.future = future
        self.message = message
        self.keep: list[object] | None = keep
        self.started = False


class _Worker:
    __slots__ = ("inflight", "process", "ready", "results", "tasks")

    def __init__(self, process: BaseProcess, tasks: Connection, results: Connection) -> None:
        self.process = process
        self.tasks = tasks
        self.results = results
        self.inflight: deque[_Call] = deque()
        self.ready = False


def _dumps(value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        # Lambdas and closures do not pickle by reference; cloudpickle (a dask
        # dependency) pickles them by value when it is installed.
        try:
            import cloudpickle  # type: ignore[import-untyped]
        except ImportError:
            raise error from None
        try:
            data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            raise error from None
        return data


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
            workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        if not isinstance(workers, int) or workers < 1:
            raise ConfigError(
                f"workers must be a positive int or None (all cores), got {workers!r}"
            )
        methods = multiprocessing.get_all_start_methods()
        if start_method not in methods or start_method == "fork":
            raise ConfigError(
                f"start_method {start_method!r} is not usable here; valid: "
                f"{[m for m in methods if m != 'fork']} ('fork' is unsafe with threads)"
            )
        self._ctx = cast(_Context, multiprocessing.get_context(start_method))
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload(_WORKER_PRELOAD)
        self.size = workers
        self.segment_prefix = f"cg_{secrets.token_hex(3)}_"
        self._table = SegmentTable(self.segment_prefix, owner=True, min_bytes=shm_min_bytes)
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._pending: deque[_Call] = deque()
        self._workers: list[_Worker] = []
        self._state = PoolState.RUNNING
        self._startup_failures = 0
        self._broken_by: BaseException | None = None
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        try:
            for _ in range(workers):
                self._workers.append(self._start_worker())
        except BaseException:
            _terminate(self._workers)
            raise
        self._manager = threading.Thread(
            target=self._manage, name=f"chunkgraph-pool-{self.segment_prefix}", daemon=True
        )
        self._manager.start()
        _live_pools.add(self)

    # -- public --------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a worker; numpy arrays go through shared memory."""
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
            message = _worker.HEADER.pack(next(self._ids)) + _dumps(encoded)
        except Exception as error:
            future.set_exception(error)
            return future
        with self._lock:
            if self._state is not PoolState.RUNNING:
                raise self._refusal()
            self._pending.append(_Call(future, message, keep))
            self._dispatch()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the pool; with ``cancel_futures`` terminate workers now.

        Without cancelling, submitted calls finish first. Either way, once the
        manager thread is done (``wait=True`` waits for it) no worker process
        and no shared-memory segment of this pool remains; arrays already
        returned stay readable (their mapping outlives the segment's name).
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
            if self._broken_by is not None:
                reason = f"a replacement worker could not start ({self._broken_by!r})"
            else:
                reason = f"{MAX_STARTUP_FAILURES} workers in a row died before starting"
            return WorkerDiedError(
                f"process pool is broken: {reason}; check that chunkgraph and numpy "
                "import in a fresh Python process, then create a new ProcessPool"
            )
        return RuntimeError(
            f"cannot submit to a process pool that is {self._state.value}; create a new "
            "ProcessPool, or submit before calling shutdown()"
        )

    def _dispatch(self) -> None:
        """Send pending calls to the workers with room, emptiest first. Call under the lock."""
        for level in range(TASKS_PER_WORKER):
            for worker in self._workers:
                if not self._pending:
                    return
                if len(worker.inflight) <= level:
                    self._send(worker)

    def _send(self, worker: _Worker) -> None:
        while self._pending:
            call = self._pending.popleft()
            if call.started or call.future.set_running_or_notify_cancel():
                break
            call.keep = None  # cancelled before it ran
        else:
            return
        call.started = True
        try:
            worker.tasks.send_bytes(call.message)
        except OSError:
            # The worker is dying; its sentinel will fire. Keep the call queued.
            self._pending.appendleft(call)
            return
        worker.inflight.append(call)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already closed: the manager has finished
            self._wake_w.send_bytes(b"")

    # -- workers -------------------------------------------------------------------

    def _start_worker(self) -> _Worker:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        result_r, result_w = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_worker.main,
            args=(task_r, result_w, self.segment_prefix, self._table.min_bytes),
            name=f"chunkgraph-worker-{self.segment_prefix}",
            daemon=True,
        )
        process.start()
        # Close our copies of the worker's ends, so either side sees EOF when the other dies.
        task_r.close()
        result_w.close()
        return _Worker(process, task_w, result_r)

    # -- manager thread ------------------------------------------------------------

    def _manage(self) -> None:
        try:
            while self._serve_once():
                pass
        finally:
            self._close()

    def _serve_once(self) -> bool:
        """One wait-and-handle round; False when the pool should close."""
        with self._lock:
            by_conn = {w.results: w for w in self._workers}
            by_sentinel = {w.process.sentinel: w for w in self._workers}
        ready = wait([self._wake_r, *by_conn, *by_sentinel])
        for item in ready:
            if isinstance(item, Connection) and item in by_conn:
                self._drain(by_conn[item])
        for item in ready:
            if isinstance(item, int) and item in by_sentinel:
                self._bury(by_sentinel[item])
        if self._wake_r in ready:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
        with self._lock:
            state = self._state
            idle = not self._pending and not any(w.inflight for w in self._workers)
        return state is PoolState.RUNNING or (state is PoolState.DRAINING and not idle)

    def _drain(self, worker: _Worker) -> None:
        try:
            while worker.results.poll():
                self._receive(worker, worker.results.recv_bytes())
        except (EOFError, OSError):
            pass  # the sentinel reports the death

    def _receive(self, worker: _Worker, message: bytes) -> None:
        _, status = _worker.STATUS.unpack_from(message)
        body = memoryview(message)[_worker.STATUS.size :]
        if status == _worker.HELLO:
            worker.ready = True
            with self._lock:
                self._startup_failures = 0
            return
        with self._lock:
            if not worker.inflight:
                return  # the call was already failed by a cancelling shutdown
            call = worker.inflight.popleft()
            self._dispatch()
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
        _resolve(call.future, value, error)

    def _bury(self, worker: _Worker) -> None:
        """A worker exited: blame its running call, requeue the rest, replace it."""
        self._drain(worker)
        worker.process.join()
        cause = _worker.describe_exit(worker.process.exitcode)
        victim: _Call | None = None
        with self._lock:
            self._workers.remove(worker)
            if worker.ready and worker.inflight:
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
        if victim is not None:
            victim.keep = None
            _resolve(
                victim.future,
                error=WorkerDiedError(
                    f"worker process {worker.process.pid} {cause} while running a task; "
                    "a fresh worker replaces it"
                ),
            )
        if replace:
            self._replace()

    def _replace(self) -> None:
        try:
            fresh = self._start_worker()
        except Exception as error:
            # No way to start workers (fork server gone, out of processes): stop.
            with self._lock:
                self._state = PoolState.BROKEN
                self._broken_by = error
            return
        with self._lock:
            self._workers.append(fresh)
            self._dispatch()

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
            _terminate(workers)
        else:
            _stop(workers)
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


def _stop(workers: list[_Worker]) -> None:
    for w in workers:
        with contextlib.suppress(OSError):  # a dead worker needs no stop message
            w.tasks.send_bytes(_worker.HEADER.pack(_worker.STOP_TASK_ID))
    for w in workers:
        w.process.join(STOP_TIMEOUT_S)
    _terminate([w for w in workers if w.process.exitcode is None])


def _terminate(workers: list[_Worker]) -> None:
    for w in workers:
        w.process.terminate()
    for w in workers:
        w.process.join(TERMINATE_GRACE_S)
    for w in workers:
        if w.process.exitcode is None:
            w.process.kill()
            w.process.join()


_live_pools: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


@atexit.register
def _shutdown_live_pools() -> None:
    # A pool still open at interpreter exit (e.g. Ctrl-C outside a with-block):
    # cancel it so no worker or segment outlives the program.
    for pool in list(_live_pools):
        pool.shutdown(wait=True, cancel_futures=True)
