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
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.dask._batch_tasks import faults_per_buffer, nap
from tests.dask._tasks import identity

import chunkgraph as cg
from chunkgraph import volume
from chunkgraph.execute import DaskExecutor, _dask_malloc
from chunkgraph.execute._dask_stream import WINDOW_PER_THREAD, Call, _Window, slots
from chunkgraph.flow.run._batches import TopStreams
from chunkgraph.geometry import Box

distributed = pytest.importorskip("distributed")

# 64 x 16 top tasks of one 4x4 storage chunk each; a 1-voxel crop pad makes each read
# the 3 x 3 chunks around its own.
SHAPE = (256, 64)
CHUNK = (4, 4)


def test_neighbouring_top_tasks_share_their_worker_and_its_decoded_halo(
    healthy: Any, tmp_path: Path
) -> None:
    """Two streams of 32 x 16 tasks read 33 x 16 chunks each, of 64 x 16: 1.03x (a split
    of a stream at the tail, or a batch that Dask moves to the other worker, costs about
    two rows more: +0.03x). Batches handed to whichever worker is free decode the halo
    rows between them on both (1.25x measured)."""
    # Both workers warm (chunkgraph imported): neither is slow at first, so none of its
    # batches is moved for that.
    list(DaskExecutor(healthy).stream(Call(f"warm-{i}", nap, (0.0, i), slot=i) for i in (0, 1)))
    data = np.random.default_rng(3).integers(0, 2**31, SHAPE, dtype=np.int64).astype(np.int32)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, CHUNK, data.dtype)
    src.write(Box.from_shape(SHAPE), data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, CHUNK, data.dtype)
    report = cg.apply(
        identity, src, dst, chunk_sizes=[CHUNK], crop_pads=[(1, 1)], probe=False,
        intermediates=tmp_path / "tmp", executor=DaskExecutor(healthy),
    )  # fmt: skip
    np.testing.assert_array_equal(dst.read(Box.from_shape(SHAPE)), data)
    # The workers' decoded bytes, summed: whole chunks, at least the two streams' 33 x 16
    # each (more only where a stream was split or a batch moved).
    chunk_bytes = 4 * 4 * 4
    assert report.bytes_read % chunk_bytes == 0
    assert report.bytes_read >= 2 * 33 * 16 * chunk_bytes
    # 1.03 to 1.09 measured; 1.15 leaves room for a loaded machine's moved batches and
    # still fails the rule before (1.25).
    assert report.read_amplification <= 1.15


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


@settings(max_examples=80, deadline=None)
@given(
    total=st.integers(0, 300),
    threads=st.integers(1, 6),
    joined=st.integers(0, 3),
    size=st.integers(1, 40),
    least=st.integers(1, 10),
    order=st.randoms(use_true_random=False),
)
def test_streams_hand_out_every_index_once_in_contiguous_runs(
    total: int, threads: int, joined: int, size: int, least: int, order: Any
) -> None:
    """Batches come back in any order, into a window of ``WINDOW_PER_THREAD`` per thread
    (``joined`` threads more than the streams were cut for): every flat index is cut
    once, each batch is one contiguous range, a stream's batches follow each other but
    where it took over another's back half (never less than ``2 x least`` of it), and the
    streams start as equal shares."""
    streams = TopStreams(total, threads, WINDOW_PER_THREAD, least=least)
    window = WINDOW_PER_THREAD * (threads + joined)
    assert streams.left() == total
    shares = [b - a for a, b in zip(streams.next, streams.stop, strict=True)]
    assert max(shares) - min(shares) <= 1
    seen: list[int] = []
    last_stop: dict[int, int] = {}
    in_flight: list[int] = []
    while True:
        stream = streams.pick() if len(in_flight) < window else None
        if stream is None:
            if not in_flight:
                break
            streams.out[in_flight.pop(order.randrange(len(in_flight)))] -= 1
            continue
        took_over = stream not in last_stop or streams.next[stream] != last_stop[stream]
        if took_over and stream in last_stop and least > 1:  # a back half, of >= least
            assert streams.left(stream) >= least
        cut = streams.take(stream, size)
        assert len(cut) >= 1 and streams.out[stream] < WINDOW_PER_THREAD
        assert not took_over or streams.out[stream] == 0  # only an idle stream takes over
        last_stop[stream] = cut.stop
        seen.extend(cut)
        streams.out[stream] += 1
        in_flight.append(stream)
    assert sorted(seen) == list(range(total))
    assert len(streams.out) <= max(1, min(threads, total)) + joined or total < threads


def test_slots_put_a_workers_threads_side_by_side_in_address_order() -> None:
    nthreads = {"tcp://10.0.0.2:9": 1, "tcp://10.0.0.1:7": 2, "tcp://10.0.0.3:1": 0}
    assert slots(nthreads) == ["tcp://10.0.0.1:7", "tcp://10.0.0.1:7", "tcp://10.0.0.2:9"]


def test_a_calls_slot_is_a_loose_restriction_to_its_worker(healthy: Any) -> None:
    window = _Window(healthy)
    window.size()
    workers = sorted(healthy.scheduler_info()["workers"])
    assert window.placement(None) == {}
    assert window.placement(1) == {"workers": [workers[1]], "allow_other_workers": True}
    assert window.placement(2) == {"workers": [workers[0]], "allow_other_workers": True}


@pytest.mark.parametrize(
    "environ",
    [
        {"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "131072"},  # owner's
        {},  # no nanny's threshold: glibc's adaptive rule is on
    ],
)
def test_the_allocator_is_left_as_its_owner_set_it(
    environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with _dask_malloc.large_buffers_reused() as reused:
        assert reused is False


def test_a_clusters_reads_are_what_its_plan_predicts(healthy: Any, tmp_path: Path) -> None:
    """2 workers x 1 thread, automatic sizes over (64, 96, 128) float32 in 16^3 chunks,
    crop 2: 4 top tasks, two streams of two (cut at once, so none is split). Each
    worker's cache is its own: the two tasks astride the boundary both read the halo
    layers they share, 2 x 16 of 128 voxels along the sweep, and the plan says 1.25 (it
    said 1.00: one cache for all)."""
    list(DaskExecutor(healthy).stream(Call(f"warm-{i}", nap, (0.0, i), slot=i) for i in (0, 1)))
    shape, chunk = (64, 96, 128), (16, 16, 16)
    data = np.random.default_rng(4).random(shape, dtype=np.float32)
    src = volume.create(str(tmp_path / "src.zarr"), shape, chunk, data.dtype)
    src.write(Box.from_shape(shape), data)
    dst = volume.create(str(tmp_path / "dst.zarr"), shape, chunk, data.dtype)
    report = cg.apply(identity, src, dst, crop_pads=2, intermediates=tmp_path / "tmp",
                      executor=DaskExecutor(healthy))  # fmt: skip
    np.testing.assert_array_equal(dst.read(Box.from_shape(shape)), data)
    assert report.plan is not None
    assert report.read_amplification == pytest.approx(report.plan.read_amplification, abs=0.02)
    assert report.plan.read_amplification == pytest.approx(1.25)
    assert report.plan.streams == 2 and report.plan.on_cluster
