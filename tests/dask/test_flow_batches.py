"""A flow on a real LocalCluster runs in batches: exact output, few Dask tasks, a bounded
window, records that a resume and a rerun batch skip, a killed worker, a cancelled run."""

from __future__ import annotations

import functools
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin
from tests.dask._batch_tasks import (
    POISON,
    counted,
    counted_failing_once,
    counted_or_fail,
    counted_slowly,
    nap,
)
from tests.dask._cluster import START_DEADLINE_S, wait_until

import chunkgraph as cg
from chunkgraph import volume
from chunkgraph.execute import DaskExecutor
from chunkgraph.execute._dask_stream import Call
from chunkgraph.flow.plan import validate_flow
from chunkgraph.flow.run._batches import _ReductionCounts
from chunkgraph.flow.run._reduce import reduction_boxes, top_indices_meeting
from chunkgraph.flow.state import REDUCE, TOP, MarkerStore, StateRoot
from chunkgraph.geometry import Box
from chunkgraph.report import Recorder, load_report, write_report

STORAGE = (8, 8)


class Tally(SchedulerPlugin):  # type: ignore[misc]
    """On the scheduler: the chunkgraph tasks it saw, and the most it held at once."""

    name = "flow-batches-tally"

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.held: set[str] = set()
        self.most = 0

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        key = str(key)
        if not key.startswith("chunkgraph-"):
            return
        self.keys.add(key)
        if finish in ("released", "forgotten", "memory", "erred"):
            self.held.discard(key)
        else:
            self.held.add(key)
        self.most = max(self.most, len(self.held))


def _tally(dask_scheduler: Any) -> tuple[int, int]:
    plugin = dask_scheduler.plugins[Tally.name]
    return len(plugin.keys), plugin.most


def _held(dask_scheduler: Any) -> int:
    return sum(str(k).startswith("chunkgraph-") for k in dask_scheduler.tasks)


def _running(record: str, dask_scheduler: Any) -> str | None:
    """The worker running the batch whose record is ``record`` (its key holds the name)."""
    for task in dask_scheduler.tasks.values():
        if f"-{record}-" in str(task.key) and task.processing_on is not None:
            return str(task.processing_on.address)
    return None


def _executing(dask_worker: Any) -> int:
    return len(dask_worker.state.executing)


@pytest.fixture
def tally(healthy: Any) -> Any:
    healthy.register_plugin(Tally())
    yield lambda: healthy.run_on_scheduler(_tally)
    healthy.unregister_scheduler_plugin(Tally.name)


def source(root: Path, shape: tuple[int, int], poison: tuple[int, int] | None = None) -> Any:
    data = np.random.default_rng(1).integers(0, 1000, shape).astype(np.int32)
    if poison is not None:
        data[poison] = POISON
    vol = volume.create(str(root / "src.zarr"), shape, STORAGE, "int32")
    vol.write(Box.from_shape(shape), data)
    return vol


def calls(folder: Path) -> int:
    return sum(1 for _ in folder.iterdir())


def blended(fn: Any, src: Any, root: Path, name: str, executor: Any, **options: Any) -> Any:
    """One-chunk top tasks (8x8) blended over 2 voxels: a reduction per dst chunk (no
    probe: each call of fn is a task's)."""
    dst = volume.create(str(root / f"{name}.zarr"), src.shape, STORAGE, "float64", exist_ok=True)
    report = cg.apply(
        fn, src, dst, chunk_sizes=[STORAGE], blend_pads=[(2, 2)], blend_modes="linear",
        intermediates=root / f"{name}-tmp", executor=executor, probe=False, **options,
    )  # fmt: skip
    return report, dst


