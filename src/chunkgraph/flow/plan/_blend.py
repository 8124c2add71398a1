"""Blend ramps: how overlapping contributions of neighbouring chunks are weighted.

Policy. A chunk padded by its blend pad ``p`` overlaps each neighbour by
``2p`` voxels on that axis. Over the overlap its weight rises (low face) or
falls (high face) along a ramp; the interior weighs 1. The rising ramp
``w_1 .. w_2p`` and the falling ramp of the neighbour at the same voxels
(``w_2p .. w_1``) sum to 1 exactly, so a weighted sum of contributions needs
no normalising pass (partition of unity)::

    axis:        |<-- 2p -->|<------ interior ------>|<-- 2p -->|
    this chunk:   w1 ... w2p  1  1  1  ...  1  1  1   w2p ... w1
    left one:     w2p ... w1                                        (its high face)
    right one:                                        w1 ... w2p    (its low face)

Modes (``k = 1 .. 2p``; ``t = k / (2p + 1)``):

* ``linear``     ``w_k = t``
* ``quadratic``  ``u = k / (p + 0.5)``; ``w = u^2 / 2`` for ``k <= p``, else ``1 - (2 - u)^2 / 2``
* ``bump``       ``w = e(t) / (e(t) + e(1 - t))`` with ``e(x) = exp(-1 / x)``: flat (all
  derivatives zero) at both ends, so seams leave no visible kink
* ``max``        no weights (all ones): contributions combine by elementwise maximum,
  which keeps label values intact
* ``defer``      no weights (all ones): the top level leaves its checkerboard layers
  unreduced, for a later pass that chooses how to combine them

Exactness. Only the first half of a ramp (``k <= p``, values <= 1/2) is
computed from the formula; the second half is ``1 - w`` mirrored. For any
float64 ``w`` in ``[0, 1/2]``, ``w + fl(1 - w) == 1`` holds exactly (the
rounding error of ``1 - w`` is at most 2**-54, which rounds back to 1), so
per-axis partition of unity is exact, not just within a tolerance. Products
over axes (corners, edges) sum to 1 within a few ulps.

A face that touches the edge of the region being processed has no neighbour
there and gets no ramp (``ramp_low`` / ``ramp_high`` False): its weight is 1.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from chunkgraph._errors import ConfigError

WEIGHTED_MODES: tuple[str, ...] = ("linear", "quadratic", "bump")
UNWEIGHTED_MODES: tuple[str, ...] = ("max", "defer")
ALL_MODES: tuple[str, ...] = WEIGHTED_MODES + UNWEIGHTED_MODES

# Ramps are cached per (length, pad, mode, faces): a flow asks for the same few
# shapes millions of times. 4096 entries of at most a few MiB of float64 bound
# the cache; more would only help flows with thousands of distinct chunk shapes.
_RAMP_CACHE_SIZE = 4096

# exp(700) is near float64's largest value; clipping there keeps huge bump pads
# (p > ~350) from overflowing. The clipped weights are ~1e-304 instead of even
# smaller values: no difference after any rounding, but no longer strictly rising.
_MAX_EXPONENT = 700.0


def _rising_half(pad: int, mode: str) -> np.ndarray:
    """``w_1 .. w_p`` of the rising ramp (values in ``(0, 1/2]``)."""
    k = np.arange(1, pad + 1, dtype=np.float64)
    if mode == "linear":
        return k / (2 * pad + 1)
    if mode == "quadratic":
        u = k / (pad + 0.5)
        return u * u / 2.0
    # bump: e(t) / (e(t) + e(1 - t)), written as a logistic of the exponent
    # difference so that it neither underflows nor divides 0 by 0 near t = 0.
    t = k / (2 * pad + 1)
    diff = np.minimum(1.0 / t - 1.0 / (1.0 - t), _MAX_EXPONENT)
    return 1.0 / (1.0 + np.exp(diff))


def rising_ramp(pad: int, mode: str) -> np.ndarray:
    """The ``2 * pad`` rising weights ``w_1 .. w_2p`` of a weighted mode.

    >>> rising_ramp(2, "linear").tolist()
    [0.2, 0.4, 0.6, 0.8]
    >>> rising_ramp(1, "quadratic").round(4).tolist()
    [0.2222, 0.7778]
    """
    _check_mode(mode)
    if mode in UNWEIGHTED_MODES:
        return np.ones(2 * pad, dtype=np.float64)
    half = _rising_half(pad, mode)
    return np.concatenate([half, 1.0 - half[::-1]])


def axis_ramp(length: int, pad: int, mode: str, ramp_low: bool, ramp_high: bool) -> np.ndarray:
    """Weights along one axis of a chunk padded by ``pad`` (``length = chunk + 2 * pad``).

    The first ``2 * pad`` entries rise when ``ramp_low``, the last ``2 * pad``
    fall when ``ramp_high``, everything else is 1. ``max`` and ``defer`` give
    all ones. The result is float64 and read-only (it is shared from a cache).

    >>> axis_ramp(6, 1, "linear", True, True).round(4).tolist()
    [0.3333, 0.6667, 1.0, 1.0, 0.6667, 0.3333]
    >>> axis_ramp(4, 1, "linear", False, True).round(4).tolist()
    [1.0, 1.0, 0.6667, 0.3333]
    """
    return _axis_ramp(int(length), int(pad), str(mode), bool(ramp_low), bool(ramp_high))


@lru_cache(maxsize=_RAMP_CACHE_SIZE)
def _axis_ramp(length: int, pad: int, mode: str, ramp_low: bool, ramp_high: bool) -> np.ndarray:
    _check_mode(mode)
    if pad < 0 or length < 0:
        raise ConfigError(
            f"blend ramp needs length >= 0 and pad >= 0, got length={length}, pad={pad}"
        )
    width = 2 * pad
    needed = width * (int(ramp_low) + int(ramp_high))
    if needed > length:
        raise ConfigError(
            f"a blend ramp of length {length} cannot hold its ramps: pad {pad} needs "
            f"{width} voxels per ramped face ({needed} in all); the chunk must be at least "
            f"2 * pad = {width} (blend pad <= half the chunk)"
        )
    out = np.ones(length, dtype=np.float64)
    if mode in WEIGHTED_MODES and width > 0:
        ramp = rising_ramp(pad, mode)
        if ramp_low:
            out[:width] = ramp
        if ramp_high:
            out[length - width :] = ramp[::-1]
    out.flags.writeable = False
    return out


def axis_weights(
    shape: tuple[int, ...],
    pad: tuple[int, ...],
    mode: str,
    ramp_low: tuple[bool, ...],
    ramp_high: tuple[bool, ...],
) -> tuple[np.ndarray, ...]:
    """Per-axis ramps shaped to broadcast against an array of ``shape``.

    Multiplying by these in turn costs no ``prod(shape)`` weight array.

    >>> [w.shape for w in axis_weights((4, 6), (1, 1), "linear", (True, True), (True, True))]
    [(4, 1), (1, 6)]
    """
    ndim = len(shape)
    if not (len(pad) == len(ramp_low) == len(ramp_high) == ndim):
        raise ConfigError(
            f"blend weights need one pad and one face flag per axis of shape {tuple(shape)}: "
            f"got pad={tuple(pad)}, ramp_low={tuple(ramp_low)}, ramp_high={tuple(ramp_high)}"
        )
    out = []
    for axis in range(ndim):
        ramp = axis_ramp(shape[axis], pad[axis], mode, ramp_low[axis], ramp_high[axis])
        view_shape = [1] * ndim
        view_shape[axis] = shape[axis]
        out.append(ramp.reshape(view_shape))
    return tuple(out)


def blend_weights(
    shape: tuple[int, ...],
    pad: tuple[int, ...],
    mode: str,
    ramp_low: tuple[bool, ...],
    ramp_high: tuple[bool, ...],
) -> np.ndarray:
    """The float64 weight array of a padded chunk: outer product of its axis ramps.

    >>> w = blend_weights((4, 4), (1, 1), "linear", (True, False), (False, True))
    >>> w.shape, float(w[0, 3]), float(w[3, 0])
    ((4, 4), 0.1111111111111111, 1.0)
    """
    factors = axis_weights(shape, pad, mode, ramp_low, ramp_high)
    weights = np.ones(tuple(int(s) for s in shape), dtype=np.float64)
    for factor in factors:
        weights *= factor
    return weights


def _check_mode(mode: str) -> None:
    if mode not in ALL_MODES:
        raise ConfigError(f"unknown blend mode {mode!r}; valid modes are {', '.join(ALL_MODES)}")
