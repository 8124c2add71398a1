"""How many workers to activate, per node, from measured CPU and I/O signals.

`Activation` is a pure policy: it decides, its caller starts the workers.
It reads signals from a `Sampler` (see ``_signals.py``) and never sleeps or
spawns threads, so one instance serves the `PartitionRunner` and any other
"run ready work on a growing set of workers" loop.

    caller                         Activation                    Sampler
    initial()  ----------------->  active = max(1, cap // 4)  -> start()
    check(remaining) ----------->  reading? --None (window < 0.1 s)--> add nothing
                                     | yes: cpu says?  io says?  (both, always)
                                     v
                                   grow? -> add min(max(1, cap // 8), dormant) per node,
                                            at most `remaining` in total
    <--- workers to add per node    timeline += ActivationEvent

Rules (each per node of capacity ``cap`` = that node's workers):

* start: ``max(1, cap // INITIAL_DIVISOR)`` active workers.
* growth step: ``max(1, cap // GROWTH_DIVISOR)`` more, at most the node's
  dormant workers (``cap - active``); all nodes grow at the same check, so
  growth is balanced by construction. The step's total is at most
  ``remaining`` (partitions not yet started); when that trims it, workers go
  one at a time to the nodes with the fewest active first.
* grow if either signal says so; both are sampled at every accepted check:
  - CPU (cores busy): grow if ``cpu - cpu_at_last_step >= CPU_GAIN * added``,
    where ``added`` is the number of workers the last step added (the initial
    activation counts as a step taken at 0 cores), unless the busy cores
    already reach ``CPU_FULL`` of the CPUs there are (``cpus``, when given):
    more workers cannot raise a reading at its ceiling, so a CPU-bound stage
    stays at its start of one worker per core.
  - I/O (bytes/s): grow if the rate rose since the last step by at least
    ``IO_GAIN`` of what the workers it added would bring at the rate per
    worker before it: ``io - io_at_step >= IO_GAIN * added * io_at_step /
    active_before_step`` (the CPU rule's shape: there a worker can bring at
    most one core, here the average worker's rate), and by at least
    ``IO_MIN_RISE`` of ``io_at_step`` whatever the step (storage rates vary
    by several percent from window to window: a smaller rise is noise). The
    run's first non-zero rate counts as growth; a step taken with no I/O
    leaves no baseline, and I/O alone does not grow the node after it.
    Without I/O counters (``io`` None) only the CPU signal is used.

    Why not "the rate rose by a fixed 20% over the previous window": a step
    of an eighth of the node adds fewer than 20% more workers once five
    eighths are active, so even a stage whose throughput grows exactly with
    its workers stopped short of the cap (at 28 of 32), and real storage,
    whose gain per worker shrinks, stalled at 3-4 of 8 while a static pool
    of 8 ran 1.3-1.4x faster. And comparing consecutive windows misses a
    step whose effect lands a window late; the flat windows after such a
    miss never grow again.
* a check whose window the sampler rejects (shorter than 0.1 s) changes
  nothing and records nothing. No scale-down.

Ramp for one node of 16: 4 active, then 6, 8, 10, 12, 14, 16: six growth
steps, and six on each of eight such nodes too (growth is a fraction of the
node, not one worker at a time: that once took ~10 minutes to reach 40).

State: ``active`` per node; ``_cpu_at_step``, ``_io_at_step``,
``_active_before_step`` and ``_added_at_step`` (the readings at, the workers
active before, and the total added by, the last growth step);
``timeline``, one `ActivationEvent` per accepted check (and the start).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chunkgraph._errors import ConfigError, UsageError
from chunkgraph._util import as_int
from chunkgraph.parallel._signals import Reading, Sampler

# Start a quarter of each node: enough that a CPU-bound stage shows its
# slope at the first check, few enough that a memory-bound one is not
# swamped before the signals can say "stop".
INITIAL_DIVISOR = 4
# Grow by an eighth of each node per step: reaching a full node takes six
# steps whatever its size; one worker per step was far too slow on big nodes.
GROWTH_DIVISOR = 8
# CPU: a step paid if busy cores rose by at least this share of the workers it
# added. Lower grows on noise; higher stops early on stages that are partly
# waiting (a worker that is 30% busy still adds throughput).
CPU_GAIN = 0.2
# CPU: busy cores at this share of the CPUs there are is full: no growth on CPU.
CPU_FULL = 0.9
# I/O: the smallest rise taken as growth, whatever the step; below it, window-to-
# window noise of real storage (a few percent) would ratchet the ramp up.
IO_MIN_RISE = 0.1
# I/O: a step paid if each worker it added brought at least this share of the
# average worker's rate before it. Storage throughput grows sublinearly with
# queue depth, so asking for a whole worker's share would stop I/O-bound
# stages early; a share well above the window-to-window noise keeps a
# saturated device from growing on noise.
IO_GAIN = 0.2


@dataclass(frozen=True, slots=True)
class ActivationEvent:
    """One accepted check (or the start): what was read and what was done.

    Attributes:
        time: The sampler's clock.
        active: Active workers per node after this check.
        added: Workers this check activated, per node.
        cpu: The CPU reading, in cores; None at the start.
        io: The I/O reading, in bytes/s; None at the start and without I/O counters.
        cpu_grows: Whether the CPU signal said more workers would be absorbed.
        io_grows: Whether the I/O signal said so.
    """

    time: float
    active: tuple[int, ...]
    added: tuple[int, ...]
    cpu: float | None
    io: float | None
    cpu_grows: bool = False
    io_grows: bool = False


class Activation:
    """The activation policy for nodes of ``caps`` workers, fed by ``sampler``.

    >>> from chunkgraph.parallel._signals import ProcessSignals
    >>> clock = iter([0.0, 1.0]).__next__
    >>> busy = iter([0.0, 4.0]).__next__  # 4 cores busy over the first second
    >>> policy = Activation([16], ProcessSignals(cpu=busy, io=None, clock=clock))
    >>> policy.initial()
    [4]
    >>> policy.check(remaining=100)  # gain 4 >= 0.2 * 4 added: grow by 16 // 8
    [2]
    >>> policy.active
    (6,)
    """

    def __init__(
        self,
        caps: Sequence[int],
        sampler: Sampler,
        on_event: Callable[[ActivationEvent], None] | None = None,
        *,
        cpus: int | None = None,
    ) -> None:
        """``on_event`` is called with each `ActivationEvent` as it is recorded;
        ``cpus``: the CPUs the workers share (None: no ceiling on the CPU signal)."""
        self.caps = tuple(as_int(cap, "workers per node") for cap in caps)
        if not self.caps or min(self.caps) < 1:
            raise ConfigError(f"caps must give >= 1 worker for each node, got {list(caps)!r}")
        self.growth = tuple(max(1, cap // GROWTH_DIVISOR) for cap in self.caps)
        if cpus is not None and as_int(cpus, "cpus") < 1:
            raise ConfigError(f"cpus must be >= 1 or None, got {cpus!r}")
        self.cpus = cpus
        self._io_seen = False  # a non-zero I/O rate was read: the bootstrap is spent
        self._sampler = sampler
        self._on_event = on_event
        self._active: list[int] | None = None
        self._cpu_at_step = 0.0
        self._added_at_step = 0
        self._active_before_step = 0
        self._io_at_step = 0.0
        self.timeline: list[ActivationEvent] = []

    @property
    def active(self) -> tuple[int, ...]:
        """Workers activated so far, per node (0s before `initial`)."""
        return tuple(self._active or [0] * len(self.caps))

    @property
    def full(self) -> bool:
        """Every worker of every node is active: checks can add nothing more."""
        return self.active == self.caps

    def initial(self) -> list[int]:
        """Start the run: the workers to activate now, per node."""
        if self._active is not None:
            raise UsageError("Activation.initial() was already called; make one Activation per run")
        start = self._sampler.start()
        self._active = [max(1, cap // INITIAL_DIVISOR) for cap in self.caps]
        self._added_at_step = sum(self._active)
        self._record(ActivationEvent(start, self.active, self.active, None, None))
        return list(self._active)

    def check(self, remaining: int) -> list[int]:
        """Sample the signals; the workers to activate now, per node (all 0: none).

        ``remaining``: partitions (or tasks) not yet started; no more than that
        many workers are added.
        """
        if self._active is None:
            raise UsageError("Activation.check() before initial(); call initial() to start")
        reading = self._sampler.sample()
        if reading is None:
            return [0] * len(self.caps)
        cpu_grows = reading.cpu - self._cpu_at_step >= CPU_GAIN * self._added_at_step and (
            self.cpus is None or reading.cpu < CPU_FULL * self.cpus
        )
        io_grows = self._io_says(reading)
        added = self._step(remaining) if cpu_grows or io_grows else [0] * len(self.caps)
        if any(added):
            self._cpu_at_step = reading.cpu
            self._io_at_step = reading.io or 0.0
            self._active_before_step = sum(self._active)
            self._added_at_step = sum(added)
            self._active = [a + b for a, b in zip(self._active, added, strict=True)]
        self._record(
            ActivationEvent(
                reading.time,
                self.active,
                tuple(added),
                reading.cpu,
                reading.io,
                cpu_grows,
                io_grows,
            )
        )
        return added

    def _io_says(self, reading: Reading) -> bool:
        if reading.io is None or reading.io <= 0:
            return False
        if not self._io_seen:
            self._io_seen = True
            return True  # the run's first non-zero rate
        base = self._io_at_step
        if base <= 0:
            return False  # the last step was taken with no I/O: no baseline to beat
        share = self._added_at_step / max(1, self._active_before_step)
        return reading.io - base >= base * max(IO_MIN_RISE, IO_GAIN * share)

    def _step(self, remaining: int) -> list[int]:
        active = self._active or []
        want = [min(g, cap - a) for g, cap, a in zip(self.growth, self.caps, active, strict=True)]
        budget = max(0, remaining)
        if sum(want) <= budget:
            return want
        added = [0] * len(want)
        fewest_first = sorted(range(len(want)), key=lambda n: (active[n], n))
        while budget > 0:  # ends: sum(want) > budget
            for n in fewest_first:
                if budget > 0 and added[n] < want[n]:
                    added[n] += 1
                    budget -= 1
        return added

    def _record(self, event: ActivationEvent) -> None:
        self.timeline.append(event)
        if self._on_event is not None:
            self._on_event(event)


def plot_timeline(timeline: Sequence[ActivationEvent], path: str | Path) -> Path:
    """A PNG of active workers per node (top) and CPU cores and I/O MB/s (bottom) over time."""
    if not timeline:
        raise UsageError("no activation timeline to draw: call run() with partitions first")
    import matplotlib

    matplotlib.use("Agg")  # before pyplot: no display
    import matplotlib.pyplot as plt

    start = timeline[0].time
    times = [event.time - start for event in timeline]
    fig, (workers, signals) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    try:
        styles = ("-", "--", ":", "-.")  # balanced nodes overlap: tell them apart by style
        for n in range(len(timeline[0].active)):
            active = [event.active[n] for event in timeline]
            style = styles[n % len(styles)]
            workers.step(times, active, style, where="post", linewidth=1.6, label=f"node {n}")
        workers.set_ylabel("active workers")
        workers.set_ylim(bottom=0)
        workers.yaxis.get_major_locator().set_params(integer=True)
        workers.legend(loc="lower right")
        workers.set_title("PartitionRunner activation")
        read = [(t, e.cpu) for t, e in zip(times, timeline, strict=True) if e.cpu is not None]
        lines = signals.plot([t for t, _ in read], [c for _, c in read], "C3", label="CPU (cores)")
        signals.set_ylabel("busy cores")
        signals.set_ylim(bottom=0)
        signals.set_xlabel("seconds since start")
        io = [(t, e.io / 1e6) for t, e in zip(times, timeline, strict=True) if e.io is not None]
        if io:
            rate = signals.twinx()
            lines += rate.plot([t for t, _ in io], [b for _, b in io], "C2", label="I/O (MB/s)")
            rate.set_ylabel("I/O MB/s")
            rate.set_ylim(bottom=0)
        signals.legend(lines, [line.get_label() for line in lines], loc="lower right")
        target = Path(path)
        fig.tight_layout()
        fig.savefig(target, dpi=110)
    finally:
        plt.close(fig)
    return target
