"""The pool's side of one worker process: start it, hold its calls, stop or end it.

A :class:`WorkerHandle` is what the pool knows of a worker::

    pool process                               worker process
    ------------                               --------------
    tasks   (write end) ───── task pipe ─────> reader thread -> run calls in order
    results (read end)  <──── result pipe ──── one message per finished call
    process.sentinel    ready when the worker has exited, for any reason

* ``inflight``: the calls sent to it, oldest first. The worker runs them in
  that order, so while it lives the first one is running (or about to).
* ``ready``: it said hello. A worker that dies before that failed to start;
  one that dies after it is blamed on its running call.
* ``closed``: writing to it failed, or it is being killed; nothing more is
  sent, and its sentinel reports the death.
* ``head_since``: when its first in-flight call started, as seen from the pool
  (when it was sent to an idle worker, or when the call before it reported);
  never earlier than the real start, so a time limit is never cut short.
* ``timed_out``: the call it was killed for running too long, if it was.

Workers are started from a fork server ("forkserver") or a fresh interpreter
("spawn"); never plain "fork", which copies the parent's threads' locks in
whatever state they are in.

A worker never imports the parent's ``__main__``. multiprocessing would, before
the worker's first line (its "prepare" step runs the parent's script again as
``__mp_main__``, or imports its ``-m`` module): a script without an
``if __name__ == "__main__":`` guard would then start its whole work again in
every worker. Workers run only chunkgraph's loop and receive functions of
``__main__`` by value (``_pickling``), so ``start_worker`` leaves the main
module out of what the child is told to prepare, for its own processes only.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.spawn
import signal
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, cast

from chunkgraph._errors import ConfigError
from chunkgraph.execute.pool import _worker

# Seconds a worker gets to exit after SIGTERM before SIGKILL. Workers do no
# cleanup of their own on SIGTERM, so this only covers a slow kernel.
TERMINATE_GRACE_S = 1.0

# Seconds a clean shutdown waits for a worker to exit after its stop message.
STOP_TIMEOUT_S = 5.0

# Imported once by the fork server, so each forked worker starts with them.
_WORKER_PRELOAD = ["numpy", "chunkgraph.execute.pool._worker"]

Context = ForkServerContext | SpawnContext


class Call:
    """One submitted call: its future, its wire frame, what pins its segments, its limit."""

    __slots__ = ("future", "keep", "message", "slot", "started", "timeout")

    def __init__(
        self,
        future: Future[Any],
        message: bytes,
        keep: list[object],
        timeout: float | None = None,
        slot: int | None = None,
    ) -> None:
        self.future = future
        self.message = message
        self.keep: list[object] | None = keep  # None once the call is over
        self.started = False  # its future is RUNNING (it was given to a worker once)
        self.timeout = timeout  # seconds it may run in a worker; None: no limit
        self.slot = slot  # the worker slot it prefers (ProcessPool.submit's worker); None: any


class WorkerHandle:
    """One worker process, its two pipes and the calls it holds (see the module doc)."""

    __slots__ = (
        "closed",
        "head_since",
        "inflight",
        "process",
        "ready",
        "results",
        "slot",
        "tasks",
        "timed_out",
    )

    def __init__(self, process: BaseProcess, tasks: Connection, results: Connection) -> None:
        self.slot = -1  # its place among the pool's workers; a replacement takes the dead one's
        self.process = process
        self.tasks = tasks
        self.results = results
        self.inflight: deque[Call] = deque()
        self.ready = False
        self.closed = False
        self.head_since = 0.0  # time.monotonic() when inflight[0] started
        self.timed_out: Call | None = None

    def deadline(self) -> float | None:
        """When its running call's time limit ends (monotonic clock), if it has one."""
        if not self.ready or not self.inflight or self.timed_out is not None:
            return None
        timeout = self.inflight[0].timeout
        return None if timeout is None else self.head_since + timeout


