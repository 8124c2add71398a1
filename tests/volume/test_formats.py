"""Volumes in the formats of the field, on a local disk: precomputed scales, OME-Zarr levels,
N5 and Zarr v2 datasets, opened and created by prefix, with the placement their metadata says."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import AlignmentError, ConfigError, volume
from chunkgraph.geometry import Box


def test_a_precomputed_scale_round_trips_with_offset_and_resolution(tmp_path: Path) -> None:
    url = f"precomputed://{tmp_path}/img"
    v = volume.create(url, (40, 32, 12), (16, 16, 8), "uint16", resolution=(4, 4, 40),
                      offset=(10, 20, 5))  # fmt: skip
    data = np.arange(40 * 32 * 12, dtype="uint16").reshape(40, 32, 12)
    v.write(v.bounds, data)
    again = volume.open(url, scale="4_4_40")
    assert (again.offset, again.resolution, again.chunks) == ((10, 20, 5), (4, 4, 40), (16, 16, 8))
    np.testing.assert_array_equal(again.read(again.bounds), data)
    info = json.loads((tmp_path / "img" / "info").read_text())
    assert info["scales"][0]["voxel_offset"] == [10, 20, 5]


def test_a_sharded_scale_is_written_by_whole_shards_and_read_by_chunks(tmp_path: Path) -> None:
    url = f"precomputed://{tmp_path}/sh"
    v = volume.create(url, (128, 128, 16), (16, 16, 8), "uint8", write_chunks=(64, 64, 16))
    assert (v.chunks, v.read_chunks) == ((64, 64, 16), (16, 16, 8))
    with pytest.raises(AlignmentError, match="whole shards"):
        v.write(Box((0, 0, 0), (16, 16, 8)), np.ones((16, 16, 8), "uint8"))
    v.write(Box((0, 0, 0), (64, 64, 16)), np.full((64, 64, 16), 7, "uint8"))
    assert volume.open(url).read(Box((60, 60, 0), (68, 68, 1))).sum() == 16 * 7


def test_a_scale_is_chosen_by_index_or_key_and_a_wrong_one_names_those_there(
    tmp_path: Path,
) -> None:
    url = f"precomputed://{tmp_path}/ms"
    (base,) = volume.create_multiscale(url, [volume.Level((64, 64, 8), (16, 16, 8), (4, 4, 40))],
                                       "uint8")  # fmt: skip
    half = volume.add_level(base, (2, 2, 1))
    assert volume.open(url, scale=1).path == half.path == volume.open(url, scale="8_8_40").path
    with pytest.raises(ConfigError, match=r"0: '4_4_40'.*1: '8_8_40'") as err:
        volume.open(url, scale=2)
    assert err.value.field == "scale"


def test_encodings_refuse_dtypes_they_cannot_store_and_say_what_would_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use encoding='raw'"):
        volume.create(f"precomputed://{tmp_path}/j", (8, 8, 8), (8, 8, 8), "float32",
                      encoding="jpeg")  # fmt: skip
    with pytest.raises(ConfigError, match="uint32 or uint64 only"):
        volume.create(f"precomputed://{tmp_path}/c", (8, 8, 8), (8, 8, 8), "float32",
                      encoding="compressed_segmentation")  # fmt: skip


def test_an_unknown_prefix_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"precomputed://, zarr2://, zarr3://, zarr://, n5://"):
        volume.open("ngff://somewhere")


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_an_ome_zarr_pyramid_opens_by_level_with_its_placement(
    tmp_path: Path, version: str
) -> None:
    root = str(tmp_path / "img.zarr")
    levels = volume.create_multiscale(
        root, [((2, 32, 32), (2, 16, 16), (1.5, 1.5), (4, 4))], "float32", version=version
    )
    levels[0].write(levels[0].bounds, np.ones((2, 32, 32), "float32"))
    half = volume.add_level(levels[0], 2)
    assert (half.shape, half.offset, half.resolution) == ((2, 16, 16), (2, 2), (3, 3))
    again = volume.open(root, scale=1)
    assert (again.offset, again.resolution, again.channel_shape) == ((2, 2), (3, 3), (2,))
    assert volume.open(root).read(Box((4, 4), (6, 6))).sum() == 8
    assert pickle.loads(pickle.dumps(again)).path == again.path


def test_n5_and_zarr2_datasets_keep_their_placement(tmp_path: Path) -> None:
    for url in (f"n5://{tmp_path}/a.n5", f"zarr2://{tmp_path}/b.zarr"):
        v = volume.create(url, (20, 30), (8, 8), "uint16", resolution=(2, 3), offset=(1, 2))
        v.write(v.bounds, np.ones((20, 30), "uint16"))
        again = pickle.loads(pickle.dumps(volume.open(url)))
        assert (again.offset, again.resolution) == ((1, 2), (2, 3))
        assert again.read(again.bounds).sum() == 600
