"""Runs say how to look at what they read and wrote: ``chunkgraph run``, ``transfer`` and
``downsample`` print a ``chunkgraph view`` command whose paths open, ``run --report``
keeps it in report.json (and ``chunkgraph report`` shows it), and ``--view`` serves the
viewer at the end of the run until Ctrl-C."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from chunkgraph import cli, volume

OUTPUT = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"


def _view_line(out: str) -> list[str]:
    """The paths of the one ``view:`` line in ``out``."""
    lines = [line for line in out.splitlines() if line.startswith("view: ")]
    assert len(lines) == 1, out
    words = shlex.split(lines[0].removeprefix("view: "))
    assert words[:2] == ["chunkgraph", "view"]
    return words[2:]


def test_run_prints_and_reports_the_view_command(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "spec.yaml").write_text(
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\n"
        "kwargs: {factor: 3.0, offset: 1.0}\nchunk_sizes: [16]\n"
    )
    report = work / "report"
    code = cli.main(["run", "--quiet", str(work / "spec.yaml"), "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    paths = _view_line(out)
    assert paths == [str(work / "raw.zarr"), str(work / "out.zarr")]
    for path in paths:
        volume.open(path)  # the command works as printed
    kept = json.loads((report / "report.json").read_text())["summary"]["view"]
    assert shlex.split(kept)[2:] == paths
    assert cli.main(["report", str(report)]) == 0
    assert f"view: {kept}" in capsys.readouterr().out


def test_a_dry_run_prints_no_view(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["transfer", "--quiet", "--dry-run", str(work / "raw.zarr"), str(work / "c")])
    assert code == 0 and "view:" not in capsys.readouterr().out


def test_transfer_and_downsample_print_their_volumes(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw, copy = str(work / "raw.zarr"), str(work / "copy.zarr")
    assert cli.main(["transfer", "--quiet", raw, copy, "--chunks", "8,8,8"]) == 0
    assert _view_line(capsys.readouterr().out) == [raw, copy]
    assert cli.main(["downsample", "--quiet", copy, "--levels", "2"]) == 0
    levels = [str(work / "copy_s1.zarr"), str(work / "copy_s2.zarr")]
    assert _view_line(capsys.readouterr().out) == [copy, *levels]
    for path in levels:
        volume.open(path)


def test_view_serves_the_run_until_interrupted(work: Path) -> None:
    command = [sys.executable, "-m", "chunkgraph", "transfer", "--quiet", "--view"]
    command += [str(work / "raw.zarr"), str(work / "copy.zarr")]
    # BROWSER=true: the browser the run opens is a program that exits at once.
    env = {**os.environ, "BROWSER": "true"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as served:
        assert served.stdout is not None
        for line in served.stdout:  # the summary, the view line, then the URL
            if line.startswith("http://127.0.0.1:"):
                break
        with urllib.request.urlopen(line.strip(), timeout=10) as page:
            assert page.status == 200
        served.send_signal(signal.SIGINT)
        assert served.wait(timeout=20) == 0
