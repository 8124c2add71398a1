"""The Scheduler state machine, driven by hand: readiness, release, retries, stopping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph.execute import Scheduler, TaskState
from chunkgraph.graph import Graph, TaskRef
from chunkgraph.planning import order


def f(*args: object) -> None:
    return None


def diamond() -> tuple[Graph, list[TaskRef]]:
    """
        a
       / \\
      b   c
       \\ /
        d
    """
    g = Graph()
    a = g.add(f, name="a")
    b = g.add(f, a, name="b")
    c = g.add(f, a, name="c")
    d = g.add(f, b, c, name="d")
    return g, [a, b, c, d]


def test_results_are_released_after_the_last_consumer() -> None:
    g, (a, b, c, d) = diamond()
    s = Scheduler(g, [d.id], order(g))
    assert s.take(10) == [a.id]
    s.finish(a.id, "A")
    assert sorted(s.take(10)) == [b.id, c.id]
    s.finish(b.id, "B")
    assert s.results[a.id] == "A"  # c still needs it
    s.finish(c.id, "C")
    assert s.results[a.id] is None
    assert s.take(10) == [d.id]
    s.finish(d.id, "D")
    assert s.results[b.id] is None and s.results[c.id] is None
    assert s.results[d.id] == "D" and s.finished


def test_targets_are_kept_even_when_consumed() -> None:
    g, (a, _, _, d) = diamond()
    s = Scheduler(g, [a.id, d.id], order(g))
    while batch := s.take(10):
        for t in batch:
            s.finish(t, t * 10)
    assert s.results[a.id] == 0 and s.results[d.id] == 30


def test_unneeded_tasks_are_skipped() -> None:
    g, (_, b, c, _) = diamond()
    s = Scheduler(g, [b.id], order(g))
    assert s.total == 2 and s.state[c.id] == TaskState.SKIPPED
    s.finish(s.take(10)[0], 1)
    assert s.take(10) == [b.id]  # c is not offered even though a is done


def test_retry_returns_the_task_to_ready_until_tries_run_out() -> None:
    g, (a, *_rest) = diamond()
    s = Scheduler(g, [3], order(g), retries=1)
    assert s.take(1) == [a.id]
    assert s.fail(a.id, RuntimeError("once")) is True
    assert s.attempt(a.id) == 2 and s.state[a.id] == TaskState.READY
    assert s.take(1) == [a.id]
    assert s.fail(a.id, RuntimeError("twice")) is False
    assert s.state[a.id] == TaskState.FAILED and s.attempts[a.id] == 2
    assert s.stopping and s.finished and s.take(5) == []
    assert sorted(s.cancelled()) == [1, 2, 3]


def test_stopping_waits_for_running_tasks() -> None:
    g = Graph()
    x, y = g.add(f), g.add(f)
    s = Scheduler(g, [x.id, y.id], order(g))
    assert sorted(s.take(2)) == [0, 1]
    s.fail(0, ValueError())
    assert not s.finished  # task 1 is still running
    s.finish(1, "late")
    assert s.finished and s.results[1] == "late"


def test_put_back_restores_ready_tasks_in_priority_order() -> None:
    g = Graph()
    for _ in range(5):
        g.add(f)
    s = Scheduler(g, list(range(5)), np.array([4, 3, 2, 1, 0]))
    taken = s.take(3)
    assert taken == [4, 3, 2]
    s.put_back(taken[1:])
    assert s.running == 1 and s.take(10) == [3, 2, 1, 0]


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_any_completion_order_runs_each_needed_task_once(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 30))
    g = Graph()
    for i in range(n):
        picks = data.draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else []
        g.add(f, *[TaskRef(g, p) for p in picks])
    targets = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True))
    s = Scheduler(g, targets, order(g))
    seen: list[int] = []
    running: list[int] = []
    while not s.finished:
        running += s.take(data.draw(st.integers(1, 4)))
        assert running, "nothing ready and nothing running, yet not finished"
        t = running.pop(data.draw(st.integers(0, len(running) - 1)))
        ptr, idx = g.dependencies()
        assert all(s.state[d] == TaskState.DONE for d in idx[ptr[t] : ptr[t + 1]])
        seen.append(t)
        s.finish(t, t)
    assert len(seen) == len(set(seen)) == s.total
    assert all(s.results[t] == t for t in targets)
    kept = {t for t in range(n) if s.results[t] is not None}
    assert kept <= set(targets)


@pytest.mark.parametrize("k", [1, 3, 100])
def test_take_respects_priority(k: int) -> None:
    g = Graph()
    for _ in range(10):
        g.add(f)
    priority = np.array([9, 0, 8, 1, 7, 2, 6, 3, 5, 4])
    s = Scheduler(g, list(range(10)), priority)
    out: list[int] = []
    while batch := s.take(k):
        out += batch
    assert out == np.argsort(priority).tolist()
