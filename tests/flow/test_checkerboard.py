"""The checkerboard layout: no storage chunk of a layer is touched by two top-level tasks."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph.flow.plan._spec import FlowSpec, LevelSpec, layer_dtype
from chunkgraph.flow.run._checkerboard import nearest_divisor, plan_layers
from chunkgraph.flow.run._reduce import top_chunk_box, top_indices_meeting
from chunkgraph.geometry import Box


def _spec(
    chunk: tuple[int, ...],
    blend: tuple[int, ...],
    grid: tuple[int, ...],
    start: tuple[int, ...],
    mode: str = "linear",
    dtype: str = "uint8",
) -> FlowSpec:
    stop = tuple(s + g * c for s, g, c in zip(start, grid, chunk, strict=True))
    return FlowSpec(
        levels=(LevelSpec(chunk=chunk, crop=(0,) * len(chunk), blend=blend, blend_mode=mode),),
        bbox=Box(start, stop),
        input_names=("src",),
        dst_dtype=np.dtype(dtype),
        accumulate_dtype=np.dtype("float64"),
        max_reduction_chunk_size=None,
        skip_intermediates=False,
        spatial_ndim=len(chunk),
    )


@st.composite
def layouts(draw: st.DrawFn) -> tuple[FlowSpec, tuple[int, ...]]:
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.integers(1, 40)) for _ in range(ndim))
    blend = tuple(draw(st.integers(0, c // 2)) for c in chunk)
    grid = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    start = tuple(draw(st.integers(-20, 20)) for _ in range(ndim))
    dst_chunk = tuple(draw(st.integers(1, 64)) for _ in range(ndim))
    return _spec(chunk, blend, grid, start), dst_chunk


@settings(max_examples=200, deadline=None)
@given(layout=layouts())
def test_no_two_tasks_of_a_layer_share_a_storage_chunk(
    layout: tuple[FlowSpec, tuple[int, ...]],
) -> None:
    spec, dst_chunk = layout
    dst = SimpleNamespace(chunks=dst_chunk, spatial_chunks=dst_chunk, channel_shape=())
    plan = plan_layers(spec, dst, Path("unused"))  # type: ignore[arg-type]
    top = spec.levels[0]
    assert all(c % s == 0 for c, s in zip(top.chunk, plan.storage_chunk, strict=True))
    owner: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}
    for index in itertools.product(*(range(n) for n in spec.top_grid)):
        out = top_chunk_box(spec, index).padded(top.blend).intersection(spec.bbox)
        assert plan.bounds.contains(out)
        ranges = [
            range((a - o) // s, -((o - b) // s))
            for a, b, o, s in zip(
                out.start, out.stop, plan.bounds.start, plan.storage_chunk, strict=True
            )
        ]
        for key in itertools.product(*ranges):
            slot = (plan.layer_of(index), key)
            assert slot not in owner, f"tasks {owner.get(slot)} and {index} share {slot}"
            owner[slot] = index


@settings(max_examples=100, deadline=None)
@given(layout=layouts(), data=st.data())
def test_tasks_meeting_a_box_are_exactly_those_whose_output_overlaps(
    layout: tuple[FlowSpec, tuple[int, ...]], data: st.DataObject
) -> None:
    spec, _ = layout
    bbox = spec.bbox
    lo = tuple(data.draw(st.integers(a, b - 1)) for a, b in zip(bbox.start, bbox.stop, strict=True))
    hi = tuple(data.draw(st.integers(a + 1, b)) for a, b in zip(lo, bbox.stop, strict=True))
    box = Box(lo, hi)
    top = spec.levels[0]
    brute = {
        index
        for index in itertools.product(*(range(n) for n in spec.top_grid))
        if not top_chunk_box(spec, index).padded(top.blend).intersection(box).is_empty
    }
    assert set(top_indices_meeting(spec, box)) == brute


def test_layer_count_follows_the_blended_axes() -> None:
    spec = _spec((8, 8, 8), (2, 0, 3), (2, 2, 2), (0, 0, 0))
    plan = plan_layers(
        spec,
        SimpleNamespace(chunks=(4, 4, 4), spatial_chunks=(4, 4, 4), channel_shape=()),  # type: ignore[arg-type]
        Path("unused"),
    )
    assert plan.parity_axes == (0, 2) and plan.n_layers == 4
    assert plan.bounds == Box((-2, 0, -3), (18, 16, 19))


def test_layer_dtype_is_lossless_for_what_reductions_do() -> None:
    assert layer_dtype(_spec((8,), (2,), (2,), (0,), "linear", "uint8")) == np.float64
    assert layer_dtype(_spec((8,), (2,), (2,), (0,), "linear", "float32")) == np.float32
    assert layer_dtype(_spec((8,), (2,), (2,), (0,), "max", "uint8")) == np.uint8
    assert layer_dtype(_spec((8,), (0,), (2,), (0,), "linear", "int16")) == np.int16
    assert layer_dtype(_spec((8,), (2,), (2,), (0,), "defer", "float32")) == np.float64


def test_nearest_divisor_never_goes_below_half_the_target() -> None:
    for n in range(1, 200):
        for target in (1, 3, 16, 64):
            d = nearest_divisor(n, target)
            assert n % d == 0 and (2 * d >= target or d == n)


def test_blending_rounds_fractional_outputs_like_the_whole_array() -> None:
    """x + 0.49999999 into uint8: layers must keep the fraction float32 would round to .5."""
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    data = np.arange(1024, dtype=np.uint8).reshape(32, 32)
    src = volume.create("round-src", (32, 32), (8, 8), "uint8", backend="memory")
    src.write(src.bounds, data)
    dst = volume.create("round-dst", (32, 32), (8, 8), "uint8", backend="memory")
    try:
        volume.apply(
            lambda x: x.astype("float64") + 0.49999999,
            src,
            dst,
            chunk_sizes=[16],
            blend_pads=2,
            executor="sync",
            cast="unsafe",
        )
        expected = np.rint(data.astype("float64") + 0.49999999).astype("uint8")
        np.testing.assert_array_equal(dst.read(Box.from_shape((32, 32))), expected)
    finally:
        volume.remove("round-src")
        volume.remove("round-dst")
