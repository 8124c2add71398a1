"""Sharded Zarr v3 arrays on the direct path: zarr's bytes, coalesced ranged reads, damage named.

Real arrays on disk and on moto's S3 server; zarr-python and TensorStore write and
read the same arrays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr

from chunkgraph import AlignmentError, CorruptChunkError, volume
from chunkgraph.geometry import Box
from chunkgraph.volume._pace import Pace
from chunkgraph.volume._shards import WholeShards

SHAPE, INNER, SHARD = (12, 37, 45), (4, 8, 8), (8, 16, 16)
DTYPES = ["bool", "uint8", "int16", "uint32", "int64", "float32", "float64", "complex64"]


def _data(dtype: str) -> np.ndarray[Any, Any]:
    values = np.random.default_rng(0).integers(0, 5, SHAPE)
    values[:8, :16, :16] = 0  # one shard all fill, another with inner chunks all fill
    values[8:, 16:24, 16:24] = 0
    return (values % 2 if dtype == "bool" else values).astype(dtype)


def _objects(root: Path) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, f), root): Path(d, f).read_bytes()
        for d, _, files in os.walk(root)
        for f in files
        if f != "zarr.json"
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_shards_written_whole_are_zarrs_byte_for_byte(tmp_path: Path, dtype: str) -> None:
    data = _data(dtype)
    ours = volume.create(str(tmp_path / "a.zarr"), SHAPE, INNER, dtype, shards=SHARD)
    assert isinstance(ours._storage._direct, WholeShards)
    ours.write(ours.bounds, data)
    made = zarr.open_array(tmp_path / "a.zarr")
    theirs = zarr.create_array(
        tmp_path / "b.zarr", shape=SHAPE, chunks=INNER, shards=SHARD, dtype=dtype,
        fill_value=made.fill_value, compressors=made.compressors, serializer=made.serializer,
    )  # fmt: skip
    theirs[...] = data
    assert _objects(tmp_path / "a.zarr") == _objects(tmp_path / "b.zarr")
    for box in (ours.bounds, Box((3, 5, 7), (11, 30, 44)), Box((8, 32, 32), (12, 37, 45))):
        assert np.array_equal(ours.read(box), data[box.slices()])


def test_index_at_the_start_and_tensorstore_both_ways(tmp_path: Path) -> None:
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    path = str(tmp_path / "s.zarr")
    sharding = ShardingCodec(
        chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()], index_location="start"
    )
    zarr.create_array(
        path, shape=(32, 32), chunks=(16, 16), dtype="uint16", serializer=sharding,
        compressors=None,
    )  # fmt: skip
    vol = volume.open(path, "r+")
    assert isinstance(vol._storage._direct, WholeShards)
    data = np.arange(32 * 32, dtype="uint16").reshape(32, 32)
    vol.write(vol.bounds, data)
    assert np.array_equal(zarr.open_array(path)[...], data)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    assert np.array_equal(t.read().result(), data)
    t[0:16, 16:32].write(data[0:16, 16:32] + 1).result()  # TensorStore's shard, read by us
    data[0:16, 16:32] += 1
    assert np.array_equal(vol.read(Box((0, 10), (20, 30))), data[0:20, 10:30])
    assert np.array_equal(vol.read(Box((8, 24), (16, 32))), data[8:16, 24:32])


def test_inner_chunk_reads_on_s3_are_coalesced(bucket: str) -> None:
    url = f"s3://{bucket}/s.zarr"
    vol = volume.create(url, (64, 64, 64), (8, 8, 8), "uint8", shards=(32, 32, 32))
    data = np.random.default_rng(1).integers(0, 9, (64, 64, 64), dtype="uint8")
    vol.write(vol.bounds, data)
    counter = vol._storage.requests
    assert counter is not None
    cases = {
        Box((0, 0, 0), (32, 32, 32)): 1,  # a whole shard: one GET
        Box((0, 0, 0), (8, 8, 8)): 2,  # one inner chunk: its index, then it
        Box((0, 0, 0), (16, 16, 16)): 2,  # 2 x 2 x 2 inner chunks: adjacent in Morton order
        Box((0, 0, 0), (64, 64, 64)): 8,  # every shard whole
    }
    for box, gets in cases.items():
        counter.reset()
        assert np.array_equal(vol.read(box), data[box.slices()])
        assert counter.snapshot()["requests_get"] == gets, box
    # TensorStore reads what the direct path wrote.
    from chunkgraph.volume._object_store import StoreOptions
    from chunkgraph.volume._ts_view import kvstore_spec

    t = ts.open({"driver": "zarr3", "kvstore": kvstore_spec(url, StoreOptions())}).result()
    assert np.array_equal(t.read().result(), data)


def test_missing_and_corrupt_shards(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    vol = volume.create(str(path), (32, 32), (8, 8), "float32", shards=(16, 16), offset=(100, 200))
    vol.write(vol.bounds, np.ones((32, 32), "float32"))
    (path / "c/1/1").unlink()
    got = vol.read(Box((110, 210), (132, 232)))
    assert np.array_equal(got[:6, :6], np.ones((6, 6))) and not got[6:, 6:].any()
    raw = bytearray((path / "c/0/1").read_bytes())
    raw[-5] ^= 0xFF  # in the index (at the shard's end)
    (path / "c/0/1").write_bytes(bytes(raw))
    for box in (Box((100, 216), (116, 232)), Box((100, 216), (104, 220))):  # whole, one inner
        with pytest.raises(CorruptChunkError, match="c/0/1") as caught:
            vol.read(box)
        assert list(caught.value.chunks) == [(0, 1)]
        assert "global box Box(start=(100, 216), stop=(116, 232))" in str(caught.value)


def test_partial_shard_writes_keep_zarrs_path(tmp_path: Path) -> None:
    path = str(tmp_path / "s.zarr")
    vol = volume.create(path, (32, 32), (8, 8), "uint8", shards=(16, 16))
    data = np.arange(32 * 32, dtype="uint8").reshape(32, 32)
    vol.write(vol.bounds, data)
    with pytest.raises(AlignmentError, match="whole storage chunks"):
        vol.write(Box((0, 0), (8, 8)), np.zeros((8, 8), "uint8"))
    storage = vol._storage
    storage.write((slice(0, 8), slice(0, 8)), np.zeros((8, 8), "uint8"))  # zarr's merge
    expect = data.copy()
    expect[:8, :8] = 0
    assert np.array_equal(zarr.open_array(path)[...], expect)
    assert np.array_equal(vol.read(vol.bounds), expect)


def test_pace_sizes_requests_from_latency_and_decode_time() -> None:
    far, near = Pace(), Pace()
    assert far.in_flight(cores=2) == 10 and far.gap() == 1024 * 1024  # nothing measured
    for _ in range(16):
        far.sample(0.020, 2000)  # 20 ms a request
        far.sample(0.030, 1_000_000)  # and 100 MB/s beyond it
        far.work(0.001)  # 1 ms to decode a chunk
        near.sample(0.0005, 2000)  # half a millisecond: a store next door
        near.sample(0.0105, 1_000_000)
        near.work(0.004)
    # cores x (1 + mean request / decode): 2 x (1 + 25), capped; 2 x (1 + 5.5 / 4)
    assert far.in_flight(cores=2) == 52 and near.in_flight(cores=2) == 5
    assert far.in_flight(cores=4) == 64
    assert far.gap() == 2_000_000 and near.gap() == 50_000


def test_a_partial_shard_write_on_s3_is_conditional_and_keeps_the_rest(bucket: str) -> None:
    url = f"s3://{bucket}/s.zarr"
    vol = volume.create(url, (32, 32), (8, 8), "uint8", shards=(16, 16), aligned_writes=False)
    data = np.arange(32 * 32, dtype="uint8").reshape(32, 32)
    counter = vol._storage.requests
    assert counter is not None
    counter.reset()
    vol.write(vol.bounds, data)  # whole shards: one PUT each
    assert counter.snapshot()["requests_put"] == 4
    counter.reset()
    vol.write(Box((4, 4), (12, 12)), np.zeros((8, 8), "uint8"))  # zarr's merge of one shard
    expect = data.copy()
    expect[4:12, 4:12] = 0
    assert np.array_equal(vol.read(vol.bounds), expect)
    assert counter.snapshot()["requests_put"] == 1
    # Every GET timed the store's pace: a region's requests in flight come from it.
    store = vol._storage._array.store
    for _ in range(2):
        vol.read(vol.bounds)  # 4 GETs each
    assert store.pace.estimate() is not None and 2 <= store.in_flight() <= 64
