"""The driver's own tasks mark done in bulk: one record a second, the rest at the run's end."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from tests.flow._done import done_under

from chunkgraph import FlowLockedError, volume
from chunkgraph.flow import apply
from chunkgraph.flow.state import TOP, MarkerStore, StateRoot
from chunkgraph.flow.state._journal import MarkerJournal, journal_of
from chunkgraph.flow.state._markers import fenced

SHAPE = (32, 64)
CHUNK = (8, 8)  # 32 one-chunk top-level tasks


def _source(tmp_path: Path) -> volume.Volume:
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, CHUNK, "float32")
    src.write(src.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    return src


def plus_one(x: np.ndarray) -> np.ndarray:
    return x + 1


LAST_ROW = 24 * SHAPE[1]  # the first value of the last row of chunks


def fails_on_the_last_row(x: np.ndarray) -> np.ndarray:
    """Fails on the last row of top-level tasks: the run stops with its markers kept."""
    if x.flat[0] >= LAST_ROW:
        raise ValueError("the last row fails")
    return x + 1


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _failed_run(tmp_path: Path, **options: object) -> Path:
    """A run that stops at the last row of chunks (24 of 32 tasks done); its flow folder."""
    src = _source(tmp_path)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, CHUNK, "float32")
    root = tmp_path / "state"
    with pytest.raises(ExceptionGroup) as failure:
        apply(fails_on_the_last_row, src, dst, chunk_sizes=[CHUNK], intermediates=root,
              retries=0, skip_intermediates=True, **options)  # type: ignore[arg-type]  # fmt: skip
    assert "task(s) failed" in str(failure.value)
    (flow,) = [m.parent for m in root.glob("*/markers")]
    return flow


def test_a_threads_run_marks_its_tasks_in_records_not_a_marker_each(tmp_path: Path) -> None:
    flow = _failed_run(tmp_path, workers=1)
    assert _files(flow / "markers" / "top") == []  # no marker per task
    assert 1 <= len(_files(flow / "markers" / "top.records")) < 24
    # in C order, one at a time: the 24 tasks before the last row, written out at the
    # failure rather than lost with it
    assert len(MarkerStore(StateRoot.of(str(flow))).done_keys(TOP)) == 24


def test_a_processes_run_marks_its_tasks_in_a_record_per_batch(tmp_path: Path) -> None:
    """Worker processes run the top tasks in batches, one contiguous stream each (as on
    a Dask cluster): each batch records its done keys in one record."""
    flow = _failed_run(tmp_path, executor="processes", workers=2)
    assert _files(flow / "markers" / "top") == []  # no marker per task
    assert _files(flow / "markers" / "top.records")
    done = MarkerStore(StateRoot.of(str(flow))).done_keys(TOP)
    assert 1 <= len(done) <= 24 and done_under(flow.parent) == len(done)


def test_a_resumed_run_skips_what_the_journal_recorded(tmp_path: Path) -> None:
    flow = _failed_run(tmp_path, workers=1)
    src = volume.open(str(tmp_path / "src.zarr"))
    dst = volume.open(str(tmp_path / "dst.zarr"), mode="r+")
    global LAST_ROW
    before, LAST_ROW = LAST_ROW, 10**9  # the same code, now passing: the same flow
    try:
        report = apply(fails_on_the_last_row, src, dst, chunk_sizes=[CHUNK],
                       intermediates=flow.parent, retries=0, skip_intermediates=True,
                       resume=True, workers=1)  # fmt: skip
    finally:
        LAST_ROW = before
    assert report.top_tasks_skipped == 24
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)


def test_the_journal_writes_at_most_one_record_per_interval(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(str(tmp_path)))
    journal = MarkerJournal(markers, TOP, "run", interval=0.3)
    journal.add("0_0")  # the first key is written at once (by the timer)
    deadline = time.monotonic() + 10
    while not markers.done_keys(TOP) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert markers.done_keys(TOP) == {"0_0"}
    for i in range(1, 50):
        journal.add(f"0_{i}")
    # the next write waits for the interval; then the timer writes all 49 in one record
    while len(markers.done_keys(TOP)) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(markers.done_keys(TOP)) == 50
    assert _files(tmp_path / "markers" / "top.records") == ["run-0", "run-1"]
    journal.add("1_0")
    journal.close()  # the rest, at once
    assert "1_0" in markers.done_keys(TOP)
    assert _files(tmp_path / "markers" / "top.records") == ["run-0", "run-1", "run-2"]
    with pytest.raises(AssertionError, match="after it was closed"):
        journal.add("1_1")


class _Lost:
    """A fence whose lock is lost: every marker write after it is refused."""

    def check(self) -> None:
        raise FlowLockedError("the flow's lock was lost")


def test_a_lost_lock_refuses_the_journal_s_writes_and_says_so(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(str(tmp_path)))
    journal = MarkerJournal(markers, TOP, "run", interval=60)
    with fenced(markers.location, _Lost()):  # type: ignore[arg-type]
        journal.add("0_0")  # the timer's write is refused: raised by the next call
        deadline = time.monotonic() + 10
        while journal._error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(FlowLockedError):
            journal.add("0_1")
        journal.close(quiet=True)  # a failing run: its own error is the one to see
    assert markers.done_keys(TOP) == set()


def test_no_journal_is_left_behind_by_a_run(tmp_path: Path) -> None:
    src = _source(tmp_path)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, CHUNK, "float32")
    apply(plus_one, src, dst, chunk_sizes=[CHUNK], intermediates=tmp_path / "s")
    from chunkgraph.flow.state import _journal

    assert _journal._JOURNALS == {}
    assert journal_of("anything", TOP) is None


def test_a_growing_journal_rewrites_one_record_starting_with_an_earlier_try_s(
    tmp_path: Path,
) -> None:
    markers = MarkerStore(StateRoot.of(str(tmp_path)))
    journal = MarkerJournal(markers, TOP, "batch-3", interval=60, grow=True, before=["0_0"])
    journal.add("0_1")  # the first write: at once, the earlier try's key and this one
    deadline = time.monotonic() + 10
    while markers.record_keys(TOP, "batch-3") != {"0_0", "0_1"}:
        assert time.monotonic() < deadline, "the first write did not come"
        time.sleep(0.01)
    journal.add("0_2")  # waits for the interval, or the close
    journal.close()
    assert markers.record_keys(TOP, "batch-3") == {"0_0", "0_1", "0_2"}
    assert _files(tmp_path / "markers" / "top.records") == ["batch-3"]
    assert journal.closed
