"""A plan's subgraph as one Dask task: its member tasks run back to back in one worker.

The Dask scheduler pays for every task it tracks (about a millisecond each,
and memory), so chunkgraph hands it one task per subgraph of the plan (a
fused chain at the least), not one per graph task:

    client:  SubgraphProgram(tasks in run order, their calls pickled once, with
             Input(t) wherever task t's result goes, what to drop after each
             task, which results leave)
             client.submit(run_subgraph, program, *producer subgraphs' futures)
    worker:  run_subgraph: the process's pool sized to the worker's threads
             (``_dask_worker_pool``); the allocator left as Dask set it (only a
             flow's streamed batches change it while they run: ``_dask_malloc``);
             results = producers' exports; run each task in order, dropping a
             result after its last use here unless it leaves;
             -> {task id: result} for the tasks other subgraphs or targets need

Only exported results travel (Dask moves a producer's dict to the workers of
its consumers); the others live and die inside the call, so a subgraph's
peak memory is what its order keeps alive, not all of it.

The calls are pickled with cloudpickle by the client, so functions defined in
``__main__`` or in a module registered with
``cloudpickle.register_pickle_by_value`` reach workers that cannot import
them; functions of installed modules travel by reference.

An exported result must be serializable: it travels to the client (a
target) or to a consumer on another worker, and Dask's own failure there is
a bare TypeError far from the task (or, between workers, a consumer that
waits for ever). So each export is serialized once with Dask's serializers
before the subgraph returns, and one that fails is that task's failure. The
check costs one serialization of each export (numpy arrays: their header
only, the data is not copied); an export whose consumer runs on the same
worker would not have needed it, but Dask may move any result at any time
(stealing, a worker that leaves).

A failing task is tried again in place, up to ``retries`` more times, unless its
error would fail every try the same way (``_errors.is_permanent``: the rule every
executor keeps); the results before it stay. Then it stops the subgraph:
``SubgraphFailed`` names it, how many tries it had, and carries its exception
(replaced by a ``RemoteError`` when it cannot be pickled) and traceback text, so
the client reports the task, not the subgraph. Dask itself retries nothing (it
would run a permanent error again, and the whole subgraph from its start); tasks
are expected to be idempotent, as for any executor that retries.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from chunkgraph._errors import RemoteError, is_permanent
from chunkgraph.execute._dask_worker_pool import size_pool_to_worker
from chunkgraph.graph import replace_leaves

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class Input:
    """Stands for task ``id``'s result in a member task's arguments."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self) -> tuple[type[Input], tuple[int]]:
        return (Input, (self.id,))

    def __repr__(self) -> str:
        return f"Input({self.id})"


class Inputs:
    """``results[i]`` for ``Graph.resolve``: an Input placeholder for every id."""

    def __getitem__(self, i: int) -> Input:
        return Input(i)


@dataclass(frozen=True)
class SubgraphProgram:
    """What a worker needs to run one subgraph (see the module doc).

    ``tasks``: graph ids in run order; ``calls``: their ``(fn, args, kwargs)``,
    cloudpickled as one list; ``uses_inputs[i]``: task i's arguments hold an
    Input; ``drop_after[i]``: ids whose results nothing after task i reads;
    ``exports``: ids whose results are returned; ``retries``: more tries of a failed
    task whose error is not permanent.
    """

    tasks: tuple[int, ...]
    calls: bytes
    uses_inputs: tuple[bool, ...]
    drop_after: tuple[tuple[int, ...], ...]
    exports: tuple[int, ...]
    retries: int = 0


class SubgraphFailed(Exception):
    """Task ``task`` of a subgraph raised ``error`` on its last of ``attempts`` tries;
    ``text`` is its traceback."""

    def __init__(self, task: int, error: BaseException, text: str, attempts: int = 1) -> None:
        super().__init__(f"task {task} failed: {type(error).__name__}: {error}")
        self.task = task
        self.error = error
        self.text = text
        self.attempts = attempts

    def __reduce__(self) -> tuple[type[SubgraphFailed], tuple[int, BaseException, str, int]]:
        return (SubgraphFailed, (self.task, self.error, self.text, self.attempts))


def _failed(task: int, error: BaseException, attempts: int = 1) -> SubgraphFailed:
    text = "".join(traceback.format_exception(error))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        error = RemoteError(f"{type(error).__name__}: {error}")
    return SubgraphFailed(task, error, text, attempts)


def pickle_calls(calls: list[Call]) -> bytes:
    """The member calls as one cloudpickle (functions of ``__main__`` travel by value)."""
    data: bytes = cloudpickle.dumps(calls, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def run_subgraph(program: SubgraphProgram, *producers: dict[int, Any]) -> dict[int, Any]:
    """Run ``program``'s tasks in order (in a Dask worker); returns its exported results.

    ``producers`` are the exports of the subgraphs it consumes. Raises
    ``SubgraphFailed`` naming the first task that failed.
    """
    size_pool_to_worker()
    try:
        calls: list[Call] = pickle.loads(program.calls)
    except BaseException as error:
        failure = _failed(program.tasks[0], error)
        failure.add_note(
            "the worker could not load this task's function or arguments: they must be "
            "importable on the workers (installed there), or defined in __main__"
        )
        raise failure from None
    results: dict[int, Any] = {}
    for out in producers:
        results.update(out)

    def fill(item: Any) -> Any:
        return results[item.id] if item.__class__ is Input else item

    for t, (fn, args, kwargs), uses, drop in zip(
        program.tasks, calls, program.uses_inputs, program.drop_after, strict=True
    ):
        tries = 0
        while True:
            tries += 1
            try:
                if uses:
                    args = tuple(replace_leaves(a, fill) for a in args)
                    kwargs = {k: replace_leaves(v, fill) for k, v in kwargs.items()}
                    uses = False  # filled in once; the tries share them
                results[t] = fn(*args, **kwargs)
                break
            except BaseException as error:
                # The task's own Ctrl-C, its last try, or an error every try would repeat.
                final = isinstance(error, KeyboardInterrupt) or is_permanent(error)
                if final or tries > program.retries:
                    raise _failed(t, error, tries) from None
        for d in drop:
            del results[d]
    exports = {t: results[t] for t in program.exports}
    for t, value in exports.items():
        _check_serializable(t, value)
    return exports


def _check_serializable(task: int, value: Any) -> None:
    """Raise ``SubgraphFailed`` for ``task`` when its result cannot leave this worker."""
    from distributed.protocol.serialize import serialize

    try:
        serialize(value, on_error="raise")
    except Exception as error:  # Dask wraps pickle's TypeError, PicklingError, ...
        cause = error.__cause__ or error
        problem = TypeError(
            f"its result, of type {type(value).__name__}, cannot be serialized to travel back "
            f"from the Dask worker (to the client, or to a task that reads it on another "
            f"worker): {type(cause).__name__}: {cause}. Return values that pickle: numpy "
            "arrays, numbers, strings, or lists, tuples and dicts of them; not locks, open "
            "files, connections or generators (return list(...) of a generator)"
        )
        raise _failed(task, problem) from None
