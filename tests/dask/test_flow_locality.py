"""A flow on a real LocalCluster at the local speed: the halo its neighbouring top tasks
share is decoded once (the top grid goes out as one contiguous stream per worker thread,
each preferring one worker: ``_batches``, ``_dask_stream``), and a worker reuses its large
buffers as a process outside Dask does (``_dask_malloc``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.dask._batch_tasks import faults_per_buffer
from tests.dask._tasks import identity

import chunkgraph as cg
from chunkgraph import volume
from chunkgraph.execute import DaskExecutor
from chunkgraph.execute._dask_stream import Call
from chunkgraph.geometry import Box

distributed = pytest.importorskip("distributed")

# 32 x 8 top tasks of one 4x4 storage chunk each; a 1-voxel crop pad makes each read
# the 3 x 3 chunks around its own.
SHAPE = (128, 32)
CHUNK = (4, 4)


def test_neighbouring_top_tasks_share_their_worker_and_its_decoded_halo(
    healthy: Any, tmp_path: Path
) -> None:
    """Two streams of 16 x 8 tasks read 17 x 8 chunks each, of 32 x 8: 1.06x. Batches
    scattered over the workers decode the halo rows between them on both (up to 3x)."""
    data = np.random.default_rng(3).integers(0, 2**31, SHAPE, dtype=np.int64).astype(np.int32)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, CHUNK, data.dtype)
    src.write(Box.from_shape(SHAPE), data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, CHUNK, data.dtype)
    report = cg.apply(
        identity, src, dst, chunk_sizes=[CHUNK], crop_pads=[(1, 1)], probe=False,
        intermediates=tmp_path / "tmp", executor=DaskExecutor(healthy),
    )  # fmt: skip
    np.testing.assert_array_equal(dst.read(Box.from_shape(SHAPE)), data)
    # The workers' decoded bytes, summed: whole chunks, at least the two streams' 17 x 8
    # each (more only if Dask moved a batch to the other worker).
    chunk_bytes = 4 * 4 * 4
    assert report.bytes_read % chunk_bytes == 0
    assert report.bytes_read >= 2 * 17 * 8 * chunk_bytes
    assert report.read_amplification <= 1.1


def test_a_worker_reuses_freed_buffers_despite_dasks_trim_threshold(healthy: Any) -> None:
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which turns off glibc's adaptive mmap
    threshold: each 1 MiB array would be mapped afresh (256 page faults to fill it). A
    chunkgraph call on the worker sets the thresholds back (``_dask_malloc``)."""
    environ = healthy.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert set(environ.values()) == {"65536"}  # Dask's default: the case this is about
    executor = DaskExecutor(healthy)
    calls = [Call(f"faults-{i}", faults_per_buffer, (1 << 20, 20), slot=i) for i in range(2)]
    faults = list(executor.stream(calls))
    assert len(faults) == 2 and max(faults) < 256 / 4
