"""The process pool: shared-memory arrays, remote errors, dead workers, clean shutdown."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import multiprocessing
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkgraph import RemoteError, RemoteTraceback
from chunkgraph._errors import ConfigError, WorkerDiedError
from chunkgraph.execute.pool import _shm
from chunkgraph.execute.pool._process_pool import (
    MAX_DEPTH,
    MIN_DEPTH,
    QUEUE_SECONDS,
    PoolState,
    ProcessPool,
    queue_depth,
)
from chunkgraph.execute.pool._segment_names import list_prefix, owner_prefix
from chunkgraph.execute.pool._shm import SHM_MIN_BYTES, SegmentTable, flush_finalized

# Workers import the functions they run by module name; this module is
# ``tests.execute.test_process_pool``, importable once the repository root is on
# the path that workers inherit.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

SRC = str(Path(__file__).resolve().parents[2] / "src")
BIG = SHM_MIN_BYTES // 8 + 1  # float64 elements just above the shared-memory threshold


# -- functions run in workers ------------------------------------------------------


def describe(value: Any) -> Any:
    """What the worker received: arrays become (dtype, shape, sum, shared?, writeable?)."""
    if isinstance(value, np.ndarray):
        root: object = value
        while isinstance(root, np.ndarray) and root.base is not None:
            root = root.base
        digest = hashlib.sha1(np.ascontiguousarray(value).tobytes()).hexdigest()
        return (
            value.dtype.str,
            value.shape,
            digest,
            isinstance(root, mmap.mmap),
            value.flags.writeable,
        )
    if isinstance(value, (list, tuple)):
        return type(value)(describe(v) for v in value)
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    return value


def identity(value: Any) -> Any:
    return value


Bundle = namedtuple("Bundle", "data label")


class Unrebuildable(namedtuple("Unrebuildable", "data")):
    """A named tuple whose ``_make`` fails, so it cannot be rebuilt around a reference."""

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        raise TypeError("Unrebuildable cannot be rebuilt")


def arrival(bundle: Bundle, mapping: OrderedDict[str, Any]) -> tuple[Any, ...]:
    """How a Bundle and an OrderedDict arrived: their types, and whether their arrays are mapped."""
    return (type(bundle), type(mapping), describe(bundle.data)[3], describe(mapping["a"])[3])


def wrap_unrebuildable(size: int) -> Unrebuildable:
    return Unrebuildable(np.ones(size))


def transformed(value: Any) -> Any:
    """New values everywhere: arrays flipped (a fresh array), numbers and text doubled."""
    if isinstance(value, np.ndarray):
        return np.flip(value).copy()
    if isinstance(value, (int, str)):
        return value * 2
    if isinstance(value, (list, tuple)):
        return type(value)(transformed(v) for v in value)
    if isinstance(value, dict):
        return {k: transformed(v) for k, v in value.items()}
    return value


def fail_with(kind: type[Exception], message: str) -> None:
    raise kind(message)


class _Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}+{b}")


def fail_unpicklable() -> None:
    raise _Unpicklable(1, 2)


def exit_now(code: int) -> None:
    os._exit(code)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def segfault() -> None:
    ctypes.string_at(0)


def sleep_then(seconds: float, value: Any) -> Any:
    time.sleep(seconds)
    return value


def getpid() -> int:
    return os.getpid()


def may_start_processes() -> bool:
    return not multiprocessing.current_process().daemon


def write_into(array: np.ndarray[Any, Any]) -> None:
    array[0] = 1


def return_lock_and_array() -> Any:
    return np.ones(BIG), threading.Lock()


class _ExitWhenPickled:
    def __reduce__(self) -> Any:
        os._exit(4)


def die_while_sending() -> Any:
    """Dies after its result array went into a new segment, before reporting it."""
    return np.ones(BIG), _ExitWhenPickled()


def die_at_start(*_: Any) -> None:
    os._exit(7)


# -- helpers -----------------------------------------------------------------------


def _helper_pids() -> set[int]:
    """multiprocessing's own long-lived helpers (fork server, resource tracker)."""
    pids = set()
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None):
        pids.add(server._forkserver_pid)
    tracker = multiprocessing.resource_tracker._resource_tracker
    if getattr(tracker, "_pid", None):
        pids.add(tracker._pid)
    return pids


