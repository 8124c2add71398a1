"""A bbox on dst's storage grid whose length is a prime multiple of the grain (16 x 251) has
no tiling on the grain but the grain and the whole length. Automatic sizes plan it grown
(past dst's edge where it ends there) to a length that splits into good task sizes, every
write clipped to the bbox: memory stops growing with the length, every voxel written is
what the whole array gives, and nothing outside the bbox is written. Reports count the
caller's bbox as the work done, beside the region computed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.flow.test_off_grid_bbox import _check, box_sum, box_sum_unless_stopped
from tests.flow.test_off_grid_bbox import _volumes as off_grid_volumes

from chunkgraph.cli._cmd_run import report_summary
from chunkgraph.geometry import Box
from chunkgraph.volume import apply

MiB = 2**20


def _dry(files: Any, shape: tuple[int, ...], **kw: Any) -> Any:
    src = files.empty(shape, (16, 16, 16), "float32")
    dst = files.empty(shape, (16, 16, 16), "float32")
    report = apply(lambda x: x, src, dst, crop_pads=2, dry_run=True, memory_limit=2**30,
                   intermediates=files.root / "t", **kw)  # fmt: skip
    assert report.plan is not None
    return report


def test_a_prime_multiple_length_plans_a_sweep_whose_memory_stops_growing(files: Any) -> None:
    """(64, 96, 16 x p): one task spanned 16 x 251 (347 MiB) and 16 x 1021 (753 MiB); bottom
    chunks one grain (16) long, margins a quarter of them, at 16 x 4093. Now each plans what
    the next power-of-two length plans: 102 MiB at 4016, then the same from 16336 on."""
    plans = {}
    for p in (251, 1021, 4093):
        report = _dry(files, (64, 96, 16 * p))
        plan = report.plan
        assert plan.sweep_axis == 2 and plan.sweep_tasks > 1, plan.summary()
        assert plan.grown_bbox is not None and plan.grown_bbox.stop[2] > 16 * p
        assert plan.grown_bbox.size <= 1.07 * 64 * 96 * 16 * p
        assert report.write_box == Box((0, 0, 0), (64, 96, 16 * p))
        assert "none grows with the bbox's length" in plan.memory_words()
        assert any("has no tiling on dst's storage grid" in r for r in plan.reasons)
        assert min(plan.chunk_sizes[-1]) >= 32  # margins 2 x 2 at most 1/8 of the bottom
        plans[p] = plan
    whole = _dry(files, (64, 96, 4096)).plan
    assert plans[251].chunk_sizes == whole.chunk_sizes
    assert plans[251].memory_bytes == whole.memory_bytes < 128 * MiB
    assert plans[4093].memory_bytes == plans[1021].memory_bytes


def test_a_cross_section_of_a_prime_multiple_is_cut_into_wider_bands(files: Any) -> None:
    """A (16 x 251)^2 cross-section that must be cut into bands had bands of one grain,
    each reading its halo again (2.99x); grown across too, its bands are wider."""
    plan = _dry(files, (16 * 251, 16 * 251, 16 * 509)).plan
    assert plan.read_amplification <= 1.1, plan.summary()
    assert plan.grown_bbox == Box((0, 0, 0), (4096, 4096, 8192))


def test_a_plan_within_the_rules_stays_on_the_bbox(files: Any) -> None:
    """Lengths whose plan already splits well, or is short, are not grown."""
    for shape in ((64, 96, 4096), (16 * 61, 64, 16384), (32, 32, 48)):
        assert _dry(files, shape).plan.grown_bbox is None, shape


def _volumes(files: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    return off_grid_volumes(files, shape, (8, 8, 8))


# 248 = 8 x 31 along the sweep: the grain (8) or the whole length are its only sizes
WHOLE = (16, 24, 248)
INSIDE = Box((0, 0, 8), (16, 24, 256))  # 248 long, on the grid, in a dst 400 long


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_whole_dst_of_a_prime_multiple_length_is_exact(files: Any, executor: str) -> None:
    data, src, dst = _volumes(files, WHOLE)
    report = apply(box_sum, src, dst, crop_pads=2, executor=executor, workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan.grown_bbox == Box((0, 0, 0), (16, 24, 256)), plan.summary()
    assert plan.sweep_tasks > 1 and plan.direct_writes
    _check(dst, data, dst.bounds)


def test_a_bbox_inside_dst_writes_nothing_past_it(files: Any) -> None:
    data, src, dst = _volumes(files, (16, 24, 400))
    report = apply(box_sum, src, dst, crop_pads=2, bbox=INSIDE, workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    # [256, 264) is computed and not written: dst's sentinel stays there
    assert report.plan.grown_bbox == Box((0, 0, 8), (16, 24, 264)), report.plan.summary()
    assert report.plan.sweep_tasks > 1
    _check(dst, data, INSIDE)


def test_blended_layers_over_a_grown_region_stay_exact(files: Any) -> None:
    data, src, dst = _volumes(files, (16, 24, 400))
    report = apply(box_sum, src, dst, crop_pads=2, blend_pads=2, bbox=INSIDE, workers=2,
                   intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan.grown_bbox is not None and plan.sweep_tasks > 1 and not plan.direct_writes
    _check(dst, data, INSIDE)


def test_an_interrupted_grown_flow_resumes(files: Any) -> None:
    data, src, dst = _volumes(files, WHOLE)
    stop = files.root / "stop"
    stop.touch()
    kw: dict[str, Any] = dict(crop_pads=2, executor="sync", probe=False, retries=0,
                              fn_kwargs={"stop": str(stop)},
                              intermediates=files.root / "t")  # fmt: skip
    with pytest.raises(ExceptionGroup):
        apply(box_sum_unless_stopped, src, dst, **kw)
    stop.unlink()
    report = apply(box_sum_unless_stopped, src, dst, resume=True, **kw)
    assert report.plan.grown_bbox is not None and report.top_tasks_skipped > 0
    _check(dst, data, dst.bounds)


GIVEN: list[int] = []  # a global: values an fn closes over are part of the flow's id


def counted_box_sum(src: np.ndarray) -> np.ndarray:
    GIVEN.append(src.size)
    return box_sum(src)


def test_reports_count_the_caller_s_bbox(files: Any) -> None:
    """The work is the bbox asked for: the run report's voxels and the breakdown's needed
    compute count it (the growth is redundant compute), and the summary says both it and
    the region computed. Here a bbox off the grid, grown out to it."""
    data, src, dst = _volumes(files, (16, 24, 400))
    bbox = Box((0, 3, 5), (16, 21, 250))
    GIVEN.clear()
    report = apply(counted_box_sum, src, dst, crop_pads=2, bbox=bbox, workers=2,
                   probe=False, intermediates=files.root / "t")  # fmt: skip
    computed = report.plan.grown_bbox
    assert report.bbox == computed != bbox
    summary = report_summary(report)
    assert summary["voxels"] == bbox.size == report.voxels
    assert summary["computed_voxels"] == computed.size
    assert f"{bbox.size:,} voxels written of {computed.size:,} computed" in report.summary()
    b = report.breakdown
    assert b is not None and GIVEN
    useful = b.compute_seconds / (b.compute_seconds + b.redundant_seconds)
    assert useful == pytest.approx(bbox.size / sum(GIVEN), rel=1e-6)
    _check(dst, data, bbox)
