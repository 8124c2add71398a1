"""ProcessSignals: CPU in cores and I/O in bytes/s over windows, and the 0.1 s guard."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from chunkgraph import ConfigError, UsageError
from chunkgraph.parallel._signals import (
    MIN_WINDOW_S,
    ProcessSignals,
    Reading,
    cpu_seconds,
    io_bytes_reader,
)


class Counter:
    """A reader that returns scripted values and counts how often it was read."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)
        self.reads = 0

    def __call__(self) -> float:
        value = self.values[self.reads]
        self.reads += 1
        return value


def clock(*times: float) -> Callable[[], float]:
    return iter(times).__next__


def test_cpu_is_cpu_seconds_over_wall_seconds_in_cores() -> None:
    signals = ProcessSignals(cpu=Counter(10.0, 13.0), io=None, clock=clock(5.0, 7.0))
    assert signals.start() == 5.0
    assert signals.sample() == Reading(7.0, 1.5, None)


def test_io_is_bytes_read_and_written_per_second() -> None:
    signals = ProcessSignals(
        cpu=Counter(0.0, 0.0, 0.0), io=Counter(100.0, 600.0, 600.0), clock=clock(0.0, 0.5, 1.5)
    )
    signals.start()
    assert signals.sample() == Reading(0.5, 0.0, 1000.0)
    assert signals.sample() == Reading(1.5, 0.0, 0.0)


def test_a_short_window_is_rejected_and_leaves_the_state_untouched() -> None:
    """The 94-cores lesson: 0.94 CPU seconds in 0.01 s would read 94 cores.

    The guard must not read (or store) anything, so the next accepted window
    still starts at the start and averages the burst over a full second.
    """
    cpu = Counter(0.0, 1.0)
    io = Counter(0.0, 2000.0)
    signals = ProcessSignals(cpu=cpu, io=io, clock=clock(0.0, 0.01, 0.099, 1.0))
    signals.start()
    assert signals.sample() is None  # 0.01 s
    assert signals.sample() is None  # 0.099 s, still measured from the start
    assert (cpu.reads, io.reads) == (1, 1)  # nothing read since start()
    assert signals.sample() == Reading(1.0, 1.0, 2000.0)


def test_a_window_of_exactly_the_minimum_is_accepted() -> None:
    signals = ProcessSignals(cpu=Counter(0.0, 0.05), io=None, clock=clock(0.0, MIN_WINDOW_S))
    signals.start()
    reading = signals.sample()
    assert reading is not None
    assert reading.cpu == pytest.approx(0.5)


def test_without_io_counters_only_cpu_is_read() -> None:
    signals = ProcessSignals(cpu=Counter(0.0, 1.0), io=None, clock=clock(0.0, 1.0))
    assert not signals.has_io
    signals.start()
    reading = signals.sample()
    assert reading is not None and reading.io is None


def test_sample_before_start_and_a_bad_io_argument_are_refused() -> None:
    with pytest.raises(UsageError, match="start"):
        ProcessSignals(io=None).sample()
    with pytest.raises(ConfigError, match="psutil"):
        ProcessSignals(io="psutl")  # type: ignore[arg-type]


def test_the_real_readers_measure_this_process() -> None:
    before = cpu_seconds()
    end = time.perf_counter() + 30  # a loaded machine may give this loop little CPU
    while cpu_seconds() <= before and time.perf_counter() < end:  # burn CPU until counted
        pass
    assert cpu_seconds() > before
    signals = ProcessSignals()
    reader = io_bytes_reader()
    assert signals.has_io == (reader is not None)
    signals.start()
    time.sleep(MIN_WINDOW_S + 0.01)
    reading = signals.sample()
    assert reading is not None and reading.cpu >= 0.0
    assert reading.io is None if reader is None else reading.io >= 0.0
