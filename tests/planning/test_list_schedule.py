"""List scheduling (HEFT, PEFT) against the papers' worked examples, and the rules every
schedule keeps: precedence with transfer times, one unit at a time per slot, only
contexts that can run the unit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError, PlanError
from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._contexts import Context, Link
from chunkgraph.planning._list_schedule import descending, heft, list_schedule, peft
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._rank import critical_path, optimistic_cost_table, upward_rank
from chunkgraph.planning._schedule import Schedule
from chunkgraph.planning._simulate import simulate

NO_CAP = np.full(3, math.inf)


def f(*args: object) -> None:
    return None


def paper_problem(
    seconds: Sequence[Sequence[float]], edges: Sequence[tuple[int, int, int]], prefix: str
) -> Problem:
    """Tasks ``{prefix}1..`` with per-processor costs on p1, p2, p3 (three hosts, comm
    time = data size as in the papers), edges ``(producer, consumer, size)`` 0-based."""
    g = Graph()
    inputs: dict[int, list[int]] = {}
    for a, b, _ in edges:
        inputs.setdefault(b, []).append(a)
    refs: list[TaskRef] = []
    for i, row in enumerate(seconds):
        cost = Cost(seconds=dict(zip(("p1", "p2", "p3"), row, strict=True)))
        deps = [refs[d] for d in inputs.get(i, [])]
        refs.append(g.add(f, *deps, name=f"{prefix}{i + 1}", cost=cost))
    for a, b, size in edges:
        g.set_edge_bytes(refs[a], refs[b], size)
    contexts = [Context(name, host=f"host-{name}") for name in ("p1", "p2", "p3")]
    return build_problem(g, contexts, Link(bandwidth=1, latency=0))


# Topcuoglu, Hariri & Wu 2002, Fig. 2: ten tasks on three processors.
#
#     n1 -> n2 n3 n4 n5 n6
#     n2 -> n8 n9    n3 -> n7    n4 -> n8 n9    n5 -> n9    n6 -> n8
#     n7 n8 n9 -> n10
HEFT_SECONDS = [
    [14, 16, 9], [13, 19, 18], [11, 13, 19], [13, 8, 17], [12, 13, 10],
    [13, 16, 9], [7, 15, 11], [5, 11, 14], [18, 12, 20], [21, 7, 16],
]  # fmt: skip
HEFT_EDGES = [
    (0, 1, 18), (0, 2, 12), (0, 3, 9), (0, 4, 11), (0, 5, 14),
    (1, 7, 19), (1, 8, 16), (2, 6, 23), (3, 7, 27), (3, 8, 23),
    (4, 8, 13), (5, 7, 15), (6, 9, 17), (7, 9, 11), (8, 9, 13),
]  # fmt: skip

# Arabnejad & Barbosa 2014, Fig. 1: the PEFT paper's sample DAG (T1..T10).
#
#     T1 -> T2 T3 T4 T5 T6
#     T2 -> T8 T9    T3 -> T7    T4 -> T8 T9    T5 -> T9    T6 -> T8
#     T7 T8 T9 -> T10
PEFT_SECONDS = [
    [22, 21, 36], [22, 18, 18], [32, 27, 43], [7, 10, 4], [29, 27, 35],
    [26, 17, 24], [14, 25, 30], [29, 23, 36], [15, 21, 8], [13, 16, 33],
]  # fmt: skip
PEFT_EDGES = [
    (0, 1, 17), (0, 2, 31), (0, 3, 29), (0, 4, 13), (0, 5, 7),
    (1, 7, 3), (1, 8, 30), (2, 6, 16), (3, 7, 11), (3, 8, 7),
    (4, 8, 57), (5, 7, 5), (6, 9, 9), (7, 9, 42), (8, 9, 7),
]  # fmt: skip


def check_valid(problem: Problem, s: Schedule) -> None:
    """Every unit placed where it can run, for its seconds there, after its inputs
    arrive, and never two at once on one slot."""
    n = len(problem)
    assert (s.context >= 0).all()
    assert np.isfinite(problem.seconds[np.arange(n), s.context]).all()
    assert (s.slot < np.array([problem.contexts[c].slots for c in s.context])).all()
    np.testing.assert_allclose(s.finish - s.start, problem.seconds[np.arange(n), s.context])
    for u in range(n):
        for e in range(problem.dep_ptr[u], problem.dep_ptr[u + 1]):
            d = int(problem.dep_idx[e])
            arrive = s.finish[d] + problem.comm(problem.dep_bytes[e], s.context[d], s.context[u])
            assert s.start[u] >= arrive - 1e-9, (problem.label(d), problem.label(u))
    for c, ctx in enumerate(problem.contexts):
        for slot in range(ctx.slots):
            on = np.flatnonzero((s.context == c) & (s.slot == slot))
            on = on[np.argsort(s.start[on])]
            assert (s.start[on][1:] >= s.finish[on][:-1] - 1e-9).all()


def test_heft_upward_ranks_are_the_papers() -> None:
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    rank = upward_rank(p)
    # Topcuoglu et al. 2002, Table of rank_u values for Fig. 2.
    expected = [108.0, 77.0, 80.0, 80.0, 69.0, 63.333, 42.667, 35.667, 44.333, 14.667]
    np.testing.assert_allclose(rank, expected, atol=1e-3)


def test_heft_schedule_is_the_papers() -> None:
    """Makespan 80 and the paper's placement: n1 n3 n5 n7 on p3, n4 n6 n9 n10 on p2,
    n2 n8 on p1."""
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    s = heft(p, NO_CAP)
    check_valid(p, s)
    assert s.makespan == 80
    assert s.context.tolist() == [2, 0, 2, 1, 2, 1, 2, 0, 1, 1]
    assert s.start.tolist() == [0, 27, 9, 18, 28, 26, 38, 57, 56, 73]


def test_heft_critical_path_is_the_papers() -> None:
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    assert [p.label(int(u)) for u in critical_path(p)] == ["n1", "n2", "n9", "n10"]


def test_peft_optimistic_cost_table_is_the_papers() -> None:
    p = paper_problem(PEFT_SECONDS, PEFT_EDGES, "T")
    # Arabnejad & Barbosa 2014, Table 2 (OCT of the sample DAG).
    expected = [
        [64, 68, 86], [42, 39, 42], [27, 41, 43], [42, 39, 50], [28, 37, 28],
        [42, 39, 44], [13, 16, 22], [13, 16, 33], [13, 16, 20], [0, 0, 0],
    ]  # fmt: skip
    np.testing.assert_array_equal(optimistic_cost_table(p), expected)


def test_peft_beats_heft_on_the_peft_papers_dag() -> None:
    """The paper: PEFT 122, HEFT 133 on its sample DAG."""
    p = paper_problem(PEFT_SECONDS, PEFT_EDGES, "T")
    s = peft(p, NO_CAP)
    check_valid(p, s)
    assert s.makespan == 122
    assert s.context.tolist() == [0, 0, 0, 0, 2, 1, 0, 1, 2, 1]
    h = heft(p, NO_CAP)
    check_valid(p, h)
    assert h.makespan == 133


def test_a_later_unit_fills_an_idle_hole() -> None:
    """Insertion: b waits 5 s for its input on y, and c (taken after b) runs in the hole.

    x:  [a]
    y:  [c c]  . . . [b]        a -> b moves 5 bytes at 1 byte/s
        0   2        6  7
    """
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds={"x": 1}, output_bytes=5))
    g.add(f, a, name="b", cost=Cost(seconds={"y": 1}))
    g.add(f, name="c", cost=Cost(seconds={"y": 2}))
    p = build_problem(g, [Context("x", host="hx"), Context("y", host="hy")], Link(bandwidth=1))
    s = list_schedule(p, [0, 1, 2], memory_cap=np.full(2, math.inf))
    assert s.start.tolist() == [0, 6, 0]
    assert s.makespan == 7


def test_ties_go_to_the_lower_context_then_the_lower_slot() -> None:
    """Two independent equal tasks on two equal contexts of two slots each."""
    g = Graph()
    g.add(f, name="x", cost=Cost(seconds=1))
    g.add(f, name="y", cost=Cost(seconds=1))
    p = build_problem(g, [Context("a", slots=2), Context("b", slots=2)])
    s = heft(p, np.full(2, math.inf))
    assert s.context.tolist() == [0, 0]
    assert s.slot.tolist() == [0, 1]
    assert s.start.tolist() == [0, 0]


def test_fixed_context_and_subgraph_are_kept() -> None:
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    fixed = np.full(len(p), -1, np.int64)
    fixed[[0, 9]] = 0  # n1 and n10 on p1; the rest free
    groups = np.arange(len(p), dtype=np.int64) // 2
    s = list_schedule(
        p, descending(upward_rank(p)), memory_cap=NO_CAP, fixed_context=fixed, subgraph=groups
    )
    check_valid(p, s)
    assert s.context[0] == 0 and s.context[9] == 0
    assert s.subgraph.tolist() == groups.tolist()
    assert s.subgraph is not groups


def test_priority_need_not_be_topological() -> None:
    """Consumers ranked first still wait for their inputs (the ready list decides)."""
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    s = list_schedule(p, np.arange(len(p))[::-1], memory_cap=NO_CAP)
    check_valid(p, s)


@st.composite
def mixed_problems(draw: st.DrawFn) -> Problem:
    """Random DAGs whose tasks run on the CPU only, the GPU only, or both."""
    n = draw(st.integers(1, 25))
    g = Graph()
    kinds = [{"cpu": 4.0}, {"gpu": 1.0}, {"cpu": 3.0, "gpu": 0.5}, {"gpu0": 2.0, "cpu": 6.0}]
    for i in range(n):
        picks = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else []
        seconds = draw(st.sampled_from(kinds))
        size = draw(st.sampled_from([0, 1_000, 10**9]))
        g.add(
            f,
            *[TaskRef(g, j) for j in picks],
            name=f"t{(i * 7) % n}-{i}",
            cost=Cost(seconds=seconds, output_bytes=size),
        )
    contexts = [
        Context("numa0", "cpu", slots=2),
        Context("gpu0", "gpu"),
        Context("gpu1", "gpu", host="other"),
    ]
    return build_problem(g, contexts)


@settings(max_examples=40, deadline=None)
@given(mixed_problems(), st.sampled_from([heft, peft]))
def test_never_placed_where_it_cannot_run(
    p: Problem, strategy: Callable[[Problem, np.ndarray], Schedule]
) -> None:
    s = strategy(p, np.full(3, math.inf))
    check_valid(p, s)
    # Without budgets nothing waits but for its slot and its inputs: the replay agrees.
    assert simulate(p, s).makespan == pytest.approx(s.makespan)


def test_unknown_choice_is_refused() -> None:
    p = paper_problem(HEFT_SECONDS, HEFT_EDGES, "n")
    with pytest.raises(ConfigError, match="choose"):
        list_schedule(p, np.arange(len(p)), memory_cap=NO_CAP, choose="best")  # type: ignore[arg-type]


def test_fixed_to_a_context_that_cannot_run_the_unit_is_refused() -> None:
    g = Graph()
    g.add(f, name="kernel", cost=Cost(seconds={"gpu": 1.0}))
    p = build_problem(g, [Context("numa0"), Context("gpu0", "gpu")])
    with pytest.raises(PlanError, match=r"'kernel' is fixed to context 'numa0'.*\['gpu0'\]"):
        list_schedule(p, [0], memory_cap=np.full(2, math.inf), fixed_context=np.array([0]))
    with pytest.raises(PlanError, match="is fixed to context 'numa0'"):
        list_schedule(p, [0], memory_cap=np.full(2, 1e9), fixed_context=np.array([0]))
