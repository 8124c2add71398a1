"""Partitioning by merging along the critical path, then list scheduling ("merge").

After the ECMWF Cascade design notes: simulated workers take turns building
subgraphs (units of dispatch that run on one context), each grown from the
head of the longest remaining chain, until every unit is in one. The
subgraphs fix each unit's context; the list scheduler then orders the units
under the memory caps.

State of the partitioner (``_Partitioner``):

    free[c][i]     when worker i of context c is next free (start: 0); each
                   context has ``slots`` workers
    missing[u]     inputs of u not yet in a subgraph; u is *ready* at 0
    ready[c]       heap of the ready units c can run, by upward rank
    hinted[c]      the same for the roots ``assign_roots`` gave to c
    subgraph[u]    u's subgraph (-1: none yet); context[u] its context
    finish[u]      u's expected finish (its subgraph runs its units in id
                   order from its expected start)
    backlog[c]     seconds on c of the ready units tied to c (the only context
                   within MAX_GROWTH_SLOWDOWN of their fastest), by rank position

One turn:

    worker w = the one free first (ties: the context with the smaller mean
               seconds, then the lower index)
        |
    root     = the ready unit of highest upward rank that w's context c can
               run and would not finish sooner on another context (its first
               free worker, once through the ready work tied to it that ranks
               ahead: a GPU's queue of GPU-friendly units); among roots
               within LOCALITY_RANK_TOLERANCE of it, one ``assign_roots``
               gave to c. None: w is parked
               until the next subgraph is made (then free at that time)
        |
    grow     from the root by ready neighbours: consumers of a member, and
             the other inputs of such a consumer (siblings), in order of
             (seconds on c / mean seconds, bytes from other contexts,
             -(upward + downward rank), -memory, -seconds on c, the most
             recently reached, id); a unit is skipped when it would push the
             subgraph past its work target or its memory bound
        |
    start    = max(free, the time its last outside input arrives);
    free     = start + Σ seconds on c of its members

A subgraph only ever takes ready units, so each runs as one piece: all its
outside inputs come from subgraphs made before it.

Memory bound of a subgraph on one slot (a simple upper bound of running it
alone, in id order): max over members of (memory + bytes copied in from
other contexts) + Σ output_bytes of members, as if every result were held
until the subgraph ends. It must stay under memory_cap[c] / slots, the share
of one worker; the root alone may exceed it (the list scheduler, which
enforces the context's whole cap, decides whether it fits).

Work target of a subgraph: Σ_u mean seconds / (Σ slots × SUBGRAPHS_PER_WORKER),
at least its root. About four subgraphs per worker (Rayon and Blitz split
work the same way) leave the list scheduler room to even out the load,
while each subgraph is still worth dispatching as one piece.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chunkgraph.planning._assign import assign_roots
from chunkgraph.planning._list_schedule import descending, list_schedule
from chunkgraph.planning._problem import Problem
from chunkgraph.planning._rank import downward_rank, upward_rank
from chunkgraph.planning._schedule import Schedule

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Subgraphs per worker the work target aims at: more gives the list scheduler
# finer pieces to balance, fewer keeps more of each chain on one context.
SUBGRAPHS_PER_WORKER = 4
# Roots whose upward ranks are within this fraction of the best are treated as
# equal, and one that ``assign_roots`` gave to the worker's context wins.
LOCALITY_RANK_TOLERANCE = 0.01
# How many ready units a worker looks at, best rank first, for a root it
# should run (the rest are better placed on another context). Bounds a turn.
ROOT_SCAN_LIMIT = 16
# A subgraph grows only into units that its context runs at most this much
# slower than their fastest context: growing commits a unit without weighing
# the other contexts' load, so a unit much faster elsewhere is left ready for
# a root choice, which does weigh it.
MAX_GROWTH_SLOWDOWN = 1.5
# A consumer with more inputs than this is not searched for siblings to pull
# in: a wide reduction would make every subgraph scan all of its inputs.
SIBLING_SCAN_LIMIT = 64
# Relative slack for float comparisons of times and work.
_EPS = 1e-9


@dataclass(eq=False)
class Partition:
    """Subgraphs of a Problem: ``subgraph[u]`` for every unit; per subgraph s,
    its context, expected runtime (Σ seconds there) and expected start."""

    subgraph: IntArray
    context_of_subgraph: IntArray
    expected_runtime: FloatArray
    expected_start: FloatArray

    @property
    def unit_context(self) -> IntArray:
        """The context of every unit (its subgraph's)."""
        return self.context_of_subgraph[self.subgraph]


def merge(problem: Problem, memory_cap: FloatArray) -> Schedule:
    """The "merge" strategy: ``partition``, then list scheduling with each unit's
    context fixed by its subgraph, units taken by upward rank (the list scheduler
    keeps every context under ``memory_cap``)."""
    part = partition(problem, memory_cap)
    return list_schedule(
        problem,
        descending(upward_rank(problem)),
        memory_cap=memory_cap,
        fixed_context=part.unit_context,
        subgraph=part.subgraph,
    )


def partition(problem: Problem, memory_cap: FloatArray) -> Partition:
    """Split ``problem`` into subgraphs, each on one context (see the module doc)."""
    return _Partitioner(problem, np.asarray(memory_cap, dtype=np.float64)).run()


class _Partitioner:
    """One partitioning run; the state is described in the module doc."""

    def __init__(self, problem: Problem, memory_cap: FloatArray) -> None:
        p = self.p = problem
        n, k = p.seconds.shape
        self.n, self.k = n, k
        can = p.can_run()
        self.can = can.tolist()
        self.sec = p.seconds.tolist()
        finite = np.where(can, p.seconds, 0.0)
        runnable = np.maximum(can.sum(axis=1), 1)
        mean = finite.sum(axis=1) / runnable
        # Relative efficiency, rounded so that equal speeds compare equal.
        self.rel = np.round(np.where(can, p.seconds / np.maximum(mean, 1e-300)[:, None], 1.0), 9)
        self.rel_rows = self.rel.tolist()
        self.fastest = np.where(can, p.seconds, math.inf).min(axis=1).tolist() if n else []
        up = upward_rank(p)
        self.up = up.tolist()
        self.cp = (up + downward_rank(p)).tolist()
        self.memory = p.memory.tolist()
        self.out_bytes = p.output_bytes.tolist()
        self.dep_ptr, self.dep_idx = p.dep_ptr.tolist(), p.dep_idx.tolist()
        self.dep_bytes = p.dep_bytes.tolist()
        self.out_ptr, self.out_idx = p.out_ptr.tolist(), p.out_idx.tolist()
        self.latency, self.bandwidth = p.latency.tolist(), p.bandwidth.tolist()

        slots = [ctx.slots for ctx in p.contexts]
        col_count = can.sum(axis=0)
        ctx_mean = np.where(col_count > 0, finite.sum(axis=0) / np.maximum(col_count, 1), math.inf)
        self.cap_slot = [float(memory_cap[c]) / slots[c] for c in range(k)]
        self.target = float(mean.sum()) / (sum(slots) * SUBGRAPHS_PER_WORKER) * (1 + _EPS)
        # Workers of contexts that can run nothing never take a turn.
        self.workers = [
            (0.0, float(ctx_mean[c]), c, i)
            for c in range(k)
            if col_count[c]
            for i in range(slots[c])
        ]
        heapq.heapify(self.workers)
        self.free = [[0.0] * slots[c] for c in range(k)]
        self.has_worker = [bool(col_count[c]) for c in range(k)]

        self.missing = np.diff(p.dep_ptr).tolist()
        self.subgraph = [-1] * n
        self.context = [-1] * n
        self.finish = [0.0] * n
        self.stamp = [-1] * n  # the subgraph that last reached u while growing
        # tied[u]: the one context that runs u within MAX_GROWTH_SLOWDOWN of its fastest
        # (-1: several do); backlog[c]: seconds on c of the ready units tied to c, by
        # rank position: the queue ahead of u on c (a GPU busy with GPU work).
        near = can & (p.seconds <= MAX_GROWTH_SLOWDOWN * np.asarray(self.fastest)[:, None])
        self.tied = np.where(near.sum(axis=1) == 1, near.argmax(axis=1), -1).tolist()
        self.position = np.argsort(np.lexsort((np.arange(n), -up))).tolist()
        self.backlog = [_Queue(n) for _ in range(k)]
        self.ready: list[list[tuple[float, int]]] = [[] for _ in range(k)]
        self.hinted: list[list[tuple[float, int]]] = [[] for _ in range(k)]
        hint = assign_roots(p).tolist() if n else []
        for u in range(n):
            if self.missing[u] == 0:
                self._make_ready(u)
                if hint[u] >= 0:
                    heapq.heappush(self.hinted[hint[u]], (-self.up[u], u))
        self.runtime: list[float] = []
        self.start: list[float] = []
        self.sub_context: list[int] = []

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> Partition:
        left = self.n
        parked: list[tuple[float, float, int, int]] = []
        force = False
        while left:
            if not self.workers:
                # Cannot happen while choices are consistent (module doc); never spin.
                self.workers, parked, force = parked, [], True
                heapq.heapify(self.workers)
            worker = heapq.heappop(self.workers)
            now, _, c, _ = worker
            root = self._choose_root(c, now, force)
            if root < 0:
                parked.append(worker)
                continue
            members = self._grow(root, c)
            left -= len(members)
            done = self._place(members, c, worker)
            heapq.heappush(self.workers, done)
            self._set_free(done)
            for w in parked:  # idle workers look again once something new is ready
                back = (max(w[0], now), w[1], w[2], w[3])
                heapq.heappush(self.workers, back)
                self._set_free(back)
            parked, force = [], False
        return Partition(
            np.asarray(self.subgraph, dtype=np.int64),
            np.asarray(self.sub_context, dtype=np.int64),
            np.asarray(self.runtime, dtype=np.float64),
            np.asarray(self.start, dtype=np.float64),
        )

    def _set_free(self, worker: tuple[float, float, int, int]) -> None:
        self.free[worker[2]][worker[3]] = worker[0]

    # -- the root of a subgraph ------------------------------------------------------------

    def _choose_root(self, c: int, now: float, force: bool) -> int:
        """The ready unit that ``c``'s worker, free at ``now``, starts a subgraph from
        (-1: none it should run)."""
        best = self._first_fit(self.ready[c], c, now, force, -math.inf)
        if best < 0:
            return -1
        floor = self.up[best] * (1 - LOCALITY_RANK_TOLERANCE)
        local = self._first_fit(self.hinted[c], c, now, force, floor)
        return local if local >= 0 else best

    def _first_fit(
        self, heap: list[tuple[float, int]], c: int, now: float, force: bool, floor: float
    ) -> int:
        """The best-ranked unit of ``heap``, among its first ROOT_SCAN_LIMIT and none
        ranked below ``floor``, that ``c`` should run (-1: none). Leaves ``heap`` as
        it was, less entries of units already in a subgraph."""
        popped: list[tuple[float, int]] = []
        best = -1
        while heap and len(popped) < ROOT_SCAN_LIMIT:
            rank, u = heap[0]
            if self.subgraph[u] >= 0:
                heapq.heappop(heap)  # put in a subgraph since it was pushed
                continue
            if -rank < floor:
                break
            popped.append(heapq.heappop(heap))
            if force or self._runs_best_here(u, c, now):
                best = u
                break
        for entry in popped:
            heapq.heappush(heap, entry)
        return best

    def _runs_best_here(self, u: int, c: int, now: float) -> bool:
        """Whether ``u`` finishes on ``c`` (from ``now``) no later than on any other context
        that can run it, whose first free worker must first get through the ready
        work tied to that context (spread over its slots); ties go to ``c``. The
        context where ``u`` would finish first by this rule takes it, so some worker
        always takes the top unit."""
        here = max(now, self._data_ready(u, c)) + self.sec[u][c]
        for other in range(self.k):
            if other == c or not self.can[u][other] or not self.has_worker[other]:
                continue
            queued = self.backlog[other].ahead(self.position[u])
            free = min(self.free[other]) + queued / len(self.free[other])
            there = max(free, self._data_ready(u, other)) + self.sec[u][other]
            if there * (1 + _EPS) < here:
                return False
        return True

    def _data_ready(self, u: int, c: int) -> float:
        """When every input of ``u`` (all in subgraphs) can be on context ``c``."""
        ready = 0.0
        for j in range(self.dep_ptr[u], self.dep_ptr[u + 1]):
            d = self.dep_idx[j]
            t = self.finish[d] + self._comm(self.dep_bytes[j], self.context[d], c)
            if t > ready:
                ready = t
        return ready

    def _comm(self, nbytes: float, a: int, b: int) -> float:
        if a == b:
            return 0.0
        return float(self.latency[a][b] + nbytes / self.bandwidth[a][b])

    # -- growing a subgraph ----------------------------------------------------------------

    def _grow(self, root: int, c: int) -> list[int]:
        """The subgraph grown from ``root`` on ``c`` (module doc), its members marked."""
        sid = len(self.sub_context)
        members: list[int] = []
        candidates: list[tuple[float, float, float, float, float, int, int]] = []
        work = 0.0
        peak = 0.0  # max over members of run memory + bytes copied in
        held = 0.0  # Σ output bytes of members
        u = root
        while True:
            members.append(u)
            self.subgraph[u], self.context[u] = sid, c
            if self.tied[u] >= 0:
                self.backlog[self.tied[u]].add(self.position[u], -self.sec[u][self.tied[u]])
            work += self.sec[u][c]
            peak = max(peak, self.memory[u] + self._copied_in(u, c))
            held += self.out_bytes[u]
            self._reach(u, c, sid, len(members), candidates)
            u = -1
            while candidates:
                v = heapq.heappop(candidates)[-1]
                if self.subgraph[v] >= 0:
                    continue
                if work + self.sec[v][c] > self.target:
                    continue
                grown = max(peak, self.memory[v] + self._copied_in(v, c))
                if grown + held + self.out_bytes[v] > self.cap_slot[c]:
                    continue
                u = v
                break
            if u < 0:
                return members

    def _reach(
        self,
        u: int,
        c: int,
        sid: int,
        step: int,
        candidates: list[tuple[float, float, float, float, float, int, int]],
    ) -> None:
        """Update readiness for ``u`` joining subgraph ``sid``, and offer its ready
        consumers and their ready other inputs as candidates."""
        for j in range(self.out_ptr[u], self.out_ptr[u + 1]):
            w = self.out_idx[j]
            self.missing[w] -= 1
            if self.missing[w] == 0:
                self._make_ready(w)
                self._offer(w, c, sid, step, candidates)
            elif self.dep_ptr[w + 1] - self.dep_ptr[w] <= SIBLING_SCAN_LIMIT:
                for i in range(self.dep_ptr[w], self.dep_ptr[w + 1]):
                    d = self.dep_idx[i]
                    if self.missing[d] == 0 and self.subgraph[d] < 0:
                        self._offer(d, c, sid, step, candidates)

    def _offer(
        self,
        v: int,
        c: int,
        sid: int,
        step: int,
        candidates: list[tuple[float, float, float, float, float, int, int]],
    ) -> None:
        """Push ready ``v`` as a candidate of subgraph ``sid`` once, if ``c`` suits it."""
        if self.stamp[v] == sid or not self.can[v][c]:
            return
        self.stamp[v] = sid
        if self.sec[v][c] > MAX_GROWTH_SLOWDOWN * self.fastest[v] * (1 + _EPS):
            return
        key = (
            self.rel_rows[v][c],
            self._copied_in(v, c),
            -self.cp[v],
            -float(self.memory[v]),
            -self.sec[v][c],
            -step,  # the most recently reached: follow the path just extended
            v,
        )
        heapq.heappush(candidates, key)

    def _copied_in(self, u: int, c: int) -> float:
        """Bytes of ``u``'s inputs that come from other contexts if ``u`` runs on ``c``
        (its inputs are all placed)."""
        total = 0.0
        for j in range(self.dep_ptr[u], self.dep_ptr[u + 1]):
            if self.context[self.dep_idx[j]] != c:
                total += self.dep_bytes[j]
        return total

    def _make_ready(self, u: int) -> None:
        entry = (-self.up[u], u)
        if self.tied[u] >= 0:
            self.backlog[self.tied[u]].add(self.position[u], self.sec[u][self.tied[u]])
        for c in range(self.k):
            if self.can[u][c]:
                heapq.heappush(self.ready[c], entry)

    # -- timing ----------------------------------------------------------------------------

    def _place(
        self, members: list[int], c: int, worker: tuple[float, float, int, int]
    ) -> tuple[float, float, int, int]:
        """Record the subgraph's start, runtime and its members' finishes; the worker
        as it will be once the subgraph is done."""
        members.sort()  # ids are topological: the order the subgraph runs them
        inside = set(members)
        start = worker[0]
        for u in members:
            for j in range(self.dep_ptr[u], self.dep_ptr[u + 1]):
                d = self.dep_idx[j]
                if d not in inside:
                    arrive = self.finish[d] + self._comm(self.dep_bytes[j], self.context[d], c)
                    start = max(start, arrive)
        t = start
        for u in members:
            t += self.sec[u][c]
            self.finish[u] = t
        self.sub_context.append(c)
        self.start.append(start)
        self.runtime.append(t - start)
        return (t, worker[1], worker[2], worker[3])


class _Queue:
    """Seconds of work by rank position (a Fenwick tree): ``add`` and ``ahead``
    (the sum over positions before one) in O(log n)."""

    def __init__(self, n: int) -> None:
        self.tree = [0.0] * (n + 1)

    def add(self, position: int, seconds: float) -> None:
        i = position + 1
        while i < len(self.tree):
            self.tree[i] += seconds
            i += i & -i

    def ahead(self, position: int) -> float:
        total, i = 0.0, position
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return max(total, 0.0)
