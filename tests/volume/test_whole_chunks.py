"""The direct path of the zarr backend: reads and whole-chunk writes without zarr's event loop.

Every test uses real Zarr v3 arrays on disk or on moto's S3 server, and compares with
what zarr-python's own path and TensorStore write and read on the same arrays.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr
from zarr.core import sync as zarr_sync
from zarr.storage import ObjectStore

from chunkgraph import CorruptChunkError, volume
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server
from chunkgraph.volume._object_store import StoreOptions, object_store
from chunkgraph.volume._whole_chunks import whole_chunks_of

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
# Two channels, 2-d spatial, edge chunks clipped on both spatial axes.
SHAPE, CHUNKS = (2, 10, 13), (2, 4, 8)
WAIT_S = 20.0


def _data(dtype: str, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 100, SHAPE)
    if np.dtype(dtype).kind == "c":
        return (values + 1j * rng.integers(0, 100, SHAPE)).astype(dtype)
    return (values % 2 if dtype == "bool" else values).astype(dtype)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


def _twin(path: Path, twin: Path) -> Any:
    """A zarr-python handle on an empty array with ``path``'s metadata, at ``twin``."""
    twin.mkdir()
    shutil.copy(path / "zarr.json", twin / "zarr.json")
    return zarr.open_array(twin, mode="r+")


@contextlib.contextmanager
def _zarr_loop_held() -> Iterator[None]:
    """zarr's event-loop thread kept busy: any zarr call waiting for it waits until the end."""
    loop = zarr_sync._get_loop()
    held, release = threading.Event(), threading.Event()

    async def hold() -> None:
        held.set()
        release.wait()  # blocks the loop itself, on purpose

    future = asyncio.run_coroutine_threadsafe(hold(), loop)
    assert held.wait(WAIT_S)
    try:
        yield
    finally:
        release.set()
        future.result(WAIT_S)


def _finishes_while_zarrs_loop_is_held(work: Callable[[], Any]) -> bool:
    with ThreadPoolExecutor(1) as pool:
        with _zarr_loop_held():
            job = pool.submit(work)
            try:
                job.result(WAIT_S)
                finished = True
            except FutureTimeout:
                finished = False
        job.result(WAIT_S)  # the loop is free again: it ends either way
    return finished


def test_reads_and_whole_chunk_writes_do_not_wait_for_zarrs_event_loop(tmp_path: Path) -> None:
    vol = volume.create(str(tmp_path / "a.zarr"), (16, 16), (4, 4), "uint16")
    data = np.arange(256, dtype="uint16").reshape(16, 16)
    one, many = Box((4, 8), (8, 12)), Box((0, 0), (12, 16))

    def work() -> None:
        vol.write(one, data[4:8, 8:12])
        vol.write(many, data[:12])
        assert np.array_equal(vol.read(one), data[4:8, 8:12])
        assert np.array_equal(vol.read(Box((1, 1), (15, 15))), np.where(
            np.arange(16)[:, None] < 12, data, 0)[1:15, 1:15])  # fmt: skip

    assert _finishes_while_zarrs_loop_is_held(work)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compressor", ["default", None])
def test_files_are_byte_identical_to_zarr_pythons_own(
    tmp_path: Path, dtype: str, compressor: str | None
) -> None:
    path = tmp_path / "direct.zarr"
    vol = volume.create(
        str(path), SHAPE, CHUNKS, dtype, spatial_ndim=2, compressor=compressor
    )  # fmt: skip
    data = _data(dtype)
    data[:, 4:8, 8:13] = 0  # one chunk (an edge one) all fill: neither writes its file
    if data.dtype.kind in "fc":  # -0.0: data to zarr for floats (bits), fill for complex
        data[:, :4, :8] = -0.0
    twin = _twin(path, tmp_path / "zarr.zarr")
    vol.write(vol.bounds, data)
    twin[...] = data
    mine, theirs = _files(path), _files(tmp_path / "zarr.zarr")
    assert mine == theirs and len(mine) == (4 if data.dtype.kind == "c" else 5)
    # Each reads the other's files.
    assert np.array_equal(vol.read(vol.bounds), data)
    assert np.array_equal(zarr.open_array(path)[...], data)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if np.dtype(d).kind != "c"])
def test_tensorstore_and_the_direct_path_read_each_others_files(tmp_path: Path, dtype: str) -> None:
    path = str(tmp_path / "a.zarr")
    vol = volume.create(path, SHAPE, CHUNKS, dtype, spatial_ndim=2)
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    first, second = _data(dtype, 1), _data(dtype, 2)
    vol.write(Box((0, 0), (4, 13)), first[:, :4])  # whole chunks, one clipped by the edge
    store[:, 4:10].write(second[:, 4:10]).result()
    assert np.array_equal(store.read().result()[:, :4], first[:, :4])
    assert np.array_equal(vol.read(Box((0, 0), (10, 13)))[:, 4:], second[:, 4:])


