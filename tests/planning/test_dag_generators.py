"""The benchmark graph generators: sizes, acyclicity, reproducible seeds, CCR, Graphs."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _dag_generators as gen

MAKERS: dict[str, Callable[[int], gen.Dag]] = {
    "heft_random": lambda seed: gen.heft_random(60, alpha=1.0, ccr=1.0, seed=seed),
    "heft_random_thin": lambda seed: gen.heft_random(60, alpha=0.5, ccr=10.0, seed=seed),
    "binary": lambda seed: gen.reduction_tree(16, 2, seed=seed),
    "8-ary": lambda seed: gen.reduction_tree(64, 8, seed=seed),
    "stencil": lambda seed: gen.stencil_2d(4, 3, seed=seed),
    "fft": lambda seed: gen.fft(8, seed=seed),
    "fork_join": lambda seed: gen.fork_join(5, 3, seed=seed),
    "montage": lambda seed: gen.montage(9, seed=seed),
}


def same(a: gen.Dag, b: gen.Dag) -> bool:
    return (
        a.names == b.names
        and np.array_equal(a.work, b.work)
        and np.array_equal(a.output, b.output)
        and np.array_equal(a.src, b.src)
        and np.array_equal(a.dst, b.dst)
        and np.array_equal(a.data, b.data)
    )


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_acyclic_connected_and_reproducible(kind: str) -> None:
    dag = MAKERS[kind](3)
    assert len(dag) == len(dag.names) == len(dag.output)
    assert (dag.src < dag.dst).all()  # ids are a topological order: no cycle
    assert len(set(zip(dag.src.tolist(), dag.dst.tolist(), strict=True))) == dag.edges
    assert (dag.work >= 0).all() and (dag.data >= 0).all()
    # one weakly connected piece
    parent = list(range(len(dag)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for s, d in zip(dag.src.tolist(), dag.dst.tolist(), strict=True):
        parent[root(s)] = root(d)
    assert len({root(i) for i in range(len(dag))}) == 1
    sinks = len(dag) - len(set(dag.src.tolist()))
    if kind in ("binary", "8-ary", "fork_join", "montage"):
        assert sinks == 1
    assert same(dag, MAKERS[kind](3))
    assert not same(dag, MAKERS[kind](4))


def test_structured_sizes() -> None:
    assert len(gen.reduction_tree(16, 2)) == 31
    assert len(gen.reduction_tree(64, 8)) == 64 + 8 + 1
    assert len(gen.reduction_tree(10, 3)) == 10 + 4 + 2 + 1
    assert len(gen.stencil_2d(4, 3)) == 48
    # a corner reads 3 cells of the step before, an edge cell 4, an inner cell 5
    assert gen.stencil_2d(4, 2).edges == 4 * 3 + 8 * 4 + 4 * 5
    assert len(gen.fft(8)) == 2 * 8 - 1 + 8 * 3
    assert gen.fft(8).edges == (2 * 8 - 2) + 2 * 8 * 3
    assert len(gen.fork_join(5, 3)) == 1 + 3 * 6
    m = gen.montage(9)
    assert m.names.count("mAdd") == 1 and m.names[-1] == "mJPEG"
    assert sum(n.startswith("mProject") for n in m.names) == 9
    assert sum(n.startswith("mBackground") for n in m.names) == 9
    # 3x3 images: 6 right, 6 lower and 4 lower-right overlaps
    assert sum(n.startswith("mDiffFit") for n in m.names) == 16


def test_heft_random_shape_follows_alpha() -> None:
    """alpha < 1: a longer critical path than alpha > 1 on the same v (averaged over seeds)."""

    def depth(dag: gen.Dag) -> int:
        level = np.zeros(len(dag), np.int64)
        for s, d in zip(dag.src.tolist(), dag.dst.tolist(), strict=True):
            level[d] = max(level[d], level[s] + 1)
        return int(level.max()) + 1

    v = 100
    thin = np.mean([depth(gen.heft_random(v, alpha=0.5, seed=s)) for s in range(5)])
    wide = np.mean([depth(gen.heft_random(v, alpha=2.0, seed=s)) for s in range(5)])
    assert wide < math.sqrt(v) < thin
    for s in range(5):
        dag = gen.heft_random(v, seed=s)
        assert len(dag) == v
        assert 1.5 <= dag.edges / v <= 4.5  # mean out-degree ~3 (the last level has none)


@pytest.mark.parametrize("ccr", [0.1, 1.0, 10.0])
def test_ccr_is_what_was_asked(ccr: float) -> None:
    dags = [gen.heft_random(100, ccr=ccr, seed=s) for s in range(4)]
    assert np.mean([d.ccr() for d in dags]) == pytest.approx(ccr, rel=0.15)
    fft = gen.with_ccr(gen.fft(16), ccr)
    assert fft.ccr() == pytest.approx(ccr, rel=1e-3)
    assert np.array_equal(fft.data, fft.output[fft.src])  # a result is sent whole


def test_unrelated_costs_and_gpu_mask() -> None:
    work = np.array([1.0, 2.0, 4.0])
    costs = gen.unrelated_costs(work, 3, beta=1.0, seed=1)
    assert costs.shape == (3, 3)
    assert ((costs >= work[:, None] * 0.5) & (costs <= work[:, None] * 1.5)).all()
    assert np.array_equal(gen.unrelated_costs(work, 3, beta=0.0), np.repeat(work[:, None], 3, 1))
    mask = gen.gpu_capable(10, 0.5, seed=2)
    assert mask.sum() == 5 and np.array_equal(mask, gen.gpu_capable(10, 0.5, seed=2))
    with pytest.raises(ValueError, match="beta"):
        gen.unrelated_costs(work, 3, beta=2.0)


def test_to_graph_carries_costs_and_edge_sizes() -> None:
    dag = gen.heft_random(40, ccr=1.0, seed=5)
    g = gen.to_graph(dag, memory=dag.output)
    g.validate()
    assert len(g) == len(dag)
    order = g.topological_order()
    position = np.empty(len(dag), np.int64)
    position[order] = np.arange(len(dag))
    for s, d, size in zip(dag.src.tolist(), dag.dst.tolist(), dag.data.tolist(), strict=True):
        assert position[s] < position[d]
        assert g.edge_bytes(s, d) == int(size)
    costs = g.costs()
    assert np.allclose(costs.seconds, dag.work)
    assert np.array_equal(costs.memory, dag.output.astype(np.int64))
    per_context = gen.to_graph(dag, seconds=[{"cpu": w, "gpu": w / 8} for w in dag.work])
    assert per_context.cost(0).seconds == {"cpu": dag.work[0], "gpu": dag.work[0] / 8}
