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
    ready[c]      per context, a min-heap of priorities (the plan's order); a
                  priority is mapped back to its task by ``by_priority``

    take(k, c) ─> RUNNING ──finish(t, value)──> DONE: dependents' waiting -= 1,
      ^                                              dependencies' consumers -= 1
      |                   ──fail(t, error)────> attempts <= retries and the error is
      |                                         not permanent (is_permanent) ? READY (heap)
      +-- ready[c] <─────────────────────────────────────── : FAILED, stop

Only the tasks that the targets need are run. After the first task fails for
good (or ``cancel()``), ``take()`` returns nothing; the run is ``finished`` when
every needed task is DONE, or when it is stopping and nothing is RUNNING.

Following a plan (a ``Placement``; without one there is a single context and
none of the following costs anything):

* **Contexts.** A ready task waits in its planned context's heap; a worker
  serving context c takes from ``ready[c]``.
* **Admission.** A task is taken only while its context's live memory (the
  ``memory`` of its running tasks plus the ``output`` of the results it holds)
  stays within the budget, and while its resources are free. The heap's head
  blocks the tasks behind it, so the plan's order holds; a context with
  nothing running admits its head whatever it needs (it can never fit better).
* **Steals.** A worker whose context has nothing ready steals from the context
  with the most ready tasks (two at least: a context's only ready task is its
  own next, and taking it would only bounce work back and forth) that it can
  run: the whole subgraph of the first one when none of that subgraph has
  started, else that task alone. Stolen tasks move to the thief's context
  (``steals`` counts them). A context whose head waits for memory steals
  nothing: the stolen work would wait too.
* **Fused chains.** ``claim_next(t)`` hands the task fused after ``t`` to the
  worker that ran ``t``: when ``finish(t)`` makes it ready it goes straight to
  RUNNING instead of into a heap.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import is_permanent
