"""Weighted sums in slabs (bounded float64 temporaries) give the one-go values bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph.flow import apply
from chunkgraph.flow.run import _subchunk
from chunkgraph.flow.run._subchunk import add_weighted
from chunkgraph.geometry import Box


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    channels=st.sampled_from([(), (2,)]),
    broadcast_first=st.booleans(),
    dtype=st.sampled_from(["float32", "float64"]),
    slab_bytes=st.integers(1, 600),
    seed=st.integers(0, 2**16),
)
def test_slabs_equal_one_go(
    shape: list[int],
    channels: tuple[int, ...],
    broadcast_first: bool,
    dtype: str,
    slab_bytes: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(channels + tuple(shape)).astype(dtype)
    factors = [rng.random(n) for n in shape]
    weights: np.ndarray = np.ones((1,) * len(shape))
    for axis, f in enumerate(factors):
        if axis == 0 and broadcast_first:
            continue  # a weight that is 1 along the slab axis broadcasts there
        view = [1] * len(shape)
        view[axis] = shape[axis]
        weights = weights * f.reshape(view)
    start = rng.standard_normal(data.shape)
    expected = start.copy()
    expected += data * weights
    got = start.copy()
    old = _subchunk.WEIGHTED_SLAB_BYTES
    _subchunk.WEIGHTED_SLAB_BYTES = slab_bytes
    try:
        add_weighted(got, data, weights)
    finally:
        _subchunk.WEIGHTED_SLAB_BYTES = old
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("levels", [1, 2])
def test_blended_flow_is_identical_with_tiny_slabs(
    files: Any, monkeypatch: pytest.MonkeyPatch, levels: int
) -> None:
    """Reductions (one level) and in-task accumulators (two) with one-row slabs: same bytes."""
    data = files.random((24, 20, 16), "float32")
    src = files.source(data, (8, 10, 8))
    flow: dict[str, Any] = (
        dict(chunk_sizes=[(12, 10, 8)], blend_pads=[(2, 2, 2)], blend_modes="quadratic")
        if levels == 1
        else dict(
            chunk_sizes=[(12, 20, 16), (6, 10, 8)],
            crop_pads=[(0, 0, 0), (1, 1, 1)],
            blend_pads=[(0, 0, 0), (2, 2, 2)],
            blend_modes="linear",
        )
    )

    def scaled(x: np.ndarray) -> np.ndarray:
        return x * np.float32(1.7) + np.float32(0.3)

    outputs = []
    for slab in (_subchunk.WEIGHTED_SLAB_BYTES, 1):
        monkeypatch.setattr(_subchunk, "WEIGHTED_SLAB_BYTES", slab)
        dst = files.empty((24, 20, 16), (8, 10, 8), "float32")
        apply(scaled, src, dst, executor="sync", intermediates=files.root / "t", **flow)
        outputs.append(dst.read(Box.from_shape((24, 20, 16))))
    assert outputs[0].tobytes() == outputs[1].tobytes()
    np.testing.assert_allclose(outputs[0], scaled(data), rtol=1e-5, atol=1e-4)
