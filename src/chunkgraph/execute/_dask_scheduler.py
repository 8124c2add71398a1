"""``dask_scheduler``: chunkgraph as the scheduler of dask collections.

    dask.config.set(scheduler=chunkgraph.dask_scheduler)      # every compute
    x.compute(scheduler=chunkgraph.dask_scheduler)            # one compute

dask calls a scheduler as ``get(dsk, keys, **kwargs)``: ``dsk`` is an
expression, a HighLevelGraph or a dict; ``keys`` is a key or nested lists
of keys. The answer has the structure of ``keys`` with every list a tuple
(``dask.local.nested_get``'s contract, which ``compute`` unpacks).

    dask_scheduler(dsk, keys)
      from_dask(dsk, keys)            tasks, data and aliases (graph._from_dask)
      executor.run(graph, targets)    plan, then run on LocalExecutor threads
      nested tuples of results   <-   data keys answered without a task

Errors. chunkgraph reports failed tasks as one ExceptionGroup of TaskError;
dask users (and dask's own tests) expect the task's own exception, as every
dask scheduler raises it. So the original exception of the first failed task
is re-raised, with its traceback, and a note (PEP 678) naming its dask key
and any other tasks that failed. ``except ZeroDivisionError`` keeps working;
the other failures are in the note, not lost. Errors that are not a task's
(a malformed graph, Ctrl-C) pass through unchanged.
"""

from __future__ import annotations

import warnings
from typing import Any

from chunkgraph._errors import TaskError
from chunkgraph.execute._executor import (
    Executor,
    close_resolved,
    is_scheduler_address,
    resolve_executor,
)
from chunkgraph.execute._local import ExecutorKind
from chunkgraph.graph import DaskGraph, from_dask

# Failures named in the note beside the one raised; more would bury the traceback.
_OTHER_FAILURES_SHOWN = 5


def dask_scheduler(
    dsk: Any,
    keys: Any,
    *,
    num_workers: int | None = None,
    executor: ExecutorKind | Executor = "threads",
    **dask_options: Any,
) -> Any:
    """Compute ``keys`` of the dask graph ``dsk`` with chunkgraph; a dask ``get`` function.

    A failed task raises its own exception (see the module doc).

    Args:
        dsk: The dask graph, a dict of keys to tasks and values.
        keys: The keys wanted: a key or (nested) lists of keys, as dask passes them.
        num_workers: Threads; None: dask's ``num_workers`` setting, else all usable
            cores.
        executor: ``"threads"``, ``"processes"``, ``"sync"`` or a chunkgraph Executor
            (which carries its own workers).
        **dask_options: What dask forwards from ``compute(**kwargs)``: the options
            dask's local schedulers take and this one does not need (``pool``,
            ``cache``, ``chunksize``, ...) are ignored; others are ignored with a
            warning.

    Returns:
        The values of ``keys``, in their shape.

    >>> import operator
    >>> dsk = {"x": 1, "y": (operator.add, "x", 10)}
    >>> dask_scheduler(dsk, ["y", ["x"]])
    (11, (1,))
    """
    unknown = set(dask_options) - _DASK_LOCAL_OPTIONS
    if unknown:  # dask's contract: compute(**kwargs) reaches the scheduler, which must not fail
        warnings.warn(
            f"dask_scheduler() ignores option(s) {sorted(unknown)}; it takes num_workers= "
            f"and executor= (and ignores dask's {sorted(_DASK_LOCAL_OPTIONS)})",
            stacklevel=2,
        )
    # dask's num_workers setting sizes local threads; a cluster's workers are its own.
    if num_workers is None and isinstance(executor, str) and not is_scheduler_address(executor):
        import dask

        num_workers = dask.config.get("num_workers", None)
    chosen = resolve_executor(executor, workers=num_workers)
    try:
        converted = from_dask(dsk, keys)
        ids = sorted({ref.id for ref in _refs(converted.targets)})
        try:
            by_id = chosen.run(converted.graph, ids) if ids else {}
        except ExceptionGroup as group:
            error = _first_task_error(group, converted)
            if error is None:
                raise
        else:
            return _nested(converted.targets, by_id)
        raise error
    finally:
        close_resolved(chosen, executor)


# What dask's local ``get`` functions accept beside the graph and keys; a caller
# may pass them through ``compute(**kwargs)``. Threads are chunkgraph's own here.
_DASK_LOCAL_OPTIONS = frozenset(
    {
        "cache",
        "callbacks",
        "chunksize",
        "dumps",
        "get_id",
        "loads",
        "pack_exception",
        "pool",
        "raise_exception",
        "rerun_exceptions_locally",
    }
)


def _refs(targets: Any) -> list[Any]:
    if isinstance(targets, list):
        return [r for t in targets for r in _refs(t)]
    return [targets]


def _nested(targets: Any, by_id: dict[int, Any]) -> Any:
    if isinstance(targets, list):
        return tuple(_nested(t, by_id) for t in targets)
    return by_id[targets.id]


def _first_task_error(group: BaseExceptionGroup[Any], converted: DaskGraph) -> BaseException | None:
    """The original exception of the group's first TaskError, noted with its dask key."""
    failures = [e for e in group.exceptions if isinstance(e, TaskError)]
    original = failures[0].__cause__ if failures else None
    if original is None:
        return None
    # Only on failure, so a pass over the keys is fine: dask users know keys, not ids.
    key_of: dict[int, Any] = {}
    for dask_key, tid in converted.task_ids.items():
        key_of.setdefault(tid, dask_key)  # a task's own key comes before its aliases

    def key(error: TaskError) -> Any:
        return key_of.get(converted.graph.task_id(error.task), error.task)

    first, others = failures[0], failures[1:]
    note = f"raised by dask key {key(first)!r} (chunkgraph task {first.task!r})"
    if others:
        shown = "; ".join(
            f"{key(e)!r}: {type(e.__cause__).__name__}" for e in others[:_OTHER_FAILURES_SHOWN]
        )
        more = len(others) - _OTHER_FAILURES_SHOWN
        note += f"; {len(others)} other task(s) failed too: {shown}"
        note += f" and {more} more" if more > 0 else ""
    original.add_note(note)
    return original
