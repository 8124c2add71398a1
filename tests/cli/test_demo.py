"""The command line: argument errors and the task-graph half of the demo."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chunkgraph import cli
from chunkgraph.cli._cmd_demo import _command
from chunkgraph.cli._graph_demo import build_statistics_graph, run_graph_demo


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert "chunkgraph" in capsys.readouterr().out


def test_unknown_command_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_demo_rejects_nonpositive_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--tasks", "0"]) == 2
    assert "--tasks must be at least 1" in capsys.readouterr().err


def test_statistics_graph_shape() -> None:
    """37 leaves, fan-in 16: 3 combines at depth 0, then one root: 41 tasks."""
    graph, _ = build_statistics_graph(37)
    assert len(graph) == 37 + 3 + 1


def test_graph_demo_agrees_with_numpy() -> None:
    summary = run_graph_demo(blocks=64, progress=False)
    assert summary.tasks == 64 + 4 + 1
    assert summary.matches, summary.lines()


def test_python_dash_m_runs_the_command_line() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "chunkgraph", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "chunkgraph" in done.stdout, done.stderr


def test_the_demo_names_the_command_as_it_can_be_typed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make demo`` installs into .venv, not onto PATH: the report hint names the
    installed script then, and the bare name once it is on PATH."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert Path(_command()).resolve() == (Path(sys.executable).parent / "chunkgraph").resolve()
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert _command() == "chunkgraph"
