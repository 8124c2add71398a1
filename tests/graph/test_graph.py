"""Building graphs: dependencies found in arguments, names, costs, resources, validation."""

from __future__ import annotations

import pickle
from collections import namedtuple
from operator import neg

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkgraph as cg
from chunkgraph._errors import ConfigError, GraphError
from chunkgraph.graph import DEFAULT_SECONDS, Cost, Graph, Resources, TaskRef, task

Pair = namedtuple("Pair", "left right")


def ident(*args: object, **kwargs: object) -> object:
    return args, kwargs


def deps(ref: TaskRef) -> list[int]:
    return [d.id for d in ref.dependencies]


def test_refs_found_at_top_level_nested_and_in_kwargs() -> None:
    g = Graph()
    a, b, c, d = (g.add(ident, i) for i in range(4))
    top = g.add(ident, a, 1, key=b)
    nested = g.add(ident, [1, (c, {"x": d})], opts={"k": [a]})
    named = g.add(ident, Pair(a, c))
    assert deps(top) == [0, 1]
    assert sorted(deps(nested)) == [0, 2, 3]
    assert deps(named) == [0, 2]


def test_arrays_and_other_containers_are_not_scanned() -> None:
    g = Graph()
    a = g.add(ident, 0)
    arr = np.array([a], dtype=object)  # a TaskRef hidden in an array is just a value
    t = g.add(ident, arr, {a})
    assert deps(t) == []


def test_a_ref_used_twice_is_one_dependency() -> None:
    g = Graph()
    a = g.add(ident, 0)
    t = g.add(ident, a, [a], k=a)
    assert deps(t) == [0]
    indptr, indices = g.dependencies()
    assert indptr.tolist() == [0, 0, 1]
    assert indices.tolist() == [0]


def test_dependents_is_the_transpose() -> None:
    """
    a   b
    |\\ /
    | c
    |/
    d
    """
    g = Graph()
    a = g.add(ident, 0, name="zeta")
    b = g.add(ident, 1, name="alpha")
    c = g.add(ident, a, b, name="mid")
    d = g.add(ident, c, a, name="beta")
    ptr, idx = g.dependents()
    consumers = {t: idx[ptr[t] : ptr[t + 1]].tolist() for t in range(len(g))}
    assert consumers == {a.id: [c.id, d.id], b.id: [c.id], c.id: [d.id], d.id: []}
    assert g.sinks().tolist() == [d.id]
    assert g.roots().tolist() == [a.id, b.id]


def test_dependents_cache_is_invalidated_by_add() -> None:
    g = Graph()
    a = g.add(ident, 0)
    assert g.sinks().tolist() == [0]
    g.add(ident, a)
    assert g.sinks().tolist() == [1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10**6), max_size=4), min_size=1, max_size=40))
def test_csr_matches_the_added_dependencies(choices: list[list[int]]) -> None:
    g = Graph()
    expected: list[list[int]] = []
    for i, picks in enumerate(choices):
        ids = list(dict.fromkeys(p % i for p in picks)) if i else []
        g.add(ident, *[TaskRef(g, j) for j in ids])
        expected.append(ids)
    ptr, idx = g.dependencies()
    assert [idx[ptr[i] : ptr[i + 1]].tolist() for i in range(len(g))] == expected
    optr, oidx = g.dependents()
    back = {(c, d) for d in range(len(g)) for c in oidx[optr[d] : optr[d + 1]].tolist()}
    assert back == {(c, d) for c, ds in enumerate(expected) for d in ds}
    g.validate()


def test_automatic_and_given_names() -> None:
    g = Graph()
    a = g.add(ident, 0)
    b = g.add(ident, a, name="load")
    assert (a.name, b.name) == ("ident-0", "load")
    assert g.ref("load") == b
    assert g.ref("ident-0") == a
    with pytest.raises(GraphError, match="no task named 'ident-1'"):
        g.ref("ident-1")


def test_duplicate_name_is_rejected_naming_both_tasks() -> None:
    g = Graph()
    g.add(ident, 0, name="step")
    with pytest.raises(GraphError, match=r"'step' is used twice \(tasks 0 and 1\)"):
        g.add(ident, 1, name="step")
    assert len(g) == 1  # the rejected task was not added


def test_given_name_equal_to_an_automatic_name_is_found_by_validate() -> None:
    g = Graph()
    g.add(ident, 0)
    g.add(ident, 1, name="ident-0")
    with pytest.raises(GraphError, match="automatic name of task 0"):
        g.validate()


def test_ref_from_another_graph_names_both() -> None:
    g1, g2 = Graph(), Graph()
    foreign = g1.add(ident, 0, name="theirs")
    with pytest.raises(GraphError, match=r"task 'mine' .* uses 'theirs', a task of another"):
        g2.add(ident, [foreign], name="mine")
    assert len(g2) == 0


def test_forged_cycle_is_reported_with_its_path() -> None:
    g = Graph()
    g.add(ident, TaskRef(g, 2), name="first")
    g.add(ident, TaskRef(g, 0), name="second")
    g.add(ident, TaskRef(g, 1), name="third")
    with pytest.raises(GraphError, match="cycle: 'first' -> 'third' -> 'second' -> 'first'"):
        g.validate()


def test_forged_forward_ref_without_cycle_gets_a_topological_order() -> None:
    g = Graph()
    g.add(ident, TaskRef(g, 1))
    g.add(ident, 5)
    g.validate()
    assert g.topological_order().tolist() == [1, 0]


