"""PartitionRunner: nodes, pinning, serial on_done, errors, lifetime; and Topology."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, UsageError
from chunkgraph.parallel import (
    ActivationEvent,
    PartitionRunner,
    Topology,
    get_pool,
    parallel_map,
)
from chunkgraph.parallel._signals import Reading

AFFINITY = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
two_cpus = pytest.mark.skipif(
    not {0, 1} <= AFFINITY or not hasattr(os, "sched_setaffinity"),
    reason="needs CPUs 0 and 1 and thread pinning",
)


class Growing:
    """Every check is accepted and the I/O rate doubles: every check grows."""

    def __init__(self) -> None:
        self.k = 0

    def start(self) -> float:
        return 0.0

    def sample(self) -> Reading:
        self.k += 1
        return Reading(float(self.k), 0.0, float(2**self.k))


class Flat:
    """Every check is accepted and nothing grows: the initial activation stays."""

    def start(self) -> float:
        return 0.0

    def sample(self) -> Reading:
        return Reading(1.0, 0.0, None)


def only_cpu(cpus: set[int] | frozenset[int]) -> Topology:
    return Topology.of(sorted(cpus) or [0])


@pytest.fixture
def failing_thread_keeps_the_gil() -> Iterator[None]:
    """Between ``f`` raising and its worker stopping the run, the failing thread runs a
    few bytecodes without blocking. Other threads get the GIL from it only after the
    switch interval (5 ms); a machine that pauses the failing thread longer than that
    let them start partitions in between. With 1 s, the window closes."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def test_a_real_run_of_cpu_work_returns_every_result() -> None:
    results: dict[int, float] = {}

    def work(i: int) -> float:
        rng = np.random.default_rng(i)
        a = rng.random((60, 60))
        return float(np.linalg.norm(a @ a))

    with PartitionRunner() as runner:
        runner.run(range(48), work, lambda i, r, s: results.__setitem__(i, r))
    assert results == {i: work(i) for i in range(48)}
    assert runner.timeline and runner.timeline[0].cpu is None


@two_cpus
def test_two_nodes_stay_balanced_pinned_and_use_their_own_pool() -> None:
    """A fake two-node topology: node 0 is CPU 0, node 1 is CPU 1. No partition ends
    before both nodes have started one, so a node whose CPU another process keeps busy
    cannot find the work all taken by the other when its first worker gets to run."""
    seen: list[tuple[str, frozenset[int], int, list[int]]] = []
    lock = threading.Lock()
    started: set[str] = set()
    both = threading.Event()

    def f(i: int) -> int:
        node = threading.current_thread().name.split("-")[1]
        with lock:
            started.add(node)
            if len(started) == 2:
                both.set()
        both.wait(60)
        time.sleep(0.005)
        nested = parallel_map(lambda x: x + 1, range(4))  # runs on the node's pool
        with lock:
            seen.append((node, frozenset(os.sched_getaffinity(0)), get_pool().workers, nested))
        return i

    runner = PartitionRunner(Topology.of([0], [1]), workers_per_node=8, sampler=Growing())
    runner.run(range(60), f)
    assert all(e.active[0] == e.active[1] for e in runner.timeline)
    assert runner.timeline[-1].active == (8, 8)
    assert {(node, cpus) for node, cpus, _, _ in seen} == {
        ("node0", frozenset({0})),
        ("node1", frozenset({1})),
    }
    per_node = Counter(node for node, _, _, _ in seen)
    assert min(per_node.values()) >= 10, per_node  # both nodes take work
    assert {workers for _, _, workers, _ in seen} == {1}  # a node pool of its 1 CPU
    assert all(nested == [1, 2, 3, 4] for *_, nested in seen)
    assert get_pool().workers == len(AFFINITY)  # the caller still sees the process pool
    assert set(os.sched_getaffinity(0)) == AFFINITY  # pinning touched worker threads only


def test_one_node_does_not_pin_and_nested_loops_use_the_process_pool() -> None:
    seen: list[tuple[frozenset[int], object]] = []

    def f(i: int) -> None:
        seen.append((frozenset(os.sched_getaffinity(0)), get_pool()))

    PartitionRunner(only_cpu(AFFINITY), workers_per_node=2).run(range(4), f)
    assert {cpus for cpus, _ in seen} == {frozenset(AFFINITY)}
    assert {id(pool) for _, pool in seen} == {id(get_pool())}


