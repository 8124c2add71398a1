"""Adaptive fork-join loops: parallel_for, parallel_map, parallel_reduce.

One engine runs all three. A loop over ``[0, n)`` flows like this:

    caller: grain known? --no--> probe prefix in the caller (real work)
              |                         |
              v                         v
      rest < sequential_below? --yes--> body(rest) in the caller, no dispatch
              | no                      (after the first call: one dict lookup)
              v
      bridge(rest, LengthSplitter(workers, min_len))   on the work-stealing pool
          split? --no--> leaf: body(start, stop), timed
            | yes: pool.join(bridge(left, splitter), bridge(right, child))
            |      a range run by a thief re-arms its splitter first
            v
      values combined left to right -> result; errors -> one ExceptionGroup

State per loop (`_Loop`): the leaf function, ``combine`` and ``identity``,
the errors raised so far (``failed`` stops new pieces from starting) and the
``(length, seconds)`` of each finished piece, which refine the grain.
Partial values are combined strictly in index order, so ``combine`` must be
associative but need not be commutative.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, cast

from chunkgraph._errors import ConfigError
from chunkgraph.parallel._grain import GRAINS, KIND_DEFAULTS, OpKind, body_key, probe
from chunkgraph.parallel._pool import WorkStealingPool, get_pool
from chunkgraph.parallel._splitter import LengthSplitter

T = TypeVar("T")
R = TypeVar("R")


class _Loop(Generic[T]):
    def __init__(
        self, leaf: Callable[[int, int], T], combine: Callable[[T, T], T], identity: T
    ) -> None:
        self.leaf = leaf
        self.combine = combine
        self.identity = identity
        self.errors: list[Exception] = []
        self.failed = False
        self.pieces: list[tuple[int, float]] = []
        self._lock = threading.Lock()

    def fail(self, error: Exception, start: int, stop: int) -> None:
        error.add_note(f"raised by the loop body on the range [{start}, {stop})")
        with self._lock:
            self.errors.append(error)
            self.failed = True

    def abandon(self) -> None:
        """Start nothing new (an interrupt is on its way out; it is not an error to group)."""
        self.failed = True

    def run_leaf(self, start: int, stop: int) -> T:
        if self.failed:  # another piece failed: start nothing new
            return self.identity
        begin = time.perf_counter()
        try:
            value = self.leaf(start, stop)
        except Exception as error:
            self.fail(error, start, stop)
            return self.identity
        except BaseException:
            self.abandon()  # Ctrl-C or exit: propagate, and start no other piece
            raise
        self.pieces.append((stop - start, time.perf_counter() - begin))
        return value

    def join_values(self, left: T, right: T, start: int, stop: int) -> T:
        if self.failed:
            return self.identity
        try:
            return self.combine(left, right)
        except Exception as error:
            self.fail(error, start, stop)
            return self.identity

    def raise_errors(self, what: str, n: int) -> None:
        if self.errors:
            count = len(self.errors)
            raise ExceptionGroup(f"{what} over {n} elements: {count} piece(s) failed", self.errors)


def _bridge(
    pool: WorkStealingPool,
    loop: _Loop[T],
    start: int,
    stop: int,
    splitter: LengthSplitter,
    stolen: bool,
) -> T:
    if stolen:
        splitter.rearm()
        pool.count("rearms")
    if loop.failed:
        return loop.identity
    cut = splitter.split(start, stop)
    if cut is None:
        return loop.run_leaf(start, stop)
    if stolen:
        pool.count("resplits")
    mid, child = cut
    left, right = pool.join(
        lambda s: _bridge(pool, loop, start, mid, splitter, s),
        lambda s: _bridge(pool, loop, mid, stop, child, s),
        loop.abandon,
    )
    return loop.join_values(left, right, start, stop)


def _check_n(n: int) -> int:
    try:
        count = operator.index(n)
    except TypeError:
        raise ConfigError(f"n must be an int >= 0; got {n!r} of type {type(n).__name__}") from None
    if count < 0:
        raise ConfigError(f"n must be an int >= 0; got {count}")
    return count


def check_grain(grain: int | None) -> int | None:
    if grain is None:
        return None
    if isinstance(grain, bool) or not isinstance(grain, int) or grain < 1:
        raise ConfigError(
            f"grain is the minimum piece length and must be an int >= 1 (or None to "
            f"measure it); got {grain!r}"
        )
    return grain


def run_loop(
    what: str,
    n: int,
    leaf: Callable[[int, int], T],
    combine: Callable[[T, T], T],
    identity: T,
    key_body: Callable[..., Any],
    grain: int | None,
    kind: OpKind | str,
) -> T:
    """The engine behind every loop: probe, then split on the pool, then combine."""
    if grain is None and type(n) is int and n > 0:
        # Fast path: a loop this body already ran, known to be too short to
        # split; it must cost little more than calling the body directly.
        code = getattr(key_body, "__code__", None)  # functions and bound methods
        if code is not None and type(kind) is OpKind:
            key: tuple[object, OpKind] = (code, kind)
        else:
            key = body_key(key_body, OpKind.coerce(kind))
        limit = GRAINS.limits.get(key)
        if limit is not None and n < limit:
            try:
                return leaf(0, n)
            except Exception as error:
                error.add_note(f"raised by the loop body on the range [0, {n})")
                message = f"{what} over {n} elements: 1 piece(s) failed"
                raise ExceptionGroup(message, [error]) from None
    return _run_measured(what, n, leaf, combine, identity, key_body, grain, kind)


def _run_measured(
    what: str,
    n: int,
    leaf: Callable[[int, int], T],
    combine: Callable[[T, T], T],
    identity: T,
    key_body: Callable[..., Any],
    grain: int | None,
    kind: OpKind | str,
) -> T:
    n = _check_n(n)
    grain = check_grain(grain)
    op = OpKind.coerce(kind)
    if n == 0:
        return identity
    pool = get_pool()
    loop = _Loop(leaf, combine, identity)
    key = body_key(key_body, op)
    values: list[T] = []
    start = 0
    if grain is None:
        values, start, min_len, limit = _measure_grain(pool, loop, key, n, what)
    else:
        min_len, limit = grain, 2 * grain
    if start < n:
        if pool.workers == 1 or n - start < limit:
            values.append(loop.run_leaf(start, n))
        else:
            probed = len(loop.pieces)
            with pool.participate():
                splitter = LengthSplitter(pool.workers, min_len)
                values.append(_bridge(pool, loop, start, n, splitter, False))
            if grain is None:
                GRAINS.refine(key, loop.pieces[probed:])
    loop.raise_errors(what, n)
    result = values[0]
    for value in values[1:]:
        result = loop.join_values(result, value, 0, n)
    loop.raise_errors(what, n)
    return result


def _measure_grain(
    pool: WorkStealingPool, loop: _Loop[T], key: tuple[object, OpKind], n: int, what: str
) -> tuple[list[T], int, int, int]:
    """Probe if needed: (probe values, where the loop goes on, min_len, sequential limit)."""
    values: list[T] = []
    start = 0
    model = GRAINS.get(key)
    if model is None or not model.trusted:
        values, start, model = probe(loop.run_leaf, 0, n)
        loop.raise_errors(what, n)
        GRAINS.put(key, model)
    op = key[1]
    dispatch = pool.dispatch_overhead()
    min_len = model.min_len(dispatch, KIND_DEFAULTS[op].overhead_multiple)
    limit = model.sequential_below(dispatch, pool.handoff_latency(), op)
    # An untrusted model comes from a probe that ran this whole loop in
    # pieces shorter than PROBE_MIN_S: loops up to this length stay one
    # call (whatever the noisy fit says), longer ones probe again.
    GRAINS.limits[key] = limit if model.trusted else n + 1
    return values, start, min_len, limit


def _nothing(_a: object, _b: object) -> None:
    return None


def parallel_for(
    n: int,
    body: Callable[[int, int], object],
    *,
    grain: int | None = None,
    kind: OpKind | str = OpKind.COMPUTE,
) -> None:
    """Call ``body(start, stop)`` on pieces that cover ``[0, n)`` exactly once.

    Pieces run on the process-wide work-stealing pool.

    Args:
        n: The loop's length (an int >= 0).
        body: Called as ``body(start, stop)`` on each piece of ``[0, n)``.
        grain: The shortest piece, in elements; None: measured from the body's cost
            (see ``parallel/README.md``).
        kind: The operation class, an OpKind or ``"compute"``, ``"memory"``, ``"sort"``;
            it seeds and scales the measured grain.

    Raises:
        ExceptionGroup: Of every failing piece's error, once the running pieces have
            stopped; no piece starts after a failure.

    >>> import numpy as np
    >>> x = np.arange(1_000, dtype=np.float64)
    >>> out = np.empty_like(x)
    >>> def body(start, stop):
    ...     np.sqrt(x[start:stop], out=out[start:stop])
    >>> parallel_for(len(x), body)
    >>> bool(np.array_equal(out, np.sqrt(x)))
    True
    """

    run_loop("parallel_for", n, body, _nothing, None, body, grain, kind)


def parallel_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    grain: int | None = None,
    kind: OpKind | str = OpKind.COMPUTE,
) -> list[R]:
    """``[fn(item) for item in items]``, computed in parallel pieces, in order.

    Threads run Python one at a time, so the speedup comes from ``fn``
    releasing the GIL (numpy on large arrays, compression, I/O); the grain
    is measured per ``fn`` as for `parallel_for`.

    Args:
        fn: Called once per item.
        items: The items (an iterable that is not a sequence is made a list first).
        grain: The shortest piece, in elements; None: measured from the body's cost
            (see ``parallel/README.md``).
        kind: The operation class, an OpKind or ``"compute"``, ``"memory"``, ``"sort"``;
            it seeds and scales the measured grain.

    Raises:
        ExceptionGroup: Of every failing call's error, as for ``parallel_for``.

    >>> parallel_map(lambda v: v * v, range(5))
    [0, 1, 4, 9, 16]
    """
    seq: Sequence[T] = items if isinstance(items, Sequence) else list(items)
    out: list[R | None] = [None] * len(seq)

    def leaf(start: int, stop: int) -> None:
        for i in range(start, stop):
            out[i] = fn(seq[i])

    run_loop("parallel_map", len(seq), leaf, _nothing, None, fn, grain, kind)
    return cast(list[R], out)


def parallel_reduce(
    n: int,
    body: Callable[[int, int], T],
    combine: Callable[[T, T], T],
    identity: T,
    *,
    grain: int | None = None,
    kind: OpKind | str = OpKind.MEMORY,
) -> T:
    """Combine, left to right, the values ``body(start, stop)`` of pieces of ``[0, n)``.

    ``combine`` must be associative (it need not be commutative: partial
    values are combined in index order). Returns ``identity`` when ``n == 0``.

    Args:
        n: The loop's length (an int >= 0).
        body: Called as ``body(start, stop)`` on each piece; returns its partial value.
        combine: Called as ``combine(left, right)`` on partial values; associative.
        identity: The value of an empty loop.
        grain: The shortest piece, in elements; None: measured from the body's cost
            (see ``parallel/README.md``).
        kind: The operation class, an OpKind or ``"compute"``, ``"memory"`` (the
            default), ``"sort"``; it seeds and scales the measured grain.

    >>> import numpy as np
    >>> x = np.arange(10_000, dtype=np.int64)
    >>> parallel_reduce(len(x), lambda a, b: int(x[a:b].sum()), lambda p, q: p + q, 0)
    49995000
    """
    return run_loop("parallel_reduce", n, body, combine, identity, body, grain, kind)
