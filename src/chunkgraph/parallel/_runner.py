"""PartitionRunner: ``f(i)`` for every partition, on workers activated per NUMA node.

For minutes-long partitions (files of a dataset, top-level chunks of a
volume): instead of trusting a fixed pool size, the runner activates workers
while the measured CPU and I/O signals say the machine absorbs more (the
rules are in ``_activation.py``; the signals in ``_signals.py``).

    calling thread (the driver)                 one controller per node
    activation.initial() ---- activate(k) --->  channel (semaphore) wakes k of
    loop:                                       the node's dormant workers, each
      done.get(timeout=POLL_INTERVAL_S) <-----  pinned to the node's CPUs:
      on_done(i, result, elapsed)                 take i from the shared queue,
      activation.check(not yet started) ---->     f(i), report, take the next
    until every started partition has finished and none can start
    then: wake the dormant workers (they exit), join all, raise the errors

Rules:

* One controller per node, each with ``cap`` workers started dormant at the
  beginning of `PartitionRunner.run`, pinned with ``os.sched_setaffinity`` to
  the node's CPUs on a multi-node machine (never on a single node). Inside
  ``f``, `get_pool` returns a pool of the node's CPUs on a multi-node machine,
  so nested `parallel_for` & co. stay on the node; on one node it is the
  process-wide pool. One shared work queue, taken in the given order.
* Activation checks run on every completion and whenever
  ``POLL_INTERVAL_S`` passes without one; both signals are sampled at each.
* ``on_done(i, result, elapsed)`` runs on the calling thread only, so calls
  never overlap (``elapsed``: seconds ``f(i)`` took).
* ``on_done`` backpressure: a worker takes its next partition once its
  result has been delivered, so at most one result per worker waits.
* Errors: every failing ``f(i)`` (and ``on_done``) is collected; the first
  one stops new partitions from starting (the failing worker stops the run
  at once); the run waits for the running ones, then raises all of them as
  one ``ExceptionGroup`` (``BaseExceptionGroup`` when ``f`` raised
  ``SystemExit``; a ``KeyboardInterrupt`` in ``f`` is raised as itself).
* Lifetime: a run joins every one of its threads before it returns, so a
  runner holds no threads between runs and may run again. A Ctrl-C in the
  driver starts nothing new and returns at once; workers finish their
  current partition in the background (daemon threads) and exit.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from chunkgraph._errors import ConfigError, UsageError
from chunkgraph._numa import allowed_cpus
from chunkgraph._util import as_int
from chunkgraph.parallel._activation import Activation, ActivationEvent, plot_timeline
from chunkgraph.parallel._pool import WorkStealingPool, local_pool
from chunkgraph.parallel._signals import ProcessSignals, Sampler
from chunkgraph.parallel._topology import Topology

T = TypeVar("T")
R = TypeVar("R")

# The driver checks activation at least this often while nothing completes.
# Shorter ramps faster but gives the signals shorter windows (noisier); the
# sampler ignores checks less than 0.1 s apart anyway.
POLL_INTERVAL_S = 0.25
# Default workers per node, per CPU of the node. The initial activation
# (a quarter) is then one worker per CPU, so a CPU-bound stage is at full
# occupancy from the start, while an I/O-bound one can grow to four per CPU.
DEFAULT_WORKERS_PER_CPU = 4
# How often a worker waiting for its result's delivery checks that the run is
# not over (a Ctrl-C ends it without delivering).
DELIVERY_CHECK_S = 0.5


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    item: T
    result: Any
    error: BaseException | None
    elapsed: float
    # Set once the driver has handed the result to on_done: the worker waits for
    # it before taking another partition, so results never pile up behind a
    # slow on_done (at most one undelivered result per worker).
    delivered: threading.Event = field(default_factory=threading.Event)


class _Run(Generic[T]):
    """State shared by one run's threads; every field is read and written under ``lock``."""

    def __init__(self, order: list[T]) -> None:
        self.lock = threading.Lock()
        self.queue: deque[T] = deque(order)
        self.started = 0
        self.stopping = False  # a failure or the end: start nothing new
        self.over = False  # the run is over: dormant workers exit when woken
        self.setup_errors: list[Exception] = []  # a worker that could not be pinned
        self.done: queue.SimpleQueue[_Done[T]] = queue.SimpleQueue()

    def take(self) -> tuple[T] | None:
        with self.lock:
            if self.stopping or not self.queue:
                return None
            self.started += 1
            return (self.queue.popleft(),)

    def remaining(self) -> int:
        with self.lock:
            return 0 if self.stopping else len(self.queue)

    def settled(self, finished: int) -> bool:
        with self.lock:
            return finished == self.started and (self.stopping or not self.queue)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True

    def broken(self, error: Exception) -> None:
        with self.lock:
            self.setup_errors.append(error)
            self.stopping = True


