"""Where a flow run's time and memory went: ``Breakdown``, from per-thread tallies.

Policy. The run's slots (the cores it planned for) times the wall of its tasks is
the time it had; each term says what part of it went where::

    slots x wall = compute + redundant      fn's wall, on the voxels the bbox needs and
                                            on the margins (crop, blend) cut off again
                 + decode + read wait       reads (inputs, temporary layers): the
                                            reading thread's CPU, and the rest of the wall
                 + encode + write wait      writes (layers, dst): the same split
                 + other                    CPU of the process outside those: blending,
                                            casts, markers, a storage library's own threads
                 + idle                     what is left: slots with nothing to do

Measured. Each fn call, read and write is timed where the flow makes it
(``_subchunk.call_fn``, ``_top_task``, ``_reduce``) with ``time.perf_counter``
(wall) and ``time.thread_time`` (the calling thread's CPU): 3.6 us a call measured on
a busy 2-core machine, against milliseconds of fn, read or write.
CPU spent in a read is taken as decoding and the rest of its wall as waiting on
storage (a disk, an object store, another task's read holding the read lock);
likewise encoding and waiting in a write. A storage layer that decodes on threads
of its own shows that CPU under ``other`` and the read's wall as waiting.

Redundant compute is an estimate: fn's time is spread evenly over the voxels it
was given (its chunk with crop and blend pads), and the voxels past those the run
had to compute (the bbox's, each once) are the redundant share. A (128+16)^3
bottom chunk over a 128^3 one is 1.42x: 30% of fn's time is redundant.

``other`` is the process's CPU over the tasks (``time.process_time``) less the
CPU inside fn, reads and writes: known only when the tasks run in this process
(threads, sync); elsewhere it is 0 and falls into idle. Terms can overlap (a
read waiting while another task computes): their sum may pass slots x wall, and
idle is then 0 and ``overlap_seconds`` says by how much.

Shares. Every share shown (``line``, ``table``, the report's chart) is of one total,
the terms' sum (``total_seconds``: slots x wall, plus the overlap), rounded so that
the shares shown add up to exactly 100% (largest remainders). The overlap is said
apart, as how far that sum passed the slots' time: "2.30 slot-s of work measured,
1.15x the slots' 2.00" is 15% of waits beside compute, not a 130% pie.

Memory. The process's RSS is sampled every ``RSS_SAMPLE_SECONDS`` while the
tasks run; ``peak_rss_bytes`` is the highest sample and ``baseline_rss_bytes``
the first. Beside them, what the plan allowed: the input caches' capacity and
the top-level tasks in flight times a task's memory. Out of process, only the
driver's RSS is sampled.

State. A ``TaskTimer`` lives for one task; each thread that works for it gets a
``Tally`` of its own on first use (a ``threading.local``), so measuring takes no
lock; ``times()`` adds them up into a picklable ``TaskTimes``, which the task
returns in its stats and the driver sums with ``Breakdown.of``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import psutil

from chunkgraph._util import format_bytes

T = TypeVar("T")

# RSS sampling period: 20 ms catches a top-level task's buffers (each lives for the
# read, compute and write of a task, 100s of ms at the automatic sizes) and costs
# one /proc read per sample (about 20 us: 0.1% of a core).
RSS_SAMPLE_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class TaskTimes:
    """Seconds (and the voxels fn was given) of one task, or of many added together."""

    fn_wall: float = 0.0
    fn_cpu: float = 0.0
    fn_voxels: int = 0
    fn_calls: int = 0
    read_wall: float = 0.0
    read_cpu: float = 0.0
    write_wall: float = 0.0
    write_cpu: float = 0.0

    def __add__(self, other: TaskTimes) -> TaskTimes:
        return TaskTimes(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(slots=True)
class Tally:
    """One thread's running sums for one task (only that thread adds to it): ``TaskTimes``'
    fields, mutable."""

    fn_wall: float = 0.0
    fn_cpu: float = 0.0
    fn_voxels: int = 0
    fn_calls: int = 0
    read_wall: float = 0.0
    read_cpu: float = 0.0
    write_wall: float = 0.0
    write_cpu: float = 0.0

    def frozen(self) -> TaskTimes:
        return TaskTimes(*(getattr(self, f.name) for f in fields(TaskTimes)))


class TaskTimer:
    """The tallies of one task's threads (see the module doc); cheap enough per call."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._tallies: list[Tally] = []  # list.append is atomic: no lock

    def tally(self) -> Tally:
        """This thread's tally, made on first use."""
        tally: Tally | None = getattr(self._local, "tally", None)
        if tally is None:
            tally = self._local.tally = Tally()
            self._tallies.append(tally)
        return tally

    def call_fn(self, fn: Callable[[], T], voxels: int) -> T:
        """``fn()``, timed as compute over ``voxels`` given voxels."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn()
        finally:
            tally = self.tally()
            tally.fn_wall += time.perf_counter() - wall
            tally.fn_cpu += time.thread_time() - cpu
            tally.fn_voxels += voxels
            tally.fn_calls += 1

    def read(self, read: Callable[[], T]) -> T:
        """``read()``, timed as a read (its CPU: decoding; the rest: waiting)."""
        return self._timed(read, "read")

    def write(self, write: Callable[[], T]) -> T:
        """``write()``, timed as a write (its CPU: encoding; the rest: waiting)."""
        return self._timed(write, "write")

    def _timed(self, call: Callable[[], T], term: str) -> T:
        """``call()``, its wall and this thread's CPU added to the tally's ``term``."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return call()
        finally:
            tally = self.tally()
            setattr(
                tally, f"{term}_wall", getattr(tally, f"{term}_wall") + time.perf_counter() - wall
            )
            setattr(tally, f"{term}_cpu", getattr(tally, f"{term}_cpu") + time.thread_time() - cpu)

    def times(self) -> TaskTimes:
        """Every thread's tally added up (call once the task's threads are done)."""
        total = TaskTimes()
        for tally in list(self._tallies):
            total = total + tally.frozen()
        return total


