"""Calls streamed to a Dask cluster through a bounded window: submitted as workers free up.

Policy. ``stream_calls(client, calls)`` pulls calls from a lazy iterator and
keeps at most ``WINDOW_PER_THREAD`` of them in flight per worker thread of the
cluster, yielding each result as its call completes::

    calls (lazy) --next()--> submit while the window has room --> scheduler --> workers
        ^                                                                        |
        '---- one result out, one call in <-- as_completed (results with it) <--'

State. ``in_flight``: the futures submitted and not yet yielded (their call's
name beside each); ``window``: ``WINDOW_PER_THREAD`` x the threads of the running
workers, counted again every ``WINDOW_REFRESH_S`` (workers that join widen it,
workers that leave narrow it; a cluster of no workers keeps a window of one call,
which waits for a worker as any Dask task does).

Why a window. Dask's scheduler spends about a millisecond and a few kilobytes on
each task it tracks, and the client a future per task: a million calls submitted
at once cost minutes before the first runs. With the window, neither holds more
than a few calls per thread, whatever the iterator's length, and the first call
runs as soon as it is made. Two per thread: one running, one queued on the
worker so that it never waits for the client's round trip; more would only
hold work a joining or idle worker could take (Dask's work stealing moves a
queued call, which has no worker restriction, to an idle worker).

Placement. A call may name a worker thread it prefers (``Call.slot``): the
cluster's threads in workers' address order (``slots``, counted with the window),
so that calls of one slot, and of neighbouring slots of one worker, run in one
process and share its caches. It is submitted with that worker as a loose
restriction: where the worker is gone, or Dask's stealing finds it busy, the call
runs on another.

The iterator may yield ``None``: nothing to submit now (work that waits for
results: a reduction for its top-level tasks); it is asked again after the next
result. It must not yield ``None`` while nothing is in flight (nothing would ever
come back): that is a ``RuntimeError``.

Failures: as for a subgraph (``_dask_subgraph``). A call that raises is tried
again on its worker, up to ``retries`` more times, unless its error is permanent
(``is_permanent``); its last error reaches the client, which cancels every call in
flight, submits nothing more and raises one ``ExceptionGroup`` of ``TaskError``
(named by the call, the worker's traceback as the cause's ``__cause__``). A call
that itself ran tasks (a batch on a local executor) and raised their group of
``TaskError`` gives those errors, not one for the call. A worker that dies is no
try: Dask runs its calls elsewhere, up to
``distributed.scheduler.allowed-failures`` deaths, then a ``WorkerDiedError``.
Ctrl-C, an error in the consumer or the consumer closing the generator cancels
everything in flight too. Dask cannot stop a call that already runs: one that runs
many tasks asks ``cancel_check()`` between them.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from chunkgraph._errors import RemoteTraceback, TaskError, WorkerDiedError, is_permanent
from chunkgraph._util import usable_cores
from chunkgraph.execute._dask_malloc import large_buffers_reused
from chunkgraph.execute._dask_subgraph import SubgraphFailed, _failed
from chunkgraph.execute._dask_worker_pool import size_pool_to_worker
from chunkgraph.execute._failures import describe_innermost, failure_group

# Calls in flight per worker thread: one running, one waiting on the worker (see above).
WINDOW_PER_THREAD = 2
# Seconds between counts of the cluster's threads: a count is a round trip to the
# scheduler, and workers come and go on the scale of seconds.
WINDOW_REFRESH_S = 1.0
# Seconds to wait for a failed call's error from the scheduler.
ERROR_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Call:
    """``fn(*args)`` to run on a worker; ``name`` names it in errors and Dask's keys;
    ``slot``: the worker thread it prefers (``slots``: calls of one slot run in one
    worker process, so they share its caches), None for any."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    slot: int | None = None


def stream_calls(client: Any, calls: Iterable[Call | None], *, retries: int = 0) -> Iterator[Any]:
    """Run ``calls`` on ``client``'s cluster, a bounded window at a time (module doc);
    yields each call's result as it completes, in no fixed order.

    Raises:
        ExceptionGroup: Of ``TaskError``, for the first call that failed for good (the
            calls in flight are cancelled; no later call is submitted).
    """
    from distributed import as_completed

    token = uuid.uuid4().hex[:12]
    source = iter(calls)
    exhausted = False
    in_flight: dict[str, str] = {}  # future key -> the call's name
    futures = as_completed(loop=client.loop, with_results=True, raise_errors=False)  # type: ignore[no-untyped-call]
    window = _Window(client)
    seq = itertools.count()
    try:
        while True:
            while not exhausted and len(in_flight) < window.size():
                call = next(source, _END)
                if call is _END:
                    exhausted = True
                elif call is None:
                    if not in_flight:
                        raise RuntimeError(
                            "the calls' iterator has nothing to submit while no call is in "
                            "flight: nothing would ever come back"
                        )
                    break
                else:
                    assert isinstance(call, Call)
                    n = next(seq)
                    future = client.submit(
                        _run_call, call.fn, call.args, retries,
                        key=f"chunkgraph-{call.name}-{token}-{n}",
                        priority=-n,  # the iterator's order first
                        pure=False,
                        **window.placement(call.slot),
                    )  # fmt: skip
                    in_flight[future.key] = call.name
                    futures.add(future)  # type: ignore[no-untyped-call]
            if not in_flight:
                return
            future, result = next(futures)
            name = in_flight.pop(future.key)
            status = future.status
            del future
            if status != "finished":
                raise _failure_group(name, status, result)
            yield result
            del result
    finally:
        # Ctrl-C, a failure, the consumer closing us: nothing of these calls goes on.
        left = list(futures.futures)
        futures.clear()  # type: ignore[no-untyped-call]
        if left:
            client.cancel(left, force=True)
        in_flight.clear()


