"""A run with GPU tasks in the run report: its transfers line, and no stray task.

A ``FakeBackend`` stands for CuPy (no GPU runs here; see ``test_real_gpu.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import chunkgraph as cg
from chunkgraph.gpu import FakeBackend, use_backend
from chunkgraph.report import Recorder, summarize, write_report
from chunkgraph.report._document import build_report


def test_the_transfers_line_reaches_the_report_and_its_summary(tmp_path: Path) -> None:
    recorder = Recorder()
    with use_backend(FakeBackend(1)):
        g = cg.Graph()
        up = g.add(np.multiply, np.ones(4), 2.0, resources={"gpu": 1}, name="up")
        g.add(np.sum, up, name="down")
        cg.run(g, "down", subscribers=[recorder])
    line = "gpu: 1 upload(s), 1 download(s), 64 bytes moved, 0 spill(s)"
    assert recorder.transfers == [line]
    assert sorted(r.name for r in recorder.tasks) == ["down", "up"]  # no record for it
    assert build_report(recorder)["gpu"] == [line]
    write_report(tmp_path, recorder)
    assert f"  {line}" in summarize(tmp_path).splitlines()


def test_a_run_without_gpu_tasks_has_no_gpu_entry() -> None:
    recorder = Recorder()
    g = cg.Graph()
    g.add(abs, -1, name="a")
    cg.run(g, "a", subscribers=[recorder])
    assert recorder.transfers == [] and "gpu" not in build_report(recorder)
