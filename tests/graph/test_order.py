"""The priority order (planning.order) and the critical-path ranks it is built on."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning import bottom_level, order, path_length, top_level


def f(*args: object) -> None:
    return None


@st.composite
def dags(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 60))
    g = Graph()
    for i in range(n):
        picks = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=4)) if i else []
        seconds = draw(st.sampled_from([0.5, 1.0, 3.0]))
        g.add(f, *[TaskRef(g, p) for p in picks], cost=Cost(seconds=seconds))
    return g


@settings(max_examples=60, deadline=None)
@given(dags())
def test_priority_is_a_topological_permutation(g: Graph) -> None:
    p = order(g)
    assert sorted(p.tolist()) == list(range(len(g)))
    ptr, idx = g.dependencies()
    for t in range(len(g)):
        for d in idx[ptr[t] : ptr[t + 1]]:
            assert p[d] < p[t]


@settings(max_examples=60, deadline=None)
@given(dags())
def test_ranks_satisfy_their_recurrences(g: Graph) -> None:
    s = g.costs().seconds
    top, bottom, through = top_level(g), bottom_level(g), path_length(g)
    dptr, didx = g.dependencies()
    optr, oidx = g.dependents()
    for t in range(len(g)):
        before = [top[d] for d in didx[dptr[t] : dptr[t + 1]]]
        after = [bottom[c] for c in oidx[optr[t] : optr[t + 1]]]
        assert np.isclose(top[t], s[t] + max(before, default=0.0))
        assert np.isclose(bottom[t], s[t] + max(after, default=0.0))
    assert np.isclose(through.max(), top.max())  # the critical path length
    assert np.isclose(through.max(), bottom.max())


def test_fan_in_tree_finishes_each_branch_before_opening_the_next() -> None:
    """Leaves of one sum are numbered together, then the sum, then the next group:

    l0 .. l7   l8 .. l15  ...  (64 leaves)
       \\ /        \\ /
       s0         s1      ...   (8 sums)
          \\       |      /
                 root
    """
    g = Graph()
    sums = []
    for k in range(8):
        leaves = [g.add(f, name=f"leaf-{(37 * (8 * k + j)) % 64}") for j in range(8)]
        sums.append(g.add(f, *leaves))
    g.add(f, *sums)
    p = order(g)
    ptr, idx = g.dependencies()
    for s in sums:
        group = sorted([*p[idx[ptr[s.id] : ptr[s.id + 1]]].tolist(), int(p[s.id])])
        assert group == list(range(group[0], group[0] + 9))  # contiguous
        assert group[-1] == p[s.id]  # the sum right after its leaves


def test_longer_critical_path_starts_first() -> None:
    """Two independent chains; the costlier one (b, built second) is started first.

    a0 -> a1        (1 s each)
    b0 -> b1        (5 s each)
    """
    g = Graph()
    a0 = g.add(f, cost=Cost(seconds=1.0))
    a1 = g.add(f, a0, cost=Cost(seconds=1.0))
    b0 = g.add(f, cost=Cost(seconds=5.0))
    b1 = g.add(f, b0, cost=Cost(seconds=5.0))
    p = order(g)
    assert p[b0.id] == 0 and p[b1.id] == 1
    assert p[a0.id] == 2 and p[a1.id] == 3


def test_costlier_dependency_is_visited_first() -> None:
    """
    cheap (1 s)   dear0 (2 s) -> dear1 (2 s)
          \\                     /
                  join
    """
    g = Graph()
    cheap = g.add(f, cost=Cost(seconds=1.0))
    dear0 = g.add(f, cost=Cost(seconds=2.0))
    dear1 = g.add(f, dear0, cost=Cost(seconds=2.0))
    join = g.add(f, cheap, dear1)
    assert order(g).tolist() == [2, 0, 1, 3]
    assert np.allclose(path_length(g)[[dear0.id, dear1.id, join.id]], 4 + 1e-3)


def test_independent_tasks_keep_build_order_when_costs_tie() -> None:
    g = Graph()
    for _ in range(100):
        g.add(f)
    assert order(g).tolist() == list(range(100))


def test_chain_ranks() -> None:
    g = Graph()
    x = g.add(f, cost=Cost(seconds=1.0))
    for _ in range(4):
        x = g.add(f, x, cost=Cost(seconds=1.0))
    assert bottom_level(g).tolist() == [5.0, 4.0, 3.0, 2.0, 1.0]
    assert top_level(g).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert order(g).tolist() == [0, 1, 2, 3, 4]
