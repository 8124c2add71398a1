"""Where a volume lives and what that place can do: the storage layer's one answer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.volume import Location


@pytest.mark.parametrize("backend", ["zarr", "tensorstore"])
def test_a_volume_on_disk_is_local_lockable_and_one_place_however_spelled(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vol = volume.create(tmp_path / "a.zarr", (4, 4), (2, 2), "uint8", backend=backend)
    where = vol.location
    assert where.kind == "disk" and where.local_dir == tmp_path / "a.zarr"
    assert where.lockable and not where.in_process
    os.symlink(tmp_path / "a.zarr", tmp_path / "link.zarr")
    monkeypatch.chdir(tmp_path)
    for spelling in ("link.zarr", "./a.zarr"):
        other = volume.open(spelling)
        assert other.location.same_as(where) and other.location.identity() == where.identity()
    elsewhere = volume.create(tmp_path / "b.zarr", (4, 4), (2, 2), "uint8")
    assert not elsewhere.location.same_as(where)
    assert elsewhere.location.identity() != where.identity()


def test_a_memory_volume_lives_in_this_process_only() -> None:
    vol = volume.create("loc-mem", (4, 4), (2, 2), "uint8", backend="memory")
    try:
        vol.write(vol.bounds, np.ones((4, 4), "uint8"))
        where = vol.location
        assert where.kind == "memory" and where.in_process
        assert where.local_dir is None and not where.lockable
        assert f"pid={os.getpid()}" in where.identity()
        assert where.same_as(volume.open("loc-mem").location)
    finally:
        volume.remove("loc-mem")


def test_a_url_is_remote_shared_and_not_lockable() -> None:
    where = Location.of("s3://bucket/a.zarr", "zarr")
    assert where.kind == "remote" and where.local_dir is None
    assert not where.lockable and not where.in_process
    assert where.identity() == "disk:s3://bucket/a.zarr"  # the flow ids of URLs are kept
    assert where.same_as(Location.of("s3://bucket/a.zarr", "tensorstore"))
    assert not where.same_as(Location.of("s3://bucket/b.zarr", "zarr"))
    # Same name, other kinds: never the same array.
    assert not Location.of("a.zarr", "memory").same_as(Location.of("a.zarr", "zarr"))
