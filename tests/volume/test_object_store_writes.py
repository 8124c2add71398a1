"""Partial-chunk writes on an object store: conditional read-modify-writes that keep every
writer's voxels, and the requests they cost."""

from __future__ import annotations

import itertools
import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import AlignmentError, ConfigError
from chunkgraph.geometry import Box

_buckets = itertools.count()
STRIPE = 4  # columns per writer; chunks are 32 wide, so 8 writers share each chunk


def _stripe(vol: volume.Volume, i: int) -> None:
    rows = vol.bounds.shape[0]
    vol.write(
        Box((0, STRIPE * i), (rows, STRIPE * (i + 1))), np.full((rows, STRIPE), i + 1, "int32")
    )


def _expected(rows: int, writers: int) -> np.ndarray:
    return np.repeat(np.arange(1, writers + 1), STRIPE)[None, :].repeat(rows, 0)


def test_threads_writing_adjacent_parts_of_shared_chunks_keep_every_voxel(bucket: str) -> None:
    vol = volume.create(f"s3://{bucket}/t.zarr", (40, 64), (32, 32), "int32", aligned_writes=False)
    writers = 16
    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(lambda i: _stripe(vol, i), range(writers)))
    np.testing.assert_array_equal(vol.read(vol.bounds), _expected(40, writers))
    stats = vol.stats
    # Every stripe cuts its chunks: each chunk read and written at least once per writer.
    assert stats.requests_get >= writers * 2 and stats.requests_put >= writers * 2
    assert stats.peak_requests_in_flight >= 2


def test_processes_writing_adjacent_parts_of_shared_chunks_keep_every_voxel(bucket: str) -> None:
    vol = volume.create(f"s3://{bucket}/p.zarr", (8, 32), (8, 32), "int32", aligned_writes=False)
    writers = 8  # all on one chunk
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        pool.starmap(_stripe, [(vol, i) for i in range(writers)])
    np.testing.assert_array_equal(volume.open(vol.path).read(vol.bounds), _expected(8, writers))


def test_merge_write_cuts_chunks_of_an_aligned_volume_and_only_there(
    bucket: str, tmp_path: object
) -> None:
    vol = volume.create(f"s3://{bucket}/m.zarr", (8, 8), (4, 4), "uint8")
    assert vol.aligned_writes and vol.location.conditional_writes
    with pytest.raises(AlignmentError, match="any number of writers may share a chunk"):
        vol.write(Box((1, 1), (3, 3)), np.ones((2, 2), "uint8"))
    vol.write(vol.bounds, np.full((8, 8), 7, "uint8"))
    vol.merge_write(Box((1, 1), (3, 6)), np.ones((2, 5), "uint8"))
    expected = np.full((8, 8), 7, "uint8")
    expected[1:3, 1:6] = 1
    np.testing.assert_array_equal(vol.read(vol.bounds), expected)
    local = volume.create(f"{tmp_path}/m.zarr", (8, 8), (4, 4), "uint8")
    with pytest.raises(ConfigError, match="no conditional writes"):
        local.merge_write(Box((1, 1), (3, 3)), np.ones((2, 2), "uint8"))


def test_requests_are_counted_per_volume_and_whole_chunk_writes_read_nothing(
    bucket: str,
) -> None:
    vol = volume.create(f"s3://{bucket}/c.zarr", (64, 64), (32, 32), "uint8")
    vol.reset_stats()
    vol.write(vol.bounds, np.ones((64, 64), "uint8"))
    after_write = vol.stats
    assert (after_write.requests_get, after_write.requests_put) == (0, 4)
    vol.read(Box((0, 0), (40, 40)))
    read = vol.stats - after_write
    assert (read.requests_get, read.requests_put, read.chunks_read) == (4, 0, 4)
    assert read.requests == 4
    # Some of the four chunk objects were on their way at once, never more than all four.
    assert 0 < read.peak_bytes_in_flight <= 4 * 32 * 32 + 4 * 64  # + codec headers
    vol.reset_stats()
    assert vol.stats.requests == 0
    # Opening reads zarr.json and nothing else: once per process a pickled volume reaches.
    assert volume.open(vol.path).stats.requests == 1
