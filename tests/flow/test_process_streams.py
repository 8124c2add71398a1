"""A flow on worker processes: each process takes one contiguous stream of neighbouring
top tasks (``_batches``, ``_process_stream``), so its own cache decodes the halo they
share once; the plan predicts what that reads (a boundary between two streams costs the
halo layers on both sides) and counts one cache, superchunks and buffers per process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import TaskError
from chunkgraph.cli._cmd_run import report_summary
from chunkgraph.execute import EventKind
from chunkgraph.execute._dask_stream import Call
from chunkgraph.execute._process_stream import ProcessStreams
from chunkgraph.execute.pool import ProcessPool
from chunkgraph.flow import apply
from chunkgraph.geometry import Box

# The review's case: float32 in 16^3 chunks, crop 2; the automatic plan's top grid is
# 4 tasks along axis 2, so two streams of two tasks each are cut at once (no steal).
SHAPE = (64, 96, 128)
CHUNK = (16, 16, 16)


def doubled(x: np.ndarray) -> np.ndarray:
    return x * 2


def _volumes(tmp_path: Path, name: str) -> tuple[volume.Volume, volume.Volume, np.ndarray]:
    data = np.random.default_rng(5).random(SHAPE, dtype=np.float32)
    src = tmp_path / "src.zarr"
    if src.exists():
        vol = volume.open(str(src))
    else:
        vol = volume.create(str(src), SHAPE, CHUNK, "float32")
        vol.write(Box.from_shape(SHAPE), data)
    dst = volume.create(str(tmp_path / f"{name}.zarr"), SHAPE, CHUNK, "float32")
    return vol, dst, data


@pytest.mark.parametrize(
    "sizes",
    [
        {},  # automatic: 64x96x32 over 32x48x32, one top task in flight per process
        {"chunk_sizes": [(64, 96, 32)]},  # one level: a task per core in flight
    ],
)
def test_processes_read_what_the_plan_predicts_and_write_what_threads_write(
    tmp_path: Path, sizes: dict[str, Any]
) -> None:
    src, dst, data = _volumes(tmp_path, "processes")
    events: list[Any] = []
    report = apply(doubled, src, dst, crop_pads=2, executor="processes", workers=2,
                   subscribers=[events.append], **sizes)  # fmt: skip
    threads_dst = _volumes(tmp_path, "threads")[1]
    threads = apply(doubled, src, threads_dst, crop_pads=2, workers=2, **sizes)
    got = dst.read(Box.from_shape(SHAPE))
    np.testing.assert_array_equal(got, threads_dst.read(Box.from_shape(SHAPE)))
    np.testing.assert_array_equal(got, data * 2)
    plan = report.plan
    assert plan is not None
    assert report.read_amplification == pytest.approx(plan.read_amplification, abs=0.02)
    # Both processes worked, each on its own stream.
    workers = {e.worker for e in events if e.kind is EventKind.FINISHED}
    assert len(workers) == 2
    # Two streams of two tasks: each stream's first or last task reads the halo layer of
    # chunks across the boundary (16 of 128 voxels on each side): 1.25.
    assert plan.read_amplification == pytest.approx(1.25)
    assert plan.streams == 2 and plan.worker_processes == 2
    assert threads.plan is not None and threads.plan.streams == 1
    assert threads.read_amplification == pytest.approx(threads.plan.read_amplification, abs=0.02)


def test_the_plan_counts_a_cache_and_superchunks_per_worker_process(tmp_path: Path) -> None:
    src, dst, _ = _volumes(tmp_path, "dry")
    on_processes = apply(doubled, src, dst, crop_pads=2, executor="processes", workers=2,
                         dry_run=True).plan  # fmt: skip
    on_threads = apply(doubled, src, dst, crop_pads=2, workers=2, dry_run=True).plan
    assert on_processes is not None and on_threads is not None
    assert on_processes.cache_bytes == on_threads.cache_bytes > 0
    assert on_processes.memory_bytes == 2 * on_threads.memory_bytes
    summary = on_processes.summary()
    assert "each of 2 worker processes holds its own cache" in summary
    assert "2 contiguous streams" in summary and "predicted read amplification 1.25" in summary
    assert "worker processes" not in on_threads.summary()


def test_a_pool_runs_a_call_in_the_worker_slot_it_names() -> None:
    with ProcessPool(workers=2) as pool:
        pids = [[pool.submit(os.getpid, worker=slot).result() for _ in range(3)] for slot in (0, 1)]
        assert all(len(set(p)) == 1 for p in pids) and pids[0][0] != pids[1][0]
        assert sorted(pool.worker_pids) == sorted({pids[0][0], pids[1][0]})
        assert pool.submit(os.getpid, worker=3).result() == pids[1][0]  # modulo the size


def dies_once(marker: str, value: int) -> int:
    """SIGKILLs its own process on its first try (``marker`` not yet written)."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), 9)
    return value


def fails(value: int) -> int:
    raise ValueError(f"bad {value}")


def test_a_stream_runs_a_call_again_when_its_worker_is_killed(tmp_path: Path) -> None:
    marker = str(tmp_path / "died")
    calls = [Call("dies", dies_once, (marker, 7), slot=0), Call("lives", int, ("3",), slot=1)]
    assert sorted(ProcessStreams(2).stream(calls)) == [3, 7]
    assert Path(marker).exists()


def test_a_stream_fails_with_the_calls_error_by_name() -> None:
    calls = [Call(f"c{i}", fails if i == 2 else int, (i,), slot=i % 2) for i in range(4)]
    with pytest.raises(ExceptionGroup) as info:
        list(ProcessStreams(2).stream(calls))
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and error.task == "c2" and "bad 2" in str(error)


def slow_front(src: np.ndarray, box: Box) -> np.ndarray:
    """Slow on the front half of the sweep (the first stream's tasks), fast behind it."""
    if box.start[2] < 128:
        import time

        time.sleep(0.25)  # the workload's own cost, not a wait on the test's side
    return src * 2


def test_a_stream_split_is_counted_and_said(tmp_path: Path) -> None:
    """16 top tasks as two streams of 8; the first stream's tasks are slow, so the
    second's process runs dry and takes the back half of what the first has left (at
    least once: 8 slow tasks take 2 s, 8 fast ones far less). The report counts each
    split and says why the reads exceed the prediction."""
    shape = (32, 32, 256)
    data = np.random.default_rng(6).random(shape, dtype=np.float32)
    src = volume.create(str(tmp_path / "s.zarr"), shape, CHUNK, "float32")
    src.write(Box.from_shape(shape), data)
    dst = volume.create(str(tmp_path / "d.zarr"), shape, CHUNK, "float32")
    report = apply(slow_front, src, dst, crop_pads=2, executor="processes", workers=2,
                   chunk_sizes=[(32, 32, 16)], probe=False)  # fmt: skip
    np.testing.assert_array_equal(dst.read(dst.bounds), data * 2)
    assert report.stream_splits >= 1
    assert f"{report.stream_splits} stream split(s)" in report.summary()
    assert report.read_amplification >= report.plan.read_amplification - 0.01
    saved = report_summary(report)  # report.json's summary says both
    assert saved["stream_splits"] == report.stream_splits
    assert saved["predicted_read_amplification"] == report.plan.read_amplification
