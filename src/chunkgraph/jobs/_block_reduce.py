"""Block reductions: one pyramid level's voxels from the level below, in memory.

Each output voxel reduces one block of ``factor`` input voxels per spatial axis.
At the volume's far edge, where the shape is no multiple of the factor, the last
block is partial and is reduced over the voxels present (igneous and TensorStore's
``downsample`` driver do the same): the level's shape is ``ceil(shape / factor)``.

The methods, exact for every dtype:

* ``mean``: the block's sum (integers in a wide integer type, floats in float64) over
  its count; integer dtypes round to the nearest integer, ties to even (as ``numpy.rint``
  of the exact quotient, done in integers); floats divide in float64 and cast back.
* ``median``: the lower median (the ``(n - 1) // 2``-th smallest of the ``n``
  voxels present), so it is always one of the block's own values.
* ``mode``: the most frequent value; a tie goes to the smallest value. For labels.
* ``max``, ``min``: the block's largest or smallest value.
* ``stride``: the block's first voxel (every k-th voxel of the level below).

Channel axes (leading) pass through untouched.

Speed. Every method works on whole arrays, never per block in Python. Blocks that are
whole take the fast paths: the mean of integers whose block size is a power of two
rounds with a shift; median and mode of integer blocks of at most ``NETWORK_MAX`` voxels lay the
block's voxels out as that many arrays and sort them with a sorting network (element-wise
``minimum``/``maximum``: ~5x faster than ``numpy.sort`` along rows of 8), then read the
mode off the sorted runs. The results are those of the general path, bit for bit.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

METHODS = ("mean", "median", "mode", "max", "min", "stride")

# Blocks of at most this many voxels are sorted by a network (factor 4 x 4 x 4 at most);
# the network's size grows as k log^2 k, and past this numpy's sort is as fast.
NETWORK_MAX = 64

# Inputs larger than this are reduced in slabs of about this size (``_in_slabs``).
SLAB_BYTES = 2**20


def reduced_shape(shape: tuple[int, ...], factor: tuple[int, ...]) -> tuple[int, ...]:
    """A level's spatial shape: ``ceil(shape / factor)`` (partial edge blocks count)."""
    return tuple(-(-n // f) for n, f in zip(shape, factor, strict=True))


def block_reduce(data: np.ndarray[Any, Any], factor: tuple[int, ...], method: str) -> np.ndarray:
    """``data`` (channels first, then ``len(factor)`` spatial axes) reduced block by block.

    >>> block_reduce(np.array([[1, 2, 3], [5, 6, 7]]), (2, 2), "max")
    array([[6, 7]])
    """
    n_channel = data.ndim - len(factor)
    if data.nbytes > SLAB_BYTES and n_channel == 0 and data.shape[0] > factor[0]:
        return _in_slabs(data, factor, method)
    return _block_reduce(data, factor, method, n_channel)


def _in_slabs(data: np.ndarray[Any, Any], factor: tuple[int, ...], method: str) -> np.ndarray:
    """``block_reduce`` slab by slab along the first axis, each slab a whole number of
    blocks thick, reduced into its part of the output: the temporaries stay in the
    cache (~2x faster on a 16 MiB region than one pass over it), and the result is the
    same, blocks being reduced independently."""
    f = factor[0]
    per_row = data.nbytes // data.shape[0]
    rows = max(1, SLAB_BYTES // (per_row * f)) * f
    first = _block_reduce(data[:rows], factor, method, 0)
    out = np.empty((-(-data.shape[0] // f), *first.shape[1:]), first.dtype)
    out[: first.shape[0]] = first
    for start in range(rows, data.shape[0], rows):
        out[start // f : (start + rows) // f] = _block_reduce(
            data[start : start + rows], factor, method, 0
        )
    return out


def _block_reduce(
    data: np.ndarray[Any, Any], factor: tuple[int, ...], method: str, n_channel: int
) -> np.ndarray:
    """``block_reduce`` of one piece, in one pass."""
    if method == "stride":
        every: tuple[Any, ...] = (Ellipsis, *(slice(None, None, f) for f in factor))
        strided: np.ndarray = data[every].copy()
        return strided
    if method in ("max", "min"):
        ufunc = np.maximum if method == "max" else np.minimum
        out = data
        for axis, f in enumerate(factor, start=n_channel):
            out = _combine_strided(out, axis, f, ufunc, out.dtype)
        return out
    if method == "mean":
        return _mean(data, factor, n_channel)
    return _sorted_blocks_reduce(data, factor, n_channel, method)


def _mean(data: np.ndarray[Any, Any], factor: tuple[int, ...], n_channel: int) -> np.ndarray:
    total = data
    count: Any = 1  # a number while every block is whole, an array once one is partial
    accumulate = _sum_dtype(data.dtype, math.prod(factor))
    for axis, f in enumerate(factor, start=n_channel):
        if f == 1:
            continue
        starts = np.arange(0, data.shape[axis], f)
        total = _combine_strided(total, axis, f, np.add, accumulate)
        if data.shape[axis] % f == 0:
            count = count * f
            continue
        # Voxels per block along this axis: f, and fewer in the partial last block.
        sizes = np.minimum(starts + f, data.shape[axis]) - starts
        shape = [1] * data.ndim
        shape[axis] = len(starts)
        count = count * sizes.reshape(shape)
    if np.issubdtype(data.dtype, np.integer):
        if isinstance(count, int) and total.dtype != object and count & (count - 1) == 0:
            return _shifted_quotient(total, count.bit_length() - 1).astype(data.dtype)
        return _rounded_quotient(total, count).astype(data.dtype)
    mean: np.ndarray = (total / count).astype(data.dtype)
    return mean


def _rounded_quotient(total: np.ndarray, count: Any) -> np.ndarray:
    """``total / count`` rounded to the nearest integer, ties to even (``numpy.rint`` of the
    float64 quotient), in integer arithmetic: the remainder decides, no float64 arrays."""
    if total.dtype.kind == "u":  # uint64 beside int64 would make numpy go to float64
        count = np.asarray(count).astype(total.dtype)
    quotient: np.ndarray = total // count  # floor, so the remainder is in [0, count)
    twice = (total - quotient * count) * 2
    quotient += (twice > count) | ((twice == count) & (quotient % 2 == 1))
    return quotient


def _shifted_quotient(total: np.ndarray, shift: int) -> np.ndarray:
    """``total / 2 ** shift`` rounded to the nearest integer, ties to even, as
    ``_rounded_quotient``: adding ``half - 1`` and the quotient's own parity, then
    shifting, rounds a remainder past half up and a remainder of half to even. ``total``
    has room for the addition (``_sum_dtype`` leaves at least a block's count of it)."""
    if shift == 0:
        return total
    bias = total >> shift
    bias &= 1
    bias += (1 << (shift - 1)) - 1
    bias += total
    bias >>= shift
    return bias


def _combine_strided(
    data: np.ndarray, axis: int, f: int, ufunc: np.ufunc, dtype: np.dtype[Any]
) -> np.ndarray:
    """``data`` combined by ``ufunc`` over blocks of ``f`` along ``axis``, as ``f`` strided
    slices combined element-wise: whole-array operations, several times faster than
    ``ufunc.reduceat`` or a reshape's reduction over short axes. A partial last block
    takes only the slices that reach it."""
    if f == 1:
        return data if data.dtype == dtype else data.astype(dtype)
    n = data.shape[axis]

    def strided(i: int) -> np.ndarray:
        index: list[Any] = [slice(None)] * data.ndim
        index[axis] = slice(i, None, f)
        part: np.ndarray = data[tuple(index)]
        return part

    out = strided(0).astype(dtype)  # a copy: the accumulator
    for i in range(1, min(f, n)):
        part = strided(i)
        reach: list[Any] = [slice(None)] * data.ndim
        reach[axis] = slice(0, part.shape[axis])
        target = out[tuple(reach)]
        ufunc(target, part, out=target, casting="unsafe")
    return out


def _sum_dtype(dtype: np.dtype[Any], block: int) -> np.dtype[Any]:
    """Where a block's sum is exact: integers in an integer type wide enough for
    ``block`` of them (summing in it is ~4x faster than in float64), floats in float64.
    The sum then goes to float64 for the division: exact below 2**53."""
    if dtype.kind == "u" and dtype.itemsize == 1 and block < 2**8:
        # Half the memory traffic of uint32, with room for the rounding's added half.
        return np.dtype(np.uint16)
    if dtype.kind == "u" and dtype.itemsize <= 2 and block < 2**16:
        return np.dtype(np.uint32)
    if dtype.kind in "uib":
        # 64-bit integers (labels, mostly) could overflow any numpy integer: Python ints,
        # slow but exact, as the sum must be.
        bits = dtype.itemsize * 8 - (dtype.kind == "i") + math.ceil(math.log2(max(block, 1)))
        if bits > 63:
            return np.dtype(object)
        return np.dtype(np.uint64 if dtype.kind == "u" else np.int64)
    return np.dtype(np.float64)


def _sorted_blocks_reduce(
    data: np.ndarray[Any, Any], factor: tuple[int, ...], n_channel: int, method: str
) -> np.ndarray:
    """Median or mode: each block's voxels laid out in one row, sorted, absent ones last."""
    spatial = data.shape[n_channel:]
    out_shape = reduced_shape(spatial, factor)
    padded_shape = tuple(o * f for o, f in zip(out_shape, factor, strict=True))
    channels = data.shape[:n_channel]
    k = math.prod(factor)
    # Integers only: minimum and maximum carry a NaN to both sides, where a sort puts it last.
    if padded_shape == spatial and k <= NETWORK_MAX and data.dtype.kind in "iu":
        columns = _sorted_columns(data, factor)
        if method == "median":
            return columns[(k - 1) // 2]
        return _mode_of_sorted_columns(columns)
    if padded_shape == spatial:  # every block whole: a plain sort
        rows = np.sort(_as_block_rows(data, out_shape, factor, n_channel), axis=-1)
        mask = np.ones(rows.shape, bool)
        n_present = np.full(rows.shape[:-1], k)
    else:
        # Voxels past the edge are marked absent; they sort after every present value.
        present = np.zeros(padded_shape, bool)
        present[tuple(slice(0, n) for n in spatial)] = True
        values = np.zeros(channels + padded_shape, data.dtype)
        inside: tuple[Any, ...] = (Ellipsis, *(slice(0, n) for n in spatial))
        values[inside] = data
        rows = _as_block_rows(values, out_shape, factor, n_channel)  # (..., blocks, k)
        mask = np.broadcast_to(_as_block_rows(present, out_shape, factor, 0), rows.shape)
        # Sort by (absent, value): absent voxels go to the end of each row.
        order = np.lexsort((rows, ~mask), axis=-1)
        rows = np.take_along_axis(rows, order, axis=-1)
        mask = np.take_along_axis(mask, order, axis=-1)
        n_present = mask.sum(axis=-1)
    if method == "median":
        lower = ((n_present - 1) // 2)[..., None]
        picked = np.take_along_axis(rows, lower, axis=-1)[..., 0]
    else:
        picked = _mode_of_sorted(rows, mask)
    return picked.reshape(channels + out_shape)


def _sorted_columns(data: np.ndarray[Any, Any], factor: tuple[int, ...]) -> list[np.ndarray]:
    """The ``k`` voxels of every (whole) block as ``k`` arrays of the reduced shape,
    sorted across them: ``columns[j]`` holds each block's ``j``-th smallest voxel."""
    columns = []
    for at in itertools.product(*(range(f) for f in factor)):
        index: tuple[Any, ...] = (
            Ellipsis,
            *(slice(o, None, f) for o, f in zip(at, factor, strict=True)),
        )
        # A copy always: the network sorts in place, and a view that is contiguous
        # already (one block, say) would write into ``data``, a cached chunk read-only.
        columns.append(np.array(data[index], order="C", copy=True))
    spare = np.empty_like(columns[0])
    for i, j in _network(len(columns)):
        np.minimum(columns[i], columns[j], out=spare)
        np.maximum(columns[i], columns[j], out=columns[j])
        columns[i], spare = spare, columns[i]
    return columns


def _mode_of_sorted_columns(columns: list[np.ndarray]) -> np.ndarray:
    """Each block's most frequent voxel, the smallest on a tie, from its sorted voxels
    (``_sorted_columns``): as ``_mode_of_sorted`` with every voxel present, in place."""
    best_value = columns[0]
    counts = np.uint8 if len(columns) < 2**8 else np.uint16
    run = np.zeros(best_value.shape, counts)  # the current run's length, less one
    best = run.copy()
    same = np.empty(best_value.shape, bool)
    better = np.empty(best_value.shape, bool)
    change = np.empty_like(best_value)
    for j in range(1, len(columns)):
        np.equal(columns[j], columns[j - 1], out=same)
        run += 1
        run *= same
        # Strictly longer only: the first run to reach a length keeps it (the smaller value).
        np.greater(run, best, out=better)
        np.maximum(best, run, out=best)
        # best_value = columns[j] where better, without branches (a masked copy over a
        # scattered mask is ~10x slower): xor in the difference, zeroed where not better.
        np.bitwise_xor(columns[j], best_value, out=change)
        change *= better
        best_value ^= change
    return best_value


@functools.cache
def _network(k: int) -> tuple[tuple[int, int], ...]:
    """A sorting network for ``k`` values: Batcher's odd-even merge sort for the next
    power of two, less the comparators that reach past ``k`` (those would compare with
    a maximum placed there, which never moves: the rest sorts the first ``k``). Each
    pair ``(i, j)``, ``i < j``, puts the smaller value at ``i``."""
    n = 1 << max(0, (k - 1).bit_length())

    def merge(lo: int, hi: int, r: int) -> list[tuple[int, int]]:
        step = r * 2
        if step >= hi - lo:
            return [(lo, lo + r)]
        return [
            *merge(lo, hi, step),
            *merge(lo + r, hi, step),
            *((i, i + r) for i in range(lo + r, hi - r, step)),
        ]

    def sort(lo: int, hi: int) -> list[tuple[int, int]]:
        if hi <= lo:
            return []
        mid = lo + (hi - lo) // 2
        return [*sort(lo, mid), *sort(mid + 1, hi), *merge(lo, hi, 1)]

    return tuple((i, j) for i, j in sort(0, n - 1) if j < k)


def _mode_of_sorted(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each row's most frequent present value, the smallest on a tie (rows sorted, absent
    voxels last). Sorted rows hold equal values in runs: one pass over the positions
    keeps each row's run length and its longest run so far, column by column (one
    vector operation across all rows per position: ~8x faster than along short rows)."""
    columns = np.moveaxis(rows, -1, 0)
    present = np.moveaxis(mask, -1, 0)
    best_value: np.ndarray = columns[0].copy()
    best_count = np.ones(columns.shape[1:], np.int32)
    run = best_count.copy()
    for j in range(1, columns.shape[0]):
        same = (columns[j] == columns[j - 1]) & present[j]
        run = np.where(same, run + 1, 1)
        # Strictly longer only: the first run to reach a length keeps it (the smaller value).
        better = present[j] & (run > best_count)
        best_count = np.where(better, run, best_count)
        best_value = np.where(better, columns[j], best_value)
    return best_value


def _as_block_rows(
    values: np.ndarray[Any, Any],
    out_shape: tuple[int, ...],
    factor: tuple[int, ...],
    n_channel: int,
) -> np.ndarray:
    """(channels..., out voxels, voxels of each block) view of ``values``."""
    channels = values.shape[:n_channel]
    split: list[int] = []
    for o, f in zip(out_shape, factor, strict=True):
        split += [o, f]
    blocks = values.reshape(channels + tuple(split))
    nd = len(factor)
    outer = [n_channel + 2 * i for i in range(nd)]
    inner = [n_channel + 2 * i + 1 for i in range(nd)]
    blocks = blocks.transpose(list(range(n_channel)) + outer + inner)
    return blocks.reshape((*channels, math.prod(out_shape), math.prod(factor)))
