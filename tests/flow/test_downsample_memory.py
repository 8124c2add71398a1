"""downsample's plan on small, odd shapes: every pass within the memory budget and never
reading much past the source, and the run's peak bounded accordingly.

Levels smaller than their chunks get chunks clipped to their shape (63 voxels where the
source has 70); a fused pass's top chunk is a common multiple of every level's chunk, and
such a multiple of clipped chunks can be many times the whole volume (630 voxels for a
250-voxel axis). One task across the axis covers every level's chunks whole as well.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunkgraph import downsample, volume
from chunkgraph.jobs._pyramid import FUSED_WORK_COPIES


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(*(st.integers(3, 260),) * 3),
    chunk=st.tuples(*(st.integers(2, 130),) * 3),
    factor=st.sampled_from([(2, 2, 2), (2, 2, 1), (3, 3, 3)]),
    levels=st.integers(1, 3),
    workers=st.integers(1, 4),
    memory_limit=st.sampled_from([2**28, 2**30, 2**36]),
)
@example(
    shape=(250, 250, 250),
    chunk=(70, 70, 70),
    factor=(2, 2, 2),
    levels=2,
    workers=1,
    memory_limit=2**36,
)
def test_every_pass_stays_within_the_budget_and_the_source(
    shape: tuple[int, int, int],
    chunk: tuple[int, int, int],
    factor: tuple[int, int, int],
    levels: int,
    workers: int,
    memory_limit: int,
) -> None:
    name = f"ds-plan-{shape}-{chunk}"
    src = volume.create(name, shape, chunk, "uint16", backend="memory", exist_ok=True)
    try:
        report = downsample(
            src,
            factor=factor,
            levels=levels,
            dst=name + "-{level}",
            memory_limit=memory_limit,
            workers=workers,
            dry_run=True,
        )
    finally:
        volume.remove(name)
    below = shape
    for passed, count in zip(report.passes, report.levels_per_pass, strict=True):
        plan = passed.plan
        assert plan is not None
        assert plan.memory_bytes <= memory_limit
        first = tuple(-(-n // f) for n, f in zip(below, factor, strict=True))
        top = plan.chunk_sizes[0]
        # What one task reads of the level below: within its extent plus one chunk of the
        # first level written, on every axis.
        for t, n, c in zip(top, first, chunk, strict=True):
            assert t <= n + c, (top, first, chunk)
        if count > 1:
            read = math.prod(t * f for t, f in zip(top, factor, strict=True)) * 2
            assert workers * FUSED_WORK_COPIES * read <= memory_limit
        for _ in range(count):
            below = tuple(-(-n // f) for n, f in zip(below, factor, strict=True))


def test_a_fused_run_on_an_odd_shape_peaks_near_its_source(tmp_path: Path) -> None:
    """(40, 40, 40) in chunks of 36: level 1 is 20 (chunks 20), level 2 is 10 (chunks
    10); the common multiple of 18, 20 and 20 is 180 voxels of level 1, 9^3 the source."""
    data = np.random.default_rng(3).integers(0, 1000, (40, 40, 40)).astype(np.uint16)
    src = volume.create(str(tmp_path / "v.zarr"), data.shape, (36, 36, 36), data.dtype)
    src.write(src.bounds, data)
    tracemalloc.start()
    try:
        report = downsample(
            src,
            levels=2,
            method="max",
            dst=str(tmp_path / "s{level}.zarr"),
            workers=1,
            executor="sync",
            memory_limit=2**34,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.levels_per_pass == (2,)
    # The source is 125 KiB; a pass holds a few copies of what it reads.
    assert peak < 40 * data.nbytes, peak
    top = volume.open(str(tmp_path / "s2.zarr")).read(volume.open(str(tmp_path / "s2.zarr")).bounds)
    assert np.array_equal(top, data.reshape(10, 4, 10, 4, 10, 4).max(axis=(1, 3, 5)))


def test_an_extent_the_chunks_do_not_divide_is_not_one_huge_pass() -> None:
    """1000^3 in chunks of 128: level 1 is 500 voxels, which no multiple of 128 divides;
    the plan grows past the edge to 512 rather than take all 500^3 in one task."""
    src = volume.create("ds-odd", (1000, 1000, 1000), (128, 128, 128), "uint8", backend="memory")
    try:
        report = downsample(src, levels=1, dry_run=True, dst="ds-odd-{level}", workers=4)
    finally:
        volume.remove("ds-odd")
    (passed,) = report.passes
    assert passed.plan is not None
    assert passed.tasks_per_level[0] >= 4
    assert passed.plan.memory_bytes < 1000**3  # less than the source itself
    assert all(t <= 512 for t in passed.plan.chunk_sizes[0])