def test_batched_flow_is_exact_in_few_dask_tasks(healthy: Any, tally: Any, tmp_path: Path) -> None:
    """400 top tasks and 400 reductions: the output of executor='threads', byte for byte,
    in at most 40 Dask tasks (one per batch), each fn call once, each task in the events."""
    src = source(tmp_path, (160, 160))
    (tmp_path / "calls").mkdir()
    fn = functools.partial(counted, str(tmp_path / "calls"))
    local, want = blended(fn, src, tmp_path, "local", "threads")
    recorder = Recorder()
    report, got = blended(fn, src, tmp_path, "dask", DaskExecutor(healthy), subscribers=[recorder])
    whole = Box.from_shape(src.shape)
    np.testing.assert_array_equal(got.read(whole), want.read(whole))
    tasks, _ = tally()
    assert report.tasks_per_level == (400,) and report.reductions == 400
    assert tasks <= 400 // 10
    assert calls(tmp_path / "calls") == 800  # 400 here, 400 there: none twice
    assert report.task_bytes == ()  # no row per task from a batched run
    # Progress counts tasks from the batches' sums: 800 finished, in as many batches.
    assert recorder.planned == 800
    assert [t.outcome for t in recorder.tasks] == ["finished"] * 800
    assert len({t.name for t in recorder.tasks}) == tasks
    # Each task on the Dask worker that ran its batch, over the batch's seconds there: a
    # report's workers and busy time are the cluster's.
    workers = set(healthy.scheduler_info()["workers"])
    assert {t.tries[-1].worker for t in recorder.tasks} <= workers
    assert sum(t.tries[-1].end - t.tries[-1].start for t in recorder.tasks) > 0
    assert report.bytes_written == local.bytes_written
    assert report.temporary_bytes == local.temporary_bytes


def test_stream_keeps_two_calls_per_worker_thread_in_flight(healthy: Any, tally: Any) -> None:
    executor = DaskExecutor(healthy)
    results = executor.stream(Call(f"nap-{i}", nap, (0.02, i)) for i in range(40))
    assert sorted(results) == [i * i for i in range(40)]
    tasks, most = tally()
    assert tasks == 40
    assert most <= 2 * 2  # 2 workers x 1 thread x WINDOW_PER_THREAD


def test_a_failure_cancels_the_run_and_a_resume_skips_what_batches_recorded(
    healthy: Any, tmp_path: Path
) -> None:
    """fn fails on the chunk holding POISON (the last rows): one TaskError naming that top
    task, nothing left on the scheduler; a resume skips every key the batches recorded and
    gives the output of an uninterrupted run."""
    src = source(tmp_path, (160, 160), poison=(157, 3))
    flag = tmp_path / "fail"
    flag.touch()
    (tmp_path / "calls").mkdir()
    fn = functools.partial(counted_or_fail, str(tmp_path / "calls"), str(flag))
    with pytest.raises(ExceptionGroup) as caught:
        blended(fn, src, tmp_path, "dask", DaskExecutor(healthy))
    (error,) = caught.value.exceptions
    assert isinstance(error, cg.TaskError) and error.task == "apply-top" + str(
        Box((152, 0), (160, 8))
    )
    assert "poisoned chunk" in str(error)
    # fn's own error and its worker traceback, not the batch's (TaskError pickles its cause)
    assert "poisoned chunk" in str(error.__cause__)
    wait_until(lambda: healthy.run_on_scheduler(_held) == 0, 10, "the run's tasks cancelled")
    # A cancelled batch stops before its next task; the one it runs ends first.
    wait_until(lambda: not any(healthy.run(_executing).values()), 30, "the workers idle")
    (state,) = (tmp_path / "dask-tmp").glob("*/markers")
    markers = MarkerStore(StateRoot.of(str(state.parent)))
    recorded = len(markers.done_keys(TOP))
    assert recorded > 0
    # Counted over the run (400 top tasks, 400 reductions), not over the failed batch:
    # at most what was done when it failed, at least what is done now, did run.
    counts = re.search(r"(\d+) task\(s\) failed; (\d+) task\(s\) did not run", str(caught.value))
    assert counts is not None and counts[1] == "1"
    done = recorded + len(markers.done_keys(REDUCE))
    assert 800 - done - 1 <= int(counts[2]) <= 800 - 1
    flag.unlink()
    first = calls(tmp_path / "calls")
    report, got = blended(fn, src, tmp_path, "dask", DaskExecutor(healthy), resume=True)
    assert report.top_tasks_skipped == recorded
    assert report.tasks_per_level == (400 - recorded,)
    # Reductions call no fn: each call of the resumed run is a top task not recorded.
    assert calls(tmp_path / "calls") - first == 400 - recorded
    _, want = blended(fn, src, tmp_path, "local", "threads")
    whole = Box.from_shape(src.shape)
    np.testing.assert_array_equal(got.read(whole), want.read(whole))


