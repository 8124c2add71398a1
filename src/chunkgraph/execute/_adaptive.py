"""The adaptive backend: the thread backend with workers activated from CPU and I/O signals.

``LocalExecutor("adaptive")`` runs ready tasks the way ``PartitionRunner``
runs partitions: each context (one per NUMA node, or the plan's contexts)
owns up to ``cap`` workers, a quarter of them active at the start, and the
``Activation`` policy (``parallel/_activation.py``) adds an eighth more
while the measured signals say the machine absorbs more: busy cores rising
with the workers added (CPU-bound tasks: full occupancy at once, since the
start is one worker per core by default), or storage bytes per second still
rising (I/O-bound tasks, whose threads mostly wait, keep growing past the
cores). No scale-down.

    driver loop (calling thread), every EVENT_FLUSH_SECONDS:
      collect() ── every POLL_INTERVAL_S (0.25 s), as the PartitionRunner polls:
                   Activation.check(ready tasks) ── add workers per context

Everything else (batches, time limits, Ctrl-C, abandoned threads, following
a plan, stealing) is the thread backend's. The checks run on the driver's
poll rather than on every completion: tasks are often far shorter than a
window worth reading (windows of a quarter second are less noisy than the
0.1 s the guard allows), and a check on the driver keeps signal sampling out
of the workers' lock.

Each accepted check is an ``ACTIVATED`` event (``total``: workers active;
``activation``: the ``ActivationEvent`` with workers per context and the
readings), so run reports can draw the ramp.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

from chunkgraph.execute._driver import Driver
from chunkgraph.execute._events import EventKind
from chunkgraph.execute._thread_pool import acquire_pool
from chunkgraph.execute._threads import ThreadBackend
from chunkgraph.parallel._activation import Activation, ActivationEvent
from chunkgraph.parallel._runner import POLL_INTERVAL_S
from chunkgraph.parallel._signals import ProcessSignals, Sampler

if TYPE_CHECKING:
    from chunkgraph.gpu._residency import Residency

# Seconds between activation checks: the runner's poll (longer windows read
# storage rates with less noise than the 0.1 s the sampler's guard allows).
CHECK_INTERVAL_S = POLL_INTERVAL_S


class AdaptiveBackend(ThreadBackend):
    """The thread backend on up to ``workers`` workers (split over the plan's contexts),
    activated adaptively; ``cpus``: the cores they share (busy cores cannot rise
    past them); ``sampler``: the signal source (default: this process's)."""

    def __init__(
        self,
        driver: Driver,
        workers: int,
        cpus: int,
        sampler: Sampler | None = None,
        residency: Residency | None = None,
    ) -> None:
        super().__init__(driver, workers, residency)
        # Caps per context: the plan's placement splits ``workers`` over its contexts.
        self.caps = list(self.per_context)
        self.activation = Activation(
            self.caps, sampler or ProcessSignals(), self._announce_step, cpus=cpus
        )
        self._next_check = 0.0

    def open(self) -> None:
        self.pool, self.shared = acquire_pool(sum(self.caps))
        self.per_context = self.activation.initial()
        self.workers = self.active = sum(self.per_context)
        for context, count in enumerate(self.per_context):
            for _ in range(count):
                self.pool.submit(functools.partial(self._work, context))

    def collect(self) -> None:
        super().collect()
        now = time.monotonic()
        if self.activation.full or now < self._next_check:
            return
        self._next_check = now + CHECK_INTERVAL_S
        sched = self.scheduler
        with self.lock:
            if sched.finished or sched.stopping or self.broken:
                return
            ready = sum(sched.ready_count(c) for c in range(len(self.per_context)))
        added = self.activation.check(remaining=ready)  # samples outside the lock
        if not any(added):
            return
        with self.lock:
            if sched.finished or sched.stopping or self.broken:
                return
            for context, count in enumerate(added):
                self.per_context[context] += count
                self.workers += count
                for _ in range(count):
                    self._add_worker(context)
            self.ready_signal.notify_all()

    def _announce_step(self, step: ActivationEvent) -> None:
        events = self.driver.events
        if events is not None:
            events.emit(EventKind.ACTIVATED, total=sum(step.active), activation=step)