def _children() -> set[int]:
    """Live descendants of this process, without multiprocessing's helpers."""
    helpers = _helper_pids()
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in helpers and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture(autouse=True)
def _segments_of_earlier_tests_are_gone() -> None:
    """Dropped mappings are unlinked by a reaper thread: let it finish before comparing."""
    assert flush_finalized()


@pytest.fixture(scope="module")
def pool() -> Any:
    with ProcessPool(workers=2) as shared:
        yield shared
    assert not list_prefix(shared.segment_prefix)


# -- construction ------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, -1, 1.5, "2"])
def test_bad_worker_count_is_a_config_error(workers: Any) -> None:
    with pytest.raises(ConfigError, match="workers"):
        ProcessPool(workers=workers)


@pytest.mark.parametrize("shm_min_bytes", [-1, 2.5])
def test_bad_shm_threshold_is_a_config_error(shm_min_bytes: Any) -> None:
    with pytest.raises(ConfigError, match="shm_min_bytes"):
        ProcessPool(workers=1, shm_min_bytes=shm_min_bytes)


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.none(), st.floats(0, 1e3, allow_nan=False)))
def test_queue_depth_is_bounded_and_shrinks_with_longer_calls(seconds: float | None) -> None:
    depth = queue_depth(seconds)
    assert MIN_DEPTH <= depth <= MAX_DEPTH
    if seconds is not None:
        assert queue_depth(seconds * 2 + 1e-9) <= depth
        assert depth == MIN_DEPTH or depth * seconds <= QUEUE_SECONDS


def test_fork_start_method_is_refused() -> None:
    with pytest.raises(ConfigError, match="fork"):
        ProcessPool(workers=1, start_method="fork")


# -- results and shared memory ----------------------------------------------------

_dtypes = st.sampled_from(["<f8", "<f4", "<i8", "<i2", "|u1", "|b1", "<c16", "<u4", ">i4"])
_arrays = hnp.arrays(
    dtype=_dtypes,
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
)


@settings(max_examples=25, deadline=None)
@given(small=_arrays, scale=st.integers(0, 2))
def test_nested_arrays_round_trip(
    pool: ProcessPool, small: np.ndarray[Any, Any], scale: int
) -> None:
    """Arrays of any dtype and shape, big and small, nested in containers, survive the trip."""
    big = np.resize(small, (BIG * scale,)) if small.size else np.zeros(BIG * scale)
    payload = {"a": [small, (big, 3)], "b": small.T, "c": "text"}
    seen = pool.submit(describe, (payload,), {}).result()
    expected = describe(payload)
    # The worker saw the same data; arrays above the threshold arrived mapped, read-only.
    assert seen["c"] == "text"
    for got, want in [(seen["a"][0], expected["a"][0]), (seen["b"], expected["b"])]:
        assert got[:3] == want[:3]
    got_big = seen["a"][1][0]
    assert got_big[:3] == expected["a"][1][0][:3]
    assert got_big[3] is (big.nbytes >= SHM_MIN_BYTES)
    assert got_big[4] is not got_big[3]  # shared inputs are read-only
    back = pool.submit(transformed, (payload,), {}).result()
    np.testing.assert_array_equal(back["a"][0], np.flip(small))
    np.testing.assert_array_equal(back["a"][1][0], np.flip(big))
    assert back["a"][1][0].dtype == big.dtype
    assert back["a"][1][1] == 6 and back["c"] == "texttext"
    assert isinstance(back["a"], list) and isinstance(back["a"][1], tuple)


def test_arrays_in_named_tuples_and_dict_subclasses_use_shared_memory(pool: ProcessPool) -> None:
    """The graph's container rule: a named tuple or an OrderedDict is opened like a tuple or
    a dict, so a large array inside travels through a segment, both ways, and the container
    keeps its type."""
    data = np.arange(BIG, dtype=np.float64)
    payload = (Bundle(data, "x"), OrderedDict(a=data, b=1))
    assert pool.submit(arrival, payload, {}).result() == (Bundle, OrderedDict, True, True)
    back = pool.submit(identity, (payload,), {}).result()
    assert type(back[0]) is Bundle and type(back[1]) is OrderedDict
    for array in (back[0].data, back[1]["a"]):
        assert isinstance(array.base, mmap.mmap)
        np.testing.assert_array_equal(array, data)


