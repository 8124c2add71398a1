"""The executor follows a Plan: contexts, steals, memory and resource admission, fused chains."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph.execute import EventKind, LocalExecutor, Scheduler
from chunkgraph.execute._placement import placement_of, split_workers
from chunkgraph.gpu import FakeBackend, use_backend
from chunkgraph.graph import Cost, Graph

KINDS = ["threads", "adaptive", "processes", "sync"]


class Meter:
    """Counts what runs at once (threads only: the tasks share this object)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.bytes_now = 0
        self.bytes_most = 0

    def hold(self, nbytes: int, seconds: float, then: Any = None) -> int:
        """Count itself in, allocate ``nbytes``, sleep, call ``then()`` (if given), leave."""
        with self.lock:
            self.now += 1
            self.bytes_now += nbytes
            self.most = max(self.most, self.now)
            self.bytes_most = max(self.bytes_most, self.bytes_now)
        block = np.ones(nbytes, np.uint8)  # really allocate what the cost says
        time.sleep(seconds)
        if then is not None:
            then()
        with self.lock:
            self.now -= 1
            self.bytes_now -= nbytes
        return int(block.sum())


def inc(x: int) -> int:
    return x + 1


def slow_inc(x: int) -> int:
    time.sleep(0.002)
    return x + 1


def add(*xs: int) -> int:
    return sum(xs)


