"""Ranks of a Problem (upward, downward, critical path, optimistic cost table) on small
hand-made DAGs whose values are worked out in the docstrings."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._contexts import Context, Link
from chunkgraph.planning._list_schedule import heft
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._rank import (
    critical_path,
    downward_rank,
    optimistic_cost_table,
    unit_order,
    upward_rank,
)


def f(*args: object) -> None:
    return None


def two_hosts(g: Graph) -> Problem:
    """Contexts x and y on two hosts, link latency 1 s and 2 bytes/s: c̄(b) = 1 + b / 2."""
    contexts = [Context("x", host="hx"), Context("y", host="hy")]
    return build_problem(g, contexts, Link(bandwidth=2, latency=1))


def diamond() -> Graph:
    """One context, no transfers:

        a (1)
       ╱     ╲
    b (2)   c (3)
       ╲     ╱
        d (4)
    """
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds=1))
    b = g.add(f, a, name="b", cost=Cost(seconds=2))
    c = g.add(f, a, name="c", cost=Cost(seconds=3))
    g.add(f, b, c, name="d", cost=Cost(seconds=4))
    return g


def test_ranks_of_a_diamond() -> None:
    """rank_d: a 0, b 1, c 1, d max(1 + 2, 1 + 3) = 4; rank_u: d 4, b 6, c 7, a 8."""
    p = build_problem(diamond(), [Context("cpu")])
    assert downward_rank(p).tolist() == [0, 1, 1, 4]
    assert upward_rank(p).tolist() == [8, 6, 7, 4]
    assert critical_path(p).tolist() == [0, 2, 3]


def test_mean_seconds_skip_contexts_that_cannot_run_the_unit() -> None:
    """a runs on x (2 s) or y (4 s): w̄ 3. b runs on x only: w̄ 6, not (6 + inf) / 2.
    Edge a -> b of 10 bytes: c̄ = 1 + 10 / 2 = 6.

        rank_u(b) = 6                rank_u(a) = 3 + 6 + 6 = 15
        rank_d(a) = 0                rank_d(b) = 0 + 3 + 6 = 9
    """
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds={"x": 2, "y": 4}, output_bytes=10))
    g.add(f, a, name="b", cost=Cost(seconds={"x": 6}))
    p = two_hosts(g)
    assert upward_rank(p).tolist() == [15, 6]
    assert downward_rank(p).tolist() == [0, 9]


def test_critical_path_follows_the_transfer() -> None:
    """b is the longer task, but c's input is large: a -> c costs c̄ = 1 + 20 / 2 = 11.

               a (1)
        2 B  ╱     ╲  20 B
          b (5)    c (2)
             ╲     ╱
              d (1)

    Through b: 1 + 2 + 5 + 1 + 1 = 10; through c: 1 + 11 + 2 + 1 + 1 = 16.
    """
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds={"x": 1, "y": 1}))
    b = g.add(f, a, name="b", cost=Cost(seconds={"x": 5, "y": 5}))
    c = g.add(f, a, name="c", cost=Cost(seconds={"x": 2, "y": 2}))
    d = g.add(f, b, c, name="d", cost=Cost(seconds={"x": 1, "y": 1}))
    g.set_edge_bytes(a, b, 2)
    g.set_edge_bytes(a, c, 20)
    for producer in (b, c):
        g.set_edge_bytes(producer, d, 0)
    p = two_hosts(g)
    assert [p.label(int(u)) for u in critical_path(p)] == ["a", "c", "d"]
    assert upward_rank(p)[0] == 16


def test_optimistic_cost_of_a_chain() -> None:
    """a -> b with b taking 1 s on x and 5 s on y, an edge of c̄ = 1 + 4 / 2 = 3:

        OCT(a, x) = min(1 (b on x, no move), 5 + 3) = 1
        OCT(a, y) = min(1 + 3, 5 (b on y, no move)) = 4
    and exits have 0.
    """
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds={"x": 1, "y": 1}, output_bytes=4))
    g.add(f, a, name="b", cost=Cost(seconds={"x": 1, "y": 5}))
    p = two_hosts(g)
    assert optimistic_cost_table(p).tolist() == [[1, 4], [0, 0]]


def test_optimistic_cost_ignores_contexts_that_cannot_run_the_consumer() -> None:
    """b runs on y only (5 s): from a on x it must move (c̄ 3), from y it need not."""
    g = Graph()
    a = g.add(f, name="a", cost=Cost(seconds={"x": 1, "y": 1}, output_bytes=4))
    g.add(f, a, name="b", cost=Cost(seconds={"y": 5}))
    p = two_hosts(g)
    assert optimistic_cost_table(p).tolist() == [[8, 5], [0, 0]]


def test_forged_references_still_rank_in_dependency_order() -> None:
    """Task 0 consumes task 1 (a reference made before its task): units are not in
    dependency order by id, and the ranks sweep them in a topological order instead."""
    g = Graph()
    g.add(f, TaskRef(g, 1), name="late-consumer", cost=Cost(seconds=2))
    g.add(f, name="early-producer", cost=Cost(seconds=3))
    p = build_problem(g, [Context("cpu")])
    assert unit_order(p) == [1, 0]
    assert upward_rank(p).tolist() == [2, 5]
    assert downward_rank(p).tolist() == [3, 0]
    assert critical_path(p).tolist() == [1, 0]
    s = heft(p, np.array([np.inf]))
    assert s.start.tolist() == [3, 0]


@st.composite
def dags(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 30))
    g = Graph()
    for i in range(n):
        picks = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else []
        seconds = draw(st.sampled_from([{"x": 1, "y": 3}, {"x": 2}, {"y": 0.5}, {"x": 4, "y": 4}]))
        size = draw(st.sampled_from([0, 2, 10]))
        g.add(f, *[TaskRef(g, j) for j in picks], cost=Cost(seconds=seconds, output_bytes=size))
    return two_hosts(g)


@settings(max_examples=60, deadline=None)
@given(dags())
def test_critical_path_is_a_longest_path(p: Problem) -> None:
    """An entry-to-exit chain of edges, every unit on it with rank_u + rank_d equal to
    the longest, and no unit anywhere longer."""
    up, down = upward_rank(p), downward_rank(p)
    total = up + down
    longest = total.max()
    path = critical_path(p).tolist()
    np.testing.assert_allclose(total[path], longest)
    assert np.all(total <= longest + 1e-9)
    assert p.dep_ptr[path[0] + 1] == p.dep_ptr[path[0]]  # an entry
    assert p.out_ptr[path[-1] + 1] == p.out_ptr[path[-1]]  # an exit
    for u, v in pairwise(path):
        assert u in p.dep_idx[p.dep_ptr[v] : p.dep_ptr[v + 1]]
