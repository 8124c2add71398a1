"""run() conformance: every executor kind gives the sequential reference's results.

Each test runs for "sync", "threads" and "processes" (worker processes: fewer
hypothesis examples since each run starts a pool).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.execute._tasks import (
    Unbuildable,
    add_arrays,
    copy_of,
    fail,
    fail_counted,
    flaky,
    interrupt_counted,
    mix,
    mix_kw,
    mix_nested,
)

from chunkgraph._errors import ConfigError, GraphError, TaskError
from chunkgraph.execute import Event, EventKind, LocalExecutor, run
from chunkgraph.graph import Graph, TaskRef

KINDS = ["sync", "threads", "adaptive", "processes"]
EXAMPLES = {"sync": 40, "threads": 40, "adaptive": 20, "processes": 4}


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """Dependency lists (task i depends on earlier ids) and a target subset."""
    n = draw(st.integers(1, 40))
    deps = [
        list(dict.fromkeys(draw(st.lists(st.integers(0, i - 1), max_size=4)))) if i else []
        for i in range(n)
    ]
    targets = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5, unique=True))
    return deps, targets


def reference(deps: list[list[int]]) -> list[int]:
    values: list[int] = []
    for i, ds in enumerate(deps):
        values.append(mix(i, *[values[d] for d in ds]))
    return values


def build(deps: list[list[int]]) -> tuple[Graph, list[TaskRef]]:
    g = Graph()
    refs: list[TaskRef] = []
    for i, ds in enumerate(deps):
        # Alternate the argument forms so every substitution path is exercised.
        inputs = [refs[d] for d in ds]
        if i % 3 == 0:
            refs.append(g.add(mix, i, *inputs, name=f"t{(7 * i) % 41}-{i}"))
        elif i % 3 == 1:
            refs.append(g.add(mix_nested, i, {"in": [tuple(inputs)]}))
        else:
            refs.append(g.add(mix_kw, i=i, inputs=inputs))
    return g, refs


@pytest.mark.parametrize("kind", KINDS)
def test_random_dags_match_sequential_reference(kind: str) -> None:
    @settings(
        max_examples=EXAMPLES[kind],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(random_dags())
    def check(case: tuple[list[list[int]], list[int]]) -> None:
        deps, targets = case
        expected = reference(deps)
        g, refs = build(deps)
        got = run(g, [refs[t] for t in targets], executor=kind, workers=2)  # type: ignore[arg-type]
        assert got == [expected[t] for t in targets]
        sinks = run(g, executor=kind, workers=2)  # type: ignore[arg-type]
        assert sinks == {refs[s].name: expected[s] for s in g.sinks().tolist()}

    check()


@pytest.mark.parametrize("kind", KINDS)
def test_target_structures_are_mirrored(kind: Any) -> None:
    g = Graph()
    a = g.add(mix, 1, name="a")
    b = g.add(mix, 2, a, name="b")
    ea, eb = mix(1), mix(2, mix(1))
    assert run(g, b, executor=kind) == eb
    assert run(g, "a", executor=kind) == ea
    assert run(g, (a, b), executor=kind) == (ea, eb)
    assert run(g, {"x": a, "y": [b, a]}, executor=kind) == {"x": ea, "y": [eb, ea]}


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_results_flow_between_tasks(kind: Any) -> None:
    g = Graph()
    parts = [g.add(np.full, (64, 64), float(i)) for i in range(6)]
    total = g.add(add_arrays, *parts)
    np.testing.assert_array_equal(run(g, total, executor=kind), np.full((64, 64), 15.0))


@pytest.mark.parametrize("kind", KINDS)
def test_retries_then_success(kind: Any, tmp_path: Path) -> None:
    g = Graph()
    x = g.add(flaky, str(tmp_path / "count"), 2, 7, name="flaky-x")
    y = g.add(mix, 0, x)
    events: list[Event] = []
    assert run(g, y, executor=kind, retries=2, subscribers=[events.append]) == mix(0, 7)
    retried = [e for e in events if e.kind is EventKind.RETRIED]
    assert [(e.name, e.attempt) for e in retried] == [("flaky-x", 1), ("flaky-x", 2)]
    assert all(isinstance(e.error, RuntimeError) for e in retried)


@pytest.mark.parametrize("kind", KINDS)
def test_retries_exhausted_raise_a_group_with_the_cause(kind: Any, tmp_path: Path) -> None:
    g = Graph()
    a = g.add(mix, 0, name="input-a")
    x = g.add(flaky, str(tmp_path / "count"), 5, a, name="flaky-x")
    g.add(mix, 1, x, name="never")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor=kind, retries=1)
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError)
    assert (error.task, error.inputs, error.attempts) == ("flaky-x", ("input-a",), 2)
    assert isinstance(error.__cause__, RuntimeError)
    assert "flaky call 2 of 5" in str(error.__cause__)
    assert "1 task(s) did not run" in str(info.value)
    assert (tmp_path / "count").read_text() == "2"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("error", "tries"),
    [
        ("corrupt", 1),  # the stored bytes are the same on every try
        ("nan", 1),  # fn's NaN for an integer dst
        ("user", 1),  # a user's class with permanent = True
        ("grouped-corrupt", 1),  # a loop's group holding only permanent errors
        ("transient", 3),
        ("grouped-mixed", 3),  # one member might succeed next time
    ],
)
def test_an_error_that_fails_every_try_is_not_retried(
    kind: Any, tmp_path: Path, error: str, tries: int
) -> None:
    counter = tmp_path / "calls"
    g = Graph()
    g.add(fail_counted, str(counter), error, name="read-chunk")
    events: list[Event] = []
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor=kind, workers=2, retries=2, subscribers=[events.append])
    assert counter.read_text() == str(tries)
    (failed,) = info.value.exceptions
    assert isinstance(failed, TaskError) and failed.attempts == tries
    assert len([e for e in events if e.kind is EventKind.RETRIED]) == tries - 1


@pytest.mark.parametrize("kind", ["sync", "processes"])
def test_a_task_error_names_the_error_under_a_loops_group(kind: Any, tmp_path: Path) -> None:
    """The group's own message ("parallel_map over 16 elements") says nothing of what
    failed; the TaskError's says the corrupt chunk, its key and file."""
    g = Graph()
    g.add(fail_counted, str(tmp_path / "calls"), "grouped-mixed", name="read-chunk")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor=kind, retries=0)
    (failed,) = info.value.exceptions
    assert str(failed).startswith(
        "task 'read-chunk' failed after 1 attempt(s): CorruptChunkError: chunk (1, 0, 1) "
        "cannot be decoded"
    )
    assert str(failed).endswith("(and 1 other error)")
    assert isinstance(failed.__cause__, ExceptionGroup)  # the cause is kept whole


