"""The grain of a loop, in time: how short a piece may be before splitting loses.

A piece costs its caller a few microseconds of Python (a closure, a deque
push and pop, a join): the ``dispatch`` overhead. A piece that another thread
steals also waits a ``latency`` of tens of microseconds (a wake-up, a steal,
the owner's wake-up), paid in wall time while the owner keeps working. So
the smallest worthwhile piece, and the shortest loop worth splitting, are
durations, not element counts. For each loop body (keyed by its code object,
so a lambda re-created on every call shares one estimate) and operation
class, the first call measures:

    caller thread, before any split:
    [1][4][ 16 ][    64    ] ...  ->  t(len) = per_call + per_element * len
     probe pieces, growing 4x until one takes >= PROBE_MIN_S; they are real
     work (the loop continues after them), the last two give the fit.
     Starting at one element keeps an expensive body from running long
     sequentially; a cheap one pays about ten extra calls, once.

and the pool measures ``dispatch`` and ``latency`` once, when it starts. Then

    min_len          = ceil(overhead_multiple * (dispatch + per_call) / per_element)
    sequential_below = max(2 * min_len, ceil(latency_multiple * latency / per_element))

so every piece runs at least ``overhead_multiple`` times what it cost to
hand out, and a loop is split only when it runs ``latency_multiple`` times
longer than a hand-off; shorter loops are one call in the caller. After each
parallel loop the per-element cost is blended with what the pieces really
took (``REFINE_WEIGHT``), which corrects a probe that ran on cold memory.

Operation classes set the multiples, and seed the per-element cost where no
probe can run (the leaves of `parallel_sort`):

    class    seed/element  overhead  latency  why
    compute      5 ns         50        8     per-element math; scales with cores
    memory     0.5 ns        200       16     streaming (sums): threads share memory
                                              bandwidth, so a piece gains less and
                                              must be longer to repay its dispatch
    sort        10 ns         50      100     each cut costs a partition pass over
                                              its range, so splitting gains ~25%
                                              at 2 workers: only long sorts repay it
"""

from __future__ import annotations

import enum
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from chunkgraph._errors import ConfigError

T = TypeVar("T")

# A probe piece shorter than this is timer noise plus cache effects; longer
# probes are measured better but delay the parallel part of the first call.
PROBE_MIN_S = 5e-4
# Probe pieces grow by this factor: larger reaches PROBE_MIN_S in fewer
# calls, smaller runs less work sequentially before the loop goes parallel.
PROBE_GROWTH = 4
# Weight of a finished loop's measured per-element cost in the running
# estimate: higher adapts faster, lower resists one noisy run.
REFINE_WEIGHT = 0.25
# Estimates kept; the oldest are forgotten first (bodies are usually few).
CACHE_SIZE = 1024


class OpKind(enum.Enum):
    """Operation class of a loop body: seeds and scales its grain."""

    COMPUTE = "compute"
    MEMORY = "memory"
    SORT = "sort"

    @classmethod
    def coerce(cls, kind: OpKind | str) -> OpKind:
        """``kind`` as an OpKind.

        Args:
            kind: An OpKind, or its value (``"compute"``, ``"memory"``, ``"sort"``).

        Raises:
            ConfigError: For any other value, naming the valid ones.
        """
        try:
            return kind if isinstance(kind, OpKind) else cls(kind)
        except ValueError:
            valid = ", ".join(repr(k.value) for k in cls)
            raise ConfigError(f"unknown operation kind {kind!r}; valid: {valid}") from None


@dataclass(frozen=True)
class KindDefaults:
    """Per-class tuning: see the module docstring's table."""

    seed_per_element_s: float
    overhead_multiple: float
    latency_multiple: float


KIND_DEFAULTS: dict[OpKind, KindDefaults] = {
    OpKind.COMPUTE: KindDefaults(5e-9, 50.0, 8.0),
    OpKind.MEMORY: KindDefaults(5e-10, 200.0, 16.0),
    OpKind.SORT: KindDefaults(1e-8, 50.0, 100.0),
}


