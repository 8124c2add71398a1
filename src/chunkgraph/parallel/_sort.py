"""parallel_sort: split by exact quantiles, then sort the partitions in parallel.

The textbook parallel sort (sort pieces, then merge) does not pay off with
numpy: its quicksort is vectorised (about 8 ns per float64 at 10^7), while
every merge numpy can express costs as much or more (a stable sort of two
sorted runs ~9 ns/element, a searchsorted merge ~25 ns/element). Selection
is cheap instead: ``ndarray.partition(k)`` puts the k-th smallest element at
``k`` with nothing larger before it and nothing smaller after it in about
2 ns/element. So the range is cut at quantiles, and the parts, now
independent, are sorted on the pool:

    copy of input [........................................]
    partition(n/2)  [ <= q(1/2) ........ | >= q(1/2) ......]      (caller)
    partition each  [ <=q1/4 | ........ ][ <=q3/4 | ........]      (parallel)
    sort each leaf  [ sorted ][ sorted  ][ sorted ][ sorted ]      (parallel)

The cut tree is a `LengthSplitter` with one leaf per worker (``splits =
workers - 1``): each extra level costs a partition pass over its range, so
more leaves than workers would buy balance at a price the vectorised sort
does not repay; for the same reason a stolen range is not re-armed. The
minimum leaf is the grain of the "sort" operation class.
Multi-dimensional arrays are sorted along the last axis like `numpy.sort`:
rows are independent, so they are simply split among the workers.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import ConfigError
from chunkgraph.parallel._grain import GRAINS, KIND_DEFAULTS, CostModel, OpKind
from chunkgraph.parallel._loops import check_grain as _check_grain
from chunkgraph.parallel._loops import parallel_for
from chunkgraph.parallel._pool import WorkStealingPool, get_pool
from chunkgraph.parallel._splitter import LengthSplitter

# Dtype kinds sorted in parallel; others (objects, structured records) fall
# back to numpy.sort: comparisons of Python objects hold the GIL anyway.
PARALLEL_KINDS = frozenset("biufcmMSU?")


def _sort_key(dtype: np.dtype[Any]) -> tuple[object, OpKind]:
    return (("parallel_sort", dtype), OpKind.SORT)


def _sort_range(
    pool: WorkStealingPool,
    out: npt.NDArray[Any],
    start: int,
    stop: int,
    splitter: LengthSplitter,
    pieces: list[tuple[int, float]],
) -> None:
    cut = splitter.split(start, stop)
    if cut is None:
        begin = time.perf_counter()
        out[start:stop].sort()
        pieces.append((stop - start, time.perf_counter() - begin))
        return
    mid, child = cut
    out[start:stop].partition(mid - start)
    pool.join(
        lambda _s: _sort_range(pool, out, start, mid, splitter, pieces),
        lambda _s: _sort_range(pool, out, mid, stop, child, pieces),
    )


def _sort_rows(out: npt.NDArray[Any], grain: int | None) -> None:
    rows = out.reshape(-1, out.shape[-1])

    def body(start: int, stop: int) -> None:
        rows[start:stop].sort(axis=-1)

    parallel_for(rows.shape[0], body, grain=grain, kind=OpKind.SORT)


def parallel_sort(array: npt.ArrayLike, *, grain: int | None = None) -> npt.NDArray[Any]:
    """A sorted copy of ``array`` along its last axis, equal to ``numpy.sort(array)``.

    NaN (and NaT) sort last, as in numpy; the input is not modified.

    Args:
        array: Anything ``numpy.asarray`` takes.
        grain: The fewest elements (rows, for n-d input) per piece; None: the "sort"
            operation class's measured grain.

    >>> parallel_sort([3.0, float("nan"), 1.0, 2.0])
    array([ 1.,  2.,  3., nan])
    """
    values = np.asarray(array)
    if grain is None and values.ndim == 1:
        # Fast path: a length this dtype is known to sort faster in one call.
        limit = GRAINS.limits.get(_sort_key(values.dtype))
        if limit is not None and len(values) < limit:
            return np.sort(values)
    if values.ndim == 0:
        raise ConfigError(
            "parallel_sort needs an array with at least one axis; got a 0-d array "
            f"({values!r}); wrap it as [value] if a one-element array was meant"
        )
    if values.dtype.kind not in PARALLEL_KINDS or values.shape[-1] < 2:
        return np.sort(values)
    out = values.copy()
    if out.ndim > 1:
        _sort_rows(out, grain)
        return out
    pool = get_pool()
    key = _sort_key(out.dtype)
    min_len = _check_grain(grain)
    if min_len is None:
        model = GRAINS.get(key)
        if model is None:
            model = CostModel(KIND_DEFAULTS[OpKind.SORT].seed_per_element_s, 0.0)
            GRAINS.put(key, model)
        dispatch = pool.dispatch_overhead()
        min_len = model.min_len(dispatch, KIND_DEFAULTS[OpKind.SORT].overhead_multiple)
        limit = model.sequential_below(dispatch, pool.handoff_latency(), OpKind.SORT)
        GRAINS.limits[key] = limit if pool.workers > 1 else len(out) + 1
    else:
        limit = 2 * min_len
    if pool.workers == 1 or len(out) < limit:
        out.sort()
        return out
    pieces: list[tuple[int, float]] = []
    with pool.participate():
        splitter = LengthSplitter(pool.workers, min_len, splits=pool.workers - 1)
        _sort_range(pool, out, 0, len(out), splitter, pieces)
    if grain is None:
        GRAINS.refine(key, pieces)
    return out
