"""The rich progress bar, as an event subscriber and through run(progress=True)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from tests.execute._tasks import fail, mix

from chunkgraph.execute import ProgressBar, run
from chunkgraph.graph import Graph


def small_graph(n: int) -> Graph:
    g = Graph()
    parts = [g.add(mix, i) for i in range(n)]
    g.add(mix, 0, *parts)
    return g


def test_bar_counts_every_finished_task() -> None:
    out = io.StringIO()
    bar = ProgressBar("blocks", console=Console(file=out, width=120))
    run(small_graph(30), subscribers=[bar])
    assert bar.done == 31 and bar.failed == 0
    text = out.getvalue()
    assert "blocks" in text and "31/31" in text and "tasks/s" in text


def test_bar_reports_failures() -> None:
    g = Graph()
    g.add(fail, "no")
    bar = ProgressBar(console=Console(file=io.StringIO(), width=120))
    with pytest.raises(ExceptionGroup):
        run(g, subscribers=[bar], executor="sync")
    assert bar.failed == 1 and bar.done == 0


def test_run_with_progress_draws_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(small_graph(5), progress=True)  # a non-empty dict of sink results
    captured = capsys.readouterr()
    assert "6/6" in captured.err and captured.out == ""


def test_closing_twice_prints_nothing_more() -> None:
    import io

    from rich.console import Console

    from chunkgraph.execute import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(console=Console(file=out, width=80))
    bar.close()
    after_first = out.getvalue()
    bar.close()
    assert out.getvalue() == after_first
