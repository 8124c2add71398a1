"""Memory bounds of a run: how many superchunks are held at once (the scheduler admits top-level
tasks against the flow's budget), and in what order
top-level tasks get them (the chunk cache relies on that order)."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph import volume
from chunkgraph.flow import _apply, apply
from chunkgraph.flow.plan._estimate import top_task_memory
from chunkgraph.flow.plan._spec import validate_flow
from chunkgraph.flow.run import _top_task
from chunkgraph.flow.run._top_task import superchunks_in_flight
from chunkgraph.geometry import Box


@settings(max_examples=40, deadline=None)
@given(
    top=st.integers(4, 40),
    bottom=st.integers(1, 12),
    crop=st.integers(0, 3),
    cores=st.integers(1, 64),
)
def test_bound_covers_the_cores_with_bottom_chunks(
    top: int, bottom: int, crop: int, cores: int
) -> None:
    """The bound is the fewest tasks whose bottom chunks (counted by a dry run) cover the cores."""
    common = math.gcd(top + 2 * crop, top)  # bottom chunks tile both axes' regions
    bottom = min(bottom, common)
    while common % bottom:
        bottom -= 1
    name = f"mem-bound-{top}-{bottom}-{crop}"
    src = volume.create(name, (2 * top, top), (4, 4), "float32", backend="memory", exist_ok=True)
    dst = volume.create(
        name + "-dst", src.shape, (4, 4), "float32", backend="memory", exist_ok=True
    )
    try:
        flow: dict[str, Any] = dict(
            chunk_sizes=[(top, top), (bottom, bottom)], crop_pads=[(crop, 0), 0]
        )
        report = apply(lambda x: x, src, dst, dry_run=True, **flow)
        per_top = report.tasks_per_level[1] // report.tasks_per_level[0]
        spec = validate_flow(lambda x: x, src, dst, **flow)
        assert superchunks_in_flight(spec, cores) == max(1, -(-cores // per_top))
    finally:
        volume.remove(src.path)
        volume.remove(dst.path)


def test_one_level_flows_hold_one_superchunk_per_core(files: Any) -> None:
    """A one-level task is its own bottom chunk: the rule gives one per core, no more than
    the memory budget holds."""
    src = files.empty((16, 16), (4, 4), "uint8", backend="memory")
    dst = files.empty((16, 16), (4, 4), "uint8", backend="memory")
    spec = validate_flow(lambda x: x, src, dst, chunk_sizes=(8, 8))
    assert superchunks_in_flight(spec, 4) == 4
    assert superchunks_in_flight(spec, 4, memory_limit=250, top_bytes=100) == 2
    assert superchunks_in_flight(spec, 4, memory_limit=50, top_bytes=100) == 1


@pytest.mark.parametrize(
    ("chunk_sizes", "crop_pads"),
    [((8, 16), 2), ([(8, 32), (8, 8)], [0, 2])],
    ids=["one-level", "two-level"],
)
def test_the_run_admits_the_superchunks_the_planner_counted(
    files: Any, monkeypatch: pytest.MonkeyPatch, chunk_sizes: Any, crop_pads: Any
) -> None:
    """The run's memory budget (what the executor admits top-level tasks against) holds
    exactly the plan's ``superchunks_in_flight`` top-level tasks.

    ::

        one level:  8 x 16 chunks over 16 x 32, crop 2: 4 tasks, 1 bottom chunk each,
                    workers=2 -> 2 in flight
        two levels: 8 x 32 over 8 x 8, crop 2 below: 2 tasks, 1 x 4 bottom chunks each,
                    workers=2 -> 1 in flight
    """
    import chunkgraph.planning

    budgets: list[dict[str, float]] = []
    real_plan = chunkgraph.planning.plan

    def spy(*args: Any, **kwargs: Any) -> Any:
        budgets.append(dict(kwargs.get("memory") or {}))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(chunkgraph.planning, "plan", spy)
    data = files.random((16, 32), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((16, 32), (8, 8), "float32")
    flow: dict[str, Any] = dict(chunk_sizes=chunk_sizes, crop_pads=crop_pads)
    report = apply(
        lambda x: x, src, dst, workers=2, executor="threads", intermediates=files.root / "t", **flow
    )
    np.testing.assert_array_equal(dst.read(Box.from_shape((16, 32))), data)
    assert report.plan is not None
    expected = 2 if isinstance(chunk_sizes, tuple) else 1
    assert report.plan.superchunks_in_flight == expected
    top = top_task_memory(validate_flow(lambda x: x, src, dst, **flow), {"src": src}, dst)
    assert budgets and budgets[-1]
    for budget in budgets[-1].values():
        assert budget == report.plan.superchunks_in_flight * top


@pytest.mark.parametrize("cores", [2, 64])
def test_run_holds_at_most_the_bound(
    files: Any, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    """Count top-level tasks holding their superchunk at once, under the threads executor."""
    monkeypatch.setattr(_apply, "usable_cores", lambda: cores)
    inner = _top_task._run_top_task
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def counting(*args: Any) -> Any:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            return inner(*args)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(_top_task, "_run_top_task", counting)
    data = files.random((8, 32, 32), "float32")
    src = volume.open(files.source(data, (8, 8, 8)).path, cache_bytes=3 * 16 * 8**3 * 4)
    dst = files.empty((8, 32, 32), (8, 8, 8), "float32")

    def slow_identity(x: np.ndarray) -> np.ndarray:
        time.sleep(0.002)  # long enough for the executor to start the next task meanwhile
        return x

    report = apply(
        slow_identity,
        src,
        dst,
        chunk_sizes=[(8, 8, 32), (8, 8, 8)],
        crop_pads=[0, 2],
        executor="threads",
        intermediates=files.root / "t",
    )
    # 4 bottom chunks per top task: 1 slot for 2 cores, 16 for 64 (more than the tasks)
    spec = validate_flow(
        slow_identity, src, dst, chunk_sizes=[(8, 8, 32), (8, 8, 8)], crop_pads=[0, 2]
    )
    bound = superchunks_in_flight(spec, cores)
    assert bound == (1 if cores == 2 else 16)
    assert 1 <= state["most"] <= bound
    assert report.read_amplification == 1.0
    np.testing.assert_array_equal(dst.read(Box.from_shape((8, 32, 32))), data)
    assert _top_task._READ_LOCKS == {}  # forgotten after the run


@pytest.mark.parametrize(("workers", "expect_parallel"), [(1, False), (4, True)])
def test_workers_sets_the_concurrency_of_a_two_level_flow(
    files: Any, workers: int, expect_parallel: bool
) -> None:
    """``workers`` is the cores a two-level flow plans for: one worker runs one fn call at a
    time, four run several at once (whatever the machine's cores: sleeps release the GIL)."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def sleepy(x: np.ndarray) -> np.ndarray:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.05)
            return x
        finally:
            with lock:
                state["now"] -= 1

    data = files.random((16, 32), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((16, 32), (8, 8), "float32")
    flow: dict[str, Any] = dict(chunk_sizes=[(8, 16), (4, 4)], executor="threads", probe=False)
    # A fast fn first, in the same process: what the pool learnt of it must not keep the
    # slow fn's chunks in one sequential piece.
    for _ in range(3):
        apply(lambda x: x, src, dst, workers=workers, intermediates=files.root / "f", **flow)
    report = apply(
        sleepy,
        src,
        dst,
        workers=workers,
        intermediates=files.root / "t",
        **flow,  # 4 top tasks of 8 bottom chunks
    )
    assert report.tasks_per_level == (4, 32)
    np.testing.assert_array_equal(dst.read(Box.from_shape((16, 32))), data)
    if expect_parallel:
        assert 1 < state["most"] <= workers
    else:
        assert state["most"] == 1
