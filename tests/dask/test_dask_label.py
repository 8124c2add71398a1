"""``label`` on a Dask cluster: both passes' functions and the relabel table travel to
the workers, and the ids are scipy's on the whole array."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from chunkgraph import label, volume


def test_label_on_a_cluster_gives_scipys_ids(healthy: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    data = ndimage.gaussian_filter(rng.standard_normal((24, 24, 24)).astype("float32"), 1.5)
    src = volume.create(tmp_path / "src.zarr", data.shape, (8, 8, 8), "float32")
    src.write(src.bounds, data)
    report = label(src, tmp_path / "dst.zarr", threshold=0.05, connectivity=2, chunk=(8, 8, 8),
                   executor=healthy)  # fmt: skip
    structure = ndimage.generate_binary_structure(3, 2)
    expected, count = ndimage.label(data > 0.05, structure=structure)
    assert report.components == count
    out = volume.open(tmp_path / "dst.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), expected)