def test_on_done_calls_never_overlap_and_run_on_the_calling_thread() -> None:
    inside = threading.Event()
    overlaps: list[int] = []
    threads: set[threading.Thread] = set()

    def on_done(i: int, result: int, elapsed: float) -> None:
        if inside.is_set():
            overlaps.append(i)
        inside.set()
        threads.add(threading.current_thread())
        time.sleep(0.002)  # wide enough that a concurrent call would be caught
        assert result == 2 * i and elapsed >= 0.0
        inside.clear()

    runner = PartitionRunner(only_cpu(AFFINITY), workers_per_node=16, sampler=Growing())
    runner.run(range(80), lambda i: 2 * i, on_done)
    assert overlaps == []
    assert threads == {threading.current_thread()}


def test_every_failure_is_raised_together_and_a_failure_stops_new_partitions(
    failing_thread_keeps_the_gil: None,
) -> None:
    """Four active workers meet at a barrier; partitions 1 and 3 then fail together.
    The other partitions last until then: however late a loaded machine brings the four
    to the barrier, those started meanwhile are at most one per other worker."""
    barrier = threading.Barrier(4, timeout=60)
    failing = threading.Event()
    started: list[int] = []

    def f(i: int) -> int:
        started.append(i)
        if i < 4:
            barrier.wait()
            if i % 2:
                failing.set()
                raise ValueError(f"bad partition {i}")
        else:
            failing.wait(60)
        return i

    runner = PartitionRunner(only_cpu(AFFINITY), workers_per_node=16, sampler=Flat())
    with pytest.raises(ExceptionGroup) as caught:
        runner.run(range(200), f)
    group = caught.value
    assert sorted(str(e) for e in group.exceptions) == ["bad partition 1", "bad partition 3"]
    assert all(isinstance(e, ValueError) for e in group.exceptions)
    notes = {note for error in group.exceptions for note in error.__notes__}
    assert notes == {"raised by f(1)", "raised by f(3)"}
    assert "200 partitions: 2 failed" in str(group)
    assert len(started) < 20  # 16 workers: the rest never started


def test_errors_in_on_done_are_collected_too() -> None:
    def on_done(i: int, result: int, elapsed: float) -> None:
        raise KeyError(i)

    with pytest.raises(ExceptionGroup) as caught:
        PartitionRunner(only_cpu(AFFINITY), workers_per_node=1).run([7], lambda i: i, on_done)
    (error,) = caught.value.exceptions
    assert isinstance(error, KeyError)
    assert "raised by on_done for partition 7" in error.__notes__[0]


@pytest.mark.parametrize("fails", [False, True])
def test_dormant_workers_exit_after_each_run_and_the_runner_runs_again(fails: bool) -> None:
    topology = Topology.of([0], [1]) if {0, 1} <= AFFINITY else only_cpu(AFFINITY)
    baseline = threading.active_count()
    done: list[int] = []

    def f(i: int) -> int:
        if fails and i == 3:
            raise RuntimeError("boom")
        return i

    # 32 workers per node, 8 active per node: most stay dormant.
    with PartitionRunner(topology, workers_per_node=32, sampler=Flat()) as runner:
        for _ in range(3):
            try:
                runner.run(range(10), f, lambda i, r, s: done.append(r))
            except ExceptionGroup:
                assert fails
            assert threading.active_count() == baseline
    if not fails:
        assert sorted(done) == sorted(list(range(10)) * 3)
    with pytest.raises(UsageError, match="closed"):
        runner.run(range(3), f)


def test_subscribers_get_every_activation_event_and_the_plot_is_a_png(tmp_path: Path) -> None:
    events: list[ActivationEvent] = []
    runner = PartitionRunner(
        only_cpu(AFFINITY), workers_per_node=8, subscribers=[events.append], sampler=Growing()
    )
    runner.run(range(30), lambda i: time.sleep(0.002))
    assert events == runner.timeline
    assert [e.active for e in events[:3]] == [(2,), (3,), (4,)]
    assert runner.plot(tmp_path / "ramp.png").read_bytes()[:4] == b"\x89PNG"


def test_an_empty_order_starts_nothing() -> None:
    runner = PartitionRunner(only_cpu(AFFINITY), workers_per_node=4)
    runner.run([], lambda i: i)
    assert runner.timeline == []


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError, match="workers_per_node"):
        PartitionRunner(Topology.of([0]), workers_per_node=0)
    with pytest.raises(ConfigError, match="pin"):
        PartitionRunner(Topology.of([0], [10_000]))
    with pytest.raises(ConfigError, match="poll_interval"):
        PartitionRunner(Topology.of([0]), poll_interval=0)


def test_default_workers_are_four_per_cpu_of_each_node() -> None:
    assert PartitionRunner(Topology.of([0, 1])).caps == (8,)
    if {0, 1} <= AFFINITY:
        assert PartitionRunner(Topology.of([0], [1]), workers_per_node=3).caps == (3, 3)


