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

Following a plan: each context gets ``IN_FLIGHT_PER_WORKER`` submissions per
worker it is given (``Placement.workers``) and takes from its own ready heap
(the scheduler steals for it when that is empty). A fused chain is submitted
as one call (``_chains``): its tasks run back to back in one worker, and only
the last result comes back.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import CancelledError, Future
from typing import Any

from chunkgraph._errors import RemoteTraceback
from chunkgraph.execute._chains import later_calls, run_chain
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
        placement = driver.scheduler.placement
        self.per_context = placement.workers if placement is not None else [workers]
        self.workers = sum(self.per_context)
        # Chains run as one call, which one time limit could not cover per task: with
        # limits, each task goes alone (its own limit, and a kill names it).
        self.chains = (
            placement is not None
            and driver.timeout_of is None
            and any(n >= 0 for n in placement.chain_next)
        )
        self.pool: ProcessPool | None = None
        self.limits = [max(1, w * IN_FLIGHT_PER_WORKER) for w in self.per_context]
        self.in_flight_on = [0] * len(self.per_context)
        # future -> (context, the chain of tasks it runs: one task unless fused)
        self.in_flight: dict[Future[Any], tuple[int, list[int]]] = {}
        self.completed: deque[Future[Any]] = deque()
        self.wake = threading.Event()
        self.aborted = False

    def _on_done(self, future: Future[Any]) -> None:
        self.completed.append(future)  # runs in a pool thread: deque.append is atomic
        self.wake.set()

    def open(self) -> None:
        self.pool = ProcessPool(self.workers)
        if len(self.per_context) == 1:
            self.limits = [max(1, self.pool.size * IN_FLIGHT_PER_WORKER)]

    def start(self) -> None:
        driver, pool = self.driver, self.pool
        assert pool is not None
        for c, limit in enumerate(self.limits):
            free = limit - self.in_flight_on[c]
            if free <= 0:
                continue
            for t in driver.take(free, c):
                self._submit(t, c)

    def _submit(self, t: int, c: int) -> None:
        driver, pool = self.driver, self.pool
        assert pool is not None
        chain = [t]
        if self.chains:
            while (nxt := driver.scheduler.claim_next(chain[-1])) >= 0:
                chain.append(nxt)
        if driver.events is not None:
            for member in chain:
                driver.started(member)
        try:
            fn, args, kwargs = driver.call_of(t)
            if len(chain) > 1:
                fn, args, kwargs = (
                    run_chain,
                    (fn, args, kwargs, later_calls(driver.graph, chain[1:])),
                    {},
                )
        except Exception as error:  # rebuilding the arguments failed: the task failed
            driver.scheduler.unclaim(chain[1:])
            driver.report([], [(t, error)])
            return
        timeout = None if driver.timeout_of is None else driver.timeout_of(t)
        future = pool.submit(fn, args, kwargs, timeout=timeout)
        self.in_flight[future] = (c, chain)
        self.in_flight_on[c] += 1
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
            c, chain = self.in_flight.pop(future)
            self.in_flight_on[c] -= 1
            t = chain[0]
            if len(chain) > 1:
                driver.scheduler.unclaim(chain[1:])  # claims of tasks that did not run go back
            try:
                value = future.result()
                if len(chain) == 1:
                    done.append((t, value))
                else:
                    self._chain_outcome(chain, value, done, failed)
            except CancelledError:
                unstarted.append(t)  # never ran; the run is stopping, so it stays READY
            except CallTimeoutError as error:
                consequence = f"its worker process {error.pid} was killed (SIGKILL) and replaced"
                failed.append((t, timeout_error(name(t), error.seconds, consequence)))
            except BaseException as error:  # a KeyboardInterrupt a task raised: see report()
                if len(chain) > 1 and not isinstance(error, KeyboardInterrupt):
                    # The call ran the whole chain: which task it was in is unknown.
                    later = ", ".join(repr(name(u)) for u in chain[1:])
                    error.add_note(
                        f"{name(t)!r} ran as one call with the tasks fused after it: {later}"
                    )
                failed.append((t, error))
        if done or failed or unstarted:
            driver.report(done, failed, unstarted)

    def _chain_outcome(
        self,
        chain: list[int],
        outcome: tuple[int, Any, BaseException | None, str],
        done: list[tuple[int, Any]],
        failed: list[tuple[int, BaseException]],
    ) -> None:
        """Record what ``run_chain`` did: the tasks it finished, and the one that failed."""
        ran, value, error, text = outcome
        sched = self.driver.scheduler
        # The chain's later tasks become RUNNING as their predecessor is reported:
        # claim again those that ran or failed, so finish() hands them over.
        for member in chain[1 : ran + 1 if error is not None else ran]:
            sched.claimed[member] = 1
        for member in chain[: ran - 1]:
            done.append((member, None))  # consumed inside the chain: nothing to keep
        done.append((chain[ran - 1], value))
        if error is not None:
            error.__cause__ = RemoteTraceback(text)
            failed.append((chain[ran], error))

    def abort(self) -> None:
        self.driver.scheduler.cancel()
        self.aborted = True

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=self.aborted)
