"""The ``Executor`` protocol, and turning what a user passes as ``executor=`` into one.

Whatever runs a graph (``LocalExecutor`` today, a ``DaskExecutor`` later)
implements one small interface, so ``run()`` and the flow accept any of them:

    run(graph, targets, *, subscribers, plan)  -> {task id: result}
    in_process                           True when tasks run in this process

``in_process`` is what callers check before they build tasks: tasks shipped to
other processes must pickle and cannot use objects that live only here (a
memory volume, a lock).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from chunkgraph._errors import ConfigError
from chunkgraph.execute._events import Subscriber
from chunkgraph.execute._local import EXECUTOR_KINDS, ExecutorKind, LocalExecutor
from chunkgraph.graph import Graph

if TYPE_CHECKING:
    from chunkgraph.planning import Plan


@runtime_checkable
class Executor(Protocol):
    """Runs a Graph: the interface every executor implements (``LocalExecutor``, ...)."""

    @property
    def in_process(self) -> bool:
        """True when tasks run in the calling process (they need not pickle)."""
        ...

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        """Run what ``targets`` (task ids; default every sink) need; ``{id: result}``.

        ``subscribers`` receive this run's events. ``plan``: a Plan of ``graph`` to
        follow (None: the executor plans, or runs by its own order). Failed tasks
        raise one ``ExceptionGroup`` of ``TaskError``; no partial result is returned.
        """
        ...


def resolve_executor(
    executor: ExecutorKind | Executor,
    *,
    workers: int | None = None,
    retries: int = 0,
    timeout: float | None = None,
) -> Executor:
    """The Executor that ``executor=`` names: a kind (one of ``EXECUTOR_KINDS``)
    becomes a ``LocalExecutor`` with these options; an Executor is returned as it is.

    ConfigError for anything else, for bad options, and for options given beside an
    Executor (which carries its own).

    >>> resolve_executor("sync", retries=1)
    LocalExecutor(kind='sync', workers=None, retries=1, subscribers=(), timeout=None)
    """
    if isinstance(executor, str):
        if executor not in EXECUTOR_KINDS:
            raise ConfigError(
                f"executor must be one of {EXECUTOR_KINDS} or an Executor (such as "
                f"LocalExecutor('threads', workers=4)), got {executor!r}"
            )
        return LocalExecutor(executor, workers, retries, (), timeout)
    if not isinstance(executor, Executor):
        raise ConfigError(
            f"executor must be one of {EXECUTOR_KINDS} or an Executor (an object with "
            f"run(graph, targets, *, subscribers, plan) and in_process), got {executor!r}"
        )
    given = {
        name: value
        for name, value, default in (
            ("workers", workers, None),
            ("retries", retries, 0),
            ("timeout", timeout, None),
        )
        if value != default
    }
    if given:
        options = ", ".join(f"{name}={value!r}" for name, value in given.items())
        raise ConfigError(
            f"{options} given beside executor={executor!r}, which has its own settings; "
            f"set them on the executor instead (e.g. LocalExecutor('threads', {options}))"
        )
    return executor