@pytest.mark.parametrize("kind", KINDS)
def test_system_exit_in_a_task_is_a_failed_try(kind: Any) -> None:
    """quits (sys.exit(3)) -> never: retried, then one TaskError; the program goes on."""
    g = Graph()
    g.add(mix, 0, g.add(sys.exit, 3, name="quits"), name="never")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor=kind, workers=2, retries=1)
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and (error.task, error.attempts) == ("quits", 2)
    assert "SystemExit" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_keyboard_interrupt_raised_by_a_task_interrupts_the_run(kind: Any, tmp_path: Path) -> None:
    """stop (raises KeyboardInterrupt) -> never: not a failed try, never retried."""
    counter = tmp_path / "calls"
    g = Graph()
    g.add(mix, 0, g.add(interrupt_counted, str(counter), name="stop"), name="never")
    with pytest.raises(KeyboardInterrupt):
        run(g, executor=kind, workers=2, retries=2)
    assert counter.read_text() == "1"


@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_stops_new_work_and_reports_cancelled_tasks(kind: Any) -> None:
    """
    boom -> after0 -> after1     (the chain after boom never runs)
    """
    g = Graph()
    boom = g.add(fail, "kaput", name="boom")
    after0 = g.add(mix, 0, boom)
    g.add(mix, 1, after0)
    events: list[Event] = []
    with pytest.raises(ExceptionGroup, match="1 task"):
        run(g, executor=kind, subscribers=[events.append])
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.RUN_STARTED and kinds[-1] is EventKind.RUN_FINISHED
    assert EventKind.FINISHED not in kinds
    assert [e.name for e in events if e.kind is EventKind.FAILED] == ["boom"]
    assert sum(k is EventKind.CANCELLED for k in kinds) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_events_cover_every_task_with_timestamps(kind: Any) -> None:
    g = Graph()
    refs = [g.add(mix, i) for i in range(20)]
    g.add(mix, 99, *refs)
    events: list[Event] = []
    run(g, executor=kind, subscribers=[events.append])
    started = {e.task: e.time for e in events if e.kind is EventKind.STARTED}
    finished = {e.task: e.time for e in events if e.kind is EventKind.FINISHED}
    assert set(started) == set(finished) == set(range(21))
    assert all(started[t] <= finished[t] for t in started)
    assert events[0].total == 21 and events[-1].total == 21


