"""``chunkgraph bench``: the benchmarks of this checkout listed with their first docstring
line, one run with its own ``--help``, arguments and exit code passed through."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkgraph import cli
from chunkgraph.cli._cmd_bench import benchmark_scripts, find_benchmarks

ROOT = Path(__file__).resolve().parents[2]


def test_lists_the_checkouts_benchmarks_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """From a directory outside the checkout, found through the package's own location."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench"]) == 0
    out = capsys.readouterr().out
    assert str(ROOT / "benchmarks") in out
    assert "schedule_quality  Schedule quality: chunkgraph's planning strategies" in out
    assert "_dag_generators" not in out  # a helper module, not a benchmark
    assert set(benchmark_scripts(ROOT / "benchmarks")) >= {"task_overhead", "volume_flow"}


def test_runs_a_benchmark_with_its_own_help(capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "schedule_quality", "--help"]) == 0
    assert "usage: schedule_quality.py" in capfd.readouterr().out


def test_passes_arguments_and_the_exit_code_through(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "echo_args.py").write_text(
        '"""Echo the arguments, exit 3."""\nimport sys\nprint(sys.argv[1:])\nsys.exit(3)\n'
    )
    assert cli.main(["bench", "--dir", str(tmp_path), "echo_args", "-x", "--n", "2"]) == 3
    assert "['-x', '--n', '2']" in capfd.readouterr().out
    assert cli.main(["bench", "--dir", str(folder)]) == 0
    assert "echo_args  Echo the arguments, exit 3." in capfd.readouterr().out


def test_unknown_benchmark_and_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--dir", str(ROOT), "nope"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark 'nope'" in err and "task_overhead" in err
    assert cli.main(["bench", "--dir", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert find_benchmarks([tmp_path]) is None
