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


def test_zarr_prefix_reads_the_version_from_the_metadata(tmp_path: Path) -> None:
    volume.create(f"zarr2://{tmp_path}/v2.zarr", (8, 8), (4, 4), "uint8", offset=(3, 3))
    volume.create(tmp_path / "v3.zarr", (8, 8), (4, 4), "uint8")
    assert volume.open(f"zarr://{tmp_path}/v2.zarr").backend == "zarr2"
    assert volume.open(f"zarr://file://{tmp_path}/v3.zarr").backend == "zarr"
    with pytest.raises(ConfigError, match="open it without scale") as err:
        volume.open(f"{tmp_path}/v2.zarr", scale=1)
    assert err.value.field == "scale"


def test_a_level_translated_by_part_of_a_voxel_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "half.zarr"
    volume.create_multiscale(root, [((16, 16), (8, 8), (2, 2))], "uint8")
    meta = json.loads((root / "zarr.json").read_text())
    meta["attributes"]["ome"]["multiscales"][0]["datasets"][0]["coordinateTransformations"].append(
        {"type": "translation", "translation": [1.0, 0.0]}
    )
    (root / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"level 0 \('0'\).*\(0.5, 0\) voxels"):
        volume.open(root)


def test_remove_takes_a_whole_image_of_any_format(tmp_path: Path) -> None:
    volume.create(f"precomputed://{tmp_path}/pc", (8, 8, 8), (8, 8, 8), "uint8")
    volume.create_multiscale(tmp_path / "ome.zarr", [((8, 8), (8, 8), (1, 1))], "uint8")
    volume.create(f"n5://{tmp_path}/a.n5", (8, 8), (8, 8), "uint8")
    for url in (
        f"precomputed://{tmp_path}/pc",
        str(tmp_path / "ome.zarr"),
        f"n5://{tmp_path}/a.n5",
    ):
        volume.remove(url)
        with pytest.raises(FileNotFoundError):
            volume.open(url)


def test_exist_ok_reopens_a_sharded_scale_asked_for_again(tmp_path: Path) -> None:
    url = f"precomputed://{tmp_path}/again"
    first = volume.create(url, (128, 64, 16), (16, 16, 8), "uint8", write_chunks=(64, 64, 16))
    second = volume.create(
        url, (128, 64, 16), (16, 16, 8), "uint8", write_chunks=(64, 64, 16), exist_ok=True
    )
    assert second.path == first.path and second.chunks == (64, 64, 16)
    with pytest.raises(ConfigError, match="already exists"):
        volume.create(url, (128, 64, 16), (16, 16, 8), "uint8", write_chunks=(64, 64, 16))


def test_a_jpeg_scale_keeps_a_smooth_image_within_its_loss(tmp_path: Path) -> None:
    url = f"precomputed://{tmp_path}/photo"
    v = volume.create(url, (64, 64, 4), (64, 64, 1), "uint8", encoding="jpeg")
    x = np.arange(64, dtype="float64")
    image = (100 + 50 * np.sin(x[:, None, None] / 10) * np.cos(x[None, :, None] / 12)).astype(
        "uint8"
    ) * np.ones((1, 1, 4), "uint8")
    v.write(v.bounds, image)
    back = volume.open(url).read(v.bounds).astype(int)
    assert np.abs(back - image).max() <= 8


def test_tensorstore_formats_name_the_places_they_reach() -> None:
    with pytest.raises(ConfigError, match=r"s3:// URLs and local paths") as err:
        volume.open("n5://gs://bucket/a.n5")
    assert err.value.field == "path"
    with pytest.raises(ConfigError, match=r"not ftp://"):
        volume.open("precomputed://ftp://host/img")