@dataclass(frozen=True)
class CostModel:
    """Measured cost of one body: ``t(len) = per_call_s + per_element_s * len``.

    Attributes:
        per_element_s: Seconds per element of the loop.
        per_call_s: Seconds per call of the body, whatever its length.
        trusted: False when the probe ran out of elements before a piece took
            ``PROBE_MIN_S``: good enough to keep a small loop sequential, but a longer
            loop probes again before it splits.
    """

    per_element_s: float
    per_call_s: float
    trusted: bool = True

    def min_len(self, dispatch_s: float, multiple: float) -> int:
        """Shortest piece that runs ``multiple`` times its dispatch overhead.

        Args:
            dispatch_s: Seconds one piece's dispatch costs.
            multiple: How many times its dispatch a piece must run.

        >>> CostModel(per_element_s=1e-8, per_call_s=0.0).min_len(3e-6, 50)
        15000
        """
        needed = multiple * (dispatch_s + self.per_call_s) / self.per_element_s
        return max(1, math.ceil(round(needed, 6)))  # round: 1e-8 is not exact in binary

    def sequential_below(self, dispatch_s: float, latency_s: float, kind: OpKind) -> int:
        """Loops shorter than this run in one call: ``max(2 * min_len, latency bound)``.

        Args:
            dispatch_s: Seconds one piece's dispatch costs.
            latency_s: Seconds a hand-off to another thread costs (a wake-up, a steal),
                as the pool measured it.
            kind: The loop's operation class, which sets both multiples.

        >>> model = CostModel(per_element_s=1e-8, per_call_s=0.0)
        >>> model.sequential_below(3e-6, 25e-6, OpKind.COMPUTE)  # 2 * 15_000 > 8 * 2_500
        30000
        >>> model.sequential_below(3e-6, 25e-6, OpKind.SORT)  # 100 * 2_500 > 2 * 15_000
        250000
        """
        tune = KIND_DEFAULTS[kind]
        hide_latency = math.ceil(round(tune.latency_multiple * latency_s / self.per_element_s, 6))
        return max(2 * self.min_len(dispatch_s, tune.overhead_multiple), hide_latency)


def fit(samples: list[tuple[int, float]]) -> CostModel:
    """Fit ``t = a + c * len`` through the last two ``(len, seconds)`` samples.

    >>> fit([(100, 0.0011), (200, 0.0021)])
    CostModel(per_element_s=1e-05, per_call_s=0.0001, trusted=True)
    """
    n2, t2 = samples[-1]
    per_element = t2 / n2
    per_call = 0.0
    if len(samples) >= 2:
        n1, t1 = samples[-2]
        slope = (t2 - t1) / (n2 - n1) if n2 != n1 else 0.0
        intercept = t1 - slope * n1
        if slope > 0 and intercept >= 0:  # noise can make either meaningless
            per_element, per_call = slope, intercept
    trusted = t2 >= PROBE_MIN_S
    return CostModel(round(max(per_element, 1e-12), 15), round(per_call, 12), trusted)


def body_key(body: Callable[..., Any], kind: OpKind) -> tuple[object, OpKind]:
    """What estimates are cached under: the body's code, not the function object."""
    while isinstance(body, partial):
        body = body.func
    target: Any = getattr(body, "__func__", body)  # bound method -> function
    return (getattr(target, "__code__", None) or type(target), kind)


class GrainCache:
    """Thread-safe memory of cost models per (body, kind).

    ``limits`` caches, per key, the length below which a loop runs
    sequentially (``2 * min_len``), so that a small loop costs one dict lookup
    before its body runs; it is dropped whenever the model changes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[tuple[object, OpKind], CostModel] = {}
        self.limits: dict[tuple[object, OpKind], int] = {}

    def get(self, key: tuple[object, OpKind]) -> CostModel | None:
        return self._models.get(key)

    def put(self, key: tuple[object, OpKind], model: CostModel) -> None:
        with self._lock:
            self._models.pop(key, None)
            self.limits.pop(key, None)
            self._models[key] = model
            while len(self._models) > CACHE_SIZE:
                oldest = next(iter(self._models))
                del self._models[oldest]
                self.limits.pop(oldest, None)

    def refine(self, key: tuple[object, OpKind], pieces: list[tuple[int, float]]) -> None:
        """Blend in the per-element cost the pieces of a finished loop really took."""
        elements = sum(n for n, _ in pieces)
        model = self.get(key)
        if model is None or elements == 0:
            return
        seconds = sum(t for _, t in pieces) - model.per_call_s * len(pieces)
        measured = max(seconds / elements, 1e-12)
        blended = (1 - REFINE_WEIGHT) * model.per_element_s + REFINE_WEIGHT * measured
        self.put(key, replace(model, per_element_s=blended))

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self.limits.clear()


GRAINS = GrainCache()


def _new_lock_after_fork() -> None:
    # A thread of the parent may have held the lock at fork time; the
    # child has no such thread, so it starts with a fresh lock.
    GRAINS._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


def probe(run: Callable[[int, int], T], start: int, stop: int) -> tuple[list[T], int, CostModel]:
    """Run pieces of ``[start, stop)`` in the caller, growing ``PROBE_GROWTH``-fold
    (1, 4, 16, ... elements) until one takes ``PROBE_MIN_S``, and fit their cost.

    Returns the pieces' values (in order), where the loop continues, and the
    model. Stops early when the range is used up; exceptions propagate.
    """
    length = 1
    values: list[T] = []
    samples: list[tuple[int, float]] = []
    at = start
    while at < stop:
        end = min(stop, at + length)
        begin = time.perf_counter()
        values.append(run(at, end))
        samples.append((end - at, time.perf_counter() - begin))
        at = end
        # One element that already takes PROBE_MIN_S is expensive enough that
        # its per-call part cannot matter; otherwise fit through two samples.
        if samples[-1][1] >= PROBE_MIN_S and (len(samples) >= 2 or length == 1):
            break
        length *= PROBE_GROWTH
    return values, at, fit(samples)
