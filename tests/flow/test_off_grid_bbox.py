"""A bbox off dst's storage grid with automatic sizes: the plan computes over the bbox grown
out to the grid (a sweep whose memory does not grow with the bbox's length) and clips every
write to the caller's bbox, so nothing outside it changes and every voxel inside is what a
whole-array computation gives."""

from __future__ import annotations

import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.testing import s3_server
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
    the whole volume plans (over the 4080 = 16 x 255 on the grid it tiles 240 long, the
    whole volume's 4096 256 long), at every length, and the memory stops growing with it
    (the bottom chunk's length along the sweep is chosen from a few sizes: from 16384 on,
    one)."""
    plans = {}
    for n in (4096, 16384, 65536):
        off = _dry_plan(files, n, Box((0, 0, 16), (64, 96, n - 7))).plan
        whole = _dry_plan(files, n, Box((0, 0, 0), (64, 96, n))).plan
        assert off.sweep_axis == 2 and off.sweep_tasks > 1, off.summary()
        assert off.chunk_sizes[0][:2] == whole.chunk_sizes[0][:2] and off.direct_writes
        assert off.memory_bytes <= 1.03 * whole.memory_bytes
        assert "none grows with the bbox's length" in off.memory_words()
        assert any("writes are clipped to the bbox" in r for r in off.reasons)
        plans[n] = off
    assert plans[4096].chunk_sizes[0] in ((64, 96, 240), (64, 96, 256))
    assert plans[4096].memory_bytes < 128 * MiB
    assert plans[65536].memory_bytes <= plans[16384].memory_bytes  # no growth with length


def test_a_short_off_grid_bbox_is_computed_on_its_grid_only(files: Any) -> None:
    """A bbox a few chunks long grows out to the grid and no further: z 7..153 in chunks
    of 16 (crop 3 along it) computes 0..160, where rounding on to whole smallest bottom
    chunks (48) and a power-of-two factor computed 0..192, past dst's end."""
    src = files.empty((64, 96, 160), (16, 16, 16), "float32")
    dst = files.empty((64, 96, 160), (16, 16, 16), "float32")
    report = apply(lambda x: x, src, dst, crop_pads=(1, 2, 3), bbox=Box((3, 5, 7), (61, 90, 153)),
                   dry_run=True, intermediates=files.root / "t")  # fmt: skip
    assert report.plan.grown_bbox == Box((0, 0, 0), (64, 96, 160)), report.plan.summary()
    assert report.bbox == dst.bounds


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
    _check(dst, data, bbox)  # blended equal values stay exact (float64 weights sum to 1)


def test_off_grid_in_processes_is_exact(files: Any) -> None:
    bbox = CUTS["both, every axis"]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    report = apply(box_sum, src, dst, crop_pads=2, bbox=bbox, executor="processes", workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and report.plan.sweep_tasks > 1
    _check(dst, data, bbox)


def box_sum_unless_stopped(src: np.ndarray, box: Box, *, stop: str) -> np.ndarray:
    """``box_sum``, except past z = 128 while the file ``stop`` exists."""
    if box.start[2] >= 128 and os.path.exists(stop):
        raise RuntimeError("stopped")
    return box_sum(src)


def test_an_interrupted_off_grid_flow_resumes_under_another_budget(files: Any) -> None:
    """Run 1 plans under a small budget and fails part way; the resume, under the default
    budget (other automatic sizes), finds run 1's flow of the same work over the same grown
    bbox and finishes it: the finished tasks skipped, every voxel of the bbox exact."""
    bbox = CUTS["both, every axis"]
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    stop = files.root / "stop"
    stop.touch()
    kw: dict[str, Any] = dict(crop_pads=2, bbox=bbox, executor="sync", probe=False,
                              retries=0, fn_kwargs={"stop": str(stop)},
                              intermediates=files.root / "t")  # fmt: skip
    with pytest.raises(ExceptionGroup):
        apply(box_sum_unless_stopped, src, dst, memory_limit=2 * MiB, **kw)
    first = apply(box_sum_unless_stopped, src, dst, memory_limit=2 * MiB, dry_run=True, **kw)
    dry = apply(box_sum_unless_stopped, src, dst, dry_run=True, **kw)
    assert first.plan.chunk_sizes != dry.plan.chunk_sizes  # the default plans other sizes
    stop.unlink()
    report = apply(box_sum_unless_stopped, src, dst, resume=True, **kw)
    assert report.flow_id == first.flow_id and report.top_tasks_skipped > 0
    assert report.write_box == bbox
    _check(dst, data, bbox)


def test_adjacent_off_grid_flows_at_once_keep_each_other_s_voxels(files: Any) -> None:
    """Two flows whose bboxes meet inside storage chunks (z = 101, chunks of 8), each
    writing directly with its tasks in parallel, run at the same time: each merges its
    part of the chunks they share under the edge locks, and neither loses the other's."""
    data, src, dst = _volumes(files, SHAPE, (8, 8, 8))
    halves = [Box((0, 3, 0), (48, 61, 101)), Box((0, 3, 101), (48, 61, 256))]
    reports: list[Any] = []

    def run(k: int) -> None:
        reports.append(apply(box_sum, src, dst, crop_pads=2, bbox=halves[k], workers=2,
                             intermediates=files.root / f"t{k}"))  # fmt: skip

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reports) == 2 and all(r.plan.direct_writes for r in reports)
    out = dst.read(dst.bounds)
    union = Box((0, 3, 0), (48, 61, 256))
    expected = np.full(data.shape, SENTINEL, "float32")
    expected[union.slices()] = box_sum(data)[union.slices()]
    np.testing.assert_array_equal(out, expected)


def test_adjacent_off_grid_flows_on_an_object_store_merge_their_direct_writes() -> None:
    """The same on a dst in an object store: the chunks the bboxes cut are merged by the
    store's conditional writes (no lock), with automatic sizes writing directly."""
    with s3_server(buckets=("offgrid",)):
        shape = (16, 16, 200)
        data = np.random.default_rng(5).integers(0, 100, shape).astype("float32")
        src = volume.create("s3://offgrid/src.zarr", shape, (8, 8, 8), "float32")
        src.write(src.bounds, data)
        dst = volume.create("s3://offgrid/dst.zarr", shape, (8, 8, 8), "float32")
        dst.write(dst.bounds, np.full(shape, SENTINEL, "float32"))
        # Each on the grid splits into tasks: 0..128 and 120..200 (a length of 13 grains,
        # 0..104, is one small task: growing it to 16 would add more than 1/8).
        halves = [Box((0, 0, 3), (16, 16, 125)), Box((0, 0, 125), (16, 16, 197))]

        def run(bbox: Box) -> Any:
            with tempfile.TemporaryDirectory() as scratch:
                return apply(box_sum, src, dst, crop_pads=2, bbox=bbox, probe=False,
                             workers=2, intermediates=scratch)  # fmt: skip

        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(run, halves))
        for r in reports:
            assert r.plan.direct_writes and r.plan.sweep_tasks > 1, r.plan.summary()
        _check(volume.open("s3://offgrid/dst.zarr"), data, Box((0, 0, 3), (16, 16, 197)))


