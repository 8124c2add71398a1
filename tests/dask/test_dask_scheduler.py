"""``chunkgraph.dask_scheduler``: dask collections computed by chunkgraph.

Values are compared with dask's sync scheduler. The contract is dask's
``get(dsk, keys, **kwargs)``: results nested like ``keys`` with lists as
tuples, and a failed task's own exception.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")


def inc(x: int) -> int:
    return x + 1


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: x.sum(), id="sum"),
        pytest.param(lambda x: x.std(axis=1), id="std"),
        pytest.param(lambda x: (x @ x.T)[::2], id="matmul"),
        pytest.param(
            lambda x: x.map_overlap(lambda b: np.cumsum(b, axis=0), depth=3, boundary="reflect"),
            id="overlap",
        ),
        pytest.param(lambda x: x.rechunk((9, 4)).T + 1, id="rechunk"),
        pytest.param(lambda x: da.argmax(x, axis=0), id="argmax"),
    ],
)
def test_results_equal_the_sync_scheduler(make: Any) -> None:
    x = da.random.default_rng(7).random((60, 50), chunks=(11, 13))
    y = make(x)
    expected = y.compute(scheduler="sync")
    np.testing.assert_array_equal(y.compute(scheduler=cg.dask_scheduler), expected)


def test_the_scheduler_set_in_dask_config_computes_several_collections() -> None:
    x = da.arange(1000, chunks=10)
    with dask.config.set(scheduler=cg.dask_scheduler):
        total, top, lazy = dask.compute(x.sum(), x.max(), dask.delayed(inc)(x.min()))
    assert (total, top, lazy) == (499500, 999, 1)


def test_results_nest_like_the_keys_with_lists_as_tuples() -> None:
    dsk = {"a": 1, "b": (inc, "a"), ("c", 0): (operator.add, "a", "b")}
    assert cg.dask_scheduler(dsk, "b") == 2
    assert cg.dask_scheduler(dsk, ("c", 0)) == 3  # a tuple key, not a structure
    assert cg.dask_scheduler(dsk, [["a", "b"], [("c", 0)], []]) == ((1, 2), (3,), ())


def test_a_task_raises_its_own_exception_with_a_note_naming_its_key() -> None:
    x = da.from_array(np.arange(6), chunks=3).map_blocks(lambda b: b + int(b[0]) // 0, dtype=int)
    with pytest.raises(ZeroDivisionError) as info:
        x.compute(scheduler=cg.dask_scheduler)
    assert not isinstance(info.value, BaseExceptionGroup)
    (note,) = info.value.__notes__
    assert note.startswith("raised by dask key ('") and "lambda" in note


def test_failures_beside_the_raised_one_are_named_in_its_note() -> None:
    """
    bad-0   bad-1      both start (a barrier holds each until the other runs), both fail
    """
    gate = threading.Barrier(2, timeout=60)

    def fail(i: int) -> None:
        gate.wait()
        raise KeyError(f"missing {i}")

    dsk = {f"bad-{i}": (fail, i) for i in range(2)}
    with pytest.raises(KeyError, match="missing") as info:
        cg.dask_scheduler(dsk, list(dsk), num_workers=2)
    (note,) = info.value.__notes__
    assert "raised by dask key 'bad-" in note
    assert "; 1 other task(s) failed too: 'bad-" in note and "': KeyError" in note


def test_errors_that_are_not_a_tasks_pass_through() -> None:
    with pytest.raises(cg.GraphError, match="cycle"):
        cg.dask_scheduler({"a": (inc, "b"), "b": (inc, "a")}, "a")


def test_options() -> None:
    dsk = {"a": 1, "b": (inc, "a")}
    assert cg.dask_scheduler(dsk, "b", num_workers=1) == 2
    assert cg.dask_scheduler(dsk, "b", executor=cg.LocalExecutor("sync")) == 2
    assert cg.dask_scheduler(dsk, "b", pool=None, chunksize=4) == 2  # dask's, not needed
    with pytest.raises(cg.ConfigError, match="given beside executor"):
        cg.dask_scheduler(dsk, "b", num_workers=2, executor=cg.LocalExecutor("sync"))
    with pytest.warns(UserWarning, match=r"ignores option\(s\) \['workers'\]"):
        assert cg.dask_scheduler(dsk, "b", workers=2) == 2  # dask forwards compute(**kwargs)


def test_dask_num_workers_setting_is_the_default() -> None:
    seen: set[str] = set()

    def record(x: int) -> int:
        seen.add(threading.current_thread().name)
        return x

    dsk = {f"k{i}": (record, i) for i in range(200)}
    with dask.config.set(num_workers=1):
        cg.dask_scheduler(dsk, list(dsk))
    assert len(seen) == 1


def test_a_task_may_compute_a_collection_itself() -> None:
    inner = da.ones(10, chunks=2).sum()
    with dask.config.set(scheduler=cg.dask_scheduler):
        y = da.zeros(6, chunks=2).map_blocks(lambda b: b + inner.compute())
        np.testing.assert_array_equal(y.compute(), np.full(6, 10.0))


def test_a_key_the_graph_lacks() -> None:
    with pytest.raises(cg.ConfigError, match="not in the dask graph"):
        cg.dask_scheduler({"a": 1}, ["a", "b"])
