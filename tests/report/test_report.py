"""Run reports: the Recorder on real runs, report.json, the pictures, ``chunkgraph report``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph import cli, volume
from chunkgraph.report import Recorder, load_report, summarize, write_report
from chunkgraph.report._charts import io_over_time

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _flaky_graph(fail_once: str) -> tuple[cg.Graph, cg.TaskRef]:
    """Eight leaves (one fails on its first try) summed by one task::

    leaf-a0 .. leaf-a7  ──>  total
    """
    failures: set[str] = set()
    lock = threading.Lock()

    def leaf(i: int, name: str) -> int:
        time.sleep(0.005)  # long enough that both workers get tasks
        with lock:
            if name == fail_once and name not in failures:
                failures.add(name)
                raise RuntimeError(f"{name}: first try fails")
        return i

    graph = cg.Graph()
    names = [f"leaf-{c}{i}" for i, c in zip(range(8), "azbycxdw", strict=True)]
    leaves = [graph.add(leaf, i, name, name=name) for i, name in enumerate(names)]
    total = graph.add(lambda *xs: sum(xs), *leaves, name="total")
    return graph, total


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Recorder, Path, int]:
    """A two-thread run with one retried task, reported under tmp_path/report."""
    graph, total = _flaky_graph("leaf-c4")
    recorder = Recorder()
    result = cg.run(graph, total, executor="threads", workers=2, retries=1, subscribers=[recorder])
    folder = write_report(
        tmp_path / "report", recorder, {"bytes_read": 10 << 20, "bytes_written": 5 << 20}
    )
    return recorder, folder, int(result)


def test_report_json_has_every_task_with_times_and_workers(
    recorded: tuple[Recorder, Path, int],
) -> None:
    _, folder, result = recorded
    assert result == sum(range(8))
    document = json.loads((folder / "report.json").read_text())
    tasks = document["tasks"]
    assert sorted(t["name"] for t in tasks) == sorted(
        [f"leaf-{c}{i}" for i, c in zip(range(8), "azbycxdw", strict=True)] + ["total"]
    )
    for task in tasks:
        assert 0.0 <= task["start"] <= task["end"] <= document["totals"]["wall_seconds"]
        assert task["worker"].startswith("chunkgraph-worker-")
        assert task["outcome"] == "finished" and task["level"] is None
    assert set(document["workers"]) == {t["worker"] for t in tasks}
    totals = document["totals"]
    assert (totals["tasks"], totals["finished"], totals["failed"], totals["cancelled"]) == (
        9, 9, 0, 0
    )  # fmt: skip
    assert totals["steals"] == 0 and totals["runs"] == 1
    assert document["summary"] == {"bytes_read": 10 << 20, "bytes_written": 5 << 20}


def test_a_retried_task_is_counted_with_its_failed_try(
    recorded: tuple[Recorder, Path, int],
) -> None:
    _, folder, _ = recorded
    document = load_report(folder)
    assert (document["totals"]["retried"], document["totals"]["retries"]) == (1, 1)
    (retried,) = [t for t in document["tasks"] if t["retries"]]
    assert retried["name"] == "leaf-c4" and retried["attempts"] == 2
    first, second = retried["tries"]
    assert first[3] is True and second[3] is False  # failed, then finished
    assert first[2] <= second[1]  # the retry starts after the failure


def test_pictures_are_png_images_of_a_sensible_size(
    recorded: tuple[Recorder, Path, int],
) -> None:
    import matplotlib.image

    _, folder, _ = recorded
    for name in ("gantt.png", "utilisation.png"):
        path = folder / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE
    gantt = matplotlib.image.imread(folder / "gantt.png")
    height, width = gantt.shape[:2]
    assert 1000 <= width <= 1400 and 250 <= height <= 1000
    assert gantt.std() > 0.01  # something was drawn


def test_summarize_and_the_report_command(
    recorded: tuple[Recorder, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    _, folder, _ = recorded
    text = summarize(folder)
    assert "9 tasks on 2 workers" in text or "9 tasks on 1 worker" in text
    assert "retried 1 task (1 retry)" in text and "bytes_read: 10.0 MiB" in text
    assert "busiest worker chunkgraph-worker-" in text

    (folder / "gantt.png").unlink()
    assert cli.main(["report", str(folder), "--pictures"]) == 0
    out = capsys.readouterr().out
    assert text in out
    assert (folder / "gantt.png").read_bytes()[:8] == PNG_SIGNATURE


def test_report_command_refuses_a_missing_or_broken_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(tmp_path / "nowhere")]) == 2
    assert "no report directory" in capsys.readouterr().err

    assert cli.main(["report", str(tmp_path)]) == 2
    assert "holds no report.json" in capsys.readouterr().err

    (tmp_path / "report.json").write_text("{not json")
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err

    (tmp_path / "report.json").write_text(json.dumps({"format": 1, "tasks": 3}))
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "not a chunkgraph run report" in capsys.readouterr().err


def test_a_failed_run_records_the_error_and_the_cancelled_tasks(tmp_path: Path) -> None:
    def broken() -> int:
        raise ValueError("bad block")

    graph = cg.Graph()
    bad = graph.add(broken, name="broken")
    after = graph.add(lambda x: x, bad, name="after")
    recorder = Recorder()
    with pytest.raises(ExceptionGroup):
        cg.run(graph, after, executor="sync", subscribers=[recorder])
    document = load_report(write_report(tmp_path, recorder))
    by_name = {t["name"]: t for t in document["tasks"]}
    assert by_name["broken"]["outcome"] == "failed"
    assert by_name["broken"]["error"] == "ValueError: bad block"
    assert by_name["broken"]["worker"] == "main"  # the sync executor runs tasks in the caller
    assert by_name["after"]["outcome"] == "cancelled" and by_name["after"]["start"] is None
    assert (document["totals"]["failed"], document["totals"]["cancelled"]) == (1, 1)
    assert "failed: broken: ValueError: bad block" in summarize(tmp_path)


def test_event_worker_names_the_pool_thread(tmp_path: Path) -> None:
    graph = cg.Graph()
    refs = [graph.add(time.sleep, 0.001, name=f"nap-{i}") for i in range(4)]
    events: list[cg.Event] = []
    cg.run(graph, refs, executor="threads", workers=2, subscribers=[events.append])
    for event in events:
        if event.kind in (cg.EventKind.STARTED, cg.EventKind.FINISHED):
            assert event.worker.startswith("chunkgraph-worker-")
        else:
            assert event.worker == ""


def test_apply_flow_tasks_carry_their_level(tmp_path: Path) -> None:
    data = np.arange(32 * 32, dtype="float32").reshape(32, 32)
    src = volume.create(str(tmp_path / "src.zarr"), data.shape, (8, 8), "float32")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), data.shape, (8, 8), "float32")
    recorder = Recorder()
    report = cg.flow.apply(
        lambda x: x + 1, src, dst, chunk_sizes=[(16, 16), (8, 8)], blend_pads=[4, 0],
        executor="threads", workers=2, subscribers=[recorder], progress=False,
    )  # fmt: skip
    np.testing.assert_allclose(dst.read(dst.bounds), data + 1)
    folder = write_report(
        tmp_path / "report",
        recorder,
        {"bytes_read": report.bytes_read, "bytes_written": report.bytes_written},
        report.task_bytes,
    )
    tasks = load_report(folder)["tasks"]
    levels = [t["level"] for t in tasks]
    assert levels.count("top") == report.tasks_per_level[0]
    assert set(levels) <= {"top", "reduce", None}
    assert (folder / "utilisation.png").read_bytes()[:8] == PNG_SIGNATURE
    # Every task carries its own bytes; the reductions together wrote dst once.
    assert all("bytes_read" in t and "bytes_written" in t for t in tasks)
    written = sum(t["bytes_written"] for t in tasks if t["level"] == "reduce")
    assert written == report.bytes_written == data.nbytes
    edges, curves = io_over_time(tasks, load_report(folder)["totals"]["wall_seconds"])
    (label, rate), *_ = curves
    assert label == "read" and rate.sum() * (edges[1] - edges[0]) == pytest.approx(
        sum(t["bytes_read"] for t in tasks)
    )


def test_run_command_writes_a_report(tmp_path: Path) -> None:
    """``chunkgraph run SPEC --report DIR``, then ``chunkgraph report DIR``, as a user would."""
    data = np.ones((16, 16), dtype="float32")
    src = volume.create(str(tmp_path / "src.zarr"), data.shape, (8, 8), "float32")
    src.write(src.bounds, data)
    (tmp_path / "report_fns.py").write_text("def double(x):\n    return x * 2\n")
    (tmp_path / "spec.yaml").write_text(
        textwrap.dedent(
            """\
            input: src.zarr
            output: {path: dst.zarr, dtype: float32, chunks: [8, 8]}
            function: "report_fns:double"
            chunk_sizes: [[8, 8]]
            run: {executor: threads, workers: 2}
            """
        )
    )
    command = [
        sys.executable,
        "-c",
        "import sys; from chunkgraph.cli import main; sys.exit(main())",
    ]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    ran = _run([*command, "run", str(tmp_path / "spec.yaml"), "--report", str(tmp_path / "rep")],
               env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    np.testing.assert_array_equal(volume.open(str(tmp_path / "dst.zarr")).read(src.bounds), 2)
    document = load_report(tmp_path / "rep")
    assert document["totals"]["finished"] == document["totals"]["tasks"] > 0
    assert "top" in {t["level"] for t in document["tasks"]}
    # The run's summary and its report tell where the time went.
    assert "time on 2 slots" in ran.stdout
    assert document["summary"]["breakdown"]["slots"] == 2
    assert (tmp_path / "rep" / "breakdown.png").is_file()
    shown = _run([*command, "report", str(tmp_path / "rep")], env)
    assert shown.returncode == 0 and "tasks on" in shown.stdout
    assert "where the time went" in shown.stdout and "redundant" in shown.stdout


def _run(command: list[str], env: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