def load(worker: WorkerHandle) -> int:
    """How many calls the worker holds (the dispatch key: emptiest first)."""
    return len(worker.inflight)


def worker_context(start_method: str) -> Context:
    """The multiprocessing context workers start from; ConfigError for an unusable method."""
    methods = multiprocessing.get_all_start_methods()
    if start_method not in methods or start_method == "fork":
        raise ConfigError(
            f"start_method {start_method!r} is not usable here; valid: "
            f"{[m for m in methods if m != 'fork']} ('fork' is unsafe with threads)"
        )
    ctx = cast(Context, multiprocessing.get_context(start_method))
    if isinstance(ctx, ForkServerContext):
        ctx.set_forkserver_preload(_WORKER_PRELOAD)
    return ctx


def start_worker(ctx: Context, prefix: str, min_bytes: int) -> WorkerHandle:
    """Start one worker serving calls; its segments are named ``prefix...``."""
    task_r, task_w = ctx.Pipe(duplex=False)
    result_r, result_w = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=_worker.main,
        args=(task_r, result_w, prefix, min_bytes),
        name=f"chunkgraph-worker-{prefix}",
        # Not daemonic, so a task may start processes of its own. Workers still
        # never outlive the pool: shutdown and the exit hook end them, and an
        # orphaned worker ends itself.
        daemon=False,
    )
    with _without_main():
        process.start()
    # Close our copies of the worker's ends, so either side sees EOF when the other dies.
    task_r.close()
    result_w.close()
    return WorkerHandle(process, task_w, result_r)


# Set while this thread starts a worker: only then is the main module left out.
_starting = threading.local()
_install_lock = threading.Lock()
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


class _PreparationData(Protocol):
    def __call__(self, name: str) -> dict[str, Any]: ...


def _leaving_main_out(original: _PreparationData) -> _PreparationData:
    """``multiprocessing.spawn.get_preparation_data``, without the main module for a
    process that this thread starts as a worker; unchanged for any other process."""

    def preparation_data(name: str) -> dict[str, Any]:
        data = original(name)
        if getattr(_starting, "worker", False):
            for key in _MAIN_KEYS:
                data.pop(key, None)
        return data

    preparation_data.leaves_main_out = True  # type: ignore[attr-defined]
    return preparation_data


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """Start a process in this block without re-running ``__main__`` there (module doc).

    Both start methods ask ``spawn.get_preparation_data`` at start time; it is
    wrapped once, and the wrapper changes only what this thread starts here.
    """
    with _install_lock:
        current = multiprocessing.spawn.get_preparation_data
        if not getattr(current, "leaves_main_out", False):
            multiprocessing.spawn.get_preparation_data = _leaving_main_out(current)
    _starting.worker = True
    try:
        yield
    finally:
        _starting.worker = False


def stop_workers(workers: list[WorkerHandle]) -> None:
    """Ask idle workers to exit; terminate those that do not within STOP_TIMEOUT_S."""
    for w in workers:
        with contextlib.suppress(OSError):  # a dead worker needs no stop message
            w.tasks.send_bytes(_worker.STOP)
    for w in workers:
        w.process.join(STOP_TIMEOUT_S)
    terminate_workers([w for w in workers if w.process.exitcode is None])


def terminate_workers(workers: list[WorkerHandle]) -> None:
    """SIGTERM now, SIGKILL after TERMINATE_GRACE_S, and join every one (no zombies)."""
    for w in workers:
        w.process.terminate()
    for w in workers:
        w.process.join(TERMINATE_GRACE_S)
    for w in workers:
        if w.process.exitcode is None:
            w.process.kill()
            w.process.join()


def describe_exit(exitcode: int | None) -> str:
    """Human words for a worker's exit code (negative: killed by that signal).

    >>> describe_exit(-9), describe_exit(3)
    ('killed by signal 9 (SIGKILL)', 'exited with code 3')
    """
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"
