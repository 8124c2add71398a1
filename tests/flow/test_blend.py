"""Blend ramps: formulas, partition of unity, symmetry, faces, unweighted modes, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.flow.plan._blend import (
    ALL_MODES,
    WEIGHTED_MODES,
    axis_ramp,
    axis_weights,
    blend_weights,
    rising_ramp,
)

PADS = range(1, 17)


def _spec_ramp(pad: int, mode: str) -> list[float]:
    """The ramp written straight from the formulas, with no symmetry trick."""
    out = []
    for k in range(1, 2 * pad + 1):
        t = k / (2 * pad + 1)
        if mode == "linear":
            out.append(t)
        elif mode == "quadratic":
            u = k / (pad + 0.5)
            out.append(u * u / 2 if k <= pad else 1 - (2 - u) ** 2 / 2)
        else:
            e = math.exp(-1 / t)
            f = math.exp(-1 / (1 - t))
            out.append(e / (e + f))
    return out


@pytest.mark.parametrize("mode", WEIGHTED_MODES)
@pytest.mark.parametrize("pad", PADS)
def test_ramp_matches_formula_and_rises(mode: str, pad: int) -> None:
    ramp = rising_ramp(pad, mode)
    assert ramp.dtype == np.float64
    assert ramp.shape == (2 * pad,)
    np.testing.assert_allclose(ramp, _spec_ramp(pad, mode), rtol=0, atol=1e-12)
    assert np.all(np.diff(ramp) > 0)
    assert np.all((ramp > 0) & (ramp < 1))


@pytest.mark.parametrize("mode", WEIGHTED_MODES)
@pytest.mark.parametrize("pad", PADS)
def test_neighbour_ramps_sum_to_exactly_one(mode: str, pad: int) -> None:
    ramp = rising_ramp(pad, mode)
    # The neighbour's falling face over the same voxels is this ramp reversed.
    assert np.all(ramp + ramp[::-1] == 1.0)


@pytest.mark.parametrize("mode", WEIGHTED_MODES)
@pytest.mark.parametrize("pad", PADS)
def test_tiling_a_line_is_a_partition_of_unity(mode: str, pad: int) -> None:
    """Chunks of size c tile [0, n*c); each contributes over its padded span.

      |---c---|---c---|---c---|        chunks
    |p|--c+2p--|p|                     chunk 0's padded span, clipped to the region
    """
    chunk, count = 2 * pad + 3, 4
    total = np.zeros(chunk * count)
    for i in range(count):
        low, high = i * chunk - pad, (i + 1) * chunk + pad
        ramp = axis_ramp(chunk + 2 * pad, pad, mode, i > 0, i < count - 1)
        # The region's outer faces carry no ramp; what lies outside is dropped.
        keep = slice(max(0, -low), (chunk + 2 * pad) - max(0, high - chunk * count))
        total[max(low, 0) : min(high, chunk * count)] += ramp[keep]
    assert np.all(total == 1.0)


@settings(max_examples=60, deadline=None)
@given(
    mode=st.sampled_from(WEIGHTED_MODES),
    pads=st.tuples(st.integers(0, 5), st.integers(0, 5)),
    extra=st.tuples(st.integers(0, 4), st.integers(0, 4)),
    counts=st.tuples(st.integers(1, 3), st.integers(1, 3)),
)
def test_tiling_a_plane_is_a_partition_of_unity(
    mode: str, pads: tuple[int, int], extra: tuple[int, int], counts: tuple[int, int]
) -> None:
    chunks = tuple(max(1, 2 * p + e) for p, e in zip(pads, extra, strict=True))
    region = tuple(c * n for c, n in zip(chunks, counts, strict=True))
    padded = (region[0] + 2 * pads[0], region[1] + 2 * pads[1])
    total = np.zeros(padded)
    for i in range(counts[0]):
        for j in range(counts[1]):
            shape = (chunks[0] + 2 * pads[0], chunks[1] + 2 * pads[1])
            low = (i > 0, j > 0)
            high = (i < counts[0] - 1, j < counts[1] - 1)
            w = blend_weights(shape, pads, mode, low, high)
            total[
                i * chunks[0] : i * chunks[0] + shape[0], j * chunks[1] : j * chunks[1] + shape[1]
            ] += w
    inner = total[pads[0] : pads[0] + region[0], pads[1] : pads[1] + region[1]]
    np.testing.assert_allclose(inner, 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("pad", [1, 2, 7, 16])
def test_faces_are_mirror_images(mode: str, pad: int) -> None:
    length = 4 * pad + 5
    low_only = axis_ramp(length, pad, mode, True, False)
    high_only = axis_ramp(length, pad, mode, False, True)
    both = axis_ramp(length, pad, mode, True, True)
    assert np.array_equal(low_only[::-1], high_only)
    assert np.array_equal(both, both[::-1])


@pytest.mark.parametrize("mode", WEIGHTED_MODES)
def test_ramps_only_where_asked(mode: str) -> None:
    pad, length = 3, 15
    width = 2 * pad
    none = axis_ramp(length, pad, mode, False, False)
    assert np.all(none == 1.0)
    low = axis_ramp(length, pad, mode, True, False)
    assert np.all(low[width:] == 1.0) and np.all(low[:width] < 1.0)
    high = axis_ramp(length, pad, mode, False, True)
    assert np.all(high[: length - width] == 1.0) and np.all(high[length - width :] < 1.0)


@pytest.mark.parametrize("mode", ["max", "defer"])
def test_unweighted_modes_are_all_ones(mode: str) -> None:
    assert np.all(axis_ramp(12, 3, mode, True, True) == 1.0)
    assert np.all(blend_weights((8, 12), (2, 3), mode, (True, True), (True, True)) == 1.0)


def test_zero_pad_is_all_ones_for_every_mode() -> None:
    for mode in ALL_MODES:
        assert np.all(axis_ramp(5, 0, mode, True, True) == 1.0)


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(ALL_MODES),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    faces=st.tuples(*[st.booleans()] * 6),
)
def test_weights_are_the_outer_product_of_axis_ramps(
    mode: str, pads: tuple[int, int, int], faces: tuple[bool, ...]
) -> None:
    shape = tuple(4 * p + 2 for p in pads)
    low, high = faces[:3], faces[3:]
    w = blend_weights(shape, pads, mode, low, high)
    ramps = [axis_ramp(shape[a], pads[a], mode, low[a], high[a]) for a in range(3)]
    expected = np.einsum("i,j,k->ijk", *ramps)
    assert w.shape == shape and w.dtype == np.float64
    np.testing.assert_array_equal(w, expected)
    broadcast = np.ones(shape)
    for factor in axis_weights(shape, pads, mode, low, high):
        broadcast = broadcast * factor
    np.testing.assert_array_equal(broadcast, expected)


def test_cached_ramps_are_read_only() -> None:
    ramp = axis_ramp(10, 2, "quadratic", True, True)
    with pytest.raises(ValueError):
        ramp[0] = 5.0
    assert axis_ramp(10, 2, "quadratic", True, True)[0] < 1.0


def test_huge_bump_pad_stays_finite() -> None:
    ramp = rising_ramp(2000, "bump")
    assert np.all(np.isfinite(ramp)) and np.all(ramp + ramp[::-1] == 1.0)


def test_unknown_mode_is_named() -> None:
    with pytest.raises(ConfigError, match=r"'cubic'.*linear, quadratic, bump, max, defer"):
        axis_ramp(8, 1, "cubic", True, True)


def test_ramps_that_do_not_fit_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"length 7.*pad 2.*8"):
        axis_ramp(7, 2, "linear", True, True)
    # One ramped face fits in the same length.
    assert axis_ramp(7, 2, "linear", True, False).shape == (7,)


def test_negative_pad_is_rejected() -> None:
    with pytest.raises(ConfigError, match="pad=-1"):
        axis_ramp(8, -1, "linear", False, False)


def test_axis_count_mismatch_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"pad=\(1,\)"):
        blend_weights((4, 4), (1,), "linear", (True, True), (True, True))
