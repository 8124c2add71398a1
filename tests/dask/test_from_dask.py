"""``chunkgraph.graph.from_dask``: collections, expressions and dict graphs as chunkgraph Graphs.

Results are compared with dask's sync scheduler; hand-written graphs are
checked against values worked out by hand. Every dict-graph test runs twice:
through dask's own ``convert_legacy_graph`` (``dask._task_spec`` present) and
through chunkgraph's tuple reader (``dask._task_spec`` hidden, as on a dask
from before it existed).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph.graph import DaskGraph, from_dask

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
spec = pytest.importorskip("dask._task_spec")


@pytest.fixture(params=["task_spec", "tuples"])
def node_format(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both readers of tuple-task graphs: dask's own, and the one for older dask."""
    if request.param == "tuples":
        monkeypatch.setitem(sys.modules, "dask._task_spec", None)  # import now fails
    yield request.param


def run_keys(converted: DaskGraph) -> Any:
    return cg.run(converted.graph, converted.targets, executor="sync")


def inc(x: int) -> int:
    return x + 1


def add(*xs: int) -> int:
    return sum(xs)


# ----------------------------------------------------------------- collections


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: x.sum(axis=0), id="reduction"),
        pytest.param(lambda x: (x**2).mean(), id="mean"),
        pytest.param(
            lambda x: x.map_overlap(lambda b: b * 2 + np.roll(b, 1, 0), depth=2, boundary=0),
            id="map_overlap",
        ),
        pytest.param(lambda x: x.rechunk((7, 11)), id="rechunk"),
    ],
)
def test_collections_round_trip_to_the_same_values_as_dask(make: Any) -> None:
    x = da.from_array(np.arange(24 * 30, dtype=float).reshape(24, 30), chunks=(5, 6))
    y = make(x)
    converted = from_dask(y)
    blocks = run_keys(converted)  # one result per chunk, nested like y.__dask_keys__()
    expected = y.compute(scheduler="sync")
    np.testing.assert_array_equal(np.block(blocks).reshape(expected.shape), expected)
    assert len(converted.graph) >= y.npartitions


def test_aliases_cost_no_task() -> None:
    """dask's overlap graph aliases the chunks it does not pad; they share their target's task."""
    y = da.ones((40,), chunks=4).map_overlap(lambda b: b, depth=1, boundary="none")
    converted = from_dask(y)
    ids = list(converted.task_ids.values())
    assert len(ids) > len(set(ids))  # keys sharing a task
    assert set(ids) <= set(range(len(converted.graph)))


