"""Block reductions: one pyramid level's voxels from the level below, in memory.

Each output voxel reduces one block of ``factor`` input voxels per spatial axis.
At the volume's far edge, where the shape is no multiple of the factor, the last
block is partial and is reduced over the voxels present (igneous and TensorStore's
``downsample`` driver do the same): the level's shape is ``ceil(shape / factor)``.

The methods, exact for every dtype:

* ``mean``: float64 sum / count, rounded to the nearest integer with ties to even
  (``numpy.rint``) for integer dtypes; floats keep the float64 mean, cast back.
* ``median``: the lower median (the ``(n - 1) // 2``-th smallest of the ``n``
  voxels present), so it is always one of the block's own values.
* ``mode``: the most frequent value; a tie goes to the smallest value. For labels.
* ``max``, ``min``: the block's largest or smallest value.
* ``stride``: the block's first voxel (every k-th voxel of the level below).

Channel axes (leading) pass through untouched.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

METHODS = ("mean", "median", "mode", "max", "min", "stride")


def reduced_shape(shape: tuple[int, ...], factor: tuple[int, ...]) -> tuple[int, ...]:
    """A level's spatial shape: ``ceil(shape / factor)`` (partial edge blocks count)."""
    return tuple(-(-n // f) for n, f in zip(shape, factor, strict=True))


def block_reduce(data: np.ndarray[Any, Any], factor: tuple[int, ...], method: str) -> np.ndarray:
    """``data`` (channels first, then ``len(factor)`` spatial axes) reduced block by block.

    >>> block_reduce(np.array([[1, 2, 3], [5, 6, 7]]), (2, 2), "max")
    array([[6, 7]])
    """
    n_channel = data.ndim - len(factor)
    if method == "stride":
        every: tuple[Any, ...] = (Ellipsis, *(slice(None, None, f) for f in factor))
        strided: np.ndarray = data[every].copy()
        return strided
    if method in ("max", "min"):
        ufunc = np.maximum if method == "max" else np.minimum
        out = data
        for axis, f in enumerate(factor, start=n_channel):
            if f > 1:
                out = ufunc.reduceat(out, np.arange(0, out.shape[axis], f), axis=axis)
        return out
    if method == "mean":
        return _mean(data, factor, n_channel)
    return _sorted_blocks_reduce(data, factor, n_channel, method)


def _mean(data: np.ndarray[Any, Any], factor: tuple[int, ...], n_channel: int) -> np.ndarray:
    total = data.astype(np.float64)
    count = np.ones((1,) * data.ndim, np.float64)
    for axis, f in enumerate(factor, start=n_channel):
        if f == 1:
            continue
        starts = np.arange(0, data.shape[axis], f)
        total = np.add.reduceat(total, starts, axis=axis)
        # Voxels per block along this axis: f, and fewer in a partial last block.
        sizes = np.minimum(starts + f, data.shape[axis]) - starts
        shape = [1] * data.ndim
        shape[axis] = len(starts)
        count = count * sizes.reshape(shape)
    mean = total / count
    if np.issubdtype(data.dtype, np.integer):
        mean = np.rint(mean)
    return mean.astype(data.dtype)


def _sorted_blocks_reduce(
    data: np.ndarray[Any, Any], factor: tuple[int, ...], n_channel: int, method: str
) -> np.ndarray:
    """Median or mode: each block's voxels laid out in one row, sorted, absent ones last."""
    spatial = data.shape[n_channel:]
    out_shape = reduced_shape(spatial, factor)
    padded_shape = tuple(o * f for o, f in zip(out_shape, factor, strict=True))
    channels = data.shape[:n_channel]
    # Voxels past the edge are marked absent; they sort after every present value.
    present = np.zeros(padded_shape, bool)
    present[tuple(slice(0, n) for n in spatial)] = True
    values = np.zeros(channels + padded_shape, data.dtype)
    inside: tuple[Any, ...] = (Ellipsis, *(slice(0, n) for n in spatial))
    values[inside] = data
    k = math.prod(factor)
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
        # Count of each position's value among the present ones (rows are sorted, so a
        # run of equal values; k is small: one comparison pass per position).
        counts = np.zeros(rows.shape, np.int32)
        for j in range(k):
            counts += (rows == rows[..., j : j + 1]) & mask[..., j : j + 1]
        counts[~mask] = -1
        # argmax takes the first largest count: the smallest of the tied values.
        picked = np.take_along_axis(rows, counts.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return picked.reshape(channels + out_shape)


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
