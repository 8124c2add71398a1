"""``chunkgraph status``, ``run --resume`` and ``clean`` of a flow whose top-level tasks are
marked done in records (``MarkerStore.mark_done_many``, one per batch of tasks), on a
disk and in a bucket (moto's S3 server on loopback): they count a record's keys exactly
as plain markers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.flow.state import TOP, MarkerStore, StateRoot, state_store
from chunkgraph.flow.state._layout import MARKERS_NAME
from chunkgraph.flow.state._store import join


@pytest.fixture(params=["dir", "s3"])
def place(request: pytest.FixtureRequest, work: Path) -> str:
    """Where the flow's input, output and state go: the working folder, or a bucket."""
    if request.param == "dir":
        return str(work)
    return f"s3://{request.getfixturevalue('bucket')}"


def _spec(work: Path, place: str) -> str:
    """raw.zarr (copied to ``place``) into ``place``/out.zarr: 8 top-level tasks, the last
    refused until marker.txt exists."""
    raw = volume.open(str(work / "raw.zarr"))
    if place != str(work):
        src = volume.create(f"{place}/raw.zarr", raw.shape, raw.chunks, raw.dtype)
        src.write(src.bounds, raw.read(raw.bounds))
    lines = [
        f"input: {place}/raw.zarr",
        f"output: {{path: {place}/out.zarr, dtype: float32, chunks: [16, 16, 16]}}",
        "function: spec_functions:fail_once",
        f"kwargs: {{marker: {work / 'marker.txt'}, start: [16, 16, 16]}}",
        "chunk_sizes: [16]",
        "retries: 0",
        "run: {executor: sync}",
    ]
    (work / "spec.yaml").write_text("\n".join(lines) + "\n")
    return str(work / "spec.yaml")


def _interrupted_in_records(work: Path, place: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the spec (7 of 8 top tasks done), then move its 7 plain markers into records of
    3, 3 and 1 keys, as batches write them; the flow's folder."""
    assert cli.main(["run", "--quiet", _spec(work, place)]) == 1
    capsys.readouterr()
    assert cli.main(["status", f"{place}/out.zarr", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    markers = MarkerStore(StateRoot.of(row["flow_dir"]))
    plain = sorted(markers.done_keys(TOP))
    assert len(plain) == 7
    for n in range(0, 7, 3):
        markers.mark_done_many(TOP, plain[n : n + 3], f"batch-{n // 3}")
    for key in plain:
        markers.store.delete(join(MARKERS_NAME, TOP, key))
    assert markers.store.names(join(MARKERS_NAME, TOP)) == []
    return str(row["flow_dir"])


def test_status_and_resume_count_keys_in_records(
    work: Path, place: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _interrupted_in_records(work, place, capsys)
    assert cli.main(["status", f"{place}/out.zarr"]) == 0
    assert "failed       top 7/8" in capsys.readouterr().out
    (work / "marker.txt").touch()
    assert cli.main(["run", "--quiet", str(work / "spec.yaml"), "--resume"]) == 0
    assert "skipped 7 top-level tasks" in capsys.readouterr().out
    out = volume.open(f"{place}/out.zarr")
    raw = volume.open(str(work / "raw.zarr"))
    np.testing.assert_array_equal(out.read(out.bounds), raw.read(raw.bounds))


def test_clean_removes_a_flow_marked_in_records(
    work: Path, place: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flow_dir = _interrupted_in_records(work, place, capsys)
    assert cli.main(["clean", f"{place}/out.zarr", "--all"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not state_store(StateRoot.of(flow_dir)).exists("")  # records and all
    assert cli.main(["status", f"{place}/out.zarr", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