def test_a_result_that_cannot_be_rebuilt_fails_and_leaves_no_segment(pool: ProcessPool) -> None:
    before = set(list_prefix(pool.segment_prefix))
    with pytest.raises(TypeError, match="cannot be rebuilt"):
        pool.submit(wrap_unrebuildable, (BIG,), {}).result()
    assert set(list_prefix(pool.segment_prefix)) <= before


def test_large_results_are_shared_memory_views(pool: ProcessPool) -> None:
    data = np.arange(BIG, dtype=np.float64)
    result = pool.submit(np.multiply, (data, 3.0), {}).result()
    assert isinstance(result.base, mmap.mmap)
    assert pool._table.segment_of(result) is not None
    np.testing.assert_array_equal(result, data * 3)
    assert result.flags.writeable


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(BIG * 8, dtype=">i4").reshape(4, -1)[:, ::2],
        lambda: np.asfortranarray(np.arange(BIG * 7, dtype=np.float64).reshape(-1, 7)),
        lambda: np.zeros(BIG, dtype=[("id", "<i4"), ("pos", "<f8", (3,))]),
        lambda: np.arange(BIG, dtype=np.int64).astype("datetime64[ns]")[::-1],
    ],
    ids=["strided_bigendian", "fortran", "structured", "datetime_reversed"],
)
def test_unusual_layouts_and_dtypes_survive(pool: ProcessPool, make: Callable[[], Any]) -> None:
    array = make()
    assert array.nbytes >= SHM_MIN_BYTES
    seen = pool.submit(describe, (array,), {}).result()
    assert seen[:3] == describe(array)[:3] and seen[3] is True
    back = pool.submit(np.copy, (array,), {}).result()
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)
    assert isinstance(back.base, mmap.mmap)


def test_returned_input_reuses_the_input_segment(pool: ProcessPool) -> None:
    """Ownership of an argument's segment moves to the result that is a view of it."""
    before = pool._table.linked
    data = np.arange(BIG, dtype=np.float64)
    echoed = pool.submit(identity, (data,), {}).result()
    assert len(pool._table.linked - before) == 1  # the argument's segment, no copy of it
    assert isinstance(echoed.base, mmap.mmap) and not np.shares_memory(echoed, data)
    np.testing.assert_array_equal(echoed, data)
    del echoed
    assert flush_finalized()
    assert pool._table.linked == before


def test_small_results_are_pickled(pool: ProcessPool) -> None:
    result = pool.submit(np.add, (np.arange(10), 1), {}).result()
    assert result.base is None or not isinstance(result.base, mmap.mmap)
    np.testing.assert_array_equal(result, np.arange(1, 11))


def test_shared_result_passed_on_is_not_copied(pool: ProcessPool) -> None:
    """A result fed to the next task travels by segment name, and comes back as the same memory."""
    first = pool.submit(np.ones, ((BIG,),), {}).result()
    name = pool._table.segment_of(first)
    before = pool._table.linked
    echoed = pool.submit(identity, (first[1:],), {}).result()
    assert pool._table.linked == before  # no new segment either way
    assert np.shares_memory(echoed, first)
    assert pool._table.segment_of(echoed) == name


def test_inputs_are_read_only_in_workers(pool: ProcessPool) -> None:
    future = pool.submit(write_into, (np.zeros(BIG),), {})
    with pytest.raises(ValueError, match="read-only"):
        future.result()


def test_segment_unlinked_when_last_view_dropped(pool: ProcessPool) -> None:
    result = pool.submit(np.zeros, ((BIG,),), {}).result()
    name, _ = pool._table.segment_of(result)
    view = result[5:]
    del result
    assert flush_finalized()
    assert name in list_prefix(pool.segment_prefix)
    del view
    assert flush_finalized()  # unlinking happens in the reaper thread
    assert name not in list_prefix(pool.segment_prefix)
    assert name not in pool._table.linked