class Interrupt:
    """A subscriber that raises KeyboardInterrupt at the first finished task (Ctrl-C)."""

    def __call__(self, event: Any) -> None:
        if event.kind is cg.EventKind.FINISHED:
            raise KeyboardInterrupt


def test_ctrl_c_cancels_the_batches_in_flight(healthy: Any, tmp_path: Path) -> None:
    """Ctrl-C as the first batch comes back: nothing more is submitted, and the batches in
    flight stop before their next task: the window's 4 batches of 25 tasks (2 running, 2
    queued) make fewer calls than 3 whole batches."""
    src = source(tmp_path, (160, 160))
    (tmp_path / "calls").mkdir()
    fn = functools.partial(counted_slowly, str(tmp_path / "calls"), 0.01)
    with pytest.raises(KeyboardInterrupt):
        blended(fn, src, tmp_path, "dask", DaskExecutor(healthy), subscribers=[Interrupt()])
    wait_until(lambda: healthy.run_on_scheduler(_held) == 0, 10, "the run's tasks cancelled")
    # A cancelled batch stops before its next task; the one it runs ends first.
    wait_until(lambda: not any(healthy.run(_executing).values()), 30, "the workers idle")
    assert 25 <= calls(tmp_path / "calls") < 3 * 25


def test_a_killed_worker_costs_only_its_batches_unrecorded_tasks(
    own_cluster: Any, tmp_path: Path
) -> None:
    """A worker process is SIGKILLed once a running batch has recorded its first keys
    (RECORD_EVERY_S = 1 s into its 1.8 s): the flow completes exactly, and the calls made
    twice are at most the killed worker's batch's tasks that were not in its record."""
    _cluster, client = own_cluster()
    src = source(tmp_path, (64, 96))  # 96 top tasks, no reductions
    (tmp_path / "calls").mkdir()
    fn = functools.partial(counted_slowly, str(tmp_path / "calls"), 0.15)
    dst = volume.create(str(tmp_path / "dst.zarr"), src.shape, STORAGE, "int32")
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(
                cg.apply(fn, src, dst, chunk_sizes=[STORAGE], intermediates=tmp_path / "tmp",
                         executor=DaskExecutor(client), probe=False)
            )  # fmt: skip
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    records = tmp_path / "tmp"
    found: list[tuple[str, str]] = []  # (record, the worker running its batch)

    def recorded_batch_running() -> bool:
        for path in records.glob("*/markers/top.records/*-top-[1-4]"):  # the first 4
            worker = client.run_on_scheduler(_running, path.name)
            if worker is not None:
                found.append((path.name, worker))
                return True
        return False

    wait_until(recorded_batch_running, START_DEADLINE_S, "a running batch's first record")
    assert thread.is_alive()
    name, worker = found[0]
    (state,) = records.glob("*/markers")
    least = len(MarkerStore(StateRoot.of(str(state.parent))).record_keys(TOP, name))
    pid = client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGKILL)
    thread.join(START_DEADLINE_S)
    assert not thread.is_alive() and not isinstance(outcome[0], BaseException), outcome
    np.testing.assert_array_equal(
        dst.read(Box.from_shape(src.shape)), src.read(Box.from_shape(src.shape)) * 3 + 1
    )
    redone = calls(tmp_path / "calls") - 96
    # The first 4 batches hold 96 // 8 = 12 tasks each; the killed one had recorded `least`.
    assert least > 0 and 0 <= redone <= 12 - least
    # The batch run again skipped what its earlier try recorded: done by this run, so the
    # report counts all 96 as this run's and says nothing of a resume.
    report = outcome[0]
    assert report.top_tasks_skipped == 0 and report.reductions_skipped == 0
    assert report.tasks_per_level[0] == 96 and report.reductions == 96
    assert "resumed" not in report.summary()