NO_TIMES = TaskTimes()  # a task's stats before anything was timed


class RssSampler:
    """The process's RSS, sampled on a thread of its own between ``start`` and ``stop``."""

    def __init__(self, every: float = RSS_SAMPLE_SECONDS) -> None:
        self.every = every
        self.baseline = self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: Any = None

    def start(self) -> RssSampler:
        try:
            self._process = psutil.Process()
            self.baseline = self.peak = int(self._process.memory_info().rss)
        except OSError:  # no /proc: no memory figures
            return self
        self._thread = threading.Thread(target=self._sample, name="chunkgraph-rss", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self._take()

    def _take(self) -> None:
        with contextlib.suppress(OSError):  # /proc gone under us: the samples so far
            self.peak = max(self.peak, int(self._process.memory_info().rss))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._take()  # the last moment counts too


class RunMeter:
    """The tasks' wall, the process's CPU and its RSS samples between ``start`` and
    ``stop``; then ``breakdown`` of the tasks' times over them."""

    def __init__(self) -> None:
        self.sampler = RssSampler()
        self.wall = self.cpu = 0.0

    def start(self) -> RunMeter:
        self.sampler.start()
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def stop(self) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.sampler.stop()

    def breakdown(
        self,
        times: Iterable[TaskTimes],
        *,
        slots: int,
        needed_voxels: int,
        in_process: bool,
        **memory: int,
    ) -> Breakdown:
        """``Breakdown.of`` the tasks' ``times``; the process's CPU counts ``in_process``."""
        return Breakdown.of(
            times,
            slots=slots,
            wall=self.wall,
            needed_voxels=needed_voxels,
            process_cpu=self.cpu if in_process else None,
            peak_rss_bytes=self.sampler.peak,
            baseline_rss_bytes=self.sampler.baseline,
            **memory,
        )


@dataclass(frozen=True)
class Breakdown:
    """Where one flow run's time and memory went (see ``chunkgraph.execute._breakdown``).

    Every ``*_seconds`` term is slot-seconds of the tasks' run; together with
    ``idle_seconds`` they add up to ``slots * wall_seconds`` (less ``overlap_seconds``).

    Attributes:
        slots: The cores the run planned for (``workers`` when given).
        wall_seconds: From the first task's start to the last one's end (the graph's run).
        setup_seconds: The call's time before and after the tasks (plan, locks, probe,
            record), not in the slot terms.
        compute_seconds: fn's wall on the voxels the run had to compute.
        redundant_seconds: fn's wall on the margins it computed and cut off (crop,
            blend overlaps): an estimate, fn's time spread evenly over its voxels.
        decode_seconds: CPU of the threads reading (inputs, temporary layers).
        read_wait_seconds: The rest of the reads' wall: storage, the read lock.
        encode_seconds: CPU of the threads writing (temporary layers, dst).
        write_wait_seconds: The rest of the writes' wall.
        other_seconds: The process's other CPU over the tasks (blending, casts, markers,
            storage threads); 0 when the tasks ran out of process.
        idle_seconds: What is left of ``slots * wall_seconds``.
        overlap_seconds: How far the terms' sum passed ``slots * wall_seconds`` (waits
            overlapping compute); 0 otherwise.
        fn_cpu_seconds: fn's thread CPU (against compute + redundant: fn's own waits).
        fn_calls: fn's calls.
        peak_rss_bytes: The highest RSS sampled while the tasks ran (this process).
        baseline_rss_bytes: The RSS when they started.
        cache_bytes: The input caches' capacity.
        in_flight_bytes: The memory the plan lets top-level tasks in flight hold.
        in_process: Whether the tasks ran in this process (``other`` and RSS are theirs).
    """

    slots: int
    wall_seconds: float
    setup_seconds: float = 0.0
    compute_seconds: float = 0.0
    redundant_seconds: float = 0.0
    decode_seconds: float = 0.0
    read_wait_seconds: float = 0.0
    encode_seconds: float = 0.0
    write_wait_seconds: float = 0.0
    other_seconds: float = 0.0
    idle_seconds: float = 0.0
    overlap_seconds: float = 0.0
    fn_cpu_seconds: float = 0.0
    fn_calls: int = 0
    peak_rss_bytes: int = 0
    baseline_rss_bytes: int = 0
    cache_bytes: int = 0
    in_flight_bytes: int = 0
    in_process: bool = True

    @classmethod
    def of(
        cls,
        times: Iterable[TaskTimes],
        *,
        slots: int,
        wall: float,
        needed_voxels: int,
        process_cpu: float | None = None,
        **memory: Any,
    ) -> Breakdown:
        """The terms of tasks' ``times`` over ``wall`` seconds on ``slots`` slots.

        Args:
            times: Each task's ``TaskTimes``.
            slots: The cores the run planned for.
            wall: The tasks' run, in seconds.
            needed_voxels: The voxels the run had to compute (each once).
            process_cpu: The process's CPU over the tasks when they ran in it; None
                when they ran elsewhere (``other`` is then 0).
            memory: The memory fields (``peak_rss_bytes``, ...), as they are.

        >>> t = TaskTimes(fn_wall=8.0, fn_voxels=32**3, read_wall=1.0, read_cpu=0.25)
        >>> b = Breakdown.of([t], slots=2, wall=5.0, needed_voxels=16**3)
        >>> b.compute_seconds, b.redundant_seconds, b.decode_seconds, b.read_wait_seconds
        (1.0, 7.0, 0.25, 0.75)
        >>> b.idle_seconds
        1.0
        """
        total = sum(times, TaskTimes())
        useful = min(1.0, needed_voxels / total.fn_voxels) if total.fn_voxels else 1.0
        measured_cpu = total.fn_cpu + total.read_cpu + total.write_cpu
        other = max(0.0, process_cpu - measured_cpu) if process_cpu is not None else 0.0
        read_wait = max(0.0, total.read_wall - total.read_cpu)
        write_wait = max(0.0, total.write_wall - total.write_cpu)
        busy = total.fn_wall + total.read_cpu + read_wait + total.write_cpu + write_wait + other
        left = slots * wall - busy
        return cls(
            slots=slots,
            wall_seconds=wall,
            compute_seconds=total.fn_wall * useful,
            redundant_seconds=total.fn_wall * (1.0 - useful),
            decode_seconds=total.read_cpu,
            read_wait_seconds=read_wait,
            encode_seconds=total.write_cpu,
            write_wait_seconds=write_wait,
            other_seconds=other,
            idle_seconds=max(0.0, left),
            overlap_seconds=max(0.0, -left),
            fn_cpu_seconds=total.fn_cpu,
            fn_calls=total.fn_calls,
            in_process=process_cpu is not None,
            **memory,
        )

    def terms(self) -> dict[str, float]:
        """The slot terms, in the order they are told, by short name."""
        return {name: getattr(self, f"{name}_seconds") for name in TERMS}

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values, rounded to microseconds (report.json's "breakdown")."""
        return {
            f.name: round(v, 6) if isinstance(v := getattr(self, f.name), float) else v
            for f in fields(self)
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Breakdown:
        """The breakdown ``as_json`` wrote.

        Args:
            data: ``as_json``'s mapping (fields it does not know are ignored).
        """
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def total_seconds(self) -> float:
        """The terms' sum, which every share is of: ``slots * wall_seconds``, and more by
        ``overlap_seconds`` when waits overlapped compute."""
        return sum(self.terms().values())

    def shares(self, decimals: int = 0) -> dict[str, float]:
        """Each term's share of ``total_seconds`` in percent, by label, rounded so that
        they add up to exactly 100 (all 0 when nothing was measured).

        Args:
            decimals: The digits after the point each share is rounded to.

        >>> Breakdown(slots=1, wall_seconds=3.0, compute_seconds=1.0, decode_seconds=1.0,
        ...           idle_seconds=1.0).shares()["compute"]
        34.0
        """
        labels, seconds = zip(*self.labelled(), strict=True)
        return dict(zip(labels, _percents(list(seconds), decimals), strict=True))

    def line(self) -> str:
        """One line of each term's share of the terms' sum, in order (terms of 0 left out),
        adding up to 100%; then, when waits overlapped compute, how far that sum passed
        the slots' time.

        >>> Breakdown(slots=2, wall_seconds=1.0, compute_seconds=1.5, idle_seconds=0.5).line()
        'time on 2 slots x 1.00 s: compute 75%, idle 25%'
        >>> Breakdown(slots=2, wall_seconds=1.0, compute_seconds=1.5, read_wait_seconds=0.9,
        ...           overlap_seconds=0.4).line()
        "time on 2 slots x 1.00 s: compute 63%, read wait 37% (of 2.40 slot-s of work \
measured, 1.20x the slots' 2.00 s: reads or writes waited while other tasks computed)"
        """
        head = f"time on {self._slots()} x {self.wall_seconds:.2f} s"
        if self.total_seconds <= 0:
            return head
        shares = self.shares()
        shown = [f"{label} {shares[label]:.0f}%" for label, seconds in self.labelled() if seconds]
        return f"{head}: {', '.join(shown)}{self._overlap_said(2)}"

    def _overlap_said(self, digits: int) -> str:
        """How far the terms' sum passed the slots' time (waits beside compute), or ""."""
        have = self.slots * self.wall_seconds
        if not self.overlap_seconds or have <= 0:
            return ""
        total = self.total_seconds
        return (
            f" (of {total:.{digits}f} slot-s of work measured, {total / have:.2f}x the slots' "
            f"{have:.{digits}f} s: reads or writes waited while other tasks computed)"
        )

    def _slots(self) -> str:
        return f"{self.slots} slot" + ("" if self.slots == 1 else "s")

    def table(self) -> list[str]:
        """Each slot term's seconds and share, one a line; then fn's CPU and the memory."""
        have = self.slots * self.wall_seconds
        lines = [
            f"where the time went: {self._slots()} x {self.wall_seconds:.3f} s = "
            f"{have:.3f} slot-s (and {self.setup_seconds:.3f} s of setup around the tasks)"
        ]
        shares = self.shares(decimals=1)
        measured = self.total_seconds > 0
        for label, seconds in self.labelled():
            share = f"{shares[label]:5.1f}%" if measured else "   n/a"
            lines.append(f"  {label:<11}{seconds:10.3f} s {share}  {_MEANING[label]}")
        if self.overlap_seconds:
            lines.append(f"  shares are{self._overlap_said(3)}")
        fn_wall = self.compute_seconds + self.redundant_seconds
        lines.append(
            f"fn: {self.fn_calls} calls, {self.fn_cpu_seconds:.3f} s CPU of {fn_wall:.3f} s wall"
        )
        lines.append(self.memory_line())
        return lines

    def memory_line(self, *, planned: bool = True) -> str:
        """The peak RSS sampled, and how far above the RSS at the tasks' start.

        Args:
            planned: Add what the plan allowed (the input caches, the top-level tasks in
                flight); a run's summary leaves that to the plan's own line.
        """
        over = format_bytes(max(0, self.peak_rss_bytes - self.baseline_rss_bytes))
        whose = "" if self.in_process else ", this process only"
        line = (
            f"memory: peak RSS {format_bytes(self.peak_rss_bytes)} (+{over} over the start{whose})"
        )
        if not planned:
            return line
        return (
            f"{line}; planned: cache {format_bytes(self.cache_bytes)}, tasks in flight "
            f"{format_bytes(self.in_flight_bytes)}"
        )

    def labelled(self) -> list[tuple[str, float]]:
        """(label, seconds) of each slot term, in order."""
        return [(TERMS[name], seconds) for name, seconds in self.terms().items()]


def _percents(values: list[float], decimals: int) -> list[float]:
    """Each of ``values`` as a percent of their sum, rounded to ``decimals`` so that the
    rounded ones still add up to 100: each is rounded down, and the units left go to the
    largest remainders (all 0 when the sum is not positive).

    >>> _percents([1.0, 1.0, 1.0], 0), _percents([1.2, 0.3, 0.6, 0.1, 0.1], 0)
    ([34.0, 33.0, 33.0], [52.0, 13.0, 26.0, 5.0, 4.0])
    """
    total = sum(values)
    if total <= 0:
        return [0.0] * len(values)
    units = 100 * 10**decimals
    exact = [v / total * units for v in values]
    rounded = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: rounded[i] - exact[i])
    for i in by_remainder[: units - sum(rounded)]:
        rounded[i] += 1
    return [r / 10**decimals for r in rounded]


# The slot terms, in order, with the words the summaries use.
TERMS = {
    "compute": "compute",
    "redundant": "redundant",
    "decode": "decode",
    "read_wait": "read wait",
    "encode": "encode",
    "write_wait": "write wait",
    "other": "other",
    "idle": "idle",
}
_MEANING = {
    "compute": "fn on the voxels needed",
    "redundant": "fn on margins cut off again (estimate)",
    "decode": "CPU in reads",
    "read wait": "the rest of the reads' wall",
    "encode": "CPU in writes",
    "write wait": "the rest of the writes' wall",
    "other": "other CPU: blending, casts, storage threads",
    "idle": "slots with nothing to do",
}
