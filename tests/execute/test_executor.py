"""The Executor protocol: what run() accepts as ``executor=``, and resolve_executor's checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tests.execute._tasks import mix

from chunkgraph._errors import ConfigError
from chunkgraph.execute import (
    EXECUTOR_KINDS,
    Event,
    EventKind,
    Executor,
    LocalExecutor,
    Subscriber,
    resolve_executor,
    run,
)
from chunkgraph.graph import Graph


class Recording:
    """An executor of its own: delegates to a sync LocalExecutor and records its calls."""

    in_process = True

    def __init__(self) -> None:
        self.calls: list[tuple[list[int] | None, int]] = []

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Any = None,
    ) -> dict[int, Any]:
        self.calls.append((None if targets is None else list(targets), len(subscribers)))
        return LocalExecutor("sync").run(graph, targets, subscribers=subscribers, plan=plan)


def _graph() -> tuple[Graph, Any]:
    """a, b -> total"""
    g = Graph()
    total = g.add(mix, 0, g.add(mix, 1, name="a"), g.add(mix, 2, name="b"), name="total")
    return g, total


def test_local_executors_and_custom_ones_are_executors() -> None:
    assert EXECUTOR_KINDS == ("threads", "adaptive", "processes", "sync")
    for kind in EXECUTOR_KINDS:
        executor = LocalExecutor(kind)
        assert isinstance(executor, Executor)
        assert executor.in_process is (kind != "processes")
    assert isinstance(Recording(), Executor)
    assert not isinstance("threads", Executor)


@pytest.mark.parametrize("kind", EXECUTOR_KINDS)
def test_run_takes_an_executor_instance(kind: Any) -> None:
    g, total = _graph()
    expected = mix(0, mix(1), mix(2))
    assert run(g, total, executor=LocalExecutor(kind, workers=2)) == expected
    assert run(g, executor=LocalExecutor(kind)) == {"total": expected}


def test_run_hands_targets_and_its_subscribers_to_a_custom_executor() -> None:
    g, total = _graph()
    recording = Recording()
    events: list[Event] = []
    assert run(g, [total], executor=recording, subscribers=[events.append]) == [
        mix(0, mix(1), mix(2))
    ]
    assert recording.calls == [([total.id], 1)]
    assert events[0].kind is EventKind.RUN_STARTED
    assert sum(e.kind is EventKind.FINISHED for e in events) == 3


def test_an_executors_own_subscribers_and_the_runs_both_get_events() -> None:
    g, total = _graph()
    own: list[Event] = []
    extra: list[Event] = []
    LocalExecutor("threads", subscribers=(own.append,)).run(
        g, [total.id], subscribers=[extra.append]
    )
    assert [e.kind for e in own] == [e.kind for e in extra] and len(own) == 8


def test_resolve_executor_builds_a_local_executor_from_a_kind() -> None:
    executor = resolve_executor("processes", workers=2, retries=1, timeout=5)
    assert executor == LocalExecutor("processes", workers=2, retries=1, timeout=5.0)
    recording = Recording()
    assert resolve_executor(recording) is recording


@pytest.mark.parametrize("bad", ["thread", "", None, 3, Graph()])
def test_resolve_executor_refuses_what_is_not_an_executor(bad: Any) -> None:
    with pytest.raises(ConfigError, match="executor must be one of"):
        resolve_executor(bad)


def test_options_beside_an_executor_instance_are_refused() -> None:
    g, total = _graph()
    with pytest.raises(ConfigError, match=r"workers=4, timeout=2 given beside executor=.*"):
        run(g, total, executor=LocalExecutor("threads"), workers=4, timeout=2)
    with pytest.raises(ConfigError, match="retries=1"):
        resolve_executor(Recording(), retries=1)


def test_options_of_a_kind_are_checked() -> None:
    with pytest.raises(ConfigError, match="timeout"):
        resolve_executor("sync", timeout=1)
    with pytest.raises(ConfigError, match="workers"):
        resolve_executor("threads", workers=0)