def test_only_tasks_needed_by_the_targets_run() -> None:
    g = Graph()
    calls: list[int] = []

    def record(i: int, *_: object) -> int:
        calls.append(i)
        return i

    a = g.add(record, 0)
    b = g.add(record, 1, a)
    g.add(record, 2, a)  # not needed for b
    assert run(g, b) == 1
    assert sorted(calls) == [0, 1]


def test_bad_arguments_are_config_errors() -> None:
    g = Graph()
    g.add(mix, 0)
    with pytest.raises(ConfigError, match="executor must be one of"):
        run(g, executor="gpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="retries must be an int >= 0"):
        run(g, retries=-1)
    with pytest.raises(ConfigError, match="workers must be a positive int"):
        LocalExecutor(workers=0)
    with pytest.raises(ConfigError, match="targets must be"):
        run(g, targets=3)  # type: ignore[arg-type]


def test_invalid_graph_is_rejected_before_running() -> None:
    g = Graph()
    g.add(mix, 0, TaskRef(g, 1), name="p")
    g.add(mix, 1, TaskRef(g, 0), name="q")
    with pytest.raises(GraphError, match="cycle"):
        run(g)


def test_empty_graph_returns_no_results() -> None:
    assert run(Graph()) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_dict_subclasses_keep_their_type(kind: Any) -> None:
    g = Graph()
    a = g.add(mix, 3)
    table = defaultdict(list, {"x": a})
    got = run(g, g.add(copy_of, table), executor=kind)
    assert type(got) is defaultdict and got == {"x": mix(3)} and got["new"] == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_argument_that_cannot_be_rebuilt_fails_its_task(kind: Any) -> None:
    g = Graph()
    a = g.add(mix, 3)
    g.add(copy_of, Unbuildable(a, 1), name="odd-args")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor=kind)
    (error,) = info.value.exceptions
    assert error.task == "odd-args"  # type: ignore[attr-defined]
    assert isinstance(error.__cause__, TypeError)


def test_run_names_a_wrong_first_argument() -> None:
    g = Graph()
    ref = g.add(abs, -1)
    with pytest.raises(ConfigError, match=r"run\(\) takes a Graph first, got TaskRef.*ref.graph"):
        run(ref)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="got NoneType"):
        run(None)  # type: ignore[arg-type]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str broken")


def _raise_unprintable() -> None:
    raise _Unprintable


def test_an_exception_that_cannot_print_itself_is_still_reported() -> None:
    g = Graph()
    g.add(_raise_unprintable, name="odd")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor="sync")
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and isinstance(error.__cause__, _Unprintable)
    assert "could not be shown" in str(error)
