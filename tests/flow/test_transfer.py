"""transfer: rechunk exactly with each source chunk read about once and memory within the
budget; shards, bbox, dtype casts; and what a wrong argument gets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from chunkgraph import ConfigError, transfer, volume
from chunkgraph.flow import SaturationWarning
from chunkgraph.geometry import Box

MiB = 2**20


def _source(root: Path, data: np.ndarray, chunks: tuple[int, ...]) -> volume.Volume:
    src = volume.create(str(root / "src.zarr"), data.shape, chunks, data.dtype, checksum=False)
    src.write(src.bounds, data)
    return volume.open(str(root / "src.zarr"))


def test_rechunk_64_cubes_to_slabs_reads_each_chunk_about_once(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 255, (256, 256, 128)).astype(np.uint8)
    src = _source(tmp_path, data, (64, 64, 64))
    src.reset_stats()
    budget = 128 * MiB
    report = transfer(src, tmp_path / "dst.zarr", chunks=(256, 256, 32), memory_limit=budget)
    dst = volume.open(str(tmp_path / "dst.zarr"))
    assert dst.chunks == (256, 256, 32)
    np.testing.assert_array_equal(dst.read(dst.bounds), data)
    chunks = (256 // 64) ** 2 * (128 // 64)
    assert src.stats.chunks_read <= 1.1 * chunks
    assert report.read_amplification <= 1.1
    assert report.plan is not None and report.plan.memory_bytes <= budget


def test_sharded_dst_is_a_zarr_v3_sharded_array(tmp_path: Path) -> None:
    data = np.random.default_rng(1).integers(0, 9, (64, 64, 32)).astype(np.uint32)
    src = _source(tmp_path, data, (16, 16, 16))
    transfer(src, tmp_path / "sharded.zarr", chunks=(16, 16, 16), shards=(64, 32, 32))
    array = zarr.open_array(str(tmp_path / "sharded.zarr"))
    assert array.chunks == (16, 16, 16) and array.shards == (64, 32, 32)
    dst = volume.open(str(tmp_path / "sharded.zarr"))
    assert dst.chunks == (64, 32, 32)  # the write unit
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_bbox_and_dtype_keep_global_coordinates(tmp_path: Path) -> None:
    data = np.random.default_rng(2).integers(0, 200, (40, 30)).astype(np.uint8)
    src = _source(tmp_path, data, (8, 8))
    box = Box((5, 3), (37, 30))
    transfer(src, tmp_path / "part.zarr", bbox=box, dtype="int16", chunks=(16, 16))
    part = volume.open(str(tmp_path / "part.zarr"))
    assert part.bounds == box and part.dtype == np.int16
    np.testing.assert_array_equal(part.read(box), data[5:37, 3:30])


def test_narrowing_dtype_needs_a_cast(tmp_path: Path) -> None:
    data = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000
    src = _source(tmp_path, data, (4, 4))
    with pytest.raises(ConfigError) as info:
        transfer(src, tmp_path / "narrow.zarr", dtype="uint8")
    assert info.value.field == "cast"
    assert not (tmp_path / "narrow.zarr").exists()  # refused before dst is made
    with pytest.warns(SaturationWarning, match="63 voxel"):
        transfer(src, tmp_path / "narrow2.zarr", dtype="uint8", cast="same_kind")
    out = volume.open(str(tmp_path / "narrow2.zarr"))
    np.testing.assert_array_equal(out.read(out.bounds), np.minimum(data, 255))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bbox": Box((0, 0), (9, 8))}, "bbox"),
        ({"bbox": Box((0,), (4,))}, "bbox"),
        ({"shards": (6, 8), "chunks": (4, 4)}, "shards"),
        ({"shards": (8, 8), "backend": "tensorstore"}, "shards"),
    ],
)
def test_bad_arguments_name_the_field(
    tmp_path: Path, kwargs: dict[str, object], field: str
) -> None:
    src = _source(tmp_path, np.zeros((8, 8), np.uint8), (4, 4))
    with pytest.raises(ConfigError) as info:
        transfer(src, tmp_path / "bad.zarr", **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize("prefix", ["precomputed://", "n5://", "zarr2://"])
def test_transfer_into_another_format_and_back_is_exact(tmp_path: Path, prefix: str) -> None:
    data = np.random.default_rng(3).integers(0, 2**16, (48, 40, 20)).astype(np.uint16)
    src = _source(tmp_path, data, (16, 16, 8))
    there = f"{prefix}{tmp_path}/there"
    transfer(src, there, chunks=(32, 32, 10))
    other = volume.open(there)
    assert other.backend == prefix.removesuffix("://")
    np.testing.assert_array_equal(other.read(other.bounds), data)
    transfer(there, tmp_path / "back.zarr")
    back = volume.open(str(tmp_path / "back.zarr"))
    np.testing.assert_array_equal(back.read(back.bounds), data)
