"""estimate_flow: hand-computed figures, brute-force enumeration, the real run's own
counters, and a petascale bbox answered without enumerating below the top."""

from __future__ import annotations

import dataclasses
import itertools
import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph import ConfigError, volume
from chunkgraph.flow._apply import apply
from chunkgraph.flow.plan._estimate import estimate_flow, written_region
from chunkgraph.flow.plan._spec import FlowSpec, normalize_inputs, validate_flow
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

Make = Callable[..., Volume]


@pytest.fixture
def mem() -> Iterator[Make]:
    """Small in-memory volumes (filled with random data) with unique names."""
    names: list[str] = []
    rng = np.random.default_rng(7)

    def make(
        shape: tuple[int, ...], chunks: tuple[int, ...], dtype: Any = "uint8", **kw: Any
    ) -> Volume:
        name = f"flow-est-{uuid.uuid4().hex}"
        names.append(name)
        vol = volume.create(name, shape, chunks, dtype, backend="memory", **kw)
        start = vol.offset
        data = rng.integers(0, 100, size=shape).astype(dtype)
        vol.write(
            Box(start, tuple(s + n for s, n in zip(start, vol.bounds.shape, strict=True))), data
        )
        vol.reset_stats()
        return vol

    yield make
    for name in names:
        volume.remove(name, missing_ok=True)


def ident(x: np.ndarray) -> np.ndarray:
    return x


def test_hand_computed_figures(mem: Make) -> None:
    """64^3 uint8, storage chunks 16; top 32 blend 4, bottom 8 crop 4.

    context pad 8: the top task at 0 reads [-8, 40) -> in bounds [0, 40) -> chunks
    [0, 48); the one at 32 reads [24, 72) -> [16, 64). 48 + 48 = 96 per axis.
    """
    src, dst = mem((64,) * 3, (16,) * 3), mem((64,) * 3, (16,) * 3)
    spec = validate_flow(
        ident, src, dst, chunk_sizes=[(32,) * 3, (8,) * 3], crop_pads=[0, 4], blend_pads=[4, 0]
    )
    est = estimate_flow(spec, {"src": src}, dst)
    assert est.tasks_per_level == (8, 8 * 5**3)  # (32 + 2*4) / 8 = 5 per axis
    assert est.total_tasks == 1008
    assert est.bytes_to_read == 96**3 and est.input_bytes == (("src", 96**3),)
    assert est.needed_bytes == 64**3 and est.read_amplification == (96 / 64) ** 3
    # Outputs over chunk +- 4 clipped to the bbox: 36 + 36 per axis, float64 layers.
    assert est.temporary_bytes == 72**3 * 8
    assert est.dst_bytes == 64**3 and est.reductions == 8
    assert est.bytes_to_write == est.temporary_bytes + est.dst_bytes
    # Input 48^3 bytes + level 0 buffer 40^3 + level 1 buffer 16^3, float64.
    assert est.top_task_memory_bytes == 48**3 + (40**3 + 16**3) * 8


def test_defer_and_skip_intermediates(mem: Make) -> None:
    src, dst = mem((64,) * 3, (16,) * 3), mem((64,) * 3, (16,) * 3, dtype="float32")
    deferred = validate_flow(
        ident, src, dst, chunk_sizes=[(32,) * 3], blend_pads=4, blend_modes="defer"
    )
    est = estimate_flow(deferred, {"src": src}, dst)
    assert est.reductions == 0 and est.dst_bytes == 0 and est.temporary_bytes > 0
    direct = validate_flow(
        ident,
        src,
        dst,
        chunk_sizes=[(32,) * 3, (16,) * 3],
        crop_pads=[0, 2],
        skip_intermediates=True,
    )
    est = estimate_flow(direct, {"src": src}, dst)
    assert est.reductions == 0 and est.temporary_bytes == 0
    assert est.dst_bytes == 64**3 * 4 and est.tasks_per_level == (8, 64)


def test_reductions_merge_dst_chunks_up_to_the_limit(mem: Make) -> None:
    src, dst = mem((64,) * 3, (16,) * 3), mem((64,) * 3, (16,) * 3)
    bbox = Box((8, 0, 0), (56, 64, 64))  # snaps out to [0, 64) on axis 0
    for limit, count in [((16, 16, 16), 4 * 4 * 4), ((32, 64, 16), 2 * 1 * 4), (None, 4 * 2 * 2)]:
        spec = validate_flow(
            ident, src, dst, chunk_sizes=[(16, 32, 32)], bbox=bbox, max_reduction_chunk_size=limit
        )
        assert written_region(spec, dst) == Box((0, 0, 0), (64, 64, 64))
        assert estimate_flow(spec, {"src": src}, dst).reductions == count


