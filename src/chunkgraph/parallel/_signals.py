"""What the process is absorbing: busy cores and storage bytes per second.

A `ProcessSignals` sampler measures, over the window since its previous
accepted sample:

* ``cpu``: process CPU time (all threads, user + system) over wall time, in
  cores: 3.0 means three cores were busy on average.
* ``io``: bytes the process actually read from and wrote to storage per
  second (psutil's ``read_bytes + write_bytes``, which a page-cache hit does
  not count, unlike ``read_chars``); None where the platform has no such
  counters (macOS, access denied), so only the CPU signal is used.

Window guard: a window shorter than ``MIN_WINDOW_S`` is rejected
(`ProcessSignals.sample` returns None) and leaves every piece of state
untouched, so the next accepted window still starts at the last accepted
sample. A tiny window turns timer and accounting granularity into spikes:
one such window once read ~94 busy cores on a 192-core machine.

State: ``_last`` = (time, cpu seconds, io bytes) of the last accepted sample
or of `ProcessSignals.start`. The clock and the counter readers are
injectable, so tests drive the sampler with exact numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import psutil

from chunkgraph._errors import ConfigError, UsageError

# Shortest window a sample may cover. Shorter windows magnify the clock-tick
# granularity of CPU accounting and the burstiness of I/O into impossible
# readings; longer ones make activation checks sluggish (a check inside the
# window does nothing).
MIN_WINDOW_S = 0.1


@dataclass(frozen=True, slots=True)
class Reading:
    """One accepted sample: ``time`` (the sampler's clock), ``cpu`` in cores,
    ``io`` in bytes/s (None where I/O counters do not exist)."""

    time: float
    cpu: float
    io: float | None


class Sampler(Protocol):
    """What `Activation` needs from a signal source."""

    def start(self) -> float:
        """Open the first window now; return the time."""
        ...

    def sample(self) -> Reading | None:
        """The signals over the window since the last accepted sample; None if too short."""
        ...


def cpu_seconds() -> float:
    """CPU seconds this process has used, all threads.

    ``time.process_time`` reads the same counter as psutil's ``cpu_times``
    but in nanoseconds instead of clock ticks (10 ms), which matters for
    windows of a tenth of a second.
    """
    return time.process_time()


def io_bytes_reader() -> Callable[[], float] | None:
    """A reader of bytes read + written to storage by this process, or None if unavailable."""
    try:
        process = psutil.Process()
        process.io_counters()
    except (AttributeError, NotImplementedError, OSError, psutil.Error):
        return None

    def read() -> float:
        counters = process.io_counters()
        return float(counters.read_bytes + counters.write_bytes)

    return read


class ProcessSignals:
    """Samples CPU and I/O signals of this process with the window guard.

    >>> clock = iter([0.0, 0.05, 0.5]).__next__
    >>> busy = iter([0.0, 1.0]).__next__
    >>> signals = ProcessSignals(cpu=busy, io=None, clock=clock)
    >>> signals.start()
    0.0
    >>> signals.sample() is None  # 0.05 s window: rejected, nothing read
    True
    >>> signals.sample()
    Reading(time=0.5, cpu=2.0, io=None)
    """

    def __init__(
        self,
        cpu: Callable[[], float] = cpu_seconds,
        io: Callable[[], float] | Literal["psutil"] | None = "psutil",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``cpu``: CPU seconds used so far; ``io``: storage bytes so far, None for
        none, ``"psutil"`` for this process's counters where they exist."""
        if isinstance(io, str) and io != "psutil":
            raise ConfigError(f"io must be a reader, None or 'psutil'; got {io!r}")
        self._cpu = cpu
        self._io: Callable[[], float] | None = io_bytes_reader() if isinstance(io, str) else io
        self._clock = clock
        self._last: tuple[float, float, float | None] | None = None

    @property
    def has_io(self) -> bool:
        """Whether I/O counters exist here (else only the CPU signal is used)."""
        return self._io is not None

    def start(self) -> float:
        now = self._clock()
        self._last = (now, self._cpu(), self._read_io())
        return now

    def sample(self) -> Reading | None:
        if self._last is None:
            raise UsageError("ProcessSignals.sample() before start(); call start() first")
        now = self._clock()
        then, cpu_then, io_then = self._last
        window = now - then
        if window < MIN_WINDOW_S:
            return None  # the guard: nothing read, nothing stored
        cpu_now, io_now = self._cpu(), self._read_io()
        self._last = (now, cpu_now, io_now)
        io = None if io_now is None or io_then is None else (io_now - io_then) / window
        return Reading(now, (cpu_now - cpu_then) / window, io)

    def _read_io(self) -> float | None:
        return None if self._io is None else self._io()
