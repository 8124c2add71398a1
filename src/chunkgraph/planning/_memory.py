"""``MemoryProfile``: the bytes in use on one context over time, against its budget.

The list scheduler keeps one profile per context and asks it where a unit
fits. The rules of what is live (the simulator in ``_simulate`` applies the
same ones to a finished Schedule), on context c at time τ:

    run     memory[u] of every unit u running on c:    start[u] <= τ < finish[u]
    output  output_bytes[u] of every unit u of c, from finish[u] until the finish
            of u's last consumer (until +inf if keep[u] or u has no consumers)
    copy    the edge's bytes, on consumer v's context, while v runs
            ([start[v], finish[v])), for every edge d -> v that crosses contexts

While a schedule is being built, an output whose consumers are not all placed
is reserved until +inf; placing its last consumer trims it to the latest
finish among them (``release``). A profile therefore only grows where a unit
is placed and only shrinks where an output is released, and it never exceeds
``cap``: every placement is checked first (``fits``).

State: a step function, kept as two numpy arrays

    times   [t0=-inf, t1, t2, ...]  increasing breakpoints
    levels  [l0, l1, l2, ...]       bytes in use on [t_i, t_{i+1}); the last level
                                    holds until +inf

       level
         ^          ┌──────┐
         |    ┌─────┘      └──────────   <- an output held to +inf
         |    │ run
         +────┴──────────────────────> τ
              t1    t2     t3

Each update inserts at most two breakpoints and adds to a slice (numpy:
O(breakpoints) copies, no Python loop); queries are binary searches plus a
``max`` over a slice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# A release: ``(time, nbytes)`` freed from ``max(time, finish)`` on, where finish is
# the placed unit's own finish (the unit being the last consumer of that output).
Release = tuple[float, float]


class MemoryProfile:
    """Bytes in use on one context over time (module doc); ``cap`` is its budget.

    >>> p = MemoryProfile(cap=100)
    >>> p.add(0, 10, 60)          # a run of 60 bytes on [0, 10)
    >>> p.add(10, math.inf, 30)   # its output, held for now
    >>> p.peak(0, 10), p.peak(10, math.inf)
    (60.0, 30.0)
    >>> p.fits(5, 8, during=50, after=0)   # 60 + 50 > 100 on [5, 8)
    False
    >>> p.earliest_fit(5, 3, during=50, after=0, gap=lambda t: t)
    10.0
    """

    def __init__(self, cap: float) -> None:
        self.cap = float(cap)
        self.times: FloatArray = np.array([-math.inf])
        self.levels: FloatArray = np.zeros(1)
        self._suffix_peak: FloatArray | None = None  # max of levels[i:], rebuilt after updates

    def _breakpoint(self, t: float) -> int:
        """Index of the piece starting at ``t``, inserting a breakpoint there if needed."""
        i = int(np.searchsorted(self.times, t, side="left"))
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times = np.insert(self.times, i, t)
        self.levels = np.insert(self.levels, i, self.levels[i - 1])
        return i

    def add(self, start: float, end: float, nbytes: float) -> None:
        """Add ``nbytes`` on ``[start, end)`` (``end`` may be inf; nbytes < 0 frees)."""
        if nbytes == 0 or not end > start:
            return
        lo = self._breakpoint(start)
        hi = len(self.times) if math.isinf(end) else self._breakpoint(end)
        self.levels[lo:hi] += nbytes
        self._suffix_peak = None

    def release(self, time: float, nbytes: float) -> None:
        """Trim an output held until +inf so that it ends at ``time``."""
        self.add(time, math.inf, -nbytes)

    def level(self, t: float) -> float:
        """Bytes in use at time ``t``."""
        return float(self.levels[int(np.searchsorted(self.times, t, side="right")) - 1])

    def peak(self, start: float, end: float) -> float:
        """Largest level on ``[start, end)`` (the level at ``start`` when the window is empty)."""
        lo = int(np.searchsorted(self.times, start, side="right")) - 1
        if math.isinf(end):
            if self._suffix_peak is None:
                self._suffix_peak = np.maximum.accumulate(self.levels[::-1])[::-1]
            return float(self._suffix_peak[lo])
        hi = int(np.searchsorted(self.times, end, side="left"))
        return float(self.levels[lo : max(hi, lo + 1)].max())

    def _peak_after(self, finish: float, releases: Sequence[Release]) -> float:
        """Largest level on ``[finish, inf)`` once ``releases`` are applied."""
        if not releases:
            return self.peak(finish, math.inf)
        at = sorted((max(t, finish), nbytes) for t, nbytes in releases)
        freed = 0.0
        best = -math.inf
        edge = finish
        for t, nbytes in at:
            if t > edge:
                best = max(best, self.peak(edge, t) - freed)
                edge = t
            freed += nbytes
        return max(best, self.peak(edge, math.inf) - freed)

    def fits(
        self,
        start: float,
        finish: float,
        *,
        during: float,
        after: float,
        releases: Sequence[Release] = (),
    ) -> bool:
        """Whether ``during`` more bytes on ``[start, finish)`` and ``after`` more from
        ``finish`` on (``releases`` applied) keep the profile within ``cap``.

        An empty window (a zero-second unit) is checked at ``start``, so a unit's run
        memory is never left unchecked.
        """
        if during > 0 and self.peak(start, finish) + during > self.cap:
            return False
        if after <= 0:
            return True  # releases only lower the profile, which is within cap already
        return self._peak_after(finish, releases) + after <= self.cap

    def earliest_fit(
        self,
        lo: float,
        duration: float,
        *,
        during: float,
        after: float,
        releases: Sequence[Release] = (),
        gap: Callable[[float], float],
    ) -> float | None:
        """The earliest start ``t >= lo`` that ``gap`` accepts and that ``fits``; None
        when there is none at any time.

        ``gap(t)`` is the earliest start ``>= t`` where the slot is idle for
        ``duration``. Whether a start fits changes only where ``t`` or
        ``t + duration`` crosses a breakpoint or a release time, so those are the
        only later starts worth trying: once past all of them the answer is final.
        """
        t = gap(lo)
        while True:
            if self.fits(t, t + duration, during=during, after=after, releases=releases):
                return t
            later = self._next_change(t, duration, releases)
            if later is None:
                return None
            t = gap(later)

    def _next_change(self, t: float, duration: float, releases: Sequence[Release]) -> float | None:
        """The least start > t where ``t`` or ``t + duration`` meets a breakpoint, or
        ``t + duration`` a release time (None: past all of them)."""
        times = self.times
        options = []
        i = int(np.searchsorted(times, t, side="right"))
        if i < len(times):
            options.append(float(times[i]))
        j = int(np.searchsorted(times, t + duration, side="right"))
        if j < len(times):
            options.append(float(times[j]) - duration)
        options.extend(r - duration for r, _ in releases if r - duration > t)
        later = [x for x in options if x > t]  # guards float rounding of x - duration
        return min(later) if later else None
