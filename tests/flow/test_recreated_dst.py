"""Resume never trusts markers or a completion record of a destination that is gone."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.flow import apply


def plus_one(x: np.ndarray) -> np.ndarray:
    return x + 1


FAIL = {"on": True}


def fails_on_the_last(x: np.ndarray, box: object) -> np.ndarray:
    if FAIL["on"] and box.start[0] >= 16:  # type: ignore[attr-defined]
        raise RuntimeError("interrupted")
    return x + 1


@pytest.fixture
def src(tmp_path: Path) -> volume.Volume:
    vol = volume.create(str(tmp_path / "src.zarr"), (32, 32), (8, 8), "float32")
    vol.write(vol.bounds, np.arange(32 * 32, dtype="float32").reshape(32, 32))
    return vol


def recreate(path: Path) -> volume.Volume:
    shutil.rmtree(path)
    return volume.create(str(path), (32, 32), (8, 8), "float32")


def test_a_finished_flow_whose_dst_was_recreated_runs_again(
    tmp_path: Path, src: volume.Volume
) -> None:
    path = tmp_path / "dst.zarr"
    dst = volume.create(str(path), (32, 32), (8, 8), "float32")
    first = apply(plus_one, src, dst, chunk_sizes=[(16, 16), (8, 8)], blend_pads=[4, 0])
    dst = recreate(path)
    with pytest.warns(UserWarning, match="created anew"):
        again = apply(
            plus_one, src, dst, chunk_sizes=[(16, 16), (8, 8)], blend_pads=[4, 0], resume=True
        )
    assert again.flow_id == first.flow_id and again.tasks_per_level[0] == 4
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)


def test_markers_of_an_interrupted_flow_are_dropped_with_its_recreated_dst(
    tmp_path: Path, src: volume.Volume
) -> None:
    path = tmp_path / "dst.zarr"
    dst = volume.create(str(path), (32, 32), (8, 8), "float32")
    with pytest.raises(ExceptionGroup):
        apply(fails_on_the_last, src, dst, chunk_sizes=[(16, 16), (8, 8)], retries=0, probe=False)
    dst = recreate(path)
    FAIL["on"] = False
    with pytest.warns(UserWarning, match="created anew"):
        report = apply(
            fails_on_the_last, src, dst, chunk_sizes=[(16, 16), (8, 8)], resume=True, probe=False
        )
    assert report.top_tasks_skipped == 0
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)