def test_shutdown_sweep_waits_for_an_unlink_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name another thread is unlinking (the reaper: a daemon thread, stopped
    wherever it is when the interpreter exits) is unregistered from the resource
    tracker by the time unlink_all returns; else the tracker reports it leaked."""
    table = SegmentTable(owner_prefix(), owner=True)
    exported = table.export(np.ones(BIG))
    assert exported is not None
    ref, mapping = exported
    entered, release = threading.Event(), threading.Event()
    unregistered: list[str] = []
    real_unlink, real_unregister = _shm.unlink_name, _shm.resource_tracker.unregister

    def stalling_unlink(name: str) -> bool:
        if threading.current_thread().name == "stalled-unlink":
            entered.set()
            release.wait(10)
        return real_unlink(name)

    def recording_unregister(name: str, rtype: str) -> None:
        unregistered.append(name)
        real_unregister(name, rtype)

    monkeypatch.setattr(_shm, "unlink_name", stalling_unlink)
    monkeypatch.setattr(_shm.resource_tracker, "unregister", recording_unregister)
    stalled = threading.Thread(target=table.unlink, args=(ref.name,), name="stalled-unlink")
    stalled.start()
    assert entered.wait(10)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        table.unlink_all()
        assert unregistered == ["/" + ref.name]
    finally:
        release.set()
        stalled.join(10)
        timer.cancel()
    assert not list_prefix(table.prefix) and not table.linked
    del mapping


def test_a_segment_made_after_the_shutdown_sweep_is_unlinked_at_once() -> None:
    table = SegmentTable(owner_prefix(), owner=True)
    table.unlink_all()
    exported = table.export(np.ones(BIG))
    assert exported is not None
    ref, mapping = exported
    assert not list_prefix(table.prefix) and not table.linked
    assert table.materialize(ref)[-1] == 1.0  # the mapping outlives the name
    del mapping


def test_argument_segments_are_freed_after_the_task(pool: ProcessPool) -> None:
    before = set(list_prefix(pool.segment_prefix))
    assert pool.submit(describe, (np.ones(BIG),), {}).result()[3] is True
    assert set(list_prefix(pool.segment_prefix)) <= before


def test_tasks_may_start_processes_of_their_own(pool: ProcessPool) -> None:
    assert pool.submit(may_start_processes, (), {}).result() is True


def test_lambdas_and_closures_run(pool: ProcessPool) -> None:
    offset = 7
    assert pool.submit(lambda x: x + offset, (1,), {}).result() == 8


def test_unpicklable_arguments_fail_the_future(pool: ProcessPool) -> None:
    future = pool.submit(identity, (threading.Lock(),), {})
    with pytest.raises(TypeError):
        future.result()


def test_many_tasks_from_many_threads(pool: ProcessPool) -> None:
    futures: list[Future[Any]] = []
    lock = threading.Lock()

    def feed(start: int) -> None:
        for i in range(start, start + 200):
            f = pool.submit(operator.mul, (i, 2), {})
            with lock:
                futures.append(f)

    threads = [threading.Thread(target=feed, args=(k * 200,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(f.result() for f in futures) == [2 * i for i in range(800)]


def test_callbacks_may_submit_more(pool: ProcessPool) -> None:
    done = threading.Event()
    results: list[int] = []

    def chain(future: Future[Any]) -> None:
        results.append(future.result())
        if len(results) < 5:
            pool.submit(operator.add, (future.result(), 1), {}).add_done_callback(chain)
        else:
            done.set()

    pool.submit(operator.add, (0, 1), {}).add_done_callback(chain)
    assert done.wait(60)
    assert results == [1, 2, 3, 4, 5]


# -- errors ------------------------------------------------------------------------


def test_exception_keeps_type_and_remote_traceback(pool: ProcessPool) -> None:
    with pytest.raises(KeyError) as info:
        pool.submit(fail_with, (KeyError, "missing-key-42"), {}).result()
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "fail_with" in cause.text and "missing-key-42" in cause.text


def test_unpicklable_exception_becomes_remote_error(pool: ProcessPool) -> None:
    with pytest.raises(RemoteError, match="_Unpicklable") as info:
        pool.submit(fail_unpicklable, (), {}).result()
    assert "fail_unpicklable" in str(info.value.__cause__)


def test_sys_exit_in_a_task_fails_only_that_task(pool: ProcessPool) -> None:
    with pytest.raises(RemoteError, match=r"SystemExit\(5\)"):
        pool.submit(sys.exit, (5,), {}).result()
    assert pool.submit(operator.add, (1, 1), {}).result() == 2


@pytest.mark.parametrize(
    ("fn", "args", "words"),
    [
        (exit_now, (3,), "exited with code 3"),
        (kill_self, (), "signal 9 (SIGKILL)"),
        (segfault, (), "signal 11 (SIGSEGV)"),
    ],
    ids=["os_exit", "sigkill", "segfault"],
)
def test_dead_worker_fails_its_task_and_is_replaced(
    pool: ProcessPool, fn: Any, args: tuple[Any, ...], words: str
) -> None:
    old = set(pool.worker_pids)
    with pytest.raises(WorkerDiedError, match=words.replace("(", r"\(").replace(")", r"\)")):
        pool.submit(fn, args, {}).result()
    assert pool.submit(operator.add, (20, 22), {}).result() == 42
    assert len(pool.worker_pids) == 2
    assert set(pool.worker_pids) != old
    assert pool.state is PoolState.RUNNING


def test_unpicklable_result_fails_and_frees_its_segments(pool: ProcessPool) -> None:
    before = set(list_prefix(pool.segment_prefix))
    with pytest.raises(TypeError, match="lock"):
        pool.submit(return_lock_and_array, (), {}).result()
    assert set(list_prefix(pool.segment_prefix)) <= before


def test_workers_that_cannot_start_break_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real worker processes that exit before serving: the pool gives up instead of looping."""
    from chunkgraph.execute.pool import _worker

    monkeypatch.setattr(_worker, "main", die_at_start)
    before = _children()
    pool = ProcessPool(workers=1)
    future = pool.submit(operator.add, (1, 2), {})
    with pytest.raises(WorkerDiedError, match="broken"):
        future.result(timeout=120)
    assert pool.state is PoolState.BROKEN
    with pytest.raises(WorkerDiedError, match="died before starting"):
        pool.submit(operator.add, (1, 2), {})
    pool.shutdown()
    assert _children() <= before


