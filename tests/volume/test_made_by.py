"""``create(made_by=...)``: what made a volume, kept in chunkgraph's attributes and read
back by every backend and format that has them (``label`` resumes only into its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkgraph import volume


@pytest.mark.parametrize(
    ("place", "backend"),
    [("v.zarr", "zarr"), ("v.zarr", "tensorstore"), ("n5://v.n5", "zarr"),
     ("zarr2://v.zarr", "zarr")],
)  # fmt: skip
def test_made_by_is_kept_and_read_back(tmp_path: Path, place: str, backend: str) -> None:
    prefix, _, name = place.rpartition("://")
    path = f"{prefix}://{tmp_path / name}" if prefix else str(tmp_path / name)
    made = volume.create(path, (8, 8), (4, 4), "uint32", backend=backend, made_by='{"a": 1}')
    assert made.made_by == '{"a": 1}' == volume.open(path).made_by
    plain = volume.create(str(tmp_path / "plain.zarr"), (8, 8), (4, 4), "uint8")
    assert plain.made_by == "" == volume.open(plain.path).made_by


def test_a_memory_volume_keeps_it() -> None:
    volume.create("made-by-mem", (4,), (2,), "uint8", backend="memory", made_by="job")
    try:
        assert volume.open("made-by-mem", backend="memory").made_by == "job"
    finally:
        volume.remove("made-by-mem")
