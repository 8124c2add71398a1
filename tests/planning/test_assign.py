"""assign_roots: Mars's initial assignment of the roots (quotas by slots, BFS locality)."""

from __future__ import annotations

import numpy as np

from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._assign import assign_roots
from chunkgraph.planning._contexts import Context
from chunkgraph.planning._problem import build_problem


def test_each_tree_of_a_forest_stays_on_one_context() -> None:
    r"""Two trees whose roots are added interleaved (ids alternate between the trees):

    p0  p1  p2  p3       q0  q1  q2  q3
      \ |   | /           \ |   | /
       pair-p               pair-q
    """
    g = Graph()
    p: list[TaskRef] = []
    q: list[TaskRef] = []
    for i in range(4):
        q.append(g.add(abs, i, name=f"q{i}"))
        p.append(g.add(abs, i, name=f"p{i}"))
    g.add(max, *p, name="pair-p")
    g.add(max, *q, name="pair-q")
    problem = build_problem(g, [Context("left", slots=2), Context("right", slots=2)])

    got = assign_roots(problem)

    p_ctx = {int(got[r.id]) for r in p}
    q_ctx = {int(got[r.id]) for r in q}
    assert len(p_ctx) == 1 and len(q_ctx) == 1
    assert p_ctx != q_ctx
    assert got[g.task_id("pair-p")] == -1 and got[g.task_id("pair-q")] == -1


def test_quotas_follow_slots() -> None:
    g = Graph()
    for i in range(8):
        g.add(abs, i, name=f"r{7 - i}")
    problem = build_problem(g, [Context("small", slots=1), Context("big", slots=3)])

    got = assign_roots(problem)

    assert np.bincount(got, minlength=2).tolist() == [2, 6]


def test_roots_go_only_where_they_can_run() -> None:
    """GPU-only roots go to the GPU even past its quota; CPU-only ones to the CPUs."""
    g = Graph()
    gpu_only = [g.add(abs, i, cost=Cost(seconds={"gpu": 1.0})) for i in range(5)]
    cpu_only = [g.add(abs, i) for i in range(3)]
    problem = build_problem(g, [Context("cpu", slots=3), Context("gpu", kind="gpu", slots=1)])

    got = assign_roots(problem)

    assert [int(got[r.id]) for r in gpu_only] == [1] * 5
    assert [int(got[r.id]) for r in cpu_only] == [0] * 3


def test_a_context_without_runnable_roots_gets_no_quota() -> None:
    """Eight CPU roots share out among the CPU contexts only (4:4), not 3:3:2."""
    g = Graph()
    roots = [g.add(abs, i) for i in range(8)]
    g.add(max, *roots, cost=Cost(seconds={"gpu": 1.0, "cpu": 5.0}))
    problem = build_problem(
        g, [Context("a", slots=2), Context("g", kind="gpu", slots=2), Context("b", slots=2)]
    )

    got = assign_roots(problem)

    assert np.bincount(got[:8], minlength=3).tolist() == [4, 0, 4]
    assert got[8] == -1


def test_no_roots_left_out() -> None:
    rng = np.random.default_rng(5)
    g = Graph()
    refs: list[TaskRef] = []
    for i in range(60):
        picks = rng.choice(len(refs), size=min(len(refs), int(rng.integers(0, 3))), replace=False)
        refs.append(g.add(max, i, *[refs[int(j)] for j in picks]))
    problem = build_problem(g, [Context(f"c{i}", slots=i + 1) for i in range(3)])

    got = assign_roots(problem)

    is_root = np.diff(problem.dep_ptr) == 0
    assert (got[is_root] >= 0).all()
    assert (got[~is_root] == -1).all()
    # quotas 1:2:3 of the roots, each within one of its exact share
    share = is_root.sum() * np.array([1, 2, 3]) / 6
    assert (np.abs(np.bincount(got[is_root], minlength=3) - share) < 1).all()
