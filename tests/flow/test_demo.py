"""The demo job runs end to end and smooths the volume like a whole-array filter would."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chunkgraph import volume
from chunkgraph.cli._flow_demo import RADIUS, binomial_smooth, check_demo, run_demo
from chunkgraph.geometry import Box

SHAPE = (256, 512, 128)  # a quarter of the demo's volume: the same flow, 2 top-level tasks


def test_demo_matches_whole_array_smoothing(tmp_path: Path) -> None:
    report = run_demo(tmp_path, progress=False, shape=SHAPE)
    assert report.tasks_per_level[0] == 2 and report.reductions > 0
    assert report.read_amplification <= 1.3
    text = report.summary()
    assert report.flow_id in text and "tasks per level: [2, 128]" in text
    src = volume.open(str(tmp_path / "demo-src.zarr")).read(Box.from_shape(SHAPE))
    out = volume.open(str(tmp_path / "demo-dst.zarr"))
    # away from the volume edge (where the flow sees fill values), every voxel is the
    # blend of chunk results that each equal the whole-array filter
    inner = Box.from_shape(SHAPE).cropped(RADIUS)
    expected = binomial_smooth(src)
    np.testing.assert_allclose(out.read(inner), expected, rtol=1e-5, atol=1e-4)
    assert check_demo(tmp_path, SHAPE) <= float(np.abs(out.read(inner) - expected).max()) < 1e-3
    kept = [p.name for p in (tmp_path / ".demo-dst.zarr.chunkgraph").iterdir()]
    assert kept == [f"{report.flow_id}.done"]  # temporaries gone, completion record kept
