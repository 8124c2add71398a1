"""partition() and the "merge" strategy: subgraphs grown along the critical path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chunkgraph.graph import Cost, Graph, TaskRef
from chunkgraph.planning._contexts import Context
from chunkgraph.planning._partition import Partition, merge, partition
from chunkgraph.planning._problem import Problem, build_problem
from chunkgraph.planning._schedule import Schedule

INF2 = np.full(2, math.inf)


def random_graph(n: int, seed: int, *, gpu: bool = False, memory: bool = False) -> Graph:
    """A random DAG: each task reads up to three earlier ones. With ``gpu``, a third
    of the tasks run on the GPU only, a third on either (8x faster there)."""
    rng = np.random.default_rng(seed)
    g = Graph()
    refs: list[TaskRef] = []
    for i in range(n):
        picks = rng.choice(len(refs), size=min(len(refs), int(rng.integers(0, 4))), replace=False)
        base = float(rng.uniform(0.5, 3.0))
        seconds: float | dict[str, float] = base
        kind = int(rng.integers(0, 3)) if gpu else 0
        if kind == 1:
            seconds = {"gpu": base / 4}
        elif kind == 2:
            seconds = {"cpu": base, "gpu": base / 8}
        cost = Cost(
            seconds=seconds,
            memory=int(rng.integers(1, 60)) if memory else 0,
            output_bytes=int(rng.integers(1, 20)) * (1 if memory else 10**7),
        )
        refs.append(g.add(max, i, *[refs[int(j)] for j in picks], name=f"t{n - i}", cost=cost))
    return g


def cpu_gpu() -> list[Context]:
    return [Context("cpu", slots=3), Context("gpu", kind="gpu", slots=1)]


def check_partition(problem: Problem, part: Partition, cap: np.ndarray) -> None:
    """Every unit in exactly one subgraph, on a context that can run it, each subgraph
    fed only by earlier ones, within the per-slot memory bound unless it is one unit."""
    count = len(part.context_of_subgraph)
    assert part.subgraph.shape == (len(problem),)
    assert ((part.subgraph >= 0) & (part.subgraph < count)).all()
    assert (np.bincount(part.subgraph, minlength=count) > 0).all()
    assert problem.can_run()[np.arange(len(problem)), part.unit_context].all()
    consumer = np.repeat(np.arange(len(problem)), np.diff(problem.dep_ptr))
    assert (part.subgraph[problem.dep_idx] <= part.subgraph[consumer]).all()
    assert len(part.expected_runtime) == len(part.expected_start) == count
    for s in range(count):
        units = np.flatnonzero(part.subgraph == s)
        c = int(part.context_of_subgraph[s])
        assert part.expected_runtime[s] == pytest.approx(problem.seconds[units, c].sum())
        if len(units) > 1:
            bound = problem.memory[units].max() + problem.output_bytes[units].sum()
            assert bound <= cap[c] / problem.contexts[c].slots


def live_peaks(problem: Problem, s: Schedule) -> np.ndarray:
    """Peak live bytes per context, by the shared rules, evaluated at every breakpoint
    (half-open intervals: what ends at t is gone at t)."""
    intervals: list[tuple[int, float, float, float]] = []  # (context, from, to, bytes)
    end = s.makespan
    for u in range(len(problem)):
        c = int(s.context[u])
        intervals.append((c, s.start[u], s.finish[u], float(problem.memory[u])))
        consumers = problem.out_idx[problem.out_ptr[u] : problem.out_ptr[u + 1]]
        until = math.inf if problem.keep[u] or not len(consumers) else s.finish[consumers].max()
        intervals.append((c, s.finish[u], until, float(problem.output_bytes[u])))
        for j in range(problem.dep_ptr[u], problem.dep_ptr[u + 1]):
            d = int(problem.dep_idx[j])
            if s.context[d] != c:
                intervals.append((c, s.start[u], s.finish[u], float(problem.dep_bytes[j])))
    peaks = np.zeros(len(problem.contexts))
    times = sorted({t for _, a, b, _ in intervals for t in (a, b) if t <= end})
    for t in times:
        level = np.zeros(len(problem.contexts))
        for c, a, b, nbytes in intervals:
            if a <= t < b:
                level[c] += nbytes
        peaks = np.maximum(peaks, level)
    return peaks


def check_schedule(problem: Problem, part: Partition, s: Schedule, cap: np.ndarray) -> None:
    """Units on their subgraph's context; inputs arrive before a unit starts; slots
    run one unit at a time; live memory under the caps."""
    assert (s.context == part.unit_context).all()
    assert (s.subgraph == part.subgraph).all()
    for u in range(len(problem)):
        c = int(s.context[u])
        assert s.finish[u] == pytest.approx(s.start[u] + problem.seconds[u, c])
        for j in range(problem.dep_ptr[u], problem.dep_ptr[u + 1]):
            d = int(problem.dep_idx[j])
            arrive = s.finish[d] + problem.comm(problem.dep_bytes[j], int(s.context[d]), c)
            assert s.start[u] >= arrive - 1e-9
    for c, ctx in enumerate(problem.contexts):
        for slot in range(ctx.slots):
            on = np.flatnonzero((s.context == c) & (s.slot == slot))
            on = on[np.argsort(s.start[on], kind="stable")]
            assert (s.start[on][1:] >= s.finish[on][:-1] - 1e-9).all()
    assert (live_peaks(problem, s) <= cap + 1e-6).all()


def test_chains_stay_in_one_subgraph() -> None:
    """Twelve chains of 3 to 5 tasks (added level by level, so a chain's ids are not
    consecutive) that all meet in one sink:

        a0 -> a1 -> a2 -> a3          (lengths 3, 4, 5, 3, 4, 5, ...)
        b0 -> b1 -> b2 -> b3 -> b4
        ...                     \\-> join
    """
    g = Graph()
    lengths = [3 + i % 3 for i in range(12)]
    chains: list[list[TaskRef]] = [[] for _ in lengths]
    for level in range(max(lengths)):
        for i, length in enumerate(lengths):
            if level < length:
                inputs = chains[i][-1:] if chains[i] else [i]
                chains[i].append(g.add(abs, *inputs, name=f"c{i}-{level}"))
    g.add(max, *[chain[-1] for chain in chains], name="join")
    problem = build_problem(g, [Context("x", slots=1), Context("y", slots=1)])

    part = partition(problem, INF2)

    check_partition(problem, part, INF2)
    for chain in chains:
        assert len({int(part.subgraph[t.id]) for t in chain}) == 1
    assert len(part.context_of_subgraph) >= len(chains)  # no two chains merged


def test_a_fan_out_is_followed_chain_by_chain() -> None:
    r"""One source feeding six chains of three, added level by level (ids 1-6 are the
    chains' heads): the source's subgraph follows one chain to its end before it
    takes another chain's head, so no chain is cut.

        src -> a0 -> a1 -> a2
           \-> b0 -> b1 -> b2
           ...
    """
    g = Graph()
    src = g.add(abs, 0, name="src")
    chains: list[list[TaskRef]] = [[] for _ in range(6)]
    for level in range(3):
        for i, chain in enumerate(chains):
            chain.append(g.add(abs, chain[-1] if chain else src, name=f"c{i}-{level}"))
    problem = build_problem(g, [Context("x", slots=1)])

    part = partition(problem, np.array([math.inf]))

    check_partition(problem, part, np.array([math.inf]))
    for chain in chains:
        assert len({int(part.subgraph[t.id]) for t in chain}) == 1


def test_subgraph_work_stays_near_a_quarter_of_a_worker_share() -> None:
    """A chain of 40 one-second tasks on 2 workers: subgraphs of at most 40 / (2 x 4)
    = 5 s, so the chain is cut into at least 8 pieces."""
    g = Graph()
    one = Cost(seconds=1.0)
    x = g.add(abs, 0, cost=one)
    for i in range(39):
        x = g.add(abs, x, name=f"step{39 - i}", cost=one)
    problem = build_problem(g, [Context("x", slots=2)])

    part = partition(problem, np.array([math.inf]))

    check_partition(problem, part, np.array([math.inf]))
    assert len(part.expected_runtime) >= 8
    assert (part.expected_runtime <= 5.0 + 1e-9).all()


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_partition_and_merge(seed: int) -> None:
    contexts = [Context("a", slots=2), Context("b", slots=3)]
    problem = build_problem(random_graph(70, seed, memory=True), contexts)
    cap = np.array([220.0, 330.0])
    assert (live_peaks(problem, merge(problem, INF2)) > cap).any()  # the cap binds

    part = partition(problem, cap)
    check_partition(problem, part, cap)
    schedule = merge(problem, cap)
    check_schedule(problem, part, schedule, cap)


@pytest.mark.parametrize("seed", range(4))
def test_units_only_go_where_they_can_run(seed: int) -> None:
    problem = build_problem(random_graph(80, seed, gpu=True), cpu_gpu())

    part = partition(problem, INF2)
    check_partition(problem, part, INF2)
    check_schedule(problem, part, merge(problem, INF2), INF2)
    assert (part.unit_context == 1).any() and (part.unit_context == 0).any()


def test_gpu_friendly_tasks_go_to_the_gpu() -> None:
    """Six pipelines load -> compute -> save; loads and saves run on CPUs only, the
    compute takes 8 s on a CPU and 1 s on the GPU, so every compute belongs there
    (six in a row on the GPU end by 8 s; one on a CPU alone would end at 10 s)."""
    g = Graph()
    one = Cost(seconds=1.0)
    loads = [g.add(abs, i, name=f"load{i}", cost=one) for i in range(6)]
    computes = [
        g.add(abs, x, name=f"compute{i}", cost=Cost(seconds={"cpu": 8.0, "gpu": 1.0}))
        for i, x in enumerate(loads)
    ]
    for i, x in enumerate(computes):
        g.add(abs, x, name=f"save{i}", cost=one)
    problem = build_problem(g, [Context("cpu", slots=4), Context("gpu", kind="gpu", slots=1)])

    part = partition(problem, INF2)
    schedule = merge(problem, INF2)

    check_schedule(problem, part, schedule, INF2)
    assert [int(part.unit_context[t.id]) for t in computes] == [1] * 6
    assert [int(schedule.context[t.id]) for t in loads] == [0] * 6
    assert schedule.makespan <= 8.0 + 1e-3  # plus two link latencies per pipeline


def test_idle_cpus_help_a_backed_up_gpu() -> None:
    """Sixteen pipelines load -> compute -> one sum: all sixteen computes on the GPU
    end at 18 s; CPU workers that take a few (8 s each) end it by 14 s."""
    g = Graph()
    one = Cost(seconds=1.0)
    loads = [g.add(abs, i, name=f"load{15 - i}", cost=one) for i in range(16)]
    gpu_friendly = Cost(seconds={"cpu": 8.0, "gpu": 1.0})
    computes = [g.add(abs, x, name=f"compute{i}", cost=gpu_friendly) for i, x in enumerate(loads)]
    g.add(sum, computes, name="sum", cost=one)
    problem = build_problem(g, [Context("cpu", slots=4), Context("gpu", kind="gpu", slots=1)])

    schedule = merge(problem, INF2)

    on_cpu = int((schedule.context[[t.id for t in computes]] == 0).sum())
    assert 1 <= on_cpu <= 6
    assert schedule.makespan <= 14.0 + 1e-3  # plus link latencies


def test_a_cpu_subgraph_does_not_grow_into_a_gpu_friendly_task() -> None:
    """load -> compute -> save beside 40 one-second CPU tasks (so a subgraph may hold
    5.4 s of work): the compute takes 2 s on a CPU and 0.25 s on the GPU, and the
    subgraph that starts at the load leaves it to the GPU."""
    g = Graph()
    for i in range(40):
        g.add(abs, i, name=f"filler{i}", cost=Cost(seconds=1.0))
    load = g.add(abs, 0, name="load", cost=Cost(seconds=1.0))
    compute = g.add(abs, load, name="compute", cost=Cost(seconds={"cpu": 2.0, "gpu": 0.25}))
    g.add(abs, compute, name="save", cost=Cost(seconds=1.0))
    problem = build_problem(g, [Context("cpu", slots=1), Context("gpu", kind="gpu", slots=1)])

    part = partition(problem, INF2)

    assert part.unit_context[compute.id] == 1


def test_memory_cap_bounds_subgraphs_and_schedule() -> None:
    """A wide fan-out whose outputs do not all fit at once: 16 producers of 40 bytes
    feeding one sum, 100 bytes per context."""
    g = Graph()
    parts = [g.add(abs, i, cost=Cost(memory=10, output_bytes=40)) for i in range(16)]
    g.add(sum, parts, cost=Cost(memory=10, output_bytes=1))
    problem = build_problem(g, [Context("a", slots=2), Context("b", slots=2)])
    cap = np.array([100.0, 100.0])

    part = partition(problem, cap)
    check_partition(problem, part, cap)
    # one slot's share is 50 bytes: a subgraph holds at most one 40-byte result
    assert len(part.context_of_subgraph) >= 16


def test_partition_of_nothing() -> None:
    problem = build_problem(Graph(), [Context("a")])
    part = partition(problem, np.array([math.inf]))
    assert len(part.subgraph) == 0 and len(part.context_of_subgraph) == 0
