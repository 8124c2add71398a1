"""Calls streamed to worker processes, each in the worker it prefers: ``_dask_stream``'s
window on a local ``ProcessPool``.

Policy. ``ProcessStreams(workers).stream(calls)`` opens a pool of ``workers``
processes, pulls calls from a lazy iterator and keeps at most
``WINDOW_PER_THREAD`` of them in flight per worker, yielding each result as its
call completes::

    calls (lazy) --next()--> submit while the window has room --> pool --> worker slot
        ^                                                                      |
        '------- one result out, one call in <-- completed (a queue) <--------'

Placement. A call that names a slot (``Call.slot``) runs in that worker process,
so calls of one slot share its memory: a flow's stream of neighbouring top tasks
decodes the halo they share once, in one process's cache (``_batches``). It waits
for room there; the caller balances the slots (``TopStreams``: a dry, idle stream
takes the back half of the longest). A slot whose worker died runs in its
replacement.

Failures. A worker that dies while running a call (a crash, SIGKILL, out of
memory) is no try: the call is submitted again, to its slot's replacement, up to
``MAX_DEATHS`` deaths, then it fails with ``WorkerDiedError``. A call that raises
fails the stream: every call in flight is cancelled, the pool's workers are
terminated, nothing more is submitted, and one ``ExceptionGroup`` of ``TaskError``
is raised (the call's own group of ``TaskError`` when it ran tasks of its own, a
batch on a local executor); a ``KeyboardInterrupt`` a call raised is raised as it
is, as a task's own Ctrl-C is in this process. Ctrl-C or the consumer closing the generator ends the
pool the same way. The iterator may yield ``None`` as for ``_dask_stream``.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from chunkgraph._errors import TaskError, WorkerDiedError
from chunkgraph._util import usable_cores
from chunkgraph.execute._dask_stream import WINDOW_PER_THREAD, Call
from chunkgraph.execute._failures import describe_innermost, failure_group
from chunkgraph.execute.pool import ProcessPool

_END: Any = object()

# Deaths of worker processes one call may cause before it fails (Dask's default
# ``distributed.scheduler.allowed-failures`` is 3).
MAX_DEATHS = 3


class ProcessStreams:
    """Streams calls to a pool of ``workers`` processes (module doc); ``retries`` is what
    a call that runs tasks of its own gives each of them (its caller reads it)."""

    in_process = False

    def __init__(self, workers: int | None = None, retries: int = 0) -> None:
        self.workers = max(1, workers or usable_cores())
        self.retries = retries

    def threads(self) -> int:
        """The worker slots calls may name: one per process."""
        return self.workers

    def stream(self, calls: Iterable[Call | None], *, retries: int = 0) -> Iterator[Any]:
        """Run ``calls`` on a fresh pool, a window at a time; yields each call's result as
        it completes, in no fixed order. ``retries``: none but 0 is taken (a call that
        runs tasks retries them itself).

        Raises:
            ExceptionGroup: Of ``TaskError``, for the first call that failed (the calls in
                flight are cancelled; no later call is submitted).
        """
        if retries:
            raise ValueError("ProcessStreams.stream retries no call: a call retries its tasks")
        done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
        pool = ProcessPool(self.workers)
        in_flight: dict[Future[Any], tuple[Call, int]] = {}  # -> (call, deaths so far)
        failed = True
        try:

            def submit(call: Call, deaths: int) -> None:
                future = pool.submit(call.fn, call.args, worker=call.slot)
                in_flight[future] = (call, deaths)
                future.add_done_callback(done.put)

            source = iter(calls)
            exhausted = False
            window = WINDOW_PER_THREAD * self.workers
            while True:
                while not exhausted and len(in_flight) < window:
                    call = next(source, _END)
                    if call is _END:
                        exhausted = True
                    elif call is None:
                        if not in_flight:
                            raise RuntimeError(
                                "the calls' iterator has nothing to submit while no call is "
                                "in flight: nothing would ever come back"
                            )
                        break
                    else:
                        submit(call, 0)
                if not in_flight:
                    failed = False
                    return
                future = done.get()
                call, deaths = in_flight.pop(future)
                error = future.exception()
                if isinstance(error, WorkerDiedError) and deaths + 1 < MAX_DEATHS:
                    submit(call, deaths + 1)  # its worker died under it: no try of its own
                    continue
                if isinstance(error, KeyboardInterrupt):
                    raise error  # a task's own Ctrl-C interrupts the run, as in this process
                if error is not None:
                    raise _failure_group(call.name, error, deaths + 1)
                yield future.result()
        finally:
            for future in in_flight:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=failed)


def _failure_group(name: str, error: BaseException, deaths: int) -> ExceptionGroup[TaskError]:
    """The group the stream raises for call ``name``, which failed with ``error``."""
    if isinstance(error, BaseExceptionGroup) and all(
        isinstance(e, TaskError) for e in error.exceptions
    ):
        # The call's own tasks failed (a batch on its local executor): theirs, by name.
        return ExceptionGroup(
            error.message, [e for e in error.exceptions if isinstance(e, TaskError)]
        )
    attempts = deaths if isinstance(error, WorkerDiedError) else 1
    task_error = TaskError(name, (), attempts, describe_innermost(error))
    task_error.__cause__ = error
    return failure_group([task_error], 0)