def inc_once_both_ran(x: int, folder: str) -> int:
    """``x + 1``, once two workers (threads or processes) have run this: the worker the
    plan gives everything cannot finish alone before the other one steals (60 s at most,
    counted from the folder's creation)."""
    here = Path(folder)
    (here / f"{os.getpid()}-{threading.get_ident()}").touch()
    deadline = here.stat().st_mtime + 60
    while len(list(here.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.005)
    return x + 1


def test_workers_split_by_slots_and_gpus_get_their_own() -> None:
    assert split_workers([4, 4], ["cpu", "cpu"], 2) == [1, 1]
    assert split_workers([4, 2], ["cpu", "cpu"], 6) == [4, 2]
    assert split_workers([2, 1], ["cpu", "gpu"], 2) == [2, 1]


def test_scheduler_takes_per_context_and_steals_a_whole_unstarted_subgraph() -> None:
    g = Graph()
    left = [g.add(inc, i, cost=Cost({"a": 1.0, "b": 1.0})) for i in range(4)]
    g.add(add, *left, name="sum", cost=Cost({"a": 1.0, "b": 1.0}))
    ctx = [cg.Context("a", slots=1), cg.Context("b", slots=1)]
    plan = cg.plan(g, ctx, strategy="heft", fuse=False)
    placement = placement_of(plan, g, workers=2)
    # Put everything on context a by hand, in one subgraph: b must steal it whole.
    placement.context[:] = [0] * len(g)
    placement.subgraph[:] = [0] * len(g)
    placement.sub_ptr[:] = [0, len(g)]
    placement.sub_idx[:] = list(range(len(g)))
    s = Scheduler(g, [4], plan.order, placement=placement)
    seen: list[tuple[int, int, int, int]] = []
    s.on_steal = lambda *info: seen.append(info)
    assert s.take(1, 1) != []  # b had nothing: it stole
    assert seen and seen[0][1:3] == (0, 1) and seen[0][3] == len(g)
    assert all(c == 1 for c in placement.context)


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_stolen_subgraph_still_gives_correct_results(kind: Any, tmp_path: Path) -> None:
    """Plan every task on one context (the other is planned 100x slower): it steals."""
    ran = tmp_path / "ran"
    ran.mkdir()
    g = Graph()
    cost = Cost({"busy": 1.0, "idle": 100.0})
    leaves = [g.add(inc_once_both_ran, i, str(ran), cost=cost) for i in range(40)]
    chains = [g.add(slow_inc, g.add(slow_inc, leaf, cost=cost), cost=cost) for leaf in leaves]
    total = g.add(add, *chains, name="total", cost=cost)
    ctx = [cg.Context("busy", slots=1), cg.Context("idle", slots=1)]
    plan = cg.plan(g, ctx, strategy="heft")
    events: list[cg.Event] = []
    executor = LocalExecutor(kind, workers=2)
    got = executor.run(g, [total.id], subscribers=[events.append], plan=plan)
    assert got[total.id] == sum(i + 3 for i in range(40))
    steals = [e for e in events if e.kind is EventKind.STOLEN]
    finished = {e.task for e in events if e.kind is EventKind.FINISHED}
    assert finished == set(range(len(g)))  # every user task reported, fused ones too
    assert steals, "the idle context's worker never stole"
    assert all("busy -> idle" in e.name and e.total >= 1 for e in steals)
    assert plan.task_context.max() == 0  # nothing was planned on idle: it stole all it ran


def test_memory_tight_graph_stays_under_its_cap_in_a_real_run() -> None:
    """Fifteen tasks of 8 MiB under a cap of 24 MiB, on four workers: three at a time.
    Each waits for two others (a barrier of three) while it holds its memory, so three
    run at once however late a loaded machine starts their threads; a fourth admitted
    would show as ``most == 4``, a cap kept at two would break the barrier."""
    meter = Meter()
    three = threading.Barrier(3, timeout=60)
    mib = 1 << 20

    def hold_with_two_others(nbytes: int) -> int:
        return meter.hold(nbytes, 0.0, then=three.wait)

    g = Graph()
    parts = [
        g.add(hold_with_two_others, 8 * mib, cost=Cost(seconds=0.02, memory=8 * mib))
        for _ in range(15)
    ]
    g.add(add, *parts, name="total")
    cap = 24 * mib  # three tasks at once, of four workers
    plan = cg.plan(g, [cg.Context("cpu", slots=4)], memory=cap)
    assert plan.simulate().peak_memory[0] <= cap
    got = cg.run(g, "total", workers=4, plan=plan)
    assert got == 15 * 8 * mib
    assert meter.bytes_most <= cap and meter.most == 3


def test_gpu_tasks_never_overlap_on_one_gpu_slot() -> None:
    meter = Meter()
    g = Graph()
    gpu = [g.add(meter.hold, 0, 0.02, resources={"gpu": 1}) for _ in range(8)]
    cpu = [g.add(inc, i) for i in range(8)]
    g.add(add, *gpu, *cpu, name="total")
    ctx = [cg.Context("cpu", slots=2), cg.Context("gpu0", kind="gpu", slots=1)]
    plan = cg.plan(g, ctx)
    assert {plan.context_of(t).name for t in gpu} == {"gpu0"}  # type: ignore[union-attr]
    with use_backend(FakeBackend(1)):  # GPU tasks run only where a device backend drives gpu0
        assert cg.run(g, "total", workers=4, plan=plan) == sum(range(1, 9))
    assert meter.most == 1


@pytest.mark.parametrize("kind", KINDS)
def test_fused_chains_run_whole_and_report_every_task(kind: Any) -> None:
    g = Graph()
    ends = []
    for i in range(6):
        x = g.add(inc, i)
        for _ in range(5):
            x = g.add(inc, x)
        ends.append(x)
    total = g.add(add, *ends, name="total")
    plan = cg.plan(g, [cg.Context("cpu", slots=2)], strategy="heft")
    assert len(plan.problem) == 7  # six chains of six tasks, and the sum
    events: list[cg.Event] = []
    got = cg.run(g, total, executor=kind, workers=2, subscribers=[events.append], plan=plan)
    assert got == sum(i + 6 for i in range(6))
    assert sorted(e.task for e in events if e.kind is EventKind.FINISHED) == list(range(len(g)))


FAILED_ONCE: set[str] = set()


def flaky(x: int, key: str) -> int:
    if key not in FAILED_ONCE:
        FAILED_ONCE.add(key)
        raise RuntimeError("first try fails")
    return x + 1


def fails(x: int) -> int:
    raise ValueError(f"bad {x}")


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_failure_inside_a_fused_chain_names_its_task_and_is_retried_from_it(
    kind: Any, tmp_path: Any
) -> None:
    g = Graph()
    a = g.add(inc, 1, name="a")
    b = g.add(inc, a, name="b")
    c = g.add(fails, b, name="c")
    g.add(inc, c, name="d")
    with pytest.raises(ExceptionGroup) as info:
        cg.run(g, executor=kind, workers=2, retries=1)
    (error,) = info.value.exceptions
    assert error.task == "c" and error.attempts == 2  # type: ignore[attr-defined]
    assert "bad 3" in str(error)
    if kind == "threads":  # a process worker has its own FAILED_ONCE: threads only
        g2 = Graph()
        x = g2.add(inc, 1, name="x")
        y = g2.add(flaky, x, f"{tmp_path}", name="y")
        z = g2.add(inc, y, name="z")
        assert cg.run(g2, z, executor=kind, workers=2, retries=1) == 4


def test_a_plan_of_another_graph_or_other_targets_is_refused() -> None:
    g = Graph()
    a = g.add(inc, 1)
    b = g.add(inc, 2)
    other = Graph()
    other.add(inc, 1)
    with pytest.raises(cg.ConfigError, match="another Graph"):
        cg.run(g, a, plan=cg.plan(other))
    with pytest.raises(cg.ConfigError, match="does not place task"):
        cg.run(g, b, plan=cg.plan(g, targets=[a]))
    with pytest.raises(cg.ConfigError, match="chunkgraph Plan"):
        cg.run(g, a, plan="heft")  # type: ignore[arg-type]


def test_a_target_fused_inside_a_chain_of_the_plan_is_refused() -> None:
    g = Graph()
    a = g.add(inc, 0)
    b = g.add(inc, a)
    c = g.add(inc, b)
    plan = cg.plan(g)  # planned for the sink: a -> b -> c is one unit
    with pytest.raises(cg.ConfigError, match="fused task 'inc-1' into a chain"):
        cg.run(g, [b, c], plan=plan)
    assert cg.run(g, [b, c], plan=cg.plan(g, targets=[b, c])) == [2, 3]
    assert cg.run(g, [b, c]) == [2, 3]  # planned for these targets by run itself


def test_a_fused_chain_is_admitted_for_its_largest_task() -> None:
    """Four chains small -> big under a budget of one big: never two bigs at once."""
    meter = Meter()
    mib = 1 << 20
    g = Graph()
    ends = []
    for _ in range(4):
        small = g.add(meter.hold, 1 * mib, 0.01, cost=Cost(0.01, memory=1 * mib))
        big = g.add(
            lambda _, m=meter: m.hold(9 * mib, 0.02), small, cost=Cost(0.02, memory=9 * mib)
        )
        ends.append(big)
    g.add(add, *ends, name="total")
    plan = cg.plan(g, [cg.Context("cpu", slots=4)], memory=10 * mib)
    assert len(plan.problem) == 5  # the four chains are fused
    cg.run(g, "total", workers=4, plan=plan)
    assert meter.bytes_most <= 10 * mib and meter.most == 1


def test_a_gpu_task_with_costs_for_cpus_too_still_runs_only_on_gpus() -> None:
    meter = Meter()
    g = Graph()
    gpu = [
        g.add(meter.hold, 0, 0.01, resources={"gpu": 1}, cost=Cost({"gpu": 1.0, "cpu": 5.0}))
        for _ in range(6)
    ]
    g.add(add, *gpu, name="total")
    ctx = [cg.Context("cpu", slots=4), cg.Context("gpu0", kind="gpu", slots=1)]
    plan = cg.plan(g, ctx)
    assert {plan.context_of(t).name for t in gpu} == {"gpu0"}  # type: ignore[union-attr]
    with use_backend(FakeBackend(1)):
        cg.run(g, "total", workers=4, plan=plan)
    assert meter.most == 1


def test_a_plan_of_a_graph_changed_since_is_refused() -> None:
    g = Graph()
    g.add(inc, 1)
    plan = cg.plan(g)
    late = g.add(inc, 2)
    with pytest.raises(cg.ConfigError, match="changed after it was planned"):
        cg.run(g, late, plan=plan)
    with pytest.raises(cg.ConfigError, match="added after this plan"):
        plan.context_of(late)
