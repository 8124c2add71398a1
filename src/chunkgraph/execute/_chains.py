"""A fused chain as one call to a worker process: its tasks run back to back there.

The planner fuses linear chains (``planning._fuse``): every task after the
first has the one before it as its only input. In a worker process the chain
runs as one call, so the results between its tasks never travel back:

    driver:  call of the first task (inputs resolved as usual)
             + for each later task its callable and arguments, the reference to
               the previous task replaced by PREVIOUS
    worker:  run_chain: value = first(...); value = next(..PREVIOUS -> value..); ...
             -> (tasks done, last value, error of the task that failed, its traceback)

A failure inside the chain names the task that raised it; the tasks before it
are done, and the value handed back is the failed task's input, so a retry
starts from that task (as a chain of the tasks left).
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from chunkgraph._errors import RemoteError
from chunkgraph.graph import Graph, replace_leaves


class _Previous:
    """Stands for the previous chain task's result in a later task's arguments."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "PREVIOUS"  # unpickles as this module's one instance


PREVIOUS = _Previous()

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Stand:
    """``results[i]`` for a resolve: PREVIOUS whatever ``i`` is."""

    def __getitem__(self, i: int) -> _Previous:
        return PREVIOUS


def later_calls(graph: Graph, tasks: Sequence[int]) -> list[Call]:
    """The calls of a chain's later ``tasks``, each with PREVIOUS for its one input.

    Stops before the first task whose arguments cannot be rebuilt: that task is
    left out of the chain, to fail on its own when it is run alone.
    """
    calls = []
    for t in tasks:
        try:
            calls.append(graph.resolve(t, _Stand()))  # type: ignore[arg-type]
        except Exception:
            break
    return calls


def run_chain(
    first: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], later: list[Call]
) -> tuple[int, Any, BaseException | None, str]:
    """Run a chain (in a worker); ``(tasks done, value, error, traceback text)``.

    The first task's exception propagates like any call's. A later task's is
    returned with the value it was given, so the driver keeps that input.
    """
    value = first(*args, **kwargs)

    def fill(item: Any) -> Any:
        return value if item is PREVIOUS else item

    for i, (fn, a, kw) in enumerate(later, start=1):
        try:
            a = tuple(replace_leaves(x, fill) for x in a)
            kw = {k: replace_leaves(v, fill) for k, v in kw.items()}
            result = fn(*a, **kw)
        except BaseException as error:
            text = "".join(traceback.format_exception(error))
            try:
                pickle.dumps(error)
            except Exception:
                error = RemoteError(f"{type(error).__name__}: {error}")
            return i, value, error, text
        value = result
    return len(later) + 1, value, None, ""
