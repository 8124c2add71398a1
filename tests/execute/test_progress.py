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


def test_a_batched_flows_rate_and_eta_are_right_from_its_first_batch() -> None:
    """A flow on a Dask cluster reports its tasks a batch at a time, each at its time on
    the worker (spread over the batch's seconds, ``_batches._emit_batch``), all arriving
    in the same microseconds. After the first batch (25 tasks run over the 2 s since the
    run started) the bar says 12 tasks/s and 6 s left of 100 tasks, not 25 tasks over
    the microseconds their events took; before any task is done, that it does not know."""
    import time

    from chunkgraph.execute import EventKind
    from chunkgraph.execute._events import EventQueue
    from chunkgraph.flow.run._batch_run import BatchStats
    from chunkgraph.flow.run._batches import _emit_batch

    out = io.StringIO()
    bar = ProgressBar(console=Console(file=out, width=120))
    events = EventQueue([bar])
    events.emit(EventKind.RUN_STARTED, total=100, at=time.perf_counter() - 2.0)
    events.drain()
    assert bar.rate is None and bar.seconds_left is None
    _emit_batch(events, BatchStats(batch="b-1", done=25, ran=25, seconds=2.0, worker="w"), 0)
    assert bar.rate == pytest.approx(12.5, rel=0.05)
    assert bar.seconds_left == pytest.approx(6.0, rel=0.05)
    bar.close()
    text = out.getvalue()
    assert "25/100" in text and "12 tasks/s" in text and "0:00:06" in text, text