def test_subgraphs_dask_fused_become_chunkgraph_tasks() -> None:
    """dask fuses ones -> mul -> sum per chunk into one task that orders its subgraph
    each time it runs; chunkgraph gets the three tasks and orders them once."""
    captured: dict[str, Any] = {}

    def capture(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        captured.update(dsk=dsk.__dask_graph__(), keys=keys)
        return dask.get(captured["dsk"], keys)

    y = (da.ones((40, 40), chunks=4) * 2).sum()
    expected = y.compute(scheduler=capture)
    fused = [
        v for v in captured["dsk"].values() if getattr(v, "func", None) is spec._execute_subgraph
    ]
    assert len(fused) >= 100
    converted = from_dask(captured["dsk"], captured["keys"])
    assert len(converted.graph) >= len(captured["dsk"]) + 2 * 100
    assert run_keys(converted) == [expected]


def test_an_expression_as_dask_hands_it_to_a_scheduler() -> None:
    captured: dict[str, Any] = {}

    def capture(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        captured.update(dsk=dsk, keys=keys)
        return dask.get(dsk.__dask_graph__(), keys)

    y = da.arange(100, chunks=7).cumsum(axis=0)[::3].sum()
    expected = y.compute(scheduler=capture)
    converted = from_dask(captured["dsk"], captured["keys"])
    assert run_keys(converted) == [expected]


def test_a_high_level_graph() -> None:
    y = da.arange(50, chunks=10) + 1
    hlg = y.__dask_graph__()
    assert type(hlg).__name__ == "HighLevelGraph"
    got = run_keys(from_dask(hlg, y.__dask_keys__()))
    np.testing.assert_array_equal(np.concatenate(got), np.arange(50) + 1)


def test_delayed() -> None:
    total = dask.delayed(sum)([dask.delayed(inc)(i) for i in range(5)])
    assert run_keys(from_dask(total)) == [15]  # a Delayed's keys are [key]


# ----------------------------------------------------------------- dict graphs


def test_tuple_tasks_nested_tasks_and_lists(node_format: str) -> None:
    """
        a=1   b=2
         \\   /  \\
        c=(add, a, (inc, b))        a nested task runs inline, no key of its own
        d=(add, [a, b, c], ...)     a list argument: each element an argument
    """
    dsk = {
        "a": 1,
        "b": 2,
        "c": (add, "a", (inc, "b")),
        "d": (lambda xs, ys: sum(xs) + sum(ys), ["a", "b", "c"], [(inc, "c"), 100]),
    }
    converted = from_dask(dsk, ["d", "c"])
    assert run_keys(converted) == [1 + 2 + 4 + 5 + 100, 4]
    assert len(converted.graph) == 2  # c and d; a and b are data
    assert converted.data == {"a": 1, "b": 2}


def test_literals_that_look_like_keys_only_refer_to_keys_of_the_graph(node_format: str) -> None:
    dsk = {
        "x": 10,
        "y": (operator.add, "x", 1),
        "s": (str.upper, "not-a-key"),  # a string that is no key is a literal
        "t": (len, ("x", "y")),  # a tuple that is no task and no key: a literal
    }
    converted = from_dask(dsk, ["y", "s", "t"])
    assert run_keys(converted) == [11, "NOT-A-KEY", 2]


def test_tuple_keys_and_aliases_resolve_without_a_task(node_format: str) -> None:
    dsk = {
        ("x", 0): 5,
        ("x", 1): (inc, ("x", 0)),
        "alias": ("x", 1),
        "alias-of-alias": "alias",
        "z": (operator.mul, "alias-of-alias", 2),
    }
    converted = from_dask(dsk, ["z", "alias-of-alias"])
    assert run_keys(converted) == [12, 6]
    assert len(converted.graph) == 2
    ids = converted.task_ids
    assert ids["alias"] == ids["alias-of-alias"] == ids[("x", 1)]


def test_a_list_value_with_keys_is_a_task_and_without_is_data(node_format: str) -> None:
    dsk = {"a": 1, "l": ["a", (inc, "a"), 7], "plain": [1, 2, 3], "n": (sum, "plain")}
    converted = from_dask(dsk, ["l", "n", "plain"])
    assert run_keys(converted) == [[1, 2, 7], 6, [1, 2, 3]]
    assert "plain" in converted.data and "l" in converted.task_ids


def test_keys_given_in_any_order_of_definition(node_format: str) -> None:
    """Consumers before producers: dask dicts are not topologically ordered."""
    dsk: dict[Any, Any] = {f"k{i}": (inc, f"k{i - 1}") for i in range(200, 0, -1)}
    dsk["k0"] = 0
    converted = from_dask(dsk, "k200")
    assert run_keys(converted) == 200


def test_task_spec_nodes() -> None:
    """
    data(3) --> double --> alias --+--> total (List and Dict containers, kwargs)
                  \\------------------/
    """
    dsk = {
        "data": spec.DataNode("data", 3),
        "double": spec.Task("double", operator.mul, spec.TaskRef("data"), 2),
        "alias": spec.Alias("alias", "double"),
        "total": spec.Task(
            "total",
            lambda items, mapping, scale=1: (sum(items) + sum(mapping.values())) * scale,
            spec.List(spec.TaskRef("alias"), spec.TaskRef("data"), 1),
            spec.Dict(a=spec.TaskRef("double"), b=spec.Task(None, inc, spec.TaskRef("data"))),
            scale=spec.TaskRef("data"),
        ),
    }
    converted = from_dask(dsk, ["total", "alias"])
    assert run_keys(converted) == [(6 + 3 + 1 + 6 + 4) * 3, 6]
    assert len(converted.graph) == 2 and converted.data == {"data": 3}


def test_a_requested_data_key_gets_a_task_that_returns_it() -> None:
    converted = from_dask({"x": np.arange(3)}, ["x"])
    assert len(converted.graph) == 1
    np.testing.assert_array_equal(run_keys(converted)[0], np.arange(3))


def test_task_names_come_from_dask_keys() -> None:
    converted = from_dask({("sum-partial-0123456789abcdef", 0): (sum, [1, 2])}, [])
    assert converted.graph.name(0) == "sum-partial-0"


# ---------------------------------------------------------------------- errors


def test_a_cycle_names_its_keys(node_format: str) -> None:
    with pytest.raises(cg.GraphError, match=r"cycle: 'a' -> 'b' -> 'a'"):
        from_dask({"a": (inc, "b"), "b": (inc, "a")})


def test_a_missing_dependency_names_both_keys() -> None:
    dsk = {"y": spec.Task("y", inc, spec.TaskRef("gone"))}
    with pytest.raises(cg.GraphError, match=r"'y' depends on 'gone'"):
        from_dask(dsk)


def test_a_key_that_is_not_in_the_graph() -> None:
    with pytest.raises(cg.ConfigError, match=r"key 'nope' is not in the dask graph"):
        from_dask({"x": 1}, ["nope"])


def test_something_that_is_not_a_graph() -> None:
    with pytest.raises(cg.ConfigError, match=r"takes a dask collection .* got int"):
        from_dask(42)


def test_a_failing_task_raises_a_task_error_with_the_original_cause() -> None:
    converted = from_dask({"a": 0, "b": (operator.truediv, 1, "a")}, ["b"])
    with pytest.raises(ExceptionGroup) as info:
        run_keys(converted)
    (error,) = info.value.exceptions
    assert isinstance(error, cg.TaskError)
    assert isinstance(error.__cause__, ZeroDivisionError)
