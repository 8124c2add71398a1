"""The scheduler: a pure state machine over task ids. No threads, no I/O, no clock.

An executor drives it: ``take()`` tasks to run, report each outcome with
``finish()`` or ``fail()``, repeat until ``finished``. Every method mutates the
state and must be called under the executor's lock (or from one thread).

State (arrays indexed by task id, as Python lists for speed):

    state[t]      TaskState (WAITING -> READY -> RUNNING -> DONE | FAILED,
                  RUNNING -> READY again when a failed try is retried)
    waiting[t]    dependencies of t not yet DONE; t becomes READY at 0
    consumers[t]  needed dependents of t not yet DONE; at 0 t's result is
                  released (dropped), unless t is a target
    results[t]    t's result while someone still needs it, else None
    ready         min-heap of priorities (see planning.order); a priority is
                  mapped back to its task by ``by_priority``

    take(k) ──> RUNNING ──finish(t, value)──> DONE: dependents' waiting -= 1,
      ^                                             dependencies' consumers -= 1
      |                 ──fail(t, error)────> attempts <= retries ? READY (heap)
      +-- ready heap <──────────────────────────────────── : FAILED, stop

Only the tasks that the targets need are run. After the first task fails for
good (or ``cancel()``), ``take()`` returns nothing; the run is ``finished`` when
every needed task is DONE, or when it is stopping and nothing is RUNNING.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from chunkgraph.graph import Graph, needed_mask


class TaskState(enum.IntEnum):
    WAITING = 0
    READY = 1
    RUNNING = 2
    DONE = 3
    FAILED = 4
    SKIPPED = 5  # not needed by the targets


class Scheduler:
    """Decides which task runs next and what a finished or failed task unblocks.

    >>> g = Graph()
    >>> a = g.add(abs, -1)
    >>> b = g.add(abs, a)
    >>> s = Scheduler(g, targets=[b.id], priority=np.arange(2))
    >>> s.take(8)
    [0]
    >>> s.finish(0, 1)  # one task became ready
    1
    >>> s.take(8)
    [1]
    >>> _ = s.finish(1, 1)
    >>> s.finished, s.results[0], s.results[1]
    (True, None, 1)
    """

    def __init__(
        self,
        graph: Graph,
        targets: Sequence[int],
        priority: npt.NDArray[np.int64],
        retries: int = 0,
    ) -> None:
        n = len(graph)
        self.graph = graph
        self.retries = retries
        needed = needed_mask(graph, targets)
        dep_ptr, dep_idx = graph.dependencies()
        out_ptr, out_idx = graph.dependents()
        self._dep_ptr, self._dep_idx = dep_ptr.tolist(), dep_idx.tolist()
        self._out_ptr, self._out_idx = out_ptr.tolist(), out_idx.tolist()
        # Consumers outside the needed set never run, so they never release anything.
        needed_consumers = np.bincount(dep_idx[np.repeat(needed, np.diff(dep_ptr))], minlength=n)
        keep = np.zeros(n, dtype=bool)
        keep[np.asarray(targets, dtype=np.int64)] = True
        self.keep = keep.tolist()
        self.consumers: list[int] = needed_consumers[:n].tolist()
        self.waiting: list[int] = np.diff(dep_ptr).tolist()
        self.needed: list[bool] = needed.tolist()
        self.state = bytearray(
            np.where(needed, TaskState.WAITING, TaskState.SKIPPED).astype(np.uint8)
        )
        self.results: list[Any] = [None] * n
        self.attempts: dict[int, int] = {}
        self.failures: dict[int, BaseException] = {}
        self.by_priority: list[int] = np.argsort(priority).tolist()
        prio = priority.tolist()
        self._priority = prio
        roots = np.flatnonzero(needed & (np.diff(dep_ptr) == 0))
        self.ready: list[int] = sorted(prio[t] for t in roots.tolist())
        for t in roots.tolist():
            self.state[t] = TaskState.READY
        self.total = int(needed.sum())
        self.done = 0
        self.running = 0
        self.stopping = False

    @property
    def finished(self) -> bool:
        return self.done == self.total or (self.stopping and self.running == 0)

    def take(self, k: int) -> list[int]:
        """Up to ``k`` READY tasks, highest priority first, now RUNNING (none once stopping)."""
        if self.stopping or not self.ready:
            return []
        ready, by_priority, state = self.ready, self.by_priority, self.state
        batch = [by_priority[heapq.heappop(ready)] for _ in range(min(k, len(ready)))]
        for t in batch:
            state[t] = TaskState.RUNNING
        self.running += len(batch)
        return batch

    def finish(self, t: int, value: Any) -> int:
        """Record ``t``'s result; returns how many tasks became READY."""
        self.state[t] = TaskState.DONE
        self.running -= 1
        self.done += 1
        results = self.results
        if self.keep[t] or self.consumers[t]:
            results[t] = value
        consumers, keep = self.consumers, self.keep
        for d in self._dep_idx[self._dep_ptr[t] : self._dep_ptr[t + 1]]:
            consumers[d] -= 1
            if consumers[d] == 0 and not keep[d]:
                results[d] = None  # t was the last consumer: release
        unblocked = 0
        waiting, needed = self.waiting, self.needed
        for c in self._out_idx[self._out_ptr[t] : self._out_ptr[t + 1]]:
            waiting[c] -= 1
            if waiting[c] == 0 and needed[c]:
                self.state[c] = TaskState.READY
                heapq.heappush(self.ready, self._priority[c])
                unblocked += 1
        return unblocked

    def fail(self, t: int, error: BaseException) -> bool:
        """Record a failed try of ``t``; True if it is READY again for another try."""
        self.running -= 1
        tries = self.attempts.get(t, 0) + 1
        self.attempts[t] = tries
        if tries <= self.retries and not self.stopping:
            self.state[t] = TaskState.READY
            heapq.heappush(self.ready, self._priority[t])
            return True
        self.state[t] = TaskState.FAILED
        self.failures[t] = error
        self.stopping = True
        return False

    def put_back(self, tasks: Iterable[int]) -> None:
        """Return taken tasks that were never started to the ready heap."""
        for t in tasks:
            self.running -= 1
            self.state[t] = TaskState.READY
            heapq.heappush(self.ready, self._priority[t])

    def cancel(self) -> None:
        """Start nothing more; tasks already RUNNING may still report."""
        self.stopping = True

    def attempt(self, t: int) -> int:
        """The 1-based number of the try that ``t`` is on (or was last on)."""
        return self.attempts.get(t, 0) + (self.state[t] != TaskState.FAILED)

    def cancelled(self) -> list[int]:
        """Needed tasks that did not run because the run stopped."""
        state = self.state
        return [t for t in range(len(state)) if state[t] in (TaskState.WAITING, TaskState.READY)]
