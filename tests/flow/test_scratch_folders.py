"""A flow with its state in a bucket keeps its layers on this machine's scratch
(``<temp dir>/chunkgraph-layers/<digest>/<flow id>/layers``); when it finishes, none of
those folders is left, and a failed run leaves only the layers its resume reads."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume

SHAPE = (32, 32)


FAILING: set[float] = set()  # the top chunks fn fails on (a global: not in the flow id)


def doubled(src: np.ndarray) -> np.ndarray:
    if float(src[src.shape[0] // 2, src.shape[1] // 2]) in FAILING:  # the chunk's own
        raise RuntimeError("a failing chunk")
    return src * 2


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def _flow(bucket: str, name: str, **options: Any) -> Any:
    src = volume.open(f"s3://{bucket}/src.zarr")
    dst = volume.open(f"s3://{bucket}/{name}", mode="r+")
    return volume.apply(
        doubled,
        src,
        dst,
        chunk_sizes=[(16, 16)],
        blend_pads=2,
        blend_modes="linear",
        **{"executor": "threads", "workers": 2, **options},
    )


def _volumes(bucket: str) -> np.ndarray:
    # each 16 x 16 top chunk holds its own index, so fn can fail on one of them
    data = np.kron(np.arange(4, dtype="float32").reshape(2, 2), np.ones((16, 16), "float32"))
    src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 8), "float32")
    src.write(src.bounds, data)
    for name in ("a.zarr", "b.zarr"):
        volume.create(f"s3://{bucket}/{name}", SHAPE, (8, 8), "float32")
    return data


def test_a_finished_flow_leaves_no_scratch_folders(bucket: str, scratch: Path) -> None:
    _volumes(bucket)
    other = scratch / "chunkgraph-layers" / "someone-elses"
    other.mkdir(parents=True)
    report = _flow(bucket, "a.zarr")
    assert report.temporary_bytes > 0  # it did keep layers on the scratch
    assert sorted(p.name for p in (scratch / "chunkgraph-layers").iterdir()) == [other.name]
    other.rmdir()
    _flow(bucket, "b.zarr")
    assert list(scratch.iterdir()) == []  # chunkgraph-layers itself went with the last


def test_a_failed_flow_leaves_only_the_layers_its_resume_reads(bucket: str, scratch: Path) -> None:
    data = _volumes(bucket)
    FAILING.add(3.0)
    try:
        with pytest.raises(ExceptionGroup):
            _flow(bucket, "a.zarr", retries=0, probe=False, workers=1)
    finally:
        FAILING.clear()
    layers = list((scratch / "chunkgraph-layers").glob("*/*/layers"))
    assert len(layers) == 1 and any(layers[0].iterdir())
    report = _flow(bucket, "a.zarr", probe=False, resume=True)
    assert report.top_tasks_skipped > 0  # the layers kept were read again
    assert list(scratch.iterdir()) == []
    out = volume.open(f"s3://{bucket}/a.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), data * 2)
