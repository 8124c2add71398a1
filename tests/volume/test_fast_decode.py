"""The usual codec chain decoded in one step reads exactly what zarr's codecs read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zstandard
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype

from chunkgraph import CorruptChunkError, volume
from chunkgraph.geometry import Box
from chunkgraph.volume._fast_decode import fast_decoder
from chunkgraph.volume._whole_chunks import WholeChunks

CHUNK = (4, 6, 5)


def _array(path: Path, dtype: str, codecs: list[Any]) -> zarr.Array:
    array = zarr.create_array(
        str(path), shape=(8, 12, 10), chunks=CHUNK, dtype=dtype, serializer=codecs[0],
        compressors=codecs[1:], fill_value=0,
    )  # fmt: skip
    rng = np.random.default_rng(1)
    data = rng.normal(size=array.shape) * 1000
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.normal(size=array.shape)
    values = data.astype(dtype)
    if np.dtype(dtype).kind == "f":
        values.flat[::7] = np.nan
        values.flat[1::11] = -0.0
    array[...] = values
    return array


def _read_key(array: zarr.Array, key: str) -> Any:
    root = Path(str(array.store_path.store.root)) / array.store_path.path / key
    return default_buffer_prototype().buffer.from_bytes(root.read_bytes())


def _by_zarr(direct: WholeChunks, stored: Any) -> np.ndarray:
    data = stored
    for codec, spec in reversed(direct._codecs):
        data = codec._decode_sync(data, spec)
    return np.asarray(data.as_numpy_array())


CHAINS = {
    "zstd+crc32c": [BytesCodec(), ZstdCodec(level=3), Crc32cCodec()],
    "zstd": [BytesCodec(), ZstdCodec(level=1)],
    "zstd with its checksum": [BytesCodec(), ZstdCodec(level=5, checksum=True), Crc32cCodec()],
    "big-endian": [BytesCodec(endian="big"), ZstdCodec(), Crc32cCodec()],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize(
    "dtype", ["uint8", "bool", "int16", "uint32", "int64", "float32", "float64", "complex64"]
)
def test_each_chunk_decodes_to_zarrs_own_array(tmp_path: Path, chain: str, dtype: str) -> None:
    array = _array(tmp_path / "a.zarr", dtype, CHAINS[chain])
    direct = WholeChunks(array)
    fast = fast_decoder(direct._codecs)
    assert fast is not None
    for coords in np.ndindex(2, 2, 2):
        stored = _read_key(array, "c/" + "/".join(map(str, coords)))
        ours = fast(stored.as_numpy_array())
        theirs = _by_zarr(direct, stored)
        assert ours is not None
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert ours.tobytes() == theirs.tobytes()  # NaN and -0.0 bit for bit


def test_other_chains_stay_on_zarrs_codecs(tmp_path: Path) -> None:
    array = _array(tmp_path / "g.zarr", "uint16", [BytesCodec(), GzipCodec()])
    assert fast_decoder(WholeChunks(array)._codecs) is None


def test_bytes_it_does_not_expect_are_decoded_by_zarr(tmp_path: Path) -> None:
    """Two zstd frames in one chunk (a writer that streams): the one-step decoder gives
    them back to zarr's codecs, which read what they read."""
    array = _array(tmp_path / "a.zarr", "uint8", [BytesCodec(), ZstdCodec()])
    direct = WholeChunks(array)
    fast = fast_decoder(direct._codecs)
    assert fast is not None
    values = np.arange(np.prod(CHUNK), dtype="uint8").reshape(CHUNK)
    half = values.nbytes // 2
    compressor = zstandard.ZstdCompressor()
    two_frames = compressor.compress(values.tobytes()[:half]) + compressor.compress(
        values.tobytes()[half:]
    )
    assert fast(np.frombuffer(two_frames, np.uint8)) is None
    stored = default_buffer_prototype().buffer.from_bytes(two_frames)
    np.testing.assert_array_equal(direct._decode(stored), _by_zarr(direct, stored))


def test_a_checksum_that_does_not_match_is_a_corrupt_chunk_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "v.zarr"
    vol = volume.create(str(path), (8, 8), (4, 4), "uint16")
    vol.write(vol.bounds, np.arange(64, dtype="uint16").reshape(8, 8))
    chunk = path / "c" / "1" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(CorruptChunkError, match=r"c/1/0"):
        volume.open(str(path)).read(vol.bounds)
    np.testing.assert_array_equal(
        volume.open(str(path)).read(Box((0, 0), (4, 8))),
        np.arange(64, dtype="uint16").reshape(8, 8)[:4],
    )


@pytest.mark.parametrize("extra", [b"xyz", "a second frame"])
def test_bytes_after_a_whole_chunk_s_frame_are_judged_by_zarr(tmp_path: Path, extra: Any) -> None:
    """One frame holding the whole chunk, then more: zarr's codecs decide (they refuse it),
    not the one-step decoder, which would read the first frame and ignore the rest."""
    array = _array(tmp_path / "a.zarr", "uint8", [BytesCodec(), ZstdCodec()])
    direct = WholeChunks(array)
    fast = fast_decoder(direct._codecs)
    assert fast is not None
    values = np.arange(np.prod(CHUNK), dtype="uint8").reshape(CHUNK)
    frame = zstandard.ZstdCompressor().compress(values.tobytes())
    data = frame + (frame if extra == "a second frame" else extra)
    assert fast(np.frombuffer(data, np.uint8)) is None
    stored = default_buffer_prototype().buffer.from_bytes(data)
    try:
        theirs = _by_zarr(direct, stored)
    except Exception as err:  # zarr refuses it: so does the direct path, with its error
        with pytest.raises(type(err)):
            direct._decode(stored)
    else:
        np.testing.assert_array_equal(direct._decode(stored), theirs)