# -- Topology ----------------------------------------------------------------


def fake_sys(root: Path, cpulists: list[str]) -> Path:
    for n, text in enumerate(cpulists):
        (root / f"node{n}").mkdir(parents=True)
        (root / f"node{n}" / "cpulist").write_text(text + "\n")
    return root


@two_cpus
def test_detect_reads_each_node_s_usable_cpus(tmp_path: Path) -> None:
    topology = Topology.detect(fake_sys(tmp_path, ["0,4000-4003", "1"]))
    assert topology.nodes == (frozenset({0}), frozenset({1}))
    assert topology.is_numa and topology.sizes == (1, 1)


def test_detect_falls_back_to_one_node_of_every_usable_cpu(tmp_path: Path) -> None:
    whole = (frozenset(AFFINITY),)
    assert Topology.detect(tmp_path / "missing").nodes == whole
    assert Topology.detect(fake_sys(tmp_path / "uma", ["0-4095"])).nodes == whole
    assert Topology.detect(fake_sys(tmp_path / "away", ["0-4095", "5000"])).nodes == whole
    assert Topology.detect(fake_sys(tmp_path / "garbled", ["0-4095", "x-y"])).nodes == whole
    assert not Topology.detect(tmp_path / "missing").is_numa


def test_topology_refuses_empty_nodes() -> None:
    with pytest.raises(ConfigError, match="node 1"):
        Topology.of([0], [])
    with pytest.raises(ConfigError, match="at least one"):
        Topology(())
    assert repr(Topology.of([1, 0], [2])) == "Topology.of([0, 1], [2])"


def test_a_failure_stops_new_partitions_at_once_even_behind_a_slow_on_done(
    failing_thread_keeps_the_gil: None,
) -> None:
    """The failing worker stops the run itself: the driver, busy in a slow on_done,
    is not the one that has to notice."""
    started: list[tuple[int, float]] = []
    failed_at: list[float] = []

    def f(i: int) -> int:
        started.append((i, time.monotonic()))
        time.sleep(0.02)
        if i == 1:
            failed_at.append(time.monotonic())
            raise ValueError("bad partition")
        return i

    with pytest.raises(ExceptionGroup):
        PartitionRunner(Topology.of([0]), workers_per_node=4, sampler=Growing()).run(
            range(200), f, lambda i, r, s: time.sleep(0.3)
        )
    assert not [i for i, t in started if t > failed_at[0]]


def test_system_exit_and_ctrl_c_in_f_are_failures_of_f_not_the_end_of_the_caller() -> None:
    def exits(i: int) -> int:
        raise SystemExit(3)

    with pytest.raises(BaseExceptionGroup) as caught:  # not SystemExit: the program goes on
        PartitionRunner(Topology.of([0]), workers_per_node=1).run([0], exits)
    assert isinstance(caught.value.exceptions[0], SystemExit)

    def interrupted(i: int) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        PartitionRunner(Topology.of([0]), workers_per_node=1).run([0], interrupted)


def test_results_wait_for_on_done_one_per_worker_at_most() -> None:
    """Backpressure: a worker takes its next partition once on_done has its result."""
    waiting = 0
    most = 0
    lock = threading.Lock()

    def f(i: int) -> int:
        nonlocal waiting, most
        with lock:
            waiting += 1
            most = max(most, waiting)
        return i

    def on_done(i: int, result: int, seconds: float) -> None:
        nonlocal waiting
        time.sleep(0.005)  # slower than f
        with lock:
            waiting -= 1

    PartitionRunner(Topology.of([0]), workers_per_node=4, sampler=Growing()).run(
        range(60), f, on_done
    )
    assert most <= 4


def test_two_threads_cannot_run_one_runner_at_once() -> None:
    runner = PartitionRunner(Topology.of([0]), workers_per_node=1)
    gate = threading.Event()
    outcome: list[str] = []

    def slow_order():  # the first run is inside run() while the order is consumed
        gate.set()
        time.sleep(0.3)
        yield 0

    first = threading.Thread(target=lambda: runner.run(slow_order(), lambda i: i))
    first.start()
    gate.wait(5)
    try:
        runner.run([1], lambda i: i)
    except UsageError:
        outcome.append("refused")
    first.join()
    assert outcome == ["refused"]


def test_topologies_with_shared_cpus_or_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(ConfigError, match="shares CPUs"):
        Topology.of([0, 1], [1, 2])
    with pytest.raises(ConfigError, match="topology must be a Topology"):
        PartitionRunner([[0], [1]])  # type: ignore[arg-type]