def test_forged_unknown_id_is_rejected() -> None:
    g = Graph()
    g.add(ident, TaskRef(g, 7), name="orphan")
    with pytest.raises(GraphError, match="'orphan' depends on task id 7, which does not exist"):
        g.validate()


def test_costs_are_columns_with_defaults() -> None:
    g = Graph()
    for i in range(3000):  # crosses several capacity doublings
        g.add(ident, i, cost=Cost(seconds=float(i), memory=i) if i % 1000 == 7 else None)
    cols = g.costs()
    assert len(cols.seconds) == 3000
    assert cols.seconds[7] == 7.0 and cols.memory[2007] == 2007
    assert cols.seconds[8] == DEFAULT_SECONDS and cols.output_bytes.sum() == 0
    assert g.cost(1007) == Cost(1007.0, 1007, 0)
    with pytest.raises(ValueError):
        cols.seconds[0] = 1.0  # read-only view
    g.set_cost(0, Cost(seconds=3.0))
    assert g.costs().seconds[0] == 3.0


@pytest.mark.parametrize(
    "kwargs",
    [{"seconds": -1.0}, {"seconds": float("nan")}, {"memory": -5}, {"output_bytes": 1.5}],
)
def test_bad_cost_is_a_config_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Cost(**kwargs)  # type: ignore[arg-type]


def test_resources_default_and_interned() -> None:
    g = Graph()
    a = g.add(ident, 0)
    b = g.add(ident, 1, resources={"gpu": 1})
    c = g.add(ident, 2, resources=Resources(gpu=1))
    assert g.resources(a.id) == {"cpu": 1}
    assert g.resources(b.id) == Resources(gpu=1)
    assert g.resources(b.id) is g.resources(c.id)
    with pytest.raises(ConfigError, match="'gpu' must be a positive number"):
        Resources(gpu=0)


@pytest.mark.parametrize("name", ["GPU", "Gpu", "CPU"])
def test_a_kind_spelled_in_capitals_is_refused_naming_the_spelling(name: str) -> None:
    """Dask's "GPU" would be a custom resource here: the task would quietly run on a CPU."""
    with pytest.raises(ConfigError, match=f"spelled '{name.lower()}'"):
        Graph().add(ident, 0, resources={name: 1})


def test_add_needs_a_callable() -> None:
    with pytest.raises(GraphError, match="needs a callable"):
        Graph().add(3)  # type: ignore[arg-type]


@task
def double(x: int) -> int:
    return 2 * x


@task(name="the-total", cost=Cost(seconds=5.0))
def total(*xs: int) -> int:
    return sum(xs)


def test_task_decorator_adds_inside_a_graph_and_calls_outside() -> None:
    with Graph() as g:
        a = double(1)
        b = double(a)
        t = total(a, b)
    assert isinstance(t, TaskRef) and len(g) == 3
    assert t.name == "the-total" and g.cost(t.id).seconds == 5.0
    assert deps(t) == [a.id, b.id]
    assert double(4) == 8 and total(1, 2) == 3


def test_nested_graph_contexts_restore_the_outer_graph() -> None:
    with Graph() as outer:
        double(1)
        with Graph() as inner:
            double(2)
        double(3)
    assert (len(outer), len(inner)) == (2, 1)


def test_decorated_task_pickles_by_reference() -> None:
    assert pickle.loads(pickle.dumps(double)) is double


@pytest.mark.parametrize(
    "bad_kwargs",
    [
        {"name": "load", "cost": cg.Cost},  # the class, not an instance
        {"name": "load", "resources": {"cpu": -1}},
        {"name": "first"},  # used already
        {"name": 7},
    ],
    ids=["cost-class", "negative-resource", "duplicate-name", "non-string-name"],
)
def test_a_failed_add_leaves_the_graph_unchanged(bad_kwargs: dict[str, object]) -> None:
    """first ──> (failed add)        then      first ──> load,  other

    The failed add had a dependency and a name; neither may leak into the
    tasks added after it.
    """
    g = cg.Graph()
    first = g.add(abs, -3, name="first")
    with pytest.raises((GraphError, ConfigError)):
        g.add(pow, first, 2, **bad_kwargs)  # type: ignore[arg-type]
    assert len(g) == 1
    load = g.add(abs, -1, name="load")
    other = g.add(neg, 5, name="other")
    assert load.dependencies == [] and other.dependencies == []
    assert cg.run(g, [load, other, first]) == [1, -5, 3]


def test_cached_values_are_kept_until_the_graph_changes() -> None:
    """add() and set_cost() forget what cached() kept; reads in between reuse it."""
    g = Graph()
    a = g.add(abs, -1)
    calls: list[int] = []

    def count(graph: Graph) -> int:
        calls.append(len(graph))
        return len(graph)

    assert g.cached("n", count) == 1 and g.cached("n", count) == 1
    assert calls == [1]
    g.set_cost(a, Cost(seconds=2.0))
    assert g.cached("n", count) == 1 and calls == [1, 1]
    g.add(abs, a)
    assert g.cached("n", count) == 2 and calls == [1, 1, 2]


def test_task_id_takes_refs_ids_and_names_of_this_graph_only() -> None:
    g = Graph()
    a = g.add(abs, -1, name="a")
    b = g.add(abs, a)
    assert [g.task_id(k) for k in (a, b, 1, "a", b.name)] == [0, 1, 1, 0, 1]
    other = Graph()
    other.add(abs, 1)
    for bad in (other.ref(0), 2, -1, "nope"):
        with pytest.raises(GraphError):
            g.task_id(bad)
