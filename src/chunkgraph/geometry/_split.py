"""Splitting a box into chunks on a strided grid, vectorised.

The rule, per axis (every axis independently; chunks are the C-order product)::

    origin o (default box.start), chunk c, stride s (default c)
    chunk k covers [o + k*s, o + k*s + c)

    first k:  k_lo = floor((start - o) / s)           the cell holding ``start``
    last k:   k_hi = max(k_lo, min(ceil((stop - c - o) / s),   first chunk reaching stop
                                   ceil((stop - o) / s) - 1))  last chunk starting before stop

    box [3, 13), c = s = 4, o = 0:   k = 0..3  ->  [0,4) [4,8) [8,12) [12,16)
        shrink:  clipped to the box  ->  [3,4) [4,8) [8,12) [12,13)
        expand:  as is
        exact:   error (3 is not on the grid, 13 - 3 = 10 is not 4 + k*4)

Modes:

* ``exact`` — the chunks must tile the box with no clipping: ``start - o`` is
  a multiple of ``s`` and ``stop - start = c + k*s``. Otherwise ConfigError
  naming the axis and suggesting sizes that would work.
* ``shrink`` — chunks are clipped to the box. With ``s == c`` they cover the
  box exactly once.
* ``expand`` — chunks keep their full size and may stick out past the box.

An axis of size 0 gives no chunks at all. The whole computation is a few
numpy operations on ``(n, ndim)`` int64 arrays, so 10^6 chunks take
milliseconds; ``Box.split`` wraps rows into ``Box`` objects afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import divisors, per_axis

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from chunkgraph.geometry._box import Box, IntLike, Ints, SplitMode


def split_arrays(
    box: Box,
    chunk: Ints | IntLike,
    stride: Ints | IntLike | None,
    offset: Ints | IntLike | None,
    mode: SplitMode,
) -> tuple[NDArray[np.int64], NDArray[np.int64], tuple[int, ...]]:
    """``(starts, stops, grid_shape)``: int64 arrays of shape ``(n, ndim)``, rows in C order."""
    ndim = box.ndim
    c = per_axis(chunk, ndim, "chunk")
    s = c if stride is None else per_axis(stride, ndim, "stride")
    o = box.start if offset is None else per_axis(offset, ndim, "offset")
    if any(x <= 0 for x in c) or any(x <= 0 for x in s):
        raise ConfigError(f"chunk {c} and stride {s} must be positive on every axis")
    if mode not in ("exact", "shrink", "expand"):
        raise ConfigError(f"split mode {mode!r} is not one of 'exact', 'shrink', 'expand'")

    axis_starts: list[NDArray[np.int64]] = []
    for d in range(ndim):
        lo, hi = box.start[d], box.stop[d]
        if hi == lo:
            axis_starts.append(np.empty(0, dtype=np.int64))
            continue
        if mode == "exact":
            _check_exact(d, lo, hi, c[d], s[d], o[d])
        k_lo = (lo - o[d]) // s[d]
        k_hi = max(k_lo, min(-((o[d] + c[d] - hi) // s[d]), -((o[d] - hi) // s[d]) - 1))
        axis_starts.append(o[d] + s[d] * np.arange(k_lo, k_hi + 1, dtype=np.int64))

    grid_shape = tuple(len(a) for a in axis_starts)
    n = int(np.prod(grid_shape, dtype=np.int64))
    starts = np.empty((n, ndim), dtype=np.int64)
    for d, a in enumerate(axis_starts):
        # Broadcast axis d's 1-d starts over the grid, written straight into column d.
        view_shape = [1] * ndim
        view_shape[d] = len(a)
        starts[:, d].reshape(grid_shape)[...] = a.reshape(view_shape)
    stops = starts + np.asarray(c, dtype=np.int64)
    if mode == "shrink" and n:
        np.maximum(starts, np.asarray(box.start, dtype=np.int64), out=starts)
        np.minimum(stops, np.asarray(box.stop, dtype=np.int64), out=stops)
        # A stride larger than the chunk can leave a clipped chunk empty: keep it
        # empty (stop == start) rather than inverted, so the grid stays regular.
        np.maximum(stops, starts, out=stops)
    return starts, stops, grid_shape


def _check_exact(axis: int, lo: int, hi: int, c: int, s: int, o: int) -> None:
    size = hi - lo
    if (lo - o) % s != 0:
        raise ConfigError(
            f"split mode 'exact': box start {lo} on axis {axis} is not on the chunk grid "
            f"(origin {o}, stride {s}); snap the box first, e.g. box.snapped(...), or use "
            f"mode='shrink' / 'expand'"
        )
    if size < c or (size - c) % s != 0:
        if s == c:
            sizes = divisors(size)[-6:]
            hint = f"chunk sizes that divide {size}: {sizes}"
        else:
            k = max(0, (size - c) // s)
            hint = f"box sizes that fit: {c + k * s} or {c + (k + 1) * s}"
        raise ConfigError(
            f"split mode 'exact': axis {axis} of size {size} is not tiled by chunk {c} "
            f"with stride {s} ({hint}); or use mode='shrink' / 'expand'"
        )