class _NodeController(Generic[T]):
    """One node's workers, all started dormant, woken through one activation channel."""

    def __init__(
        self,
        index: int,
        cpus: frozenset[int] | None,
        cap: int,
        pool: WorkStealingPool | None,
        run: _Run[T],
        f: Callable[[T], Any],
    ) -> None:
        self.cpus = cpus  # None: do not pin
        self.pool = pool
        self.run = run
        self.f = f
        self.channel = threading.Semaphore(0)
        self.threads: list[threading.Thread] = []
        self._alive = 0  # workers not yet exited; the last one out closes the node pool
        self._alive_lock = threading.Lock()
        try:
            for k in range(cap):
                thread = threading.Thread(
                    target=self._work, name=f"chunkgraph-node{index}-{k}", daemon=True
                )
                with self._alive_lock:
                    self._alive += 1
                try:
                    thread.start()
                except BaseException:
                    with self._alive_lock:
                        self._alive -= 1
                    raise
                self.threads.append(thread)
        except BaseException:  # e.g. "can't start new thread": the started ones must exit
            with run.lock:
                run.stopping = run.over = True
            self.end()
            self.join()
            if not self.threads and pool is not None:
                pool.close()  # no worker was there to close it
            raise

    def activate(self, count: int) -> None:
        if count > 0:
            self.channel.release(count)

    def end(self) -> None:
        """Wake every dormant worker; ``run.over`` is set, so they exit."""
        self.channel.release(len(self.threads))

    def join(self) -> None:
        for thread in self.threads:
            thread.join()

    def _work(self) -> None:
        try:
            self._serve()
        finally:
            with self._alive_lock:
                self._alive -= 1
                last = self._alive == 0
            if last and self.pool is not None:
                # Also after a Ctrl-C, when nobody joins: the node pool's threads end.
                self.pool.close()

    def _serve(self) -> None:
        if self.cpus is not None:
            try:
                os.sched_setaffinity(0, self.cpus)  # pid 0: this thread only
            except OSError as pin_error:  # CPUs taken away since the runner checked them
                pin_error.add_note(f"pinning a worker to CPUs {sorted(self.cpus)}")
                self.run.broken(pin_error)
                return
        self.channel.acquire()
        with self.run.lock:
            if self.run.over:
                return
        scope = local_pool(self.pool) if self.pool is not None else contextlib.nullcontext()
        with scope:
            while (taken := self.run.take()) is not None:
                item = taken[0]
                begin = time.perf_counter()
                try:
                    result, error = self.f(item), None
                except BaseException as caught:  # reported to the driver, which raises
                    result, error = None, caught
                    self.run.stop()  # now, not when the driver gets to it: start nothing new
                done = _Done(item, result, error, time.perf_counter() - begin)
                del result
                self.run.done.put(done)
                while not done.delivered.wait(DELIVERY_CHECK_S):
                    with self.run.lock:
                        if self.run.over:
                            return


