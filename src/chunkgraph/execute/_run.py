"""``run()``: the one call that runs a graph, with targets given the way a user holds them.

Targets may be a TaskRef, a task name, or lists, tuples and dicts of them; the
result has the same shape. The executor is chosen by ``resolve_executor``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError
from chunkgraph.execute._events import Subscriber
from chunkgraph.execute._executor import Executor, close_resolved, resolve_executor
from chunkgraph.execute._local import ExecutorKind
from chunkgraph.execute._progress import ProgressBar
from chunkgraph.graph import Graph, TaskRef

if TYPE_CHECKING:
    from chunkgraph.planning import Plan


def _target_ids(graph: Graph, targets: object) -> list[int]:
    if isinstance(targets, TaskRef | str):
        return [graph.task_id(targets)]
    if isinstance(targets, Mapping):
        return [t for v in targets.values() for t in _target_ids(graph, v)]
    if isinstance(targets, list | tuple):
        return [t for v in targets for t in _target_ids(graph, v)]
    raise ConfigError(
        f"targets must be a TaskRef, a task name, or a list/tuple/dict of them, got {targets!r}"
    )


def _shape_like(targets: object, graph: Graph, results: Mapping[int, Any]) -> Any:
    if isinstance(targets, TaskRef):
        return results[targets.id]
    if isinstance(targets, str):
        return results[graph.ref(targets).id]
    if isinstance(targets, Mapping):
        return {k: _shape_like(v, graph, results) for k, v in targets.items()}
    if isinstance(targets, tuple):
        return tuple(_shape_like(v, graph, results) for v in targets)
    return [_shape_like(v, graph, results) for v in targets]  # type: ignore[attr-defined]


def run(
    graph: Graph,
    targets: TaskRef | str | Sequence[Any] | Mapping[Any, Any] | None = None,
    executor: ExecutorKind | Executor = "threads",
    retries: int | None = None,
    progress: bool = False,
    workers: int | None = None,
    subscribers: Iterable[Subscriber] = (),
    timeout: float | None = None,
    plan: Plan | None = None,
    gpu_fallback: bool | None = None,
) -> Any:
    """Run ``graph`` and return the results of ``targets``.

    Args:
        graph: The graph to run.
        targets: A TaskRef or a task name (returns its value), a list, tuple or dict
            of them (the same structure of values), or None (a dict ``{sink name:
            value}`` of every task no other task consumes).
        executor: ``"threads"`` (the default), ``"adaptive"``, ``"processes"``,
            ``"sync"`` (a ``LocalExecutor`` with ``workers``, ``retries`` and
            ``timeout``), a Dask scheduler address, or an ``Executor``, which carries
            its own settings (an option given beside it is a ConfigError).
        retries: Extra tries per failed task; None: 0 for a kind, an Executor's own.
        progress: Show a progress bar on the terminal.
        workers: A kind's number of workers; None: all usable cores.
        subscribers: Callables that receive every ``Event`` of the run.
        timeout: Seconds each try of each task may run (see ``LocalExecutor``); None:
            no limit.
        plan: A ``chunkgraph.plan(graph, ...)`` to follow; None: the graph is planned
            on this machine's contexts, ``chunkgraph.local_contexts()``.
        gpu_fallback: Where no GPU is found, run tasks asking for ``{"gpu": ...}`` on
            CPU workers; None or False: a ConfigError saying no GPU was found.

    Returns:
        The targets' values, in the shape of ``targets``.

    Raises:
        ExceptionGroup: Of ``TaskError``, one per failed task.
        ConfigError: For an invalid executor or option.

    >>> from chunkgraph.graph import Graph
    >>> g = Graph()
    >>> parts = [g.add(sum, range(i)) for i in range(4)]
    >>> total = g.add(sum, parts, name="total")
    >>> run(g, total), run(g, [parts[3], total]), run(g)
    (4, [3, 4], {'total': 4})
    """
    if not isinstance(graph, Graph):
        hint = (
            f"; for one task, call run(ref.graph, ref) with ref = {graph!r}"
            if isinstance(graph, TaskRef)
            else ""
        )
        raise ConfigError(f"run() takes a Graph first, got {type(graph).__name__}{hint}")
    chosen = resolve_executor(
        executor, workers=workers, retries=retries, timeout=timeout, gpu_fallback=gpu_fallback
    )
    subs = list(subscribers)
    bar = None
    try:
        if progress:
            bar = ProgressBar()
            subs.append(bar)
        # An executor written before plans existed still runs a graph given no plan.
        given: dict[str, Any] = {"plan": plan} if plan is not None else {}
        if targets is None:
            by_id = chosen.run(graph, subscribers=subs, **given)
            return {graph.name(t): value for t, value in by_id.items()}
        by_id = chosen.run(graph, _target_ids(graph, targets), subscribers=subs, **given)
        return _shape_like(targets, graph, by_id)
    finally:
        close_resolved(chosen, executor)
        if bar is not None:
            bar.close()