CALLED: list[Box] = []  # a global: values an fn closes over are part of the flow's id


def recorded(src: np.ndarray, box: Box) -> np.ndarray:
    CALLED.append(box)
    return src * 2


def test_fn_skips_the_bottom_chunks_past_the_bbox_in_the_grown_region(files: Any) -> None:
    """529 along the sweep grows to 576 (a length with a power-of-two factor, 9 x 64) in
    tasks 32 long: the one wholly past 529 writes nothing, so fn is not called on its
    bottom chunks, and the voxels are exact."""
    shape = (16, 16, 1024)
    data = np.random.default_rng(1).integers(0, 100, shape).astype("float32")
    src = files.source(data, (8, 8, 8))
    dst = files.source(np.full(shape, SENTINEL, "float32"), (8, 8, 8))
    bbox = Box((0, 0, 0), (16, 16, 529))
    CALLED.clear()
    report = apply(recorded, src, dst, crop_pads=1, bbox=bbox, executor="sync", probe=False,
                   intermediates=files.root / "t")  # fmt: skip
    assert report.plan.grown_bbox == Box((0, 0, 0), (16, 16, 576)), report.plan.summary()
    assert report.plan.chunk_sizes[0][2] == 32  # [544, 576) is wholly past the bbox: the case
    assert CALLED and max(b.start[2] for b in CALLED) == 512 - 1  # box: the padded read
    expected = np.full(shape, SENTINEL, "float32")
    expected[bbox.slices()] = data[bbox.slices()] * 2
    np.testing.assert_array_equal(dst.read(dst.bounds), expected)
