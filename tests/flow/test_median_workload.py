"""The benchmarks' second workload, a 3-D median filter of size 5 with ``crop_pads=2``
and automatic sizes, is exact: every voxel equals scipy's filter of the whole array
with the volume's fill value (0) outside it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from chunkgraph.volume import apply

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import volume_flow


def test_median_of_size_5_with_automatic_sizes_equals_scipy_on_the_whole_array(
    files: Any,
) -> None:
    shape = (24, 40, 64)
    data = files.random(shape, "float32")
    src = files.source(data, (8, 8, 16))
    dst = files.empty(shape, (8, 8, 16), "float32")
    report = apply(volume_flow.median, src, dst, crop_pads=volume_flow.MEDIAN_PAD,
                   executor="threads", intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and report.plan.automatic
    assert report.read_amplification == 1.0
    expected = ndimage.median_filter(data, size=5, mode="constant", cval=0.0)
    np.testing.assert_array_equal(dst.read(dst.bounds), expected)