class PartitionRunner:
    """Runs ``f(i)`` for every partition with adaptively activated workers per NUMA node.

    Args:
        topology: The nodes; None: ``Topology.detect()``.
        workers_per_node: Each node's most workers; None: ``DEFAULT_WORKERS_PER_CPU``
            per CPU of the node.
        subscribers: Callables given each ``ActivationEvent`` as it is recorded (on the
            calling thread).
        sampler: The CPU and I/O signal source, for tests; None: a fresh
            ``ProcessSignals`` per run.
        poll_interval: Seconds between activation checks while nothing completes (> 0).

    Raises:
        ConfigError: For a topology that is not one, ``workers_per_node`` below 1, a
            poll interval that is not positive, or NUMA CPUs that cannot be pinned.

    >>> done = []
    >>> with PartitionRunner(Topology.of([0]), workers_per_node=2) as runner:
    ...     runner.run([3, 1, 2], lambda i: i * i, lambda i, r, s: done.append(r))
    >>> sorted(done)
    [1, 4, 9]
    """

    def __init__(
        self,
        topology: Topology | None = None,
        workers_per_node: int | None = None,
        *,
        subscribers: Sequence[Callable[[ActivationEvent], object]] = (),
        sampler: Sampler | None = None,
        poll_interval: float = POLL_INTERVAL_S,
    ) -> None:
        self.topology = Topology.detect() if topology is None else topology
        if not isinstance(self.topology, Topology):
            raise ConfigError(
                f"topology must be a Topology (Topology.detect() or Topology.of([0, 1], [2, 3])) "
                f"or None, got {topology!r}"
            )
        if workers_per_node is None:
            self.caps = tuple(DEFAULT_WORKERS_PER_CPU * n for n in self.topology.sizes)
        else:
            cap = as_int(workers_per_node, "workers_per_node")
            if cap < 1:
                raise ConfigError(f"workers_per_node must be >= 1 or None, got {cap}")
            self.caps = (cap,) * len(self.topology.nodes)
        if self.topology.is_numa:
            _check_pinnable(self.topology)
        if not poll_interval > 0:
            raise ConfigError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        self.subscribers = tuple(subscribers)
        self._sampler = sampler
        self._poll = poll_interval
        self._timeline: list[ActivationEvent] = []
        self._busy = False
        self._guard = threading.Lock()
        self._closed = False

    @property
    def timeline(self) -> list[ActivationEvent]:
        """The last run's activation events: the start, then one per accepted check."""
        return list(self._timeline)

    def run(
        self,
        order: Iterable[T],
        f: Callable[[T], R],
        on_done: Callable[[T, R, float], object] | None = None,
    ) -> None:
        """Run ``f(i)`` for each ``i`` of ``order`` (taken in that order); see the module doc.

        Args:
            order: The partitions, taken in this order from one shared queue.
            f: Called on a worker with one partition; its result goes to ``on_done``.
            on_done: Called on the calling thread as ``on_done(i, result, elapsed)``
                for each finished partition; None: results are dropped.

        Raises:
            ExceptionGroup: Of every failing ``f(i)`` and ``on_done`` call.
            UsageError: When the runner is closed or already running.
        """
        if self._closed:
            raise UsageError("this PartitionRunner is closed; make a new one")
        with self._guard:  # checked and set at once: two threads never both run
            if self._busy:
                raise UsageError("PartitionRunner.run is already running; one run at a time")
            self._busy = True
        try:
            items = list(order)
            self._timeline = []
            if items:
                self._run(items, f, on_done)
        finally:
            self._busy = False

    def _run(
        self, items: list[T], f: Callable[[T], R], on_done: Callable[[T, R, float], object] | None
    ) -> None:
        state = _Run(items)
        activation = Activation(
            self.caps,
            self._sampler or ProcessSignals(),
            self._emit,
            cpus=sum(self.topology.sizes),
        )
        self._timeline = activation.timeline
        numa = self.topology.is_numa
        controllers: list[_NodeController[T]] = []
        errors: list[BaseException] = []
        try:
            for n, (cpus, cap) in enumerate(zip(self.topology.nodes, self.caps, strict=True)):
                pool = WorkStealingPool(len(cpus), cpus=cpus) if numa else None
                controllers.append(_NodeController(n, cpus if numa else None, cap, pool, state, f))
            self._drive(state, activation, controllers, on_done, errors)
        except BaseException as error:
            # A Ctrl-C returns at once: running partitions finish in the background.
            self._end(state, controllers, join=isinstance(error, Exception))
            raise
        self._end(state, controllers, join=True)
        errors.extend(state.setup_errors)
        interrupts = [e for e in errors if isinstance(e, KeyboardInterrupt)]
        if interrupts:  # a Ctrl-C inside f is the user's: raised as such
            others = len(errors) - 1
            if others:
                interrupts[0].add_note(f"{others} other partition(s) failed too")
            raise interrupts[0]
        if errors:
            # SystemExit from f is a failure of f(i), not the end of this program:
            # grouped with the rest (a BaseExceptionGroup only when such are in it).
            raise BaseExceptionGroup(
                f"PartitionRunner.run over {len(items)} partitions: {len(errors)} failed", errors
            )

    def _drive(
        self,
        state: _Run[T],
        activation: Activation,
        controllers: list[_NodeController[T]],
        on_done: Callable[[T, Any, float], object] | None,
        errors: list[BaseException],
    ) -> None:
        for controller, count in zip(controllers, activation.initial(), strict=True):
            controller.activate(count)
        finished = 0
        while not state.settled(finished):
            try:
                done: _Done[T] | None = state.done.get(timeout=self._poll)
            except queue.Empty:
                done = None
            if done is not None:
                finished += 1
                self._deliver(done, on_done, errors, state)
            added = activation.check(state.remaining())
            for controller, count in zip(controllers, added, strict=True):
                controller.activate(count)

    @staticmethod
    def _deliver(
        done: _Done[T],
        on_done: Callable[[T, Any, float], object] | None,
        errors: list[BaseException],
        state: _Run[T],
    ) -> None:
        error = done.error
        try:
            if error is None and on_done is not None:
                try:
                    on_done(done.item, done.result, done.elapsed)
                except Exception as caught:
                    caught.add_note(f"raised by on_done for partition {done.item!r}")
                    error = caught
            elif error is not None:
                error.add_note(f"raised by f({done.item!r})")
        finally:
            done.delivered.set()  # the worker may take its next partition
        if error is None:
            return
        state.stop()  # a failure: start no new partition
        errors.append(error)

    @staticmethod
    def _end(state: _Run[T], controllers: list[_NodeController[T]], *, join: bool) -> None:
        with state.lock:
            state.stopping = state.over = True
        while True:  # undelivered results: their workers stop waiting and exit
            try:
                state.done.get_nowait().delivered.set()
            except queue.Empty:
                break
        for controller in controllers:
            controller.end()
        if join:
            for controller in controllers:
                controller.join()

    def _emit(self, event: ActivationEvent) -> None:
        for subscriber in self.subscribers:
            subscriber(event)

    def plot(self, path: str | Path) -> Path:
        """Draw the last run's timeline (active workers per node; CPU and I/O) as a PNG.

        Args:
            path: The PNG file written.

        Returns:
            The path written.
        """
        return plot_timeline(self._timeline, path)

    def close(self) -> None:
        """Refuse further runs. A runner holds no threads between runs, so nothing to join."""
        self._closed = True

    def __enter__(self) -> PartitionRunner:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionRunner({self.topology!r}, workers per node {list(self.caps)})"


def _check_pinnable(topology: Topology) -> None:
    allowed = allowed_cpus()
    outside = sorted(set().union(*topology.nodes) - allowed)
    if outside or not hasattr(os, "sched_setaffinity"):
        raise ConfigError(
            f"cannot pin workers to CPUs {outside or sorted(set().union(*topology.nodes))}: "
            f"this process may run on {sorted(allowed)} only"
            + ("" if hasattr(os, "sched_setaffinity") else " and cannot pin threads here")
            + "; use Topology.detect() or nodes within those CPUs"
        )
