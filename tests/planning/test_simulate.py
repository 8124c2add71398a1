"""simulate(): the replay of a hand-made Schedule, every number worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import PlanError
from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._contexts import Context, Link
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._schedule import Schedule
from chunkgraph.planning._simulate import lower_bound, simulate


def f(*args: object) -> None:
    return None


def schedule(
    context: Sequence[int],
    slot: Sequence[int],
    start: Sequence[float],
    subgraph: Sequence[int] | None = None,
) -> Schedule:
    """A Schedule whose planned finishes are nonsense: the replay must not read them."""
    n = len(context)
    return Schedule(
        np.array(context, np.int64),
        np.array(slot, np.int64),
        np.array(start, np.float64),
        np.full(n, -1.0),
        np.array(subgraph if subgraph is not None else range(n), np.int64),
    )


def test_chain_replays_back_to_back_whatever_the_planned_times() -> None:
    """
    kiwi(2) -> fig(3) -> lime(1)      one context, one slot
    """
    g = Graph()
    kiwi = g.add(f, name="kiwi", cost=Cost(seconds=2))
    fig = g.add(f, kiwi, name="fig", cost=Cost(seconds=3))
    g.add(f, fig, name="lime", cost=Cost(seconds=1))
    p = build_problem(g, [Context("cpu")])
    sim = simulate(p, schedule([0, 0, 0], [0, 0, 0], [0.0, 10.0, 20.0]), None)
    assert sim.start.tolist() == [0.0, 2.0, 5.0]
    assert sim.finish.tolist() == [2.0, 5.0, 6.0]
    assert sim.makespan == 6.0
    assert sim.busy.tolist() == [6.0]
    assert sim.bytes_moved == 0.0
    assert sim.utilisation.tolist() == [1.0]


def diamond() -> Problem:
    """
          ┌> bee(2, X) ─50B─┐
    ant(1, X)               ├> dog(1, X)
          └> cat(2, Y) ─200B┘
    ant sends 100 B; X <-> Y: 0.5 s + bytes / 100 B/s
    """
    g = Graph()
    ant = g.add(f, name="ant", cost=Cost(seconds=1, output_bytes=100))
    bee = g.add(f, ant, name="bee", cost=Cost(seconds=2, output_bytes=50))
    cat = g.add(f, ant, name="cat", cost=Cost(seconds=2, output_bytes=200))
    g.add(f, bee, cat, name="dog", cost=Cost(seconds=1))
    link = {("X", "Y"): Link(bandwidth=100, latency=0.5)}
    return build_problem(g, [Context("X"), Context("Y")], link)


def test_diamond_across_two_contexts_waits_for_the_link() -> None:
    p = diamond()
    sim = simulate(p, schedule([0, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 3]), None)
    # cat: ant's 1 s + 0.5 + 100/100 = 2.5; dog: cat's 4.5 + 0.5 + 200/100 = 7
    assert sim.start.tolist() == [0.0, 1.0, 2.5, 7.0]
    assert sim.makespan == 8.0
    assert sim.bytes_moved == 300.0  # ant -> cat and cat -> dog cross; bee -> dog does not
    assert sim.busy.tolist() == [4.0, 2.0]
    assert sim.utilisation.tolist() == [0.5, 0.25]


def test_all_on_one_context_moves_nothing() -> None:
    p = diamond()
    sim = simulate(p, schedule([0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 3, 5]), None)
    assert sim.makespan == 6.0
    assert sim.bytes_moved == 0.0


def test_slot_contention_runs_each_slot_in_planned_order() -> None:
    """Three independent 2 s tasks on two slots; slot 0 holds two of them."""
    g = Graph()
    for name in ("yew", "oak", "elm"):
        g.add(f, name=name, cost=Cost(seconds=2))
    p = build_problem(g, [Context("cpu", slots=2)])
    # yew is planned after oak on slot 0, so oak runs first
    sim = simulate(p, schedule([0, 0, 0], [0, 0, 1], [5.0, 0.0, 0.0]), None)
    assert sim.start.tolist() == [2.0, 0.0, 0.0]
    assert sim.makespan == 4.0
    assert sim.utilisation.tolist() == [0.75]
    # equal planned starts: the lower unit id first
    sim = simulate(p, schedule([0, 0, 0], [0, 0, 1], [1.0, 1.0, 0.0]), None)
    assert sim.start.tolist() == [0.0, 2.0, 0.0]


def fan_out(*, keep_producer: bool) -> Problem:
    """
    pea(1 s, mem 10, out 100) ─┬> rye(2 s, mem 20, out 5)    on A
                               └> soy(1 s, mem 30, out 7)    on B (100 B copied: 1 s)
    tea(1 s, mem 50)                                         on A after rye
    """
    g = Graph()
    pea = g.add(f, name="pea", cost=Cost(seconds=1, memory=10, output_bytes=100))
    rye = g.add(f, pea, name="rye", cost=Cost(seconds=2, memory=20, output_bytes=5))
    soy = g.add(f, pea, name="soy", cost=Cost(seconds=1, memory=30, output_bytes=7))
    tea = g.add(f, name="tea", cost=Cost(seconds=1, memory=50))
    targets = [pea, rye, soy, tea] if keep_producer else [rye, soy, tea]
    ids = np.array([g.task_id(t) for t in targets], np.int64)
    link = {("A", "B"): Link(bandwidth=100)}
    return build_problem(g, [Context("A"), Context("B")], link, targets=ids)


FAN_OUT = schedule([0, 0, 1, 0], [0, 0, 0, 0], [0.0, 1.0, 2.0, 3.0])


def test_peak_memory_with_a_held_output_and_a_copy() -> None:
    p = fan_out(keep_producer=True)
    sim = simulate(p, FAN_OUT, None)
    assert sim.start.tolist() == [0.0, 1.0, 2.0, 3.0]
    # A: [0,1) pea 10; [1,3) pea's result 100 + rye 20 = 120;
    #    [3,4) pea's result (kept) 100 + rye's result 5 + tea 50 = 155
    # B: [2,3) soy 30 + the copy of pea's result 100 = 130; then soy's result 7
    assert sim.peak_memory.tolist() == [155.0, 130.0]
    assert sim.bytes_moved == 100.0


def test_an_output_is_freed_when_its_last_consumer_finishes() -> None:
    p = fan_out(keep_producer=False)
    sim = simulate(p, FAN_OUT, None)
    # pea's result goes at 3 s, when rye and soy are done: A peaks at 120 during rye
    assert sim.peak_memory.tolist() == [120.0, 130.0]
    # simulate's own targets hold a result to the end as well
    held = simulate(p, FAN_OUT, None, targets=[0])
    assert held.peak_memory.tolist() == [155.0, 130.0]


def test_releases_come_before_acquisitions_at_one_time() -> None:
    """
    ash(0 s, out 100) -> bay(1 s)      then fir (mem 60) on the same slot at 1 s
    ash's result is freed as bay finishes, before fir takes its memory.
    """
    g = Graph()
    ash = g.add(f, name="ash", cost=Cost(seconds=0, output_bytes=100))
    g.add(f, ash, name="bay", cost=Cost(seconds=1))
    g.add(f, name="fir", cost=Cost(seconds=1, memory=60))
    p = build_problem(g, [Context("cpu")])
    sim = simulate(p, schedule([0, 0, 0], [0, 0, 0], [0.0, 0.0, 1.0]), None)
    assert sim.start.tolist() == [0.0, 0.0, 1.0]
    assert sim.peak_memory.tolist() == [100.0]


def test_cap_violations_name_the_contexts_over_budget() -> None:
    p = fan_out(keep_producer=True)
    assert simulate(p, FAN_OUT, np.array([150.0, 200.0])).cap_violations == ("A",)
    assert simulate(p, FAN_OUT, np.array([100.0, 100.0])).cap_violations == ("A", "B")
    assert simulate(p, FAN_OUT, np.array([155.0, 130.0])).cap_violations == ()  # equal fits
    assert simulate(p, FAN_OUT, None).cap_violations == ()
    with pytest.raises(PlanError, match="one budget per context"):
        simulate(p, FAN_OUT, np.array([1.0]))


def test_deadlocking_slot_orders_raise() -> None:
    """
    ash -> bay, cod -> dab;  slot 0 runs bay then cod, slot 1 runs dab then ash:
    bay waits for ash, behind dab, which waits for cod, behind bay.
    """
    g = Graph()
    one = Cost(seconds=1)
    ash = g.add(f, name="ash", cost=one)
    g.add(f, ash, name="bay", cost=one)
    cod = g.add(f, name="cod", cost=one)
    g.add(f, cod, name="dab", cost=one)
    p = build_problem(g, [Context("cpu", slots=2)])
    with pytest.raises(PlanError, match=r"deadlock.*'bay'.*'ash'"):
        simulate(p, schedule([0, 0, 0, 0], [1, 0, 0, 1], [1.0, 0.0, 1.0, 0.0]), None)
    # the same placement in a consistent order replays
    sim = simulate(p, schedule([0, 0, 0, 0], [1, 0, 0, 1], [0.0, 2.0, 0.0, 2.0]), None)
    assert sim.makespan == 2.0


def test_a_unit_placed_where_it_cannot_run_is_refused() -> None:
    g = Graph()
    g.add(f, name="kernel", cost=Cost(seconds={"gpu": 1}))
    p = build_problem(g, [Context("cpu"), Context("gpu0", kind="gpu")])
    with pytest.raises(PlanError, match=r"'kernel'.*cannot run it"):
        simulate(p, schedule([0], [0], [0.0]), None)
    with pytest.raises(PlanError, match="slot 1 of 'gpu0'"):
        simulate(p, schedule([1], [1], [0.0]), None)
    assert simulate(p, schedule([1], [0], [0.0]), None).makespan == 1.0


def test_lower_bound_is_the_longer_of_the_path_and_the_work_per_slot() -> None:
    """
    ant(1) -> {bee(2), cat(2)} -> dog(1): path 4, work 6
    """
    p = diamond()  # two contexts of one slot: work 6 / 2 = 3 < path 4
    assert lower_bound(p) == 4.0
    g = p.graph
    assert lower_bound(build_problem(g, [Context("cpu")])) == 6.0
    assert lower_bound(build_problem(g, [Context("cpu", slots=4)])) == 4.0
    # each unit at its fastest context: twice as fast halves the path
    assert lower_bound(build_problem(g, [Context("a"), Context("b", speed=2.0)])) == 2.0
    sim = simulate(p, schedule([0, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 3]), None)
    assert sim.lower_bound == 4.0


def test_lower_bound_uses_the_best_context_of_each_task() -> None:
    g = Graph()
    a = g.add(f, name="prep", cost=Cost(seconds=3))
    g.add(f, a, name="infer", cost=Cost(seconds={"cpu": 14, "gpu": 2}))
    p = build_problem(g, [Context("cpu", slots=8), Context("gpu0", kind="gpu")])
    assert lower_bound(p) == 5.0


def test_an_empty_problem() -> None:
    p = build_problem(Graph(), [Context("cpu")])
    sim = simulate(p, Schedule.empty(0), None)
    assert sim.makespan == 0.0 and sim.lower_bound == 0.0
    assert sim.peak_memory.tolist() == [0.0] and sim.utilisation.tolist() == [0.0]


@st.composite
def placed_dags(draw: st.DrawFn) -> tuple[Problem, Schedule]:
    """A random DAG on two contexts, units dealt to slots in id order (a topological one)."""
    n = draw(st.integers(1, 40))
    g = Graph()
    for i in range(n):
        picks = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else []
        cost = Cost(
            seconds=draw(st.sampled_from([0.0, 0.5, 2.0])),
            memory=draw(st.integers(0, 50)),
            output_bytes=draw(st.integers(0, 50)),
        )
        g.add(f, *[TaskRef(g, q) for q in sorted(set(picks))], cost=cost)
    contexts = [Context("P", slots=2), Context("Q", slots=1)]
    p = build_problem(g, contexts, {("P", "Q"): Link(bandwidth=10, latency=0.1)})
    rows = [(0, 0), (0, 1), (1, 0)]
    picks = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    s = schedule([rows[r][0] for r in picks], [rows[r][1] for r in picks], list(range(n)))
    return p, s


@settings(max_examples=60, deadline=None)
@given(placed_dags())
def test_replay_respects_dependencies_slots_and_bounds(case: tuple[Problem, Schedule]) -> None:
    p, s = case
    sim = simulate(p, s, None)
    n = len(p)
    for u in range(n):
        c = int(s.context[u])
        assert math.isclose(sim.finish[u] - sim.start[u], p.seconds[u, c])
        for j in range(p.dep_ptr[u], p.dep_ptr[u + 1]):
            d = int(p.dep_idx[j])
            ready = sim.finish[d] + p.comm(p.dep_bytes[j], int(s.context[d]), c)
            assert sim.start[u] >= ready - 1e-12
    for u in range(n):
        for v in range(u + 1, n):  # one slot never runs two units at once
            if (s.context[u], s.slot[u]) == (s.context[v], s.slot[v]):
                assert sim.start[v] >= sim.finish[u] - 1e-12
    assert sim.makespan >= sim.lower_bound - 1e-9
    assert (sim.peak_memory >= 0).all()
    # no context ever holds less than its largest running unit
    for c in range(2):
        on = s.context == c
        if on.any():
            assert sim.peak_memory[c] >= p.memory[on & (sim.finish > sim.start)].max(initial=0)
