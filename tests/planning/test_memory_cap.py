"""List scheduling under memory budgets: breadth first while the budget allows, depth
first where it binds, PlanError with the numbers where nothing fits.

Live memory is recomputed here from the rules (``_memory``'s module doc), not with
the scheduler's own profile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import PlanError
from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._contexts import Context
from chunkgraph.planning._list_schedule import heft, peft
from chunkgraph.planning._memory import MemoryProfile
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._schedule import Schedule


def f(*args: object) -> None:
    return None


def live_peaks(p: Problem, s: Schedule) -> list[float]:
    """Per context, the largest live bytes at any time, by the rules:
    runs on [start, finish); outputs from finish to the last consumer's finish (inf
    when kept or unconsumed); copies of cross-context inputs on the consumer's context
    while it runs."""
    n = len(p)
    intervals: list[tuple[int, float, float, float]] = []  # (context, from, to, bytes)
    for u in range(n):
        c = int(s.context[u])
        intervals.append((c, s.start[u], s.finish[u], float(p.memory[u])))
        consumers = p.out_idx[p.out_ptr[u] : p.out_ptr[u + 1]]
        end = math.inf if p.keep[u] or not len(consumers) else float(s.finish[consumers].max())
        intervals.append((c, s.finish[u], end, float(p.output_bytes[u])))
        for e in range(p.dep_ptr[u], p.dep_ptr[u + 1]):
            if s.context[p.dep_idx[e]] != c:
                intervals.append((c, s.start[u], s.finish[u], float(p.dep_bytes[e])))
    times = sorted({t for _, a, b, _ in intervals for t in (a, b) if math.isfinite(t)})
    peaks = [0.0] * len(p.contexts)
    for tau in times:
        for c in range(len(p.contexts)):
            live = sum(b for cc, lo, hi, b in intervals if cc == c and lo <= tau < hi)
            peaks[c] = max(peaks[c], live)
    return peaks


def branches(count: int, result_bytes: int) -> Graph:
    """``count`` independent ``load-i -> reduce-i`` pairs; each load's result is large.

    load-0   load-1  ...  load-15
      │        │            │
    reduce-0 reduce-1 ... reduce-15
    """
    g = Graph()
    for i in range(count):
        load = g.add(
            f, name=f"load-{i}", cost=Cost(seconds=1, memory=10, output_bytes=result_bytes)
        )
        g.add(f, load, name=f"reduce-{i}", cost=Cost(seconds=1, memory=10))
    return g


@pytest.mark.parametrize("strategy", [heft, peft])
def test_wide_graph_holds_at_most_two_results(strategy: object) -> None:
    """Room for two held results (and the runs beside them): the planner finishes
    branches before it opens new ones, and the plan is still complete."""
    p = build_problem(branches(16, 100), [Context("numa0", slots=4)])
    assert callable(strategy)
    free: Schedule = strategy(p, np.array([math.inf]))
    assert live_peaks(p, free)[0] >= 16 * 100  # breadth first: every load's result at once
    capped: Schedule = strategy(p, np.array([250.0]))
    assert live_peaks(p, capped)[0] <= 250
    assert (capped.context == 0).all()
    assert math.isfinite(capped.makespan) and capped.makespan > free.makespan


def test_a_chain_of_large_results_fits_in_little_more_than_one() -> None:
    """a -> b -> c, each result 100 bytes, budget 150: b's result may take the place of
    a's at the very moment b finishes (a's ends there, half-open)."""
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds=1, output_bytes=100))
    b = g.add(f, a, name="b", cost=Cost(seconds=1, output_bytes=100))
    g.add(f, b, name="c", cost=Cost(seconds=1, output_bytes=100))
    p = build_problem(g, [Context("numa0")])
    s = heft(p, np.array([150.0]))
    assert s.makespan == 3
    assert live_peaks(p, s)[0] == 100


def test_a_unit_waits_until_memory_is_free() -> None:
    """Two slots but room for one of the two runs: the short one starts when the long
    one ends, although a slot is idle before."""
    g = Graph()
    g.add(f, name="long", cost=Cost(seconds=10, memory=80))
    g.add(f, name="short", cost=Cost(seconds=1, memory=80))
    p = build_problem(g, [Context("numa0", slots=2)])
    s = heft(p, np.array([100.0]))
    assert s.start.tolist() == [0, 10]
    assert live_peaks(p, s)[0] == 80


def test_a_task_larger_than_every_budget_is_named() -> None:
    g = Graph()
    g.add(f, name="small", cost=Cost(seconds=1, memory=10))
    g.add(f, name="huge-kernel", cost=Cost(seconds=1, memory=1000))
    p = build_problem(g, [Context("numa0"), Context("numa1")])
    with pytest.raises(PlanError, match=r"'huge-kernel'.*'numa0'.*budget of 500 B") as info:
        heft(p, np.array([500.0, 400.0]))
    assert "larger memory budget" in str(info.value)


def test_a_reduction_whose_inputs_cannot_all_be_held_is_named() -> None:
    """Four 100-byte parts, one consumer of all four, a budget of 250.

    part-0  part-1  part-2  part-3
        └───────┴───┬───┴───────┘
                  total
    """
    g = Graph()
    parts = [g.add(f, name=f"part-{i}", cost=Cost(seconds=1, output_bytes=100)) for i in range(4)]
    g.add(f, *parts, name="total", cost=Cost(seconds=1))
    p = build_problem(g, [Context("numa0", slots=2)])
    with pytest.raises(PlanError, match=r"'part-2'.*'numa0'.*200 B of it held") as info:
        heft(p, np.array([250.0]))
    assert "fewer results held at once" in str(info.value)


@st.composite
def budgeted(draw: st.DrawFn) -> tuple[Problem, np.ndarray]:
    """Random DAGs on two contexts with random sizes and budgets."""
    n = draw(st.integers(1, 18))
    g = Graph()
    for i in range(n):
        picks = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else []
        cost = Cost(
            seconds=draw(st.sampled_from([0.5, 1.0, 2.0])),
            memory=draw(st.sampled_from([0, 10, 40])),
            output_bytes=draw(st.sampled_from([0, 20, 50])),
        )
        g.add(f, *[TaskRef(g, j) for j in picks], name=f"t{i}", cost=cost)
    contexts = [Context("numa0", slots=2), Context("numa1", slots=2)]
    caps = np.array([draw(st.sampled_from([60.0, 150.0, 400.0])) for _ in contexts])
    return build_problem(g, contexts), caps


@settings(max_examples=60, deadline=None)
@given(budgeted(), st.sampled_from([heft, peft]))
def test_every_context_stays_within_its_budget(
    case: tuple[Problem, np.ndarray], strategy: object
) -> None:
    p, caps = case
    assert callable(strategy)
    try:
        s: Schedule = strategy(p, caps)
    except PlanError:
        return
    assert (s.context >= 0).all()
    for c, peak in enumerate(live_peaks(p, s)):
        assert peak <= caps[c]


def test_profile_search_moves_past_a_busy_window() -> None:
    p = MemoryProfile(cap=100)
    p.add(2, 6, 70)
    assert p.earliest_fit(0, 3, during=40, after=0, gap=lambda t: t) == 6
    assert p.earliest_fit(0, 2, during=40, after=0, gap=lambda t: t) == 0
    assert p.earliest_fit(0, 1, during=40, after=0, gap=lambda t: max(t, 1.5)) == 6
    p.add(7, math.inf, 90)
    assert p.earliest_fit(0, 1, during=0, after=20, gap=lambda t: t) is None
    assert p.earliest_fit(0, 1, during=0, after=20, releases=[(9, 90)], gap=lambda t: t) == 8
