"""A persistent work-stealing thread pool for fork-join loops.

Policy. ``workers`` counts every thread that works on a loop, the calling
thread included: the pool starts ``workers - 1`` helper threads and the
thread that calls ``join`` (a helper, or any other thread that entered with
`WorkStealingPool.participate`) does its share. Each participant owns a
deque of jobs:

    participant A                 participant B (idle)
    +--------------------+        +------------------+
    | oldest ... newest  | <----- | steals oldest    |   FIFO steal: big ranges
    +--------------------+        +------------------+
              ^ push / pop newest (LIFO): small, cache-warm ranges

``join(left, right)`` pushes ``right`` on the caller's deque, runs ``left``
inline, then pops ``right`` back and runs it inline unless it was stolen. A
caller whose ``right`` was stolen does not block idly: it steals and runs
other jobs until ``right`` is done, so nested loops, and loops started from
threads outside the pool, never deadlock. Because thieves take the oldest
job first, a stolen ``right`` means every older job of that deque was stolen
too, so a waiting caller's own deque is empty and helping cannot run a frame
that its own stack is waiting for.

State.
* ``_participants``: tuple of registered participants (copy-on-write under
  ``_lock``, so thieves scan a snapshot without locking).
* ``_sleepers``: participants parked on their ``wake`` event (under ``_lock``).
  A push wakes one sleeper; a stolen job's completion wakes its owner.
* per participant: ``deque`` (touched lock-free: deque append/pop/popleft are
  atomic), ``wake`` (threading.Event), ``stats`` (plain ints written only by
  the owning thread; `WorkStealingPool.stats` sums them).

The process-wide pool is created on first use (`get_pool`), sized to the
usable cores (``len(os.sched_getaffinity(0))``); `set_workers` replaces it.
A forked child starts without one (its parent's threads do not exist there).
A pool made with ``cpus`` (a NUMA node's pool) pins its helpers there, and
`get_pool` returns it instead inside its helpers and inside `local_pool`.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

from chunkgraph._errors import ConfigError, UsageError
from chunkgraph._util import usable_cores
from chunkgraph.parallel._splitter import LengthSplitter

A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

# A parked participant re-checks for work this often even when nobody wakes
# it. Wake-ups are explicit, so this only bounds the cost of a missed one;
# shorter wastes CPU on idle pools, longer would let a missed wake-up stall.
SLEEP_TIMEOUT_S = 0.05

# Probes timed once per pool, when it starts: more average out scheduling
# noise but make starting a pool slower (about 1 ms as set).
_HANDOFF_PROBES = 15
_FORK_PROBE_LEAVES = 64
_FORK_PROBE_REPEATS = 5


@dataclass(frozen=True)
class PoolStats:
    """Counters summed over all participants, ever.

    Attributes:
        forks: ``join`` calls.
        inline: Right halves popped back and run by the thread that pushed them.
        steals: Jobs run by another thread.
        rearms: Stolen loop ranges whose splitter was re-armed.
        resplits: Stolen ranges that were then split again.
    """

    forks: int = 0
    inline: int = 0
    steals: int = 0
    rearms: int = 0
    resplits: int = 0

    def __sub__(self, other: PoolStats) -> PoolStats:
        return PoolStats(
            *(getattr(self, f.name) - getattr(other, f.name) for f in fields(PoolStats))
        )


class _Counters:
    """Mutable per-participant counters; written only by the owning thread."""

    __slots__ = ("forks", "inline", "rearms", "resplits", "steals")

    def __init__(self) -> None:
        self.forks = self.inline = self.steals = self.rearms = self.resplits = 0

    def snapshot(self) -> PoolStats:
        return PoolStats(self.forks, self.inline, self.steals, self.rearms, self.resplits)


class _Participant:
    __slots__ = ("deque", "name", "stats", "wake")

    def __init__(self, name: str) -> None:
        self.name = name
        self.deque: deque[_Job[Any]] = deque()
        self.wake = threading.Event()
        self.stats = _Counters()


class _Job(Generic[T]):
    """A pushed right half: run exactly once by whoever pops it."""

    __slots__ = ("done", "error", "fn", "owner", "value")

    def __init__(self, fn: Callable[[bool], T], owner: _Participant) -> None:
        self.fn = fn
        self.owner = owner
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self, by: _Participant) -> None:
        stolen = by is not self.owner
        if stolen:
            by.stats.steals += 1
        try:
            self.value = self.fn(stolen)
        except BaseException as error:  # re-raised in the joining thread
            self.error = error
        self.done = True
        if stolen:
            self.owner.wake.set()

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class WorkStealingPool:
    """Fork-join thread pool with per-participant deques and stealing.

    Args:
        workers: Helper threads; None: one per usable core.
        cpus: Pin the helper threads to these CPUs (Linux) and make this the pool that
            loops nested in its jobs use (see ``local_pool``); None: not pinned.

    >>> pool = WorkStealingPool(workers=2)
    >>> with pool.participate():
    ...     pool.join(lambda stolen: 1 + 1, lambda stolen: "right")
    (2, 'right')
    >>> pool.close()
    """

    def __init__(self, workers: int | None = None, cpus: Collection[int] | None = None) -> None:
        """``cpus``: pin the helper threads to these CPUs (Linux) and make this the
        pool that loops nested in its jobs use (see `local_pool`)."""
        if workers is None:
            workers = usable_cores()
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(
                f"workers must be a positive int or None (all cores); got {workers!r}"
            )
        self.workers = workers
        self._cpus = None if cpus is None else frozenset(cpus)
        self._lock = threading.Lock()
        self._participants: tuple[_Participant, ...] = ()
        self._sleepers: list[_Participant] = []
        self._retired = PoolStats()
        self._local = threading.local()
        self._closed = False
        self._overheads: tuple[float, float] | None = None  # (dispatch, hand-off)
        self._threads = [
            threading.Thread(
                target=self._work, args=(i,), name=f"chunkgraph-steal-{i}", daemon=True
            )
            for i in range(1, workers)
        ]
        for thread in self._threads:
            # Daemon: an idle pool must not keep the interpreter alive at exit.
            thread.daemon = True
            thread.start()
        # Measure overheads now, while the helpers are idle: measured later,
        # from inside a running loop, busy helpers would inflate them.
        self._measured()
        self._reset_counters()

    # -- participation -------------------------------------------------------
    def _register(self, me: _Participant) -> None:
        with self._lock:
            self._participants = (*self._participants, me)
        self._local.participant = me

    def _unregister(self, me: _Participant) -> None:
        with self._lock:
            self._participants = tuple(p for p in self._participants if p is not me)
            self._retired = _add(self._retired, me.stats.snapshot())
        self._local.participant = None

    @contextlib.contextmanager
    def participate(self) -> Iterator[None]:
        """Let the current thread call `join` (re-entrant; helpers always may)."""
        if getattr(self._local, "participant", None) is not None:
            yield
            return
        if self._closed:
            raise UsageError("this WorkStealingPool is closed; use get_pool() for a live one")
        me = _Participant(threading.current_thread().name)
        self._register(me)
        try:
            yield
        finally:
            self._unregister(me)

    def _me(self) -> _Participant:
        me: _Participant | None = getattr(self._local, "participant", None)
        if me is None:
            raise UsageError(
                "WorkStealingPool.join was called from a thread that has not entered the pool; "
                "wrap the call in `with pool.participate():`"
            )
        return me

    # -- fork-join -----------------------------------------------------------
    def join(
        self,
        left: Callable[[bool], A],
        right: Callable[[bool], B],
        abort: Callable[[], None] | None = None,
    ) -> tuple[A, B]:
        """Run ``left(False)`` here and ``right(stolen)`` here or on a thief; both results.

        If either raises, both have finished before the error propagates
        (``left``'s error first). ``abort`` is called first when ``left`` is
        interrupted (Ctrl-C, SystemExit), so ``right`` can skip its work.

        Args:
            left: Run here, given False.
            right: Queued for a thief; given True when a thief runs it, False when it runs
                here.
            abort: Called when ``left`` is interrupted, before waiting for ``right``;
                None: nothing.

        Raises:
            UsageError: When the calling thread has not entered the pool
                (``pool.participate()``).
        """
        me = self._me()
        job = _Job(right, me)
        me.deque.append(job)
        me.stats.forks += 1
        self._wake_one()
        try:
            value = left(False)
        except BaseException as error:
            if abort is not None and not isinstance(error, Exception):
                abort()
            raise
        finally:
            self._reclaim(me, job)
        return value, job.result()

    def _reclaim(self, me: _Participant, job: _Job[Any]) -> None:
        try:
            top = me.deque.pop()
        except IndexError:
            top = None
        if top is job:
            me.stats.inline += 1
            job.run(me)
            return
        if top is not None:  # not expected (see docstring); keep it runnable
            me.deque.append(top)
        self._help_until(me, job)

    def _help_until(self, me: _Participant, job: _Job[Any]) -> None:
        while not job.done:
            other = self._find_work(me)
            if other is not None:
                other.run(me)
            else:
                self._sleep(me, lambda: job.done)
        if self._sleepers and self._has_work():
            self._wake_one()  # pass on a wake-up this thread may have consumed

    def _find_work(self, me: _Participant) -> _Job[Any] | None:
        try:
            return me.deque.pop()
        except IndexError:
            pass
        victims = self._participants
        count = len(victims)
        # Start the scan at a different victim per thief so thieves spread out.
        first = (id(me) >> 4) % count if count else 0
        for k in range(count):
            victim = victims[(first + k) % count]
            if victim is me:
                continue
            try:
                return victim.deque.popleft()
            except IndexError:
                continue
        return None

    def _has_work(self) -> bool:
        return any(p.deque for p in self._participants)

    def _sleep(self, me: _Participant, ready: Callable[[], bool]) -> None:
        me.wake.clear()
        with self._lock:
            self._sleepers.append(me)
        try:
            # Re-check after registering: a push or completion that happened
            # before registration did not see us, so we must not wait for it.
            if not (ready() or self._has_work()):
                me.wake.wait(SLEEP_TIMEOUT_S)
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._sleepers.remove(me)

    def _wake_one(self) -> None:
        if not self._sleepers:  # unlocked peek: a stale answer costs one timeout at worst
            return
        with self._lock:
            if self._sleepers:
                self._sleepers.pop().wake.set()

    def _work(self, index: int) -> None:
        if self._cpus is not None:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, self._cpus)  # pid 0: this thread only
            _local_pool.set(self)
        me = _Participant(f"chunkgraph-steal-{index}")
        self._register(me)
        try:
            while not self._closed:
                job = self._find_work(me)
                if job is not None:
                    job.run(me)
                else:
                    self._sleep(me, lambda: self._closed)
        finally:
            self._unregister(me)

    # -- observation and lifetime --------------------------------------------
    def count(self, counter: str, amount: int = 1) -> None:
        """Add to one of the calling participant's loop counters (``rearms``, ``resplits``).

        Args:
            counter: ``"rearms"`` or ``"resplits"``.
            amount: How much to add.
        """
        if counter not in ("rearms", "resplits"):
            raise ConfigError(f"unknown pool counter {counter!r}; valid: 'rearms', 'resplits'")
        me = self._me()
        setattr(me.stats, counter, getattr(me.stats, counter) + amount)

    def stats(self) -> PoolStats:
        """Counters summed over every participant this pool has had."""
        with self._lock:
            total = self._retired
            for p in self._participants:
                total = _add(total, p.stats.snapshot())
        return total

    def _reset_counters(self) -> None:
        # Only between loops: every job has finished, so no thread is counting.
        with self._lock:
            self._retired = PoolStats()
            for p in self._participants:
                p.stats = _Counters()

    def dispatch_overhead(self) -> float:
        """Seconds of the caller's time one loop piece costs: fork, push, pop, join.

        Measured once, when the pool starts: a loop of ``_FORK_PROBE_LEAVES``
        empty pieces, fastest of ``_FORK_PROBE_REPEATS`` runs, per piece (this
        is CPU work: other load only adds to it, so the minimum is the cost).
        """
        return self._measured()[0]

    def handoff_latency(self) -> float:
        """Seconds from pushing a job until a thief has run it and woken the owner.

        Measured once, when the pool starts: the lower quartile of ``_HANDOFF_PROBES``
        no-op hand-offs. It is paid in wall time, not in the owner's work, by
        each steal; a loop must be long enough to hide it. A loaded machine
        measures longer hand-offs, so fewer short loops go parallel. 0 with
        one worker.
        """
        return self._measured()[1]

    def _measured(self) -> tuple[float, float]:
        if self._overheads is None:
            if self.workers == 1:
                self._overheads = (0.0, 0.0)
            else:
                with self.participate():
                    forks = sorted(self._time_fork_tree() for _ in range(_FORK_PROBE_REPEATS))
                    hands = sorted(self._time_handoff() for _ in range(_HANDOFF_PROBES))
                # Lower quartile: a burst of load while the pool starts must
                # not make every later loop in the process overly cautious.
                self._overheads = (forks[0] / _FORK_PROBE_LEAVES, hands[len(hands) // 4])
        return self._overheads

    def _time_fork_tree(self) -> float:
        # The same work per piece as a loop: split a range with a splitter,
        # fork, and time and record each leaf; only the body is empty.
        timings: list[tuple[int, float]] = []

        def piece(start: int, stop: int, splitter: LengthSplitter) -> None:
            cut = splitter.split(start, stop)
            if cut is None:
                begin = time.perf_counter()
                timings.append((stop - start, time.perf_counter() - begin))
                return
            mid, child = cut
            self.join(lambda _s: piece(start, mid, splitter), lambda _s: piece(mid, stop, child))

        leaves = _FORK_PROBE_LEAVES
        begin = time.perf_counter()
        piece(0, leaves, LengthSplitter(self.workers, 1, splits=leaves - 1))
        return time.perf_counter() - begin

    def _time_handoff(self) -> float:
        me = self._me()
        job: _Job[None] = _Job(lambda _stolen: None, me)
        me.wake.clear()
        begin = time.perf_counter()
        me.deque.append(job)
        self._wake_one()
        # Wait without helping, so that a thief has to take the job.
        while not job.done and me.wake.wait(SLEEP_TIMEOUT_S):
            me.wake.clear()
        if not job.done:  # every helper is busy: take the job back
            self._reclaim(me, job)
        return time.perf_counter() - begin

    def close(self) -> None:
        """Stop the helper threads (after the jobs they are running)."""
        self._closed = True
        with self._lock:
            sleepers, self._sleepers = self._sleepers, []
        for p in sleepers:
            p.wake.set()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"WorkStealingPool(workers={self.workers}, {state})"


def _add(a: PoolStats, b: PoolStats) -> PoolStats:
    return PoolStats(*(getattr(a, f.name) + getattr(b, f.name) for f in fields(PoolStats)))


_global_lock = threading.Lock()
_global_pool: WorkStealingPool | None = None
# A node-local pool that replaces the process-wide one for the current thread.
_local_pool: contextvars.ContextVar[WorkStealingPool | None] = contextvars.ContextVar(
    "chunkgraph_local_pool", default=None
)


@contextlib.contextmanager
def local_pool(pool: WorkStealingPool) -> Iterator[None]:
    """Inside this block, on this thread, `get_pool` returns ``pool``."""
    token = _local_pool.set(pool)
    try:
        yield
    finally:
        _local_pool.reset(token)


def get_pool() -> WorkStealingPool:
    """The process-wide pool, created on first use with one worker per usable core.

    Inside `local_pool` (a `PartitionRunner` worker on a NUMA node), that pool instead.
    """
    local = _local_pool.get()
    if local is not None:
        return local
    global _global_pool
    pool = _global_pool
    if pool is None:
        with _global_lock:
            if _global_pool is None:
                _global_pool = WorkStealingPool()
            pool = _global_pool
    return pool


def set_workers(workers: int | None) -> WorkStealingPool:
    """Replace the process-wide pool with one of ``workers`` (None: all usable cores).

    Loops already running finish on the old pool, whose helpers then exit.

    Args:
        workers: The new pool's helper threads; None: all usable cores.

    Returns:
        The new pool.
    """
    global _global_pool
    new = WorkStealingPool(workers)
    with _global_lock:
        old, _global_pool = _global_pool, new
    if old is not None:
        old.close()
    return new


def _forget_pool_after_fork() -> None:
    global _global_pool, _global_lock
    _global_pool = None
    _global_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)
