"""Damaged chunk files: checksummed by default, and an error that names the chunk.

Every test damages real Zarr v3 chunk files on disk. The chunk used is grid
index (1, 2) of a (12, 12) volume in 4x4 chunks at offset (100, 200), key
``c/1/2``, covering global box (104, 208)..(108, 212)::

        col 0   col 1   col 2
      +-------+-------+-------+
row 0 |       |       |       |
      +-------+-------+-------+
row 1 |       |       | c/1/2 |  <- damaged
      +-------+-------+-------+
row 2 |       |       |       |
      +-------+-------+-------+
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkgraph import CorruptChunkError, volume
from chunkgraph._errors import ChunkgraphError, ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

DISK = ("zarr", "tensorstore")
SHAPE, CHUNKS, OFFSET = (12, 12), (4, 4), (100, 200)
KEY, GRID = "c/1/2", (1, 2)
DATA = np.random.default_rng(7).random(SHAPE, dtype="float32")


def _make(path: Path, backend: str, **kw: Any) -> Volume:
    v = volume.create(str(path), SHAPE, CHUNKS, "float32", backend=backend, offset=OFFSET, **kw)  # type: ignore[arg-type]
    v.write(v.bounds, DATA)
    return v


def _damage(file: Path, how: str) -> None:
    raw = bytearray(file.read_bytes())
    if how == "flip":
        middle = len(raw) // 2
        raw[middle : middle + 4] = bytes(b ^ 0xFF for b in raw[middle : middle + 4])
    else:
        del raw[len(raw) // 2 :]
    file.write_bytes(bytes(raw))


def _codecs(path: Path) -> list[str]:
    return [c["name"] for c in json.loads((path / "zarr.json").read_text())["codecs"]]


@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("compressor", ["default", None])
@pytest.mark.parametrize("writer", DISK)
@pytest.mark.parametrize("reader", DISK)
def test_damaged_chunk_error_names_key_file_and_box(
    tmp_path: Path, writer: str, reader: str, compressor: str | None, how: str
) -> None:
    path = tmp_path / "v"
    _make(path, writer, compressor=compressor)
    _damage(path / "c" / "1" / "2", how)
    v = volume.open(path, backend=reader)
    with pytest.raises(CorruptChunkError) as caught:
        v.read(v.bounds)
    err = caught.value
    assert (err.volume, err.chunks, err.keys) == (str(path), (GRID,), (KEY,))
    assert err.files == (str(path / "c" / "1" / "2"),)
    message = str(err)
    for needed in (str(path), f"chunk {GRID}", f"key {KEY!r}", repr(err.files[0])):
        assert needed in message
    assert "Box(start=(104, 208), stop=(108, 212))" in message
    assert re.search(r"rerun the step that produced it.*delete the file", message)
    # The chunks around it are intact and still read.
    np.testing.assert_array_equal(v.read(Box((100, 200), (104, 212))), DATA[:4])


@pytest.mark.parametrize("backend", DISK)
def test_damage_is_named_through_the_chunk_cache_and_not_cached(
    tmp_path: Path, backend: str
) -> None:
    path = tmp_path / "v"
    _make(path, backend)
    good = (path / "c" / "1" / "2").read_bytes()
    _damage(path / "c" / "1" / "2", "flip")
    _damage(path / "c" / "2" / "0", "truncate")
    v = volume.open(path, backend=backend, cache_bytes=1 << 20)
    v.read(Box((100, 200), (104, 212)))  # row 0 cached, intact
    with pytest.raises(CorruptChunkError) as caught:
        v.read(v.bounds)
    assert caught.value.keys == ("c/1/2", "c/2/0")
    assert "2 stored chunks" in str(caught.value)
    # Repaired on disk: the cache kept nothing of the failed read.
    (path / "c" / "1" / "2").write_bytes(good)
    np.testing.assert_array_equal(v.read(Box((104, 200), (108, 212))), DATA[4:8])


@pytest.mark.parametrize("backend", DISK)
def test_partial_write_over_a_damaged_chunk_names_it(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "v"
    v = _make(path, backend, aligned_writes=False)
    _damage(path / "c" / "1" / "2", "flip")
    with pytest.raises(CorruptChunkError, match=r"write of volume .*key 'c/1/2'"):
        v.write(Box((105, 209), (106, 210)), np.zeros((1, 1), "float32"))


@pytest.mark.parametrize("backend", DISK)
def test_deleted_chunk_of_a_checksummed_volume_reads_as_fill(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "v"
    v = _make(path, backend, fill_value=-3, checksum=True)
    assert _codecs(path)[-1] == "crc32c"
    (path / "c" / "1" / "2").unlink()
    expected = DATA.copy()
    expected[4:8, 8:12] = -3
    np.testing.assert_array_equal(v.read(v.bounds), expected)


@pytest.mark.parametrize("backend", DISK)
def test_without_checksum_a_flipped_raw_chunk_reads_as_wrong_numbers(
    tmp_path: Path, backend: str
) -> None:
    """Why checksums are on by default: raw bytes have no structure to fail on."""
    path = tmp_path / "v"
    v = _make(path, backend, compressor=None, checksum=False)
    assert _codecs(path) == ["bytes"]
    _damage(path / "c" / "1" / "2", "flip")
    got = v.read(v.bounds)  # no error at all
    wrong = got != DATA
    outside = wrong.copy()
    outside[4:8, 8:12] = False
    assert wrong[4:8, 8:12].any() and not outside.any()


@pytest.mark.parametrize("backend", DISK)
@pytest.mark.parametrize(
    ("compressor", "checksum", "chain"),
    [
        ("default", True, ["bytes", "zstd", "crc32c"]),
        (None, True, ["bytes", "crc32c"]),
        ("default", False, ["bytes", "zstd"]),
        (None, False, ["bytes"]),
    ],
)
def test_codec_chain(
    tmp_path: Path, backend: str, compressor: str | None, checksum: bool, chain: list[str]
) -> None:
    path = tmp_path / "v"
    kw: dict[str, Any] = {"compressor": compressor, "checksum": checksum, "backend": backend}
    volume.create(str(path), (4,), (2,), "uint16", **kw)
    assert _codecs(path) == chain


def test_checksum_on_by_default_and_the_same_chain_on_both_backends(tmp_path: Path) -> None:
    chains = []
    for backend in DISK:
        path = tmp_path / backend
        volume.create(str(path), (4, 4), (2, 2), "int32", backend=backend)  # type: ignore[arg-type]
        chains.append(json.loads((path / "zarr.json").read_text())["codecs"])
    assert chains[0] == chains[1] and chains[0][-1] == {"name": "crc32c"}


@pytest.mark.parametrize("bad", ["yes", 1, 0, None, np.True_])
def test_checksum_must_be_a_bool(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match=r"checksum must be True .* or False, got"):
        volume.create(str(tmp_path / "v"), (4,), (2,), "uint8", checksum=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("backend", DISK)
def test_damaged_chunk_of_a_volume_made_elsewhere_without_checksum(
    tmp_path: Path, backend: str
) -> None:
    """A plain zarr array (bytes + zstd, no crc32c) opens and reads; a truncated chunk is named."""
    path = tmp_path / "foreign"
    array = zarr.create_array(str(path), shape=(8, 8), chunks=(4, 4), dtype="uint16")
    array[:] = np.arange(64, dtype="uint16").reshape(8, 8)
    v = volume.open(path, backend=backend)
    np.testing.assert_array_equal(v.read(v.bounds), array[:])
    _damage(path / "c" / "0" / "1", "truncate")
    with pytest.raises(CorruptChunkError, match=r"key 'c/0/1'") as caught:
        v.read(Box((0, 0), (4, 8)))
    assert caught.value.chunks == ((0, 1),)


def test_error_keeps_its_fields_across_pickling_and_matches_value_error() -> None:
    err = CorruptChunkError("bad", volume="/v", chunks=[(1, 2)], keys=["c/1/2"], files=["/v/c/1/2"])
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.volume, copy.chunks, copy.keys, copy.files) == (
        "bad",
        "/v",
        ((1, 2),),
        ("c/1/2",),
        ("/v/c/1/2",),
    )
    assert isinstance(copy, ChunkgraphError) and isinstance(copy, ValueError)
    assert volume.CorruptChunkError is CorruptChunkError