def test_a_threshold_of_zero_shares_every_array() -> None:
    with ProcessPool(workers=1, shm_min_bytes=0) as eager:
        seen = eager.submit(describe, (np.arange(3),), {}).result()
        assert seen[3] is True
        back = eager.submit(np.negative, (np.arange(3),), {}).result()
        assert isinstance(back.base, mmap.mmap)
        # An empty array has no bytes to map: it is pickled.
        assert eager.submit(describe, (np.zeros(0),), {}).result()[3] is False


_OUTCOMES = st.lists(st.sampled_from(["ok", "raise", "exit"]), min_size=1, max_size=16).filter(
    lambda plan: plan.count("exit") <= 2
)


def run_planned(step: int, kind: str) -> int:
    if kind == "raise":
        raise ArithmeticError(f"step {step}")
    if kind == "exit":
        os._exit(9)
    return step * step


@settings(max_examples=6, deadline=None)
@given(plan=_OUTCOMES)
def test_each_call_gets_its_own_outcome(pool: ProcessPool, plan: list[str]) -> None:
    """Values, errors and deaths land on exactly the call that caused them."""
    futures = [pool.submit(run_planned, (i, kind), {}) for i, kind in enumerate(plan)]
    for i, (kind, future) in enumerate(zip(plan, futures, strict=True)):
        if kind == "ok":
            assert future.result() == i * i
        elif kind == "raise":
            with pytest.raises(ArithmeticError, match=f"step {i}$"):
                future.result()
        else:
            with pytest.raises(WorkerDiedError, match="code 9"):
                future.result()