def test_retries_inside_batches_are_in_the_run_report(healthy: Any, tmp_path: Path) -> None:
    """Three chunks fail their first try and pass the next, retried by their batch's own
    executor on the worker (retries=1): the run's report counts 3 tasks retried, 3 retries,
    and every task (32 top-level, 32 reductions) finished, as a local run's would."""
    src = volume.create(str(tmp_path / "src.zarr"), (64, 32), STORAGE, "int32")
    data = np.arange(64 * 32, dtype=np.int32).reshape(64, 32)
    for poisoned in ((3, 3), (20, 30), (60, 12)):
        data[poisoned] = POISON
    src.write(Box.from_shape(src.shape), data)
    (tmp_path / "calls").mkdir()
    (tmp_path / "tried").mkdir()
    fn = functools.partial(counted_failing_once, str(tmp_path / "calls"), str(tmp_path / "tried"))
    dst = volume.create(str(tmp_path / "dst.zarr"), src.shape, STORAGE, "int32")
    recorder = Recorder()
    report = cg.apply(
        fn, src, dst, chunk_sizes=[STORAGE], intermediates=tmp_path / "tmp", probe=False,
        executor=DaskExecutor(healthy, retries=1), subscribers=[recorder],
    )  # fmt: skip
    assert calls(tmp_path / "tried") == 3 and report.tasks_per_level == (32,)
    np.testing.assert_array_equal(dst.read(dst.bounds), data * 3 + 1)
    tasks = recorder.tasks
    assert [t.outcome for t in tasks] == ["finished"] * 64  # 32 top tasks, 32 reductions
    assert sum(t.retries for t in tasks) == 3 and sum(1 for t in tasks if t.retries) == 3
    totals = write_report(tmp_path / "report", recorder, {})
    assert load_report(totals)["totals"]["retries"] == 3


@pytest.mark.parametrize(
    ("shape", "top", "blend", "dst_chunks", "bbox"),
    [
        ((64, 48), (8, 8), (2, 2), (8, 8), None),
        ((64, 48), (16, 8), (4, 0), (8, 4), None),
        ((60, 50), (8, 16), (3, 2), (8, 8), Box((4, 2), (60, 50))),
    ],
)
def test_reduction_counts_are_the_top_tasks_meeting_each_box(
    tmp_path: Path, shape: Any, top: Any, blend: Any, dst_chunks: Any, bbox: Any
) -> None:
    """The per-axis ranges agree with top_indices_meeting for every box; done top tasks
    count down, done reductions are out, boxes at zero are ready."""
    src = volume.create(str(tmp_path / "s.zarr"), shape, dst_chunks, "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), shape, dst_chunks, "float32")
    spec = validate_flow(
        lambda x: x, src, dst, chunk_sizes=[top], blend_pads=[blend], blend_modes="linear",
        bbox=bbox,
    )  # fmt: skip
    boxes, grid = reduction_boxes(spec, dst)
    done_tops = {"0_0", "1_0"}
    counts = _ReductionCounts(spec, dst, done_tops, {"0_1"})
    assert counts.counts.shape == grid
    for flat, box in enumerate(boxes):
        index = np.unravel_index(flat, grid)
        meeting = top_indices_meeting(spec, box.intersection(spec.bbox))
        want = len([i for i in meeting if "_".join(map(str, i)) not in done_tops])
        assert counts.counts[index] == (-1 if index == (0, 1) else want), box
    assert sorted(counts.ready) == sorted(np.flatnonzero(counts.counts.ravel() == 0).tolist())


def test_a_batch_its_workers_died_on_names_its_tasks_and_its_tries() -> None:
    """A worker that dies on a batch each time (out of memory, say): the error names the
    grid indices the batch held, the tries Dask made, and what to try."""
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    from chunkgraph.execute._dask_stream import _failure_group
    from chunkgraph.flow.run._batch_run import Batch
    from chunkgraph.flow.run._batches import _named_batch

    died = KilledWorker("b7", SimpleNamespace(address="tcp://w:1"), 3)  # type: ignore[arg-type]
    group = _failure_group("apply-batch-b7", "error", died)
    (error,) = group.exceptions
    assert isinstance(error, cg.TaskError) and error.attempts == 4
    assert "memory_limit" in str(error)
    held = Batch("b7", TOP, np.array([[3, 0], [3, 1], [4, 0]]))
    batched = SimpleNamespace(in_flight={"b7": held})
    named = _named_batch(batched, error)  # type: ignore[arg-type]
    assert "the batch held 3 top-level tasks, grid (3, 0) to (4, 0)" in str(named)
    assert named.__cause__ is error.__cause__
    other = cg.TaskError("apply-top[0]")
    assert _named_batch(batched, other) is other  # a task's own failure names itself
