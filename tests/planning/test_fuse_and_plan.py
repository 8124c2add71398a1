"""Chain fusion, contexts, and plan() end to end: known shapes, refusals, the summary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph._numa import parse_cpulist
from chunkgraph.graph import Cost, Graph
from chunkgraph.planning._contexts import link_between, local_contexts
from chunkgraph.planning._fuse import fuse_chains


def units(g: Graph, targets: list[int] | None = None, fuse: bool = True) -> list[list[int]]:
    t = np.asarray(g.sinks() if targets is None else targets, dtype=np.int64)
    ptr, idx = fuse_chains(g, t, fuse=fuse)
    return [idx[ptr[u] : ptr[u + 1]].tolist() for u in range(len(ptr) - 1)]


def test_a_chain_fuses_to_one_unit_in_order() -> None:
    g = Graph()
    x = g.add(abs, -1)
    for _ in range(4):
        x = g.add(abs, x)
    assert units(g) == [[0, 1, 2, 3, 4]]


def test_a_diamond_does_not_fuse() -> None:
    g = Graph()
    a = g.add(abs, -1)
    b, c = g.add(abs, a), g.add(abs, a)
    g.add(max, b, c)
    assert units(g) == [[0], [1], [2], [3]]


def test_a_target_is_never_fused_away() -> None:
    g = Graph()
    a = g.add(abs, -1)
    b = g.add(abs, a)
    c = g.add(abs, b)
    assert units(g, [b.id, c.id]) == [[0, 1], [2]]  # b ends its unit: its result is wanted
    assert units(g, [b.id]) == [[0, 1]]  # c is not needed: not planned at all


def test_chains_break_where_resources_or_cost_kinds_differ() -> None:
    g = Graph()
    a = g.add(abs, -1)
    b = g.add(abs, a, resources={"gpu": 1})
    c = g.add(abs, b, resources={"gpu": 1})
    d = g.add(abs, c, cost=Cost({"cpu": 2.0, "gpu": 1.0}))
    g.add(abs, d)
    assert units(g) == [[0], [1, 2], [3], [4]]
    assert units(g, fuse=False) == [[0], [1], [2], [3], [4]]


def test_plan_keeps_fused_names_and_follows_a_chain_on_one_slot() -> None:
    g = Graph()
    a = g.add(abs, -1, name="load", cost=Cost(2.0))
    b = g.add(abs, a, name="blur", cost=Cost(3.0))
    plan = cg.plan(g, [cg.Context("cpu", slots=2), cg.Context("cpu2", slots=1)])
    assert plan.makespan == 5.0 and plan.problem.label(0) == "load+blur"
    start, finish = plan.times()
    assert (start.tolist(), finish.tolist()) == ([0.0, 2.0], [2.0, 5.0])
    assert plan.context_of(a) == plan.context_of(b)
    assert plan.task_slot.tolist() == [plan.task_slot[0]] * 2  # one slot runs the chain
    assert len(plan.subgraphs()) == 1


def test_strategies_agree_on_a_known_small_graph() -> None:
    g = Graph()
    parts = [g.add(abs, -i, cost=Cost(1.0)) for i in range(4)]
    g.add(max, *parts, cost=Cost(1.0))
    ctx = [cg.Context("cpu", slots=2)]
    for strategy in ("heft", "peft", "merge", "auto"):
        plan = cg.plan(g, ctx, strategy=strategy)  # type: ignore[arg-type]
        sim = plan.simulate()
        assert sim.makespan == pytest.approx(3.0) and sim.lower_bound == pytest.approx(2.5)


def test_summary_names_strategy_contexts_and_budgets() -> None:
    g = Graph()
    g.add(abs, -1, cost=Cost(1.0, memory=1 << 20))
    text = cg.plan(g, [cg.Context("a", slots=1), cg.Context("b", memory=1 << 30)]).summary()
    assert "strategy" in text and "a " in text and "budget 1.0 GiB" in text
    assert "no budget" in text


def test_bad_plan_arguments_are_refused_with_what_is_valid() -> None:
    g = Graph()
    g.add(abs, -1, cost=Cost(1.0, memory=100))
    ctx = [cg.Context("cpu", slots=1)]
    with pytest.raises(cg.ConfigError, match="strategy must be one of"):
        cg.plan(g, ctx, strategy="fastest")  # type: ignore[arg-type]
    with pytest.raises(cg.ConfigError, match="not one of"):
        cg.plan(g, ctx, memory={"gpu9": 1})
    with pytest.raises(cg.ConfigError, match="used twice"):
        cg.plan(g, [cg.Context("x"), cg.Context("x")])
    with pytest.raises(cg.ConfigError, match="at least one Context"):
        cg.plan(g, [])
    with pytest.raises(cg.PlanError, match="needs 100 B while it runs"):
        cg.plan(g, ctx, memory=10)
    gpu_only = Graph()
    gpu_only.add(abs, -1, resources={"gpu": 1})
    with pytest.raises(cg.PlanError, match="no context can run task"):
        cg.plan(gpu_only, ctx)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"slots": 0}, "slots must be an int >= 1"),
        ({"kind": "tpu"}, "kind must be one of"),
        ({"speed": -1.0}, "speed must be a positive"),
        ({"memory": 0}, "memory must be a positive"),
    ],
)
def test_contexts_refuse_bad_fields(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(cg.ConfigError, match=match):
        cg.Context("c", **kwargs)  # type: ignore[arg-type]


def test_links_default_by_host_and_can_be_given_per_pair() -> None:
    a, b = cg.Context("a"), cg.Context("b")
    far = cg.Context("far", host="node7")
    assert link_between(a, a) is None
    assert link_between(a, b).bandwidth >= 1e9  # type: ignore[union-attr]
    given = cg.Link(bandwidth=1.0)
    assert link_between(a, far, given) is given and link_between(a, b, given) is not given
    assert link_between(b, a, {("a", "b"): given}) is given
    assert cg.Link(1e9, 1e-3).seconds(1e6) == pytest.approx(0.002)


def test_local_contexts_cover_the_usable_cores() -> None:
    from chunkgraph._util import usable_cores

    contexts = local_contexts(gpus=False)
    assert sum(c.slots for c in contexts if c.kind == "cpu") == usable_cores()
    assert all(c.memory > 0 and not math.isnan(c.memory) for c in contexts)
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}


def test_per_context_seconds_and_edge_sizes_reach_the_problem() -> None:
    g = Graph()
    a = g.add(abs, -1, cost=Cost(2.0, output_bytes=10))
    b = g.add(abs, a, cost=Cost({"gpu": 1.0, "cpu": 8.0}))
    c = g.add(abs, a)
    g.add(max, b, c)
    g.set_edge_bytes(a, c, 4)
    ctx = [cg.Context("cpu", slots=1, speed=2.0), cg.Context("gpu0", kind="gpu")]
    problem = cg.plan(g, ctx, fuse=False).problem
    assert problem.seconds[0].tolist() == [1.0, math.inf]  # 2 s at speed 2; no GPU entry
    assert problem.seconds[1].tolist() == [8.0, 1.0]  # by kind, not scaled
    assert problem.dep_bytes.tolist()[:2] == [10.0, 4.0]
    with pytest.raises(cg.GraphError, match="does not consume"):
        g.set_edge_bytes(b, c, 1)


def test_bad_links_contexts_and_paths_get_clear_errors(tmp_path: Any) -> None:
    g = Graph()
    a = g.add(abs, -1)
    ctx = [cg.Context("cpu"), cg.Context("b", host="h2")]
    with pytest.raises(cg.ConfigError, match="must be a Link"):
        cg.plan(g, ctx, links={("cpu", "b"): 5})  # type: ignore[dict-item]
    with pytest.raises(cg.ConfigError, match="pair of context names"):
        cg.plan(g, ctx, links={("cpu", "nowhere"): cg.Link(1.0)})
    with pytest.raises(cg.ConfigError, match="links must be a Link"):
        cg.plan(g, ctx, links=5)  # type: ignore[arg-type]
    with pytest.raises(cg.ConfigError, match="list of Context"):
        cg.plan(g, "cpu")  # type: ignore[arg-type]
    with pytest.raises(cg.ConfigError, match="bandwidth"):
        cg.Link(bandwidth=True)
    plan = cg.plan(g, ctx, targets=a)  # one target, as run() takes it
    with pytest.raises(cg.ConfigError, match="cannot write"):
        plan.gantt(tmp_path / "missing" / "plan.png")
    with pytest.raises(cg.ConfigError, match="cannot write"):
        plan.gantt(tmp_path)


def test_big_graphs_get_the_greedy_pass_which_replays_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chunkgraph.planning import _plan

    g = Graph()
    refs: list[cg.TaskRef] = []
    rng = np.random.default_rng(3)
    for i in range(300):
        deps = [refs[int(j)] for j in rng.choice(len(refs), size=min(2, len(refs)), replace=False)]
        cost = Cost({"cpu": 2.0, "gpu": 0.5}) if i % 3 == 0 else Cost(float(rng.uniform(1, 2)))
        refs.append(g.add(max, 0, *deps, cost=cost))
    ctx = [cg.Context("c0", slots=2), cg.Context("c1", slots=2), cg.Context("g", kind="gpu")]
    monkeypatch.setattr(_plan, "AUTO_GREEDY_UNITS", 100)
    plan = cg.plan(g, ctx, fuse=False)
    assert plan.strategy == "greedy earliest finish"
    sim = plan.simulate()
    assert sim.makespan == pytest.approx(plan.makespan)
    np.testing.assert_allclose(sim.start, plan.schedule.start)
    runnable = np.isfinite(plan.problem.seconds)
    assert runnable[np.arange(len(plan.problem)), plan.schedule.context].all()
    heft = cg.plan(g, ctx, fuse=False, strategy="heft")
    assert plan.makespan <= 1.5 * heft.makespan  # cheaper, and not far off