def test_deep_queues_requeue_everything_but_the_crash() -> None:
    with ProcessPool(workers=1) as single:
        # Tiny calls first, so the worker is given a deep queue.
        assert [f.result() for f in [single.submit(abs, (-i,), {}) for i in range(300)]] == list(
            range(300)
        )
        assert single._depth() > MIN_DEPTH
        futures = [single.submit(run_planned, (i, "ok"), {}) for i in range(40)]
        futures[20:20] = [single.submit(run_planned, (0, "exit"), {})]
        futures += [single.submit(run_planned, (i, "ok"), {}) for i in range(40, 80)]
        outcomes = [f.exception() for f in futures]
        assert sum(isinstance(e, WorkerDiedError) for e in outcomes) == 1
        assert sum(e is None for e in outcomes) == 80


def test_segments_of_a_result_never_sent_are_swept(pool: ProcessPool) -> None:
    held = pool.submit(np.ones, ((BIG,),), {}).result()  # a received segment stays linked
    before = set(list_prefix(pool.segment_prefix))
    with pytest.raises(WorkerDiedError, match="code 4"):
        pool.submit(die_while_sending, (), {}).result()
    assert set(list_prefix(pool.segment_prefix)) <= before
    assert pool._table.segment_of(held) is not None
    assert pool.submit(np.sum, (held,), {}).result() == BIG


def test_calls_queued_behind_a_crash_still_run() -> None:
    with ProcessPool(workers=1) as single:
        doomed = single.submit(exit_now, (5,), {})
        after = [single.submit(operator.mul, (i, 3), {}) for i in range(6)]
        with pytest.raises(WorkerDiedError, match="code 5"):
            doomed.result()
        assert [f.result() for f in after] == [3 * i for i in range(6)]


# -- shutdown and cancellation ----------------------------------------------------


def test_shutdown_leaves_no_processes_and_no_segments() -> None:
    before = _children()
    pool = ProcessPool(workers=2)
    held = pool.submit(np.full, ((BIG,), 4.0), {}).result()
    pids = pool.worker_pids
    assert list_prefix(pool.segment_prefix)
    pool.shutdown()
    assert pool.state is PoolState.CLOSED
    assert not list_prefix(pool.segment_prefix)
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids
    )
    assert _children() <= before
    assert float(held.sum()) == 4.0 * BIG  # held results stay readable
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(operator.add, (1, 2), {})


def test_shutdown_without_waiting_finishes_in_the_background() -> None:
    before = _children()
    pool = ProcessPool(workers=1)
    futures = [pool.submit(sleep_then, (0.05, i), {}) for i in range(3)]
    pool.shutdown(wait=False)
    with pytest.raises(RuntimeError, match=r"draining|closed"):
        pool.submit(operator.add, (1, 2), {})
    assert [f.result(timeout=60) for f in futures] == [0, 1, 2]
    pool.shutdown()  # again, now waiting: idempotent
    assert pool.state is PoolState.CLOSED
    assert _children() <= before
    assert not list_prefix(pool.segment_prefix)


def test_shutdown_waits_for_submitted_work() -> None:
    pool = ProcessPool(workers=1)
    futures = [pool.submit(sleep_then, (0.05, i), {}) for i in range(4)]
    pool.shutdown(wait=True)
    assert [f.result() for f in futures] == [0, 1, 2, 3]


def test_cancel_terminates_running_work() -> None:
    before = _children()
    pool = ProcessPool(workers=2)
    arg = np.ones(BIG)
    running = [pool.submit(sleep_then, (600, arg), {}) for _ in range(6)]
    assert pool.submit(getpid, (), {})  # queued behind the sleepers
    while not all(f.running() for f in running[:2]):
        time.sleep(0.01)
    pool.shutdown(wait=True, cancel_futures=True)
    for future in running:
        with pytest.raises(CancelledError):
            future.result(timeout=0)
    assert not list_prefix(pool.segment_prefix)
    assert _children() <= before


def test_exiting_the_context_on_interrupt_cancels() -> None:
    before = _children()
    with pytest.raises(KeyboardInterrupt), ProcessPool(workers=1) as pool:
        future = pool.submit(sleep_then, (600, None), {})
        raise KeyboardInterrupt
    assert pool.state is PoolState.CLOSED
    assert future.cancelled() or isinstance(future.exception(timeout=0), CancelledError)
    assert _children() <= before