_END: Any = object()


class _Window:
    """``WINDOW_PER_THREAD`` x the cluster's worker threads, and the workers' ``slots``,
    counted again every ``WINDOW_REFRESH_S``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.counted = -float("inf")
        self.value = 1
        self.slots: list[str] = []

    def size(self) -> int:
        now = time.monotonic()
        if now - self.counted >= WINDOW_REFRESH_S:
            self.counted = now
            nthreads = self.client.nthreads()
            self.slots = slots(nthreads)
            self.value = max(1, WINDOW_PER_THREAD * len(self.slots))
        return self.value

    def placement(self, slot: int | None) -> dict[str, Any]:
        """``client.submit``'s keywords for a call preferring ``slot``: its worker if any
        runs, any other when that one is gone or busy past Dask's stealing threshold."""
        if slot is None or not self.slots:
            return {}
        return {"workers": [self.slots[slot % len(self.slots)]], "allow_other_workers": True}


def slots(nthreads: dict[str, int]) -> list[str]:
    """Worker thread ``i`` of a cluster as the address of its worker: the workers in
    address order, each once per thread, so that neighbouring slots share a process.

    >>> slots({"tcp://b:2": 1, "tcp://a:1": 2})
    ['tcp://a:1', 'tcp://a:1', 'tcp://b:2']
    """
    return [a for a in sorted(nthreads) for _ in range(max(0, int(nthreads[a])))]


def worker_threads() -> int:
    """The threads of the Dask worker this runs in; outside one, the usable cores."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError):  # not in a Dask worker
        return usable_cores()


def worker_name() -> str:
    """The address of the Dask worker this runs in; outside one, ""."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):  # not in a Dask worker
        return ""


def cancel_check() -> Callable[[], bool]:
    """Called in a call on a Dask worker: a function that says, from any thread, whether
    the call was cancelled since (its result no longer wanted: the run failed or was
    interrupted). Dask cannot stop a running call; a call that runs many tasks asks this
    between them and stops. Outside a Dask worker: never cancelled."""
    try:
        from distributed import get_worker

        worker = get_worker()
        key = worker.get_current_task()
    except (ImportError, ValueError):  # not in a Dask worker
        return lambda: False

    def cancelled() -> bool:
        task = worker.state.tasks.get(key)
        return task is None or task.state in ("cancelled", "released", "forgotten")

    return cancelled


def _run_call(fn: Callable[..., Any], args: tuple[Any, ...], retries: int) -> Any:
    """On a worker: ``fn(*args)``, tried again in place while its error is not permanent
    and tries are left; its last error as a ``SubgraphFailed`` (picklable, with the text
    of its traceback)."""
    size_pool_to_worker()
    with large_buffers_reused():  # a flow's batch: its buffers reused while it runs
        tries = 0
        while True:
            tries += 1
            try:
                return fn(*args)
            except BaseException as error:
                final = isinstance(error, KeyboardInterrupt) or is_permanent(error)
                if final or tries > retries:
                    raise _failed(0, error, tries) from None


def _failure_group(name: str, status: str, result: Any) -> ExceptionGroup[TaskError]:
    """The group the client raises for call ``name``, which ended as ``status``."""
    from distributed.scheduler import KilledWorker

    error = result[1] if isinstance(result, tuple) and len(result) == 3 else result
    attempts = 1
    if isinstance(error, SubgraphFailed):
        attempts, text, cause = error.attempts, error.text, error.error
        if isinstance(cause, BaseExceptionGroup) and all(
            isinstance(e, TaskError) for e in cause.exceptions
        ):
            # The call's own tasks failed (a batch on its local executor): theirs, by name.
            errors = [e for e in cause.exceptions if isinstance(e, TaskError)]
            for e in errors:
                if e.__cause__ is None:  # its own cause crossed with it (TaskError pickles it)
                    e.__cause__ = RemoteTraceback(text)
            return ExceptionGroup(cause.message, errors)
        cause.__cause__ = RemoteTraceback(text)
    elif isinstance(error, KilledWorker):
        # Each death was a try: Dask gives up after allowed-failures of them, plus one.
        import dask  # deferred: only a Dask run reaches here

        attempts = int(dask.config.get("distributed.scheduler.allowed-failures", 3)) + 1
        cause = WorkerDiedError(
            f"{error}; Dask stops retrying a task after "
            "distributed.scheduler.allowed-failures worker deaths (a worker that dies on "
            "the same work each time may be running out of memory: give workers more, or "
            "the flow a lower memory_limit)"
        )
    elif status == "cancelled" or not isinstance(error, BaseException):
        cause = RuntimeError(
            f"cancelled on the cluster before it finished (Dask status {status!r}): "
            "client.restart(), or another client cancelled its key; run it again"
        )
    else:
        cause = error
    task_error = TaskError(name, (), attempts, describe_innermost(cause))
    task_error.__cause__ = cause
    return failure_group([task_error], 0)