def test_a_bare_path_opens_precomputed_and_n5_by_their_metadata(tmp_path: Path) -> None:
    volume.create(f"precomputed://{tmp_path}/pc", (8, 8, 8), (8, 8, 8), "uint8")
    volume.create(f"n5://{tmp_path}/a.n5", (8, 8), (8, 8), "uint8")
    assert volume.open(tmp_path / "pc", scale="1_1_1").backend == "precomputed"
    assert volume.open(tmp_path / "a.n5").backend == "n5"


def test_a_sharded_zarr3_array_made_elsewhere_is_written_by_whole_shards(tmp_path: Path) -> None:
    import zarr

    zarr.create_array(tmp_path / "sh.zarr", shape=(64, 64), chunks=(8, 8), shards=(32, 32),
                      dtype="uint8")  # fmt: skip
    v = volume.open(tmp_path / "sh.zarr", "r+")
    assert (v.chunks, v.read_chunks) == ((32, 32), (8, 8))
    v.write(Box((0, 0), (32, 64)), np.ones((32, 64), "uint8"))
    assert volume.open(tmp_path / "sh.zarr").read(v.bounds).sum() == 32 * 64


def test_reads_of_a_sharded_scale_are_cached_and_counted_by_the_chunk_inside(
    tmp_path: Path,
) -> None:
    url = f"precomputed://{tmp_path}/counted"
    v = volume.create(url, (128, 128, 16), (16, 16, 8), "uint8", write_chunks=(64, 64, 16))
    v.write(v.bounds, np.ones((128, 128, 16), "uint8"))
    for cache_bytes in (0, 1 << 20):
        r = volume.open(url, cache_bytes=cache_bytes)
        r.read(Box((16, 16, 0), (32, 32, 8)))
        assert (r.stats.chunks_read, r.stats.bytes_read) == (1, 16 * 16 * 8)
    v.write(Box((0, 0, 0), (64, 64, 16)), np.zeros((64, 64, 16), "uint8"))
    assert v.stats.chunks_written == 1 + 4  # the whole volume's 4 shards, then one


@pytest.mark.parametrize("dtype", ["bool", "float64", "int64"])
def test_precomputed_lists_the_data_types_it_stores(tmp_path: Path, dtype: str) -> None:
    """precomputed names its dtypes one by one: a number it does not list (float64, int64)
    is refused with that list, naming the dtype field, before anything is made."""
    path = tmp_path / "pc"
    with pytest.raises(ConfigError, match="valid: uint8, int8, uint16, int16, uint32, int32, "
                       "uint64, float32") as info:  # fmt: skip
        volume.create(f"precomputed://{path}", (8, 8, 8), (8, 8, 8), dtype)
    assert info.value.field == "dtype"
    assert not path.exists()


def test_a_zarr3_prefix_over_a_zarr2_array_is_refused_naming_its_prefix(tmp_path: Path) -> None:
    """``zarr3://`` asks for Zarr v3: a v2 array there is named, with the prefix that opens
    it, as ``zarr2://`` over a v3 array is refused."""
    import zarr

    place = tmp_path / "v2.zarr"
    zarr.create_array(str(place), shape=(4, 4), chunks=(2, 2), dtype="uint8", zarr_format=2)
    with pytest.raises(ConfigError, match=r"is Zarr v2: open it as 'zarr2://") as info:
        volume.open(f"zarr3://{place}")
    assert info.value.field == "path"
    assert volume.open(f"zarr2://{place}").backend == "zarr2"
    assert volume.open(str(place)).backend == "zarr2"  # no prefix: found by what is there


def test_a_format_prefix_beside_the_memory_backend_is_refused(tmp_path: Path) -> None:
    """A memory volume lives in this process; ``n5://`` asks for a dataset on disk: the two
    disagree, and nothing is made (it made the N5 dataset on disk)."""
    place = tmp_path / "x.n5"
    with pytest.raises(ConfigError, match="lives in this process") as info:
        volume.create(f"n5://{place}", (8, 8), (4, 4), "uint8", backend="memory")
    assert info.value.field == "backend"
    assert not place.exists()
