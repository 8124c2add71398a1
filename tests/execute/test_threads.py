"""Thread-executor specifics: memory release, grouped failures, Ctrl-C, nested runs, the pool."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from tests.execute._tasks import interrupt, mix

from chunkgraph._errors import TaskError
from chunkgraph.execute import Scheduler, run
from chunkgraph.execute._thread_pool import acquire_pool, release_pool
from chunkgraph.graph import Graph


class Blob:
    """A stand-in for a large intermediate result; counts live instances."""

    live = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, value: int) -> None:
        self.value = value
        with Blob.lock:
            Blob.live += 1
            Blob.peak = max(Blob.peak, Blob.live)

    def __del__(self) -> None:
        with Blob.lock:
            Blob.live -= 1


def make_blob(value: int, *inputs: Blob) -> Blob:
    return Blob(value + sum(b.value for b in inputs))


def total(*blobs: Blob) -> int:
    return sum(b.value for b in blobs)


@pytest.mark.parametrize("kind", ["sync", "threads"])
def test_intermediates_are_freed_while_the_run_goes_on(kind: Any) -> None:
    """A chain a0 -> a1 -> ... -> a9; each step checks that the step before last is gone.

    a_k's only consumer is a_{k+1}; once a_{k+1} finished, a_k must be released
    even though the run is far from done.
    """
    refs: list[weakref.ref[Blob]] = []
    dead_when_checked: list[bool] = []

    def step(k: int, prev: Blob | None) -> Blob:
        if k >= 2:
            dead_when_checked.append(refs[k - 2]() is None)
        blob = Blob(k)
        refs.append(weakref.ref(blob))
        return blob

    g = Graph()
    x = g.add(step, 0, None)
    for k in range(1, 10):
        x = g.add(step, k, x)
    assert run(g, x, executor=kind, workers=2).value == 9
    assert dead_when_checked == [True] * 8


def test_peak_live_results_stay_far_below_the_graph_width() -> None:
    """512 leaves under a fan-in-8 tree: priority order plus release keeps few alive.

    leaf x8 -> sum, x64 sums -> root sums (the reduction of Blob values)
    """
    gc.collect()  # blobs of earlier tests die now, not during the count
    Blob.live = Blob.peak = 0
    g = Graph()
    mids = []
    for k in range(64):
        leaves = [g.add(make_blob, 8 * k + j) for j in range(8)]
        mids.append(g.add(make_blob, 0, *leaves))
    root = g.add(total, *mids)
    assert run(g, root, workers=2) == sum(range(512))
    assert Blob.live == 0
    # Kept alive: at most a few batches of leaves per worker plus the 64 sums
    # the root waits for; without release all 576 blobs would be alive at once.
    assert Blob.peak < 64 + 4 * 64


def test_every_concurrently_failing_task_is_in_the_group() -> None:
    """Two tasks that fail together (a barrier makes both start) are both reported.

    left (fails)   right (fails)
         \\          /
           never-runs
    """
    barrier = threading.Barrier(2, timeout=60)

    def fail_together(side: str) -> None:
        barrier.wait()
        raise ValueError(f"{side} broke")

    g = Graph()
    left = g.add(fail_together, "left", name="left")
    right = g.add(fail_together, "right", name="right")
    g.add(mix, 0, left, right, name="never-runs")
    with pytest.raises(ExceptionGroup) as info:
        run(g, workers=2)
    errors = info.value.exceptions
    assert all(isinstance(e, TaskError) for e in errors)
    assert sorted(e.task for e in errors) == ["left", "right"]  # type: ignore[attr-defined]
    assert sorted(str(e.__cause__) for e in errors) == ["left broke", "right broke"]


def test_keyboard_interrupt_in_a_task_cancels_and_reraises() -> None:
    started: list[int] = []

    def record(i: int, *_: object) -> int:
        started.append(i)
        return i

    g = Graph()
    stop = g.add(interrupt, name="stop")
    for i in range(50):
        g.add(record, i, stop)  # every other task needs the interrupted one
    with pytest.raises(KeyboardInterrupt):
        run(g, workers=2)
    assert started == []
    assert run(g, g.add(mix, 1)) == mix(1)  # the shared pool still works afterwards


def test_run_inside_a_task_uses_its_own_pool() -> None:
    """Every shared worker is busy with an outer task that runs an inner graph."""

    def inner(i: int) -> int:
        g = Graph()
        parts = [g.add(mix, i, j) for j in range(5)]
        return int(run(g, g.add(mix, 0, *parts), workers=2))

    g = Graph()
    outer = [g.add(inner, i) for i in range(4)]
    expected = [mix(0, *[mix(i, j) for j in range(5)]) for i in range(4)]
    assert run(g, outer, workers=2) == expected


def test_the_shared_pool_persists_between_runs() -> None:
    pool, shared = acquire_pool(2)
    release_pool(pool, shared)
    g = Graph()
    g.add(mix, 1)
    run(g, workers=2)
    again, shared_again = acquire_pool(2)
    release_pool(again, shared_again)
    assert shared and shared_again and again is pool
    assert all(t.is_alive() for t in pool._threads)


def test_a_lent_pool_is_not_lent_twice() -> None:
    first, shared = acquire_pool(2)
    second, second_shared = acquire_pool(2)
    try:
        assert shared and not second_shared and second is not first
    finally:
        release_pool(second, second_shared)
        release_pool(first, shared)
    assert not any(t.is_alive() for t in second._threads)


def _nested_run(i: int) -> int:
    inner = Graph()
    return run(inner, inner.add(pow, i, 2), workers=2)  # type: ignore[no-any-return]


def _run_from_other_threads() -> list[int]:
    with ThreadPoolExecutor(2) as others:  # not executor threads: the case that deadlocked
        return list(others.map(_nested_run, range(6)))


def test_run_inside_a_task_from_another_thread_does_not_deadlock() -> None:
    """outer task ──> plain threads ──> run(inner graph): the outer run holds the pool."""
    g = Graph()
    outcome: list[object] = []
    driver = threading.Thread(
        target=lambda: outcome.append(run(g, g.add(_run_from_other_threads), workers=2))
    )
    driver.start()
    driver.join(timeout=60)
    assert not driver.is_alive(), "nested run deadlocked"
    assert outcome == [[0, 1, 4, 9, 16, 25]]


def test_runs_with_many_worker_counts_do_not_accumulate_threads() -> None:
    g = Graph()
    g.add(mix, 1)
    run(g, workers=3)
    before = threading.active_count()
    for workers in range(1, 12):
        run(g, workers=workers)
    run(g, workers=3)
    assert threading.active_count() <= before


def test_a_fault_in_the_bookkeeping_surfaces_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injection: Scheduler.finish breaks; the run must raise, not wait forever."""

    def broken_finish(self: Scheduler, t: int, value: object) -> int:
        raise RuntimeError("bookkeeping fault")

    g = Graph()
    parts = [g.add(mix, i) for i in range(20)]
    g.add(mix, 0, *parts)
    monkeypatch.setattr(Scheduler, "finish", broken_finish)
    with pytest.raises(RuntimeError, match="bookkeeping fault"):
        run(g, workers=2)
    monkeypatch.undo()
    assert run(g, parts[3], workers=2) == mix(3)  # the shared pool survived
