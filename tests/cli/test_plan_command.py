"""``chunkgraph plan GRAPH.json``: the documented examples, the Gantt chart, and errors that
name the task and field."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from chunkgraph import cli

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "graph-format.md"
HEFT = ROOT / "docs" / "heft-example.json"
PLANNED_IN = re.compile(r"planned in \d+\.\d+ s")


def _plan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_heft_example_has_the_papers_makespan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "plan.png"
    code, out, _ = _plan(
        [str(HEFT), "--strategy", "heft", "--no-fuse", "--gantt", str(png)], capsys
    )
    assert code == 0
    assert out.splitlines()[1].startswith("makespan 80 s")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_documented_examples_print_what_the_page_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ``$ chunkgraph plan FILE ...`` block of docs/graph-format.md, on the page's
    own JSON block (``tiles.json``) or on docs/heft-example.json."""
    text = DOC.read_text()
    (graph,) = re.findall(r"```json\n(.*?)```", text, re.S)
    (tmp_path / "tiles.json").write_text(graph)
    shown = re.findall(r"```\n\$ chunkgraph plan (.*?)\n(.*?)```", text, re.S)
    assert len(shown) == 2
    for command, output in shown:
        argv = [str(tmp_path / a) if a == "tiles.json" else a for a in shlex.split(command)]
        argv = [str(ROOT / a) if a.startswith("docs/") else a for a in argv]
        code, out, _ = _plan(argv, capsys)
        assert code == 0
        assert PLANNED_IN.sub("", out) == PLANNED_IN.sub("", output), command


def test_contexts_from_flags_and_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = {"tasks": [{"name": "a", "seconds": 4}, {"name": "b", "seconds": 4}]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph))
    argv = [str(path), "--context", "fast:cpu:1:4", "--context", "slow:cpu:1", "--schedule"]
    code, out, _ = _plan(argv, capsys)
    assert code == 0 and "makespan 2 s" in out  # a then b on the context of speed 4
    assert "fast[0]      0 -> 1 s" in out and "fast[0]      1 -> 2 s" in out
    contexts = tmp_path / "c.json"
    contexts.write_text(json.dumps([{"name": "big", "slots": 2, "memory": None}]))
    code, out, _ = _plan([str(path), "--contexts", str(contexts), "--memory", "1GiB"], capsys)
    assert code == 0 and "makespan 4 s" in out and "budget 1.0 GiB" in out


def _bad(tmp_path: Path, doc: Any, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    code, out, err = _plan([str(path), "--context", "c:cpu:1"], capsys)
    assert code == 2, out
    return err


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ('{"tasks": [', ["not valid JSON", "line 1"]),
        ({"tasks": []}, ['"tasks"', "non-empty"]),
        ({"tasks": [{"name": "x", "deps": ["nope"]}]}, ["task 'x'", "'nope'", "no task"]),
        ({"tasks": [{"name": "x"}, {"name": "x"}]}, ["tasks[1]", "'x'", "twice"]),
        ({"tasks": [{"name": "x", "dep": ["y"]}]}, ["tasks[0]", "'dep'"]),
        ({"tasks": [{"name": "x", "memory": -1}]}, ["task 'x'", "Cost.memory"]),
        ({"tasks": [{"name": "x", "seconds": "fast"}]}, ["task 'x'", "seconds"]),
        (
            {"tasks": [{"name": "x"}, {"name": "y", "deps": ["x"], "edge_bytes": {"z": 1}}]},
            ["task 'y'", "edge_bytes", "'z'"],
        ),
        (
            {
                "tasks": [
                    {"name": "p", "deps": ["r"]},
                    {"name": "q", "deps": ["p"]},
                    {"name": "r", "deps": ["q"]},
                    {"name": "s"},
                ]
            },
            ["cycle", "p -> q -> r -> p"],
        ),
        ({"tasks": [{"name": "x"}], "contexts": [{"name": "c", "cores": 2}]}, ["'cores'"]),
    ],
)
def test_bad_graph_files_exit_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, names: list[str]
) -> None:
    err = _bad(tmp_path, doc, capsys)
    assert err.startswith("chunkgraph plan: ")
    for name in names:
        assert name in err, err


def test_bad_context_flag_and_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _plan([str(HEFT), "--context", "a:cpu"], capsys)
    assert code == 2 and "name:kind:slots" in err
    code, _, err = _plan([str(HEFT), "--memory", "lots"], capsys)
    assert code == 2 and "--memory" in err
    code, _, err = _plan([str(tmp_path / "missing.json")], capsys)
    assert code == 2 and "cannot read" in err


def test_a_task_that_fits_nowhere_is_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"tasks": [{"name": "huge", "memory": 2**40}]}))
    code, _, err = _plan([str(path), "--context", "c:cpu:1:1:1GiB"], capsys)
    assert code == 1 and "huge" in err


def test_the_gantt_path_is_checked_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing folder or a suffix not drawn: exit 2, and no plan printed first."""
    for path, said in [
        (tmp_path / "nodir" / "g.png", "folder that exists"),
        (tmp_path / "g.jpg", "give one of .png, .pdf, .svg"),
    ]:
        code, out, err = _plan([str(HEFT), "--gantt", str(path)], capsys)
        assert code == 2, err
        assert out == "" and said in err and "Traceback" not in err
        assert not path.exists()
    pdf = tmp_path / "g.pdf"
    code, out, err = _plan([str(HEFT), "--strategy", "heft", "--gantt", str(pdf)], capsys)
    assert code == 0, err
    assert pdf.read_bytes()[:4] == b"%PDF" and f"Gantt chart: {pdf}" in out