def test_missing_chunks_read_as_fill_and_fill_chunks_are_not_stored(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    vol = volume.create(str(path), (8, 8), (4, 4), "float32", fill_value=np.nan)
    assert np.isnan(vol.read(Box((0, 0), (4, 4)))).all()  # one whole missing chunk
    assert np.isnan(vol.read(Box((2, 2), (8, 8)))).all()  # several, in part
    block = np.full((4, 8), np.nan, "float32")
    block[:, 4:] = 1.5
    vol.write(Box((0, 0), (4, 8)), block)
    assert sorted(_files(path)) == ["c/0/1"]  # the all-NaN chunk is not stored
    vol.write(Box((0, 4), (4, 8)), np.full((4, 4), np.nan, "float32"))
    assert _files(path) == {}  # and one rewritten as all fill is deleted, as zarr does
    got = vol.read(Box((0, 0), (8, 8)))
    assert np.isnan(got).all() and got.flags.writeable


def test_a_sharded_array_keeps_zarrs_own_path(tmp_path: Path) -> None:
    path = str(tmp_path / "s.zarr")
    vol = volume.create(path, (16, 16), (4, 4), "uint8", shards=(8, 8))
    assert whole_chunks_of(zarr.open_array(path)) is None
    data = np.arange(256, dtype="uint8").reshape(16, 16)
    vol.write(vol.bounds, data)
    assert np.array_equal(vol.read(Box((3, 3), (13, 13))), data[3:13, 3:13])
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    assert np.array_equal(store.read().result(), data)


def test_corrupt_chunks_in_a_many_chunk_read_are_each_named(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    vol = volume.create(str(path), (12, 12), (4, 4), "float32", offset=(100, 200))
    vol.write(vol.bounds, np.ones((12, 12), "float32"))
    for key in ("c/1/2", "c/2/0"):
        raw = bytearray((path / key).read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        (path / key).write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError, match="2 stored chunks") as caught:
        vol.read(vol.bounds)
    assert sorted(caught.value.chunks) == [(1, 2), (2, 0)]
    assert np.array_equal(vol.read(Box((100, 200), (104, 212))), np.ones((4, 12)))


def test_io_accounting_is_the_same_as_on_tensorstore(tmp_path: Path) -> None:
    def stats(backend: str) -> tuple[int, ...]:
        vol = volume.create(str(tmp_path / backend), (12, 10), (4, 4), "uint8", backend=backend)
        vol.write(Box((0, 0), (8, 10)), np.ones((8, 10), "uint8"))
        vol.read(Box((0, 0), (4, 4)))
        vol.read(Box((1, 1), (11, 9)))
        s = vol.stats
        return (s.chunks_read, s.bytes_read, s.chunks_written, s.bytes_written)

    assert stats("zarr") == stats("tensorstore") == (1 + 9, 16 + 12 * 10, 6, 8 * 10)


def test_on_s3_requests_are_counted_and_files_are_zarr_pythons(
    server: S3Server, bucket: str
) -> None:
    url = f"s3://{bucket}/a.zarr"
    vol = volume.create(url, (16, 16), (4, 4), "int32")
    data = np.arange(256, dtype="int32").reshape(16, 16)
    data[12:, 12:] = 0  # a fill chunk: deleted, not written
    vol.reset_stats()
    vol.write(vol.bounds, data)
    written = vol.stats
    assert (written.requests_put, written.requests_other) == (15, 1)
    vol.reset_stats()
    assert np.array_equal(vol.read(vol.bounds), data)
    read = vol.stats
    assert read.requests_get == 16 and read.peak_requests_in_flight > 1
    # zarr-python's own reader, through obstore, reads the same objects.
    store = ObjectStore(object_store(url, StoreOptions()), read_only=True)
    assert np.array_equal(zarr.open_array(store)[...], data)
    assert len([k for k in server.keys(bucket) if "/c/" in k]) == 15


def _read_in_child(path: str, queue: Any) -> None:
    queue.put(float(volume.open(path).read(Box((0, 0), (32, 32))).sum()))


def test_a_forked_child_reads_many_chunks_after_its_parent_did(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    vol = volume.create(path, (32, 32), (4, 4), "float64")
    vol.write(vol.bounds, np.ones((32, 32)))  # 64 chunks: all the parent's chunk threads start
    assert vol.read(vol.bounds).sum() == 1024
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(path, queue))
    child.start()
    try:
        assert queue.get(timeout=WAIT_S) == 1024
        child.join(WAIT_S)
        assert child.exitcode == 0
    finally:
        child.kill()  # a child stuck on threads it does not have would outlive the test


def test_a_big_endian_array_reads_in_the_volumes_native_dtype(tmp_path: Path) -> None:
    """zarr's bytes codec may store big-endian; a read of one whole chunk comes back in
    the volume's (native) dtype, as a read of several chunks does."""
    from zarr.codecs import BytesCodec

    path = str(tmp_path / "be.zarr")
    data = np.arange(10 * 9 * 8, dtype="uint16").reshape(10, 9, 8)
    array = zarr.create_array(path, shape=data.shape, chunks=(4, 4, 3), dtype="uint16",
                              serializer=BytesCodec(endian="big"), compressors=None)  # fmt: skip
    array[...] = data
    v = volume.open(path)
    one = v.read(Box((4, 4, 3), (8, 8, 6)))
    assert one.dtype == v.dtype == np.dtype("uint16") and one.dtype.isnative
    np.testing.assert_array_equal(one, data[4:8, 4:8, 3:6])
    assert v.read(v.bounds).dtype.isnative
