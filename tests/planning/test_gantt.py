"""draw_gantt(): a PNG of a hand-made plan, fused units named by their tasks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chunkgraph._errors import ConfigError
from chunkgraph.graph import Cost, Graph
from chunkgraph.planning._contexts import Context, Link
from chunkgraph.planning._fuse import fuse_chains
from chunkgraph.planning._gantt import _fit, draw_gantt
from chunkgraph.planning._plan import Plan
from chunkgraph.planning._problem import build_problem
from chunkgraph.planning._schedule import Schedule

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def f(*args: object) -> None:
    return None


def small_plan() -> Plan:
    """
    load(1) -> blur(2) -> segment(1) ─┬> stats(1)   on numa0
    (fused: load+blur+segment)        └> infer(2)   on gpu0
    """
    g = Graph()
    load = g.add(f, name="load", cost=Cost(seconds=1, output_bytes=10))
    blur = g.add(f, load, name="blur", cost=Cost(seconds=2, output_bytes=10))
    seg = g.add(f, blur, name="segment", cost=Cost(seconds=1, output_bytes=1000))
    g.add(f, seg, name="stats", cost=Cost(seconds=1))
    g.add(f, seg, name="infer", cost=Cost(seconds={"cpu": 8, "gpu": 2}), resources={"gpu": 1})
    targets = g.sinks()
    ptr, idx = fuse_chains(g, targets)
    contexts = [Context("numa0", slots=2), Context("gpu0", kind="gpu")]
    problem = build_problem(g, contexts, Link(bandwidth=1e3), member_ptr=ptr, member_idx=idx,
                            targets=targets)  # fmt: skip
    assert len(problem) == 3 and problem.label(0) == "load+blur+segment"
    schedule = Schedule(
        context=np.array([0, 0, 1]),
        slot=np.array([0, 1, 0]),
        start=np.array([0.0, 4.0, 5.0]),
        finish=np.array([4.0, 5.0, 7.0]),
        subgraph=np.array([0, 1, 2]),
    )
    cap = np.full(2, math.inf)
    return Plan(g, problem, schedule, "heft", cap, targets, 0.0)


def test_draw_gantt_writes_a_png(tmp_path: Path) -> None:
    plan = small_plan()
    out = tmp_path / "plan.png"
    draw_gantt(plan, out)
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    # a str path, through the Plan's own method
    plan.gantt(str(tmp_path / "again.png"))
    assert (tmp_path / "again.png").read_bytes()[:8] == PNG_SIGNATURE


def test_many_units_are_drawn_without_names(tmp_path: Path) -> None:
    g = Graph()
    for i in range(2_500):
        g.add(f, name=f"t{i}", cost=Cost(seconds=1.0 + (i % 3)))
    problem = build_problem(g, [Context("cpu", slots=4)])
    n = len(problem)
    slot = np.arange(n) % 4
    start = np.zeros(n)
    for s in range(4):  # back to back on each slot
        on = np.flatnonzero(slot == s)
        durations = problem.seconds[on, 0]
        start[on] = np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    schedule = Schedule(np.zeros(n, np.int64), slot, start,
                        start + problem.seconds[:, 0], np.arange(n) // 50)  # fmt: skip
    plan = Plan(g, problem, schedule, "merge", np.full(1, math.inf), g.sinks(), 0.0)
    out = tmp_path / "big.png"
    draw_gantt(plan, out)
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_a_path_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="file path"):
        draw_gantt(small_plan(), 42)


def test_labels_are_cut_to_fit() -> None:
    assert _fit("load+blur+segment", 40) == "load+blur+segment"
    assert _fit("load+blur+segment", 6) == "load+…"
    assert _fit("load+blur+segment", 2) == ""


@pytest.mark.parametrize(
    ("name", "signature"),
    [("plan.pdf", b"%PDF"), ("plan.svg", b"<?xml"), ("PLAN.PNG", PNG_SIGNATURE)],
)
def test_the_suffix_chooses_the_format(tmp_path: Path, name: str, signature: bytes) -> None:
    out = tmp_path / name
    draw_gantt(small_plan(), out)
    data = out.read_bytes()
    assert data.startswith(signature), data[:16]
    if name.endswith(".svg"):
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("name", ["plan.jpg", "plan", "plan.png.txt"])
def test_a_suffix_not_drawn_is_refused_naming_the_ones_that_are(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=r"give one of \.png, \.pdf, \.svg"):
        draw_gantt(small_plan(), tmp_path / name)
    assert not (tmp_path / name).exists()
