"""A bbox off dst's storage grid with automatic sizes: the plan computes over the bbox grown
out to the grid (a sweep whose memory does not grow with the bbox's length) and clips every
write to the caller's bbox, so nothing outside it changes and every voxel inside is what a
whole-array computation gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from chunkgraph.geometry import Box
from chunkgraph.volume import apply

MiB = 2**20
SENTINEL = -7.0


def box_sum(src: np.ndarray) -> np.ndarray:
    """A 5^3 box sum: exact on small integers, so any wrong context shows."""
    return ndimage.correlate(src, np.ones((5, 5, 5), src.dtype), mode="constant", cval=0.0)


def _volumes(files: Any, shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[Any, ...]:
    data = np.random.default_rng(3).integers(0, 100, shape).astype("float32")
    src = files.source(data, chunks)
    dst = files.source(np.full(shape, SENTINEL, "float32"), chunks)
    return data, src, dst


def _check(dst: Any, data: np.ndarray, bbox: Box) -> None:
    """Inside the bbox: the whole-array reference; outside it: the sentinel, untouched."""
    out = dst.read(dst.bounds)
    expected = np.full(data.shape, SENTINEL, "float32")
    expected[bbox.slices()] = box_sum(data)[bbox.slices()]
    np.testing.assert_array_equal(out, expected)


def _dry_plan(files: Any, length: int, bbox: Box, **kw: Any) -> Any:
    src = files.empty((64, 96, length), (16, 16, 16), "float32")
    dst = files.empty((64, 96, length), (16, 16, 16), "float32")
    report = apply(lambda x: x, src, dst, crop_pads=2, bbox=bbox, dry_run=True,
                   intermediates=files.root / "t", **kw)  # fmt: skip
    assert report.plan is not None
    return report


def test_an_off_grid_stop_plans_the_sweep_of_the_whole_volume(files: Any) -> None:
    """The review's case: the stop 7 voxels off the grid planned one task over the whole
    length (4073 along the sweep, 307 MiB at 4096, 675 MiB at 16384). Now it plans what
    the whole volume plans, at every length, and the memory stops growing with it (the
    bottom chunk's length along the sweep is chosen from a few sizes: from 16384 on, one)."""
    plans = {}
    for n in (4096, 16384, 65536):
        off = _dry_plan(files, n, Box((0, 0, 16), (64, 96, n - 7))).plan
        whole = _dry_plan(files, n, Box((0, 0, 0), (64, 96, n))).plan
        assert off.sweep_axis == 2 and off.sweep_tasks > 1, off.summary()
        assert off.chunk_sizes == whole.chunk_sizes and off.direct_writes
        assert abs(off.memory_bytes - whole.memory_bytes) <= 0.03 * whole.memory_bytes
        assert "none grows with the bbox's length" in off.memory_words()
        assert any("writes are clipped to the bbox" in r for r in off.reasons)
        plans[n] = off
    assert plans[4096].chunk_sizes[0] == (64, 96, 256)
    assert plans[4096].memory_bytes < 128 * MiB
    assert plans[65536].memory_bytes == plans[16384].memory_bytes


def test_an_off_grid_start_and_stop_plan_within_a_small_budget(files: Any) -> None:
    report = _dry_plan(files, 4096, Box((3, 5, 7), (61, 90, 4089)), memory_limit=256 * MiB)
    plan = report.plan
    assert plan.sweep_tasks > 1 and plan.memory_bytes <= 256 * MiB, plan.summary()
    assert report.bbox == Box((0, 0, 0), (64, 96, 4096))  # what the tasks tile
    assert "Box(start=(3, 5, 7), stop=(61, 90, 4089)) written" in report.summary()


def test_the_flow_id_holds_the_caller_s_bbox(files: Any) -> None:
    """Two bboxes that grow to the same region are other work: other flow ids."""
    a = _dry_plan(files, 1024, Box((0, 0, 16), (64, 96, 1010)))
    b = _dry_plan(files, 1024, Box((0, 0, 16), (64, 96, 1011)))
    assert a.bbox == b.bbox and a.flow_id != b.flow_id


SHAPE = (48, 64, 256)
CUTS = {
    "start, axis 0": Box((3, 0, 0), (48, 64, 256)),
    "stop, axis 1": Box((0, 0, 0), (48, 61, 256)),
    "both, axis 2": Box((0, 0, 5), (48, 64, 250)),
    "both, every axis": Box((3, 5, 7), (45, 59, 249)),
}


@pytest.mark.parametrize("name", list(CUTS))
def test_off_grid_bboxes_write_exactly_the_bbox(files: Any, name: str) -> None:
    bbox = CUTS[name]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    report = apply(box_sum, src, dst, crop_pads=2, bbox=bbox, executor="threads", workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan is not None and plan.sweep_tasks > 1 and plan.direct_writes, plan.summary()
    assert len(plan.chunk_sizes) == 2
    _check(dst, data, bbox)
    assert report.read_amplification <= plan.read_amplification * 1.3


def test_off_grid_with_blend_goes_through_layers_and_stays_exact(files: Any) -> None:
    bbox = CUTS["both, every axis"]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    report = apply(box_sum, src, dst, crop_pads=2, blend_pads=2, bbox=bbox,
                   executor="threads", workers=2, intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan is not None and plan.sweep_tasks > 1 and not plan.direct_writes
    out = dst.read(dst.bounds)
    expected = np.full(data.shape, SENTINEL, "float32")
    expected[bbox.slices()] = box_sum(data)[bbox.slices()]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    outside = np.ones(data.shape, bool)
    outside[bbox.slices()] = False
    assert (out[outside] == SENTINEL).all()


def test_off_grid_in_processes_is_exact(files: Any) -> None:
    bbox = CUTS["both, every axis"]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    report = apply(box_sum, src, dst, crop_pads=2, bbox=bbox, executor="processes", workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and report.plan.sweep_tasks > 1
    _check(dst, data, bbox)


def test_off_grid_resumes_the_same_flow(files: Any) -> None:
    bbox = CUTS["both, axis 2"]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    first = apply(box_sum, src, dst, crop_pads=2, bbox=bbox, executor="sync",
                  intermediates=files.root / "t")  # fmt: skip
    again = apply(box_sum, src, dst, crop_pads=2, bbox=bbox, executor="sync", resume=True,
                  intermediates=files.root / "t")  # fmt: skip
    assert again.flow_id == first.flow_id
    _check(dst, data, bbox)
