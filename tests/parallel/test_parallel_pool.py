"""The work-stealing pool: join, stealing, helping, counters, lifetime."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.parallel import PoolStats, WorkStealingPool, get_pool, parallel_reduce, set_workers


def test_join_returns_both_values() -> None:
    pool = WorkStealingPool(2)
    try:
        with pool.participate():
            assert pool.join(lambda s: "left", lambda s: 42) == ("left", 42)
    finally:
        pool.close()


def test_join_outside_the_pool_says_how_to_enter() -> None:
    pool = WorkStealingPool(1)
    with pytest.raises(RuntimeError, match="participate"):
        pool.join(lambda s: 1, lambda s: 2)
    pool.close()


def test_single_worker_runs_everything_inline_in_order() -> None:
    pool = WorkStealingPool(1)
    calls: list[str] = []
    with pool.participate():
        pool.join(
            lambda s: calls.append(f"left stolen={s}"), lambda s: calls.append(f"right stolen={s}")
        )
    assert calls == ["left stolen=False", "right stolen=False"]
    assert pool.stats() == PoolStats(forks=1, inline=1)
    assert (pool.dispatch_overhead(), pool.handoff_latency()) == (0.0, 0.0)
    pool.close()


@pytest.mark.timeout(60)
def test_a_blocked_left_half_gets_its_right_half_stolen() -> None:
    """left waits until right has run, so right must run on another thread."""
    pool = WorkStealingPool(2)
    right_ran = threading.Event()
    threads: dict[str, str] = {}

    def left(stolen: bool) -> bool:
        threads["left"] = threading.current_thread().name
        return right_ran.wait(20)

    def right(stolen: bool) -> bool:
        threads["right"] = threading.current_thread().name
        right_ran.set()
        return stolen

    try:
        with pool.participate():
            assert pool.join(left, right) == (True, True)
        assert threads["left"] != threads["right"]
        assert pool.stats().steals == 1
    finally:
        pool.close()


def test_errors_propagate_after_both_halves_finished() -> None:
    pool = WorkStealingPool(2)
    finished: list[str] = []

    def left(stolen: bool) -> None:
        raise KeyError("left broke")

    def right(stolen: bool) -> None:
        finished.append("right")

    try:
        with pool.participate(), pytest.raises(KeyError, match="left broke"):
            pool.join(left, right)
        assert finished == ["right"]
        with pool.participate(), pytest.raises(ZeroDivisionError):
            pool.join(lambda s: None, lambda s: 1 / 0)
    finally:
        pool.close()


@pytest.mark.timeout(60)
def test_deep_nested_joins_from_several_outside_threads_finish() -> None:
    pool = WorkStealingPool(3)

    def tree(depth: int) -> int:
        if depth == 0:
            return 1
        a, b = pool.join(lambda s: tree(depth - 1), lambda s: tree(depth - 1))
        return a + b

    results: list[int] = []

    def outside() -> None:
        with pool.participate():
            results.append(tree(7))

    threads = [threading.Thread(target=outside) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    pool.close()
    assert results == [128] * 4
    assert pool.stats().forks == 4 * 127


def test_close_stops_helper_threads() -> None:
    pool = WorkStealingPool(3)
    helpers = list(pool._threads)
    assert all(t.is_alive() for t in helpers)
    pool.close()
    assert not any(t.is_alive() for t in helpers)
    with pytest.raises(RuntimeError, match="closed"), pool.participate():
        pass


def test_set_workers_replaces_the_process_wide_pool(
    use_pool: Callable[[int], WorkStealingPool],
) -> None:
    old = get_pool()
    new = use_pool(3)
    assert get_pool() is new and new is not old and new.workers == 3
    assert set_workers(None).workers >= 1


@pytest.mark.parametrize("workers", [0, -2, 1.5, True])
def test_bad_worker_counts_are_config_errors(workers: object) -> None:
    with pytest.raises(ConfigError, match="workers"):
        WorkStealingPool(workers)  # type: ignore[arg-type]


def test_overheads_are_measured_once_and_positive() -> None:
    pool = WorkStealingPool(2)
    try:
        dispatch, latency = pool.dispatch_overhead(), pool.handoff_latency()
        assert 0.0 < dispatch < 1.0 and 0.0 < latency < 1.0
        assert (pool.dispatch_overhead(), pool.handoff_latency()) == (dispatch, latency)
        assert pool.stats() == PoolStats()  # measuring does not count
    finally:
        pool.close()


def test_unknown_counter_is_rejected() -> None:
    pool = WorkStealingPool(1)
    with pool.participate(), pytest.raises(ConfigError, match="rearms"):
        pool.count("nope")
    pool.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_a_forked_child_gets_a_fresh_working_pool() -> None:
    parent = get_pool()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report whether a loop works on a new pool, then exit at once
        try:
            child = get_pool()
            total = parallel_reduce(1000, lambda a, b: b - a, lambda p, q: p + q, 0, grain=10)
            ok = child is not parent and total == 1000
        except BaseException:
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"


Tree = int | list["Tree"]
trees = st.recursive(
    st.integers(-100, 100), lambda kids: st.lists(kids, min_size=1, max_size=4), max_leaves=60
)


def flat_sum(tree: Tree) -> int:
    return tree if isinstance(tree, int) else sum(flat_sum(t) for t in tree)


@pytest.fixture(scope="module")
def pool3() -> Iterator[WorkStealingPool]:
    """One 3-worker pool for all examples (starting a pool per example is slow)."""
    pool = WorkStealingPool(3)
    yield pool
    pool.close()


@settings(max_examples=40, deadline=None)
@given(tree=trees)
def test_any_fork_join_tree_computes_what_the_sequential_code_does(
    pool3: WorkStealingPool, tree: Tree
) -> None:
    def total(node: Tree) -> int:
        if isinstance(node, int):
            return node
        if len(node) == 1:
            return total(node[0])
        half = len(node) // 2
        a, b = pool3.join(lambda s: total(node[:half]), lambda s: total(node[half:]))
        return a + b

    with pool3.participate():
        assert total(tree) == flat_sum(tree)
