"""The probe's read is part of the plan: with the probe on, the first bottom chunk's
region is read once (the cache apply owns keeps it for the first task, even when that
task is the only one), the plan predicts what the run measures, and the report counts
the probe's reads in chunks and requests as it counts them in bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.volume import apply


def identity(src: np.ndarray) -> np.ndarray:
    return src


def _off_grid(files: Any) -> tuple[Any, dict[str, Any]]:
    """A bbox off the storage grid (chunks 24 x 20 x 28, origin -8), one top task of 8
    bottom chunks: the flow reads 1.60x the bbox's voxels whatever the probe does."""
    shape, offset = (80, 112, 300), (-8, -8, -8)
    src = files.source(files.random(shape, "float32"), (24, 20, 28), offset=offset)
    args = dict(
        chunk_sizes=[(64, 96, 256), (32, 48, 128)],
        crop_pads=[0, (1, 3, 5)],
        bbox=Box((0, 0, 5), (64, 96, 261)),
    )
    return src, args


def _aligned(files: Any) -> tuple[Any, dict[str, Any]]:
    """On the storage grid with automatic sizes: one top task over bottom chunks that
    blend along the last axis."""
    src = files.source(files.random((64, 96, 256), "float32"), (32, 32, 32))
    return src, dict(crop_pads=2, blend_pads=(0, 0, 8), memory_limit=2**30, workers=2)


@pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")  # off the grid
@pytest.mark.parametrize("case", [_off_grid, _aligned], ids=["off-grid", "aligned"])
def test_one_top_task_reads_the_probe_s_region_once(files: Any, case: Any) -> None:
    src, args = case(files)
    reports = {}
    for probe in (False, True):
        dst = files.empty(src.shape, src.spatial_chunks, "float32", offset=src.bounds.start)
        reports[probe] = report = apply(identity, src, dst, executor="threads", probe=probe,
                                        intermediates=files.root / f"p{probe}", **args)  # fmt: skip
        box = report.bbox
        np.testing.assert_array_equal(dst.read(box), src.read(box))
    on, off = reports[True], reports[False]
    assert on.tasks_per_level[0] == 1
    assert on.plan is not None and off.plan is not None
    assert on.read_amplification == pytest.approx(on.plan.read_amplification, abs=0.02)
    assert on.bytes_read == off.bytes_read
    assert on.input_chunks_read == off.input_chunks_read
    assert on.plan.cache_bytes > 0 and off.plan.cache_bytes == 0
    assert any("probe" in reason for reason in on.plan.reasons)


def test_the_probe_s_reads_are_counted_in_chunks_as_in_bytes(files: Any) -> None:
    """Inputs with their own cache, too small to keep the probe's region: the probe's read
    is a second read, in bytes and in chunks alike (2 x 2 x 2 storage chunks of 64 B)."""
    data = files.random((16, 16, 16), "uint8")
    path = files.source(data, (4, 4, 4)).path
    args = dict(chunk_sizes=[(16, 16, 16), (4, 4, 4)], crop_pads=[0, 1], executor="sync")
    reports = {}
    for probe in (False, True):
        src = volume.open(path, cache_bytes=64)  # one chunk: an LRU that keeps nothing useful
        dst = files.empty((16, 16, 16), (4, 4, 4), "uint8")
        reports[probe] = apply(identity, src, dst, probe=probe,
                               intermediates=files.root / f"p{probe}", **args)  # fmt: skip
    on, off = reports[True], reports[False]
    assert on.bytes_read - off.bytes_read == 8 * 64
    assert on.input_chunks_read - off.input_chunks_read == 8