from chunkgraph.execute._placement import Placement
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

    Args:
        graph: The graph run.
        targets: The ids of the tasks whose results are kept; only what they need runs.
        priority: One int per task id, lower taken first (``planning.order``).
        retries: Extra tries of a failed task.
        placement: Where each task is planned (contexts, subgraphs, fused chains,
            memory budgets) for a multi-context plan; None: one context, no admission.

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
        placement: Placement | None = None,
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
        self.placement = placement
        contexts = len(placement.names) if placement is not None else 1
        self.heaps: list[list[int]] = [[] for _ in range(contexts)]
        self.ready = self.heaps[0]  # the only heap without a plan of several contexts
        self._multi = contexts > 1
        self._admit = placement is not None and placement.admit
        self._context: list[int] = placement.context if placement is not None else []
        self._chain_next: list[int] = placement.chain_next if placement is not None else []
        self.claimed = bytearray(n) if self._chain_next else bytearray()
        self.live = [0.0] * contexts  # bytes admitted per context (running + held)
        self.running_on = [0] * contexts
        self.in_use: list[dict[str, float]] = [{} for _ in range(contexts)]
        self.steals = 0
        self.stolen_tasks = 0
        # Told of each steal: (first task, from context, to context, tasks moved).
        self.on_steal: Callable[[int, int, int, int], None] | None = None
        roots = np.flatnonzero(needed & (np.diff(dep_ptr) == 0)).tolist()
        for t in roots:
            self.state[t] = TaskState.READY
            self.heaps[self._context[t] if self._multi else 0].append(prio[t])
        for heap in self.heaps:
            heapq.heapify(heap)
        self.total = int(needed.sum())
        self.done = 0
        self.running = 0
        self.stopping = False

    @property
    def finished(self) -> bool:
        return self.done == self.total or (self.stopping and self.running == 0)

    def ready_count(self, context: int = 0) -> int:
        """How many tasks wait in ``context``'s heap (stale entries of stolen ones included).

        Args:
            context: The context's index in the plan (0 without a placement).
        """
        return len(self.heaps[context])

    def take(self, k: int, context: int = 0) -> list[int]:
        """Up to ``k`` READY tasks of ``context``, highest priority first, now RUNNING
        (none once stopping); a context with none steals (see the module doc).

        Args:
            k: The most tasks to take.
            context: The context's index in the plan (0 without a placement).
        """
        if self.stopping:
            return []
        if not self._multi and not self._admit:
            ready = self.ready
            if not ready:
                return []
            by_priority, state = self.by_priority, self.state
            batch = [by_priority[heapq.heappop(ready)] for _ in range(min(k, len(ready)))]
            for t in batch:
                state[t] = TaskState.RUNNING
            self.running += len(batch)
            return batch
        batch = self._take_planned(k, context)
        # Steal only for a context with nothing ready: one whose head waits for memory
        # would leave the stolen work waiting too (and its owner would steal it back).
        if not batch and self._multi and not self.heaps[context] and self._steal(context):
            batch = self._take_planned(k, context)
        return batch

    def _take_planned(self, k: int, c: int) -> list[int]:
        heap, by_priority, state = self.heaps[c], self.by_priority, self.state
        where = self._context
        batch: list[int] = []
        while heap and len(batch) < k:
            t = by_priority[heap[0]]
            if state[t] != TaskState.READY or (self._multi and where[t] != c):
                heapq.heappop(heap)  # stale: stolen, or already taken from another heap
                continue
            if self._admit and not self._admits(t, c):
                break  # the head waits for memory or resources; the order holds
            heapq.heappop(heap)
            state[t] = TaskState.RUNNING
            batch.append(t)
            self._occupy(t, c)
        self.running += len(batch)
        return batch

    def _admits(self, t: int, c: int) -> bool:
        if self.running_on[c] == 0:
            return True  # nothing to wait for: it can never fit better
        p = self.placement
        assert p is not None
        if self.live[c] + p.memory[t] > p.budget[c]:
            return False
        needs = p.needs.get(t)
        if needs is not None:
            cap, used = p.capacity[c], self.in_use[c]
            for name, amount in needs.items():
                if name in cap and used.get(name, 0.0) + amount > cap[name]:
                    return False
        return True

    def _occupy(self, t: int, c: int) -> None:
        """Admission bookkeeping (only when admitting): ``t`` now runs on ``c``."""
        p = self.placement
        if p is None or not self._admit:
            return
        self.running_on[c] += 1
        self.live[c] += p.memory[t]
        needs = p.needs.get(t)
        if needs is not None:
            used = self.in_use[c]
            for name, amount in needs.items():
                used[name] = used.get(name, 0.0) + amount

    def _vacate(self, t: int) -> None:
        """Admission bookkeeping (only when admitting): ``t`` stopped running."""
        p = self.placement
        if p is None or not self._admit:
            return
        c = self._context[t] if self._multi else 0
        self.running_on[c] -= 1
        self.live[c] -= p.memory[t]
        needs = p.needs.get(t)
        if needs is not None:
            used = self.in_use[c]
            for name, amount in needs.items():
                used[name] -= amount

    def _steal(self, thief: int) -> bool:
        """Move ready work the thief can run from the most loaded context; True if any."""
        p = self.placement
        assert p is not None
        bit = 1 << thief
        by_priority, state, where = self.by_priority, self.state, self._context
        for victim in sorted(range(len(self.heaps)), key=lambda c: -len(self.heaps[c])):
            if victim == thief or len(self.heaps[victim]) < 2:
                continue  # one ready task is its own context's next: taking it only ping-pongs
            heap = self.heaps[victim]
            for prio in heapq.nsmallest(len(heap), heap):
                t = by_priority[prio]
                if state[t] != TaskState.READY or where[t] != victim or not p.can_run[t] & bit:
                    continue
                moved = self._move_subgraph(t, victim, thief)
                self.steals += 1
                self.stolen_tasks += moved
                if self.on_steal is not None:
                    self.on_steal(t, victim, thief, moved)
                return True
        return False

    def _move_subgraph(self, t: int, victim: int, thief: int) -> int:
        """Give ``t``'s whole subgraph to ``thief`` when none of it has started, else ``t``."""
        p = self.placement
        assert p is not None
        sid = p.subgraph[t]
        members = p.sub_idx[p.sub_ptr[sid] : p.sub_ptr[sid + 1]] if sid >= 0 else [t]
        state, where, bit = self.state, self._context, 1 << thief
        untouched = all(
            state[m] in (TaskState.WAITING, TaskState.READY) and where[m] == victim for m in members
        )
        moving = [m for m in members if p.can_run[m] & bit] if untouched else [t]
        for m in moving:
            where[m] = thief
            if state[m] == TaskState.READY:
                heapq.heappush(self.heaps[thief], self._priority[m])
        return len(moving)

    def claim_next(self, t: int) -> int:
        """The task fused after ``t``, now promised to the caller, or -1.

        The caller (the worker that just ran ``t``) runs it next and reports it
        after ``t``. Safe without the lock: only ``t``'s own report makes it ready.

        Args:
            t: The task the caller just ran.
        """
        if not self._chain_next or self.stopping:
            return -1
        nxt = self._chain_next[t]
        if nxt >= 0 and self.needed[nxt]:
            self.claimed[nxt] = 1
            return nxt
        return -1

    def unclaim(self, tasks: Iterable[int]) -> None:
        """Give back claims of tasks that will not be run as claimed.

        Args:
            tasks: Task ids claimed by ``claim_next``.
        """
        for t in tasks:
            if self.claimed and self.claimed[t] and self.state[t] == TaskState.WAITING:
                self.claimed[t] = 0

    def finish(self, t: int, value: Any) -> int:
        """Record ``t``'s result; returns how many tasks became READY.

        Args:
            t: The task's id (RUNNING).
            value: Its result, kept while a consumer or the targets need it.
        """
        self.state[t] = TaskState.DONE
        self.running -= 1
        self.done += 1
        if self._admit:
            self._vacate(t)
        results = self.results
        keep = self.keep
        held = keep[t] or self.consumers[t]
        if held:
            results[t] = value
        consumers = self.consumers
        admit = self._admit
        for d in self._dep_idx[self._dep_ptr[t] : self._dep_ptr[t + 1]]:
            consumers[d] -= 1
            if consumers[d] == 0 and not keep[d]:
                results[d] = None  # t was the last consumer: release
                if admit:
                    self._hold(d, -1)
        if admit and held:
            self._hold(t, 1)
        unblocked = 0
        waiting, needed = self.waiting, self.needed
        for c in self._out_idx[self._out_ptr[t] : self._out_ptr[t + 1]]:
            waiting[c] -= 1
            if waiting[c] == 0 and needed[c]:
                if self.claimed and self.claimed[c]:
                    self.claimed[c] = 0
                    self.state[c] = TaskState.RUNNING  # its claimer runs it: see claim_next
                    self.running += 1
                    self._occupy(c, self._context[c] if self._multi else 0)
                    continue
                self.state[c] = TaskState.READY
                heapq.heappush(
                    self.heaps[self._context[c] if self._multi else 0], self._priority[c]
                )
                unblocked += 1
        return unblocked

    def _hold(self, t: int, sign: int) -> None:
        p = self.placement
        assert p is not None
        self.live[self._context[t] if self._multi else 0] += sign * p.output[t]

    def fail(self, t: int, error: BaseException, *, retry: bool = True) -> bool:
        """Record a failed try of ``t``; True if it is READY again for another try (never
        when ``retry`` is False, nor for an error that fails every try: ``is_permanent``).

        Args:
            t: The task's id (RUNNING).
            error: What the try raised; kept as the task's failure when it is not retried.
            retry: False fails the task without another try.
        """
        self.running -= 1
        if self._admit:
            self._vacate(t)
        tries = self.attempts.get(t, 0) + 1
        self.attempts[t] = tries
        if retry and tries <= self.retries and not self.stopping and not is_permanent(error):
            self._push(t)
            return True
        self.state[t] = TaskState.FAILED
        self.failures[t] = error
        self.stopping = True
        return False

    def _push(self, t: int) -> None:
        self.state[t] = TaskState.READY
        heapq.heappush(self.heaps[self._context[t] if self._multi else 0], self._priority[t])

    def put_back(self, tasks: Iterable[int]) -> None:
        """Return taken tasks that were never started to their ready heap (a claimed task
        that never became RUNNING only loses its claim).

        Args:
            tasks: Task ids returned by ``take`` or ``claim_next``.
        """
        for t in tasks:
            if self.state[t] != TaskState.RUNNING:
                self.unclaim((t,))
                continue
            self.running -= 1
            if self.placement is not None:
                self._vacate(t)
            self._push(t)

    def cancel(self) -> None:
        """Start nothing more; tasks already RUNNING may still report."""
        self.stopping = True

    def attempt(self, t: int) -> int:
        """The 1-based number of the try that ``t`` is on (or was last on).

        Args:
            t: The task's id.
        """
        return self.attempts.get(t, 0) + (self.state[t] != TaskState.FAILED)

    def cancelled(self) -> list[int]:
        """Needed tasks that did not run because the run stopped."""
        state = self.state
        return [t for t in range(len(state)) if state[t] in (TaskState.WAITING, TaskState.READY)]