# --- brute force: enumerate what the arithmetic avoids enumerating ------------------------


def _brute_tasks(spec: FlowSpec) -> list[int]:
    counts = [0] * len(spec.levels)
    frontier = spec.bbox.split(spec.levels[0].chunk)
    for level in range(len(spec.levels)):
        counts[level] = len(frontier)
        if level + 1 < len(spec.levels):
            lv = spec.levels[level]
            pad = tuple(c + b for c, b in zip(lv.crop, lv.blend, strict=True))
            frontier = [
                child
                for box in frontier
                for child in box.padded(pad).split(spec.levels[level + 1].chunk)
            ]
    return counts


def _brute_read_bytes(spec: FlowSpec, vol: Volume) -> int:
    chunks = vol.chunks[len(vol.chunks) - spec.spatial_ndim :]
    voxel = vol.dtype.itemsize * math.prod(vol.channel_shape)
    total = 0
    for top in spec.bbox.split(spec.levels[0].chunk):
        inside = top.padded(spec.context_pad).intersection(vol.bounds)
        if inside.is_empty:
            continue
        touched = inside.snapped(chunks, offset=vol.bounds.start).intersection(vol.bounds)
        total += touched.size * voxel
    return total


@settings(max_examples=40, deadline=None)
@given(
    bottom=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    mult=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), max_size=2),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 2)),
    grid=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    src_chunks=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    shift=st.tuples(st.integers(-6, 6), st.integers(-6, 6)),
)
def test_arithmetic_matches_brute_force(
    bottom: tuple[int, int],
    mult: list[tuple[int, int]],
    pads: tuple[int, int],
    grid: tuple[int, int],
    src_chunks: tuple[int, int],
    shift: tuple[int, int],
) -> None:
    crop, blend = pads
    chunks = [bottom]
    for m in mult:
        pad = 2 * crop + 2 * blend
        chunks.insert(0, tuple((k + pad // b) * b - pad for k, b in zip(m, chunks[0], strict=True)))
    if any(c < 2 * blend for level in chunks for c in level):
        return
    shape = tuple(t * n + 4 for t, n in zip(chunks[0], grid, strict=True))
    names = [f"flow-est-{uuid.uuid4().hex}" for _ in range(2)]
    # The source is shifted against dst, so some reads fall partly outside it.
    src = volume.create(names[0], shape, src_chunks, "int16", backend="memory", offset=shift)
    dst = volume.create(names[1], shape, (3, 4), "int16", backend="memory")
    try:
        bbox = Box((2, 2), tuple(s - 2 for s in shape))
        if bbox.intersection(src.bounds).is_empty:  # fn would see fill values only
            with pytest.raises(ConfigError, match="meets no input"):
                validate_flow(
                    ident, src, dst, chunk_sizes=chunks, crop_pads=crop, blend_pads=blend, bbox=bbox
                )
            return
        spec = validate_flow(
            ident, src, dst, chunk_sizes=chunks, crop_pads=crop, blend_pads=blend, bbox=bbox
        )
        est = estimate_flow(spec, {"src": src}, dst)
        assert list(est.tasks_per_level) == _brute_tasks(spec)
        assert est.bytes_to_read == _brute_read_bytes(spec, src)
    finally:
        for name in names:
            volume.remove(name)


# --- the real run's own counters agree with the estimate ----------------------------------


def _sum_inputs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) + b


def _two_channel(x: np.ndarray) -> np.ndarray:
    return np.stack([x[0], x[0] + x[1]])


CASES: list[tuple[str, Callable[[Make], tuple[Any, Volume, dict[str, Any]]], Any]] = [
    (
        "3-d, crop and blend, unaligned bbox",
        lambda m: (
            m((40, 36, 32), (8, 8, 8)),
            m((40, 36, 32), (8, 8, 8)),
            {
                "chunk_sizes": [(12, 16, 8), (4, 4, 4)],
                "crop_pads": [0, 2],
                "blend_pads": [(2, 2, 0), 0],
                "bbox": Box((3, 2, 8), (39, 34, 32)),
            },
        ),
        ident,
    ),
    (
        "2-d with channels and an offset, three levels",
        lambda m: (
            m((2, 50, 60), (2, 10, 16), spatial_ndim=2, offset=(-5, 10)),
            m((2, 50, 60), (2, 10, 16), dtype="float32", spatial_ndim=2, offset=(-5, 10)),
            {
                "chunk_sizes": [(24, 26), (7, 10), (3, 4)],
                "crop_pads": [(2, 2), (0, 1), (1, 0)],
                "blend_pads": [(1, 3), (2, 2), 0],
                "auto_divisibility": True,
                "bbox": Box((-5, 10), (40, 40)),
            },
        ),
        _two_channel,
    ),
    (
        "max blend, reductions merged",
        lambda m: (
            m((48, 48), (8, 8)),
            m((48, 48), (8, 8), dtype="int32"),
            {
                "chunk_sizes": [(16, 24)],
                "blend_pads": 4,
                "blend_modes": "max",
                "max_reduction_chunk_size": (16, 48),
            },
        ),
        ident,
    ),
    (
        "defer leaves the layers",
        lambda m: (
            m((32, 40), (8, 8)),
            m((32, 40), (8, 8), dtype="float32"),
            {
                "chunk_sizes": [(16, 20), (5, 13)],
                "blend_pads": [(2, 3), 1],
                "blend_modes": ["defer", "linear"],
                "crop_pads": [0, 1],
            },
        ),
        ident,
    ),
    (
        "two inputs by keyword",
        lambda m: (
            {"a": m((30, 30), (8, 8), offset=(3, 0)), "b": m((36, 30), (6, 10), dtype="int16")},
            m((36, 30), (9, 10), dtype="int32"),
            {
                "chunk_sizes": [(12, 15), (10, 7)],
                "crop_pads": [1, (2, 0)],
                "blend_pads": [(3, 2), 0],
            },
        ),
        _sum_inputs,
    ),
    (
        "direct writes",
        lambda m: (
            m((32, 48), (8, 8)),
            m((32, 48), (16, 8)),
            {"chunk_sizes": [(16, 24), (16, 8)], "crop_pads": [0, 3], "skip_intermediates": True},
        ),
        ident,
    ),
]


@pytest.mark.parametrize(("build", "fn"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_estimate_matches_the_run(
    mem: Make, tmp_path: Path, build: Callable[[Make], tuple[Any, Volume, dict[str, Any]]], fn: Any
) -> None:
    inputs, dst, kw = build(mem)
    spec = validate_flow(fn, inputs, dst, **kw)
    est = estimate_flow(spec, normalize_inputs(inputs), dst)
    dry = apply(fn, inputs, dst, dry_run=True, **kw)
    assert dry.estimate is not None and dry.tasks_per_level == est.tasks_per_level
    assert dataclasses.replace(dry.estimate, expected_bytes_to_read=None) == est
    assert dst.stats.bytes_written == 0
    report = apply(fn, inputs, dst, intermediates=str(tmp_path), probe=False, **kw)
    assert report.tasks_per_level == est.tasks_per_level
    assert report.reductions == est.reductions
    # The estimate counts reads without a cache; the plan's read model agrees with it.
    assert dry.plan is not None
    assert dry.plan.amplification_without_cache == pytest.approx(est.read_amplification)
    if dry.plan.cache_bytes == 0:
        assert report.bytes_read == est.bytes_to_read
        assert report.read_amplification == est.read_amplification > 0
    else:  # apply read through a cache of its own: the halos neighbours share come from it
        assert 0 < report.bytes_read <= est.bytes_to_read
    # The dry run's expected figure is what was read, with a cache or without.
    assert dry.estimate.expected_bytes_to_read == pytest.approx(report.bytes_read, rel=0.1)
    assert report.temporary_bytes == est.temporary_bytes
    assert report.bytes_written == est.dst_bytes


def test_two_inputs_are_counted_each(mem: Make) -> None:
    image = mem((32, 32), (8, 8), dtype="float32")
    mask = mem((32, 32), (4, 16), dtype="bool")
    dst = mem((32, 32), (8, 8), dtype="float32")

    def fn(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return image * mask

    inputs = {"image": image, "mask": mask}
    spec = validate_flow(fn, inputs, dst, chunk_sizes=[(16, 16)], crop_pads=2)
    est = estimate_flow(spec, inputs, dst)
    # Per axis: [-2, 18) -> chunks [0, 24) and [14, 34) -> [8, 32): 48 for 8-chunks;
    # 4-chunks: [0, 20) + [12, 32) = 40; 16-chunks: [0, 32) + [0, 32) = 64.
    assert dict(est.input_bytes) == {"image": 48 * 48 * 4, "mask": 40 * 64 * 1}
    assert est.bytes_to_read == 48 * 48 * 4 + 40 * 64
    assert est.top_task_memory_bytes == 20 * 20 * (4 + 1) + 20 * 20 * 8


# --- petascale: arithmetic only -----------------------------------------------------------


def test_petascale_bbox_is_pure_arithmetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100,000 x 100,000 x 10,000 voxels: 4 * 10^8 bottom chunks, none enumerated.

    top 2000 + 2*8 = 2016 = 4 * 504; 504 + 2*4 = 512 = 8 * 64.
    """
    shape = (100_000, 100_000, 10_000)
    src = volume.create(str(tmp_path / "src.zarr"), shape, (128, 128, 128), "uint8")
    dst = volume.create(str(tmp_path / "dst.zarr"), shape, (128, 128, 128), "uint8")
    spec = validate_flow(
        ident,
        src,
        dst,
        chunk_sizes=[(2000,) * 3, (504,) * 3, (64,) * 3],
        crop_pads=[0, 0, 8],
        blend_pads=[8, 4, 0],
    )

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("estimate_flow enumerated boxes")

    monkeypatch.setattr(Box, "split", refuse)
    monkeypatch.setattr(Box, "split_arrays", refuse)
    est = estimate_flow(spec, {"src": src}, dst)
    assert est.tasks_per_level == (50 * 50 * 5, 50 * 50 * 5 * 4**3, 50 * 50 * 5 * 4**3 * 8**3)
    # Default reduction chunk: the top chunk rounded down to dst chunks, 1920 = 15 * 128.
    assert est.reductions == (-(-100_000 // 1920)) ** 2 * -(-10_000 // 1920)
    pad, top = spec.context_pad[0], 2000
    assert pad == 20

    def axis_read(n_top: int, extent: int) -> int:
        total = 0
        for i in range(n_top):
            lo, hi = max(i * top - pad, 0), min((i + 1) * top + pad, extent)
            total += min(-(-hi // 128) * 128, extent) - lo // 128 * 128
        return total

    assert est.bytes_to_read == axis_read(50, 100_000) ** 2 * axis_read(5, 10_000)
    assert est.bytes_to_read > math.prod(shape)  # halos are read twice at every seam
    assert est.dst_bytes == math.prod(shape)
    assert est.top_task_memory_bytes == 2040**3 + (2016**3 + 512**3 + 80**3) * 8


def test_all_modes_and_levels_give_consistent_totals(mem: Make) -> None:
    src, dst = mem((48, 48), (8, 8)), mem((48, 48), (8, 8), dtype="float32")
    for mode, levels in itertools.product(["linear", "quadratic", "bump", "max"], [1, 2]):
        sizes = [(24, 24), (8, 8)][:levels]
        spec = validate_flow(
            ident, src, dst, chunk_sizes=sizes, blend_pads=[4, 2][:levels], blend_modes=mode
        )
        est = estimate_flow(spec, {"src": src}, dst)
        assert est.bytes_to_write == est.temporary_bytes + est.dst_bytes
        assert est.bytes_to_read == sum(b for _, b in est.input_bytes)
        assert len(est.tasks_per_level) == levels


def test_an_input_outside_the_bbox_costs_nothing_to_read(mem: Make) -> None:
    near = mem((32, 32), (8, 8))
    far = mem((16, 16), (8, 8), offset=(1000, 1000))
    dst = mem((32, 32), (8, 8))

    def fn(near: np.ndarray, far: np.ndarray) -> np.ndarray:
        return near

    inputs = {"near": near, "far": far}
    est = estimate_flow(
        validate_flow(fn, inputs, dst, chunk_sizes=[(16, 16)], crop_pads=4), inputs, dst
    )
    assert dict(est.input_bytes) == {"near": (24 + 24) ** 2, "far": 0}