# A program that holds shared results, has arrays in flight, and blocks on
# sleeping tasks; it prints its pool's segment prefix and worker pids.
_DRIVER = textwrap.dedent(
    """
    import sys, time, numpy as np
    sys.path[:0] = [{src!r}]
    from chunkgraph.execute.pool._process_pool import ProcessPool

    def work(pool):
        held = pool.submit(np.ones, ((100000,),), {{}}).result()
        pending = [pool.submit(time.sleep, (600,), {{}}) for _ in range(2)]
        pending += [pool.submit(np.linalg.norm, (np.ones(100000),), {{}}) for _ in range(3)]
        print(pool.segment_prefix, *pool.worker_pids, flush=True)
        pending[0].result()

    if {use_with}:
        with ProcessPool(workers=2) as pool:
            work(pool)
    else:
        work(ProcessPool(workers=2))  # left to the exit hook
    """
)


_QUIET_DRIVER = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path[:0] = [{src!r}]
    from chunkgraph.execute.pool._process_pool import ProcessPool

    pool = ProcessPool(workers=2)
    held = [pool.submit(np.negative, (np.ones(100000),), {{}}).result() for _ in range(3)]
    print(pool.segment_prefix, flush=True)
    # no shutdown: the exit hook cleans up
    """
)


def test_a_program_that_forgets_shutdown_exits_cleanly_and_silently() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _QUIET_DRIVER.format(src=SRC)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not list_prefix(done.stdout.strip())


def _start_driver(use_with: bool) -> tuple[subprocess.Popen[str], str, list[int]]:
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER.format(src=SRC, use_with=use_with)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = driver.stdout.readline().split() if driver.stdout else []
    if not line:
        driver.kill()
        pytest.fail(f"driver printed nothing: {driver.communicate()[1]}")
    return driver, line[0], [int(p) for p in line[1:]]


@pytest.mark.parametrize("use_with", [True, False], ids=["with_block", "exit_hook"])
def test_sigint_to_a_driver_leaves_nothing_behind(use_with: bool) -> None:
    driver, prefix, pids = _start_driver(use_with)
    try:
        assert list_prefix(prefix)
        tree = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert "KeyboardInterrupt" in err
    assert "leaked" not in err and "Warning" not in err, err
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, [p.pid for p in alive]
    assert {p.pid for p in tree} >= set(pids)
    assert not list_prefix(prefix)


def test_workers_of_a_killed_driver_exit_and_sweep() -> None:
    """SIGKILL gives the driver no chance to clean up: its orphaned workers do it."""
    driver, prefix, pids = _start_driver(use_with=True)
    try:
        assert list_prefix(prefix)
        driver.kill()
        driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    workers = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, [p.pid for p in alive]
    assert not list_prefix(prefix)


_SMALL_SHM_DRIVER = """
import numpy as np
from chunkgraph.execute.pool._process_pool import ProcessPool
if __name__ == "__main__":
    big = np.ones(8_000_000)  # 64 MB: more than this /dev/shm holds
    with ProcessPool(workers=1) as pool:
        print(pool.submit(np.sum, (big,), {}).result(timeout=60))
"""


def _can_mount_private_shm() -> bool:
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
    )  # fmt: skip
    return probe.returncode == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_mount_private_shm(),
    reason="needs a private mount namespace (unshare -m, root) for a small /dev/shm",
)
def test_a_full_shared_memory_falls_back_to_the_pipe(tmp_path: Path) -> None:
    """/dev/shm of 32 MB (a container's default is 64 MB) and a 64 MB argument:
    the array goes through the pipe instead of killing the driver with SIGBUS."""
    script = tmp_path / "driver.py"
    script.write_text(_SMALL_SHM_DRIVER)
    shell = f"mount -t tmpfs -o size=32m tmpfs /dev/shm && exec {sys.executable} {script}"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert float(done.stdout.split()[-1]) == 8_000_000.0
