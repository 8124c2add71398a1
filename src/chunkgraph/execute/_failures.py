"""How failed tasks are reported, by every executor alike: one ``TaskError`` per task
that failed for good, gathered in one ``ExceptionGroup``.

    TaskError(name, input names, attempts, "Type: message")
      __cause__  the task's own exception (from a worker: its traceback text
                 as that exception's ``__cause__``, a ``RemoteTraceback``)
    ExceptionGroup("2 task(s) failed; 5 task(s) did not run", [TaskError, ...])

A task that ran a parallel loop fails with the loop's group ("parallel_map over 16
elements: 1 piece(s) failed"), which says nothing; the message a person reads
(``TaskError``'s, the command line's, an event's JSON) is of the ``innermost``
error: the first leaf of the groups, the one that names the chunk or the file.
"""

from __future__ import annotations

from chunkgraph._errors import TaskError
from chunkgraph.graph import Graph


def describe(error: BaseException) -> str:
    """``Type: message (notes)``, even for an exception whose ``__str__`` itself fails.

    Notes are context added by code that knew more than the message (the flow names
    the chunk there), so the one-line ``TaskError`` keeps them.

    >>> error = ValueError("bad")
    >>> error.add_note("in chunk 3")
    >>> describe(error)
    'ValueError: bad (in chunk 3)'
    """
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:
        text = f"{type(error).__name__} (its message could not be shown)"
    notes = getattr(error, "__notes__", None)
    if isinstance(notes, list) and notes:
        text += f" ({'; '.join(str(n) for n in notes)})"
    return text


def innermost(error: BaseException) -> tuple[BaseException, int]:
    """The first leaf under ``error``'s exception groups, and how many other leaves they
    hold (0 for an error that is no group).

    >>> leaf = OSError("chunk c/1/0/1")
    >>> innermost(ExceptionGroup("a", [ExceptionGroup("b", [leaf]), ValueError()]))
    (OSError('chunk c/1/0/1'), 1)
    """
    others = 0
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        others += len(error.exceptions) - 1
        error = error.exceptions[0]
    return error, others


def describe_innermost(error: BaseException) -> str:
    """``describe`` of the ``innermost`` error, saying how many others the groups held.

    >>> describe_innermost(ExceptionGroup("loop", [ValueError("bad"), KeyError("k")]))
    'ValueError: bad (and 1 other error)'
    """
    leaf, others = innermost(error)
    text = describe(leaf)
    if others:
        text += f" (and {others} other error{'s' if others > 1 else ''})"
    return text


def task_error(graph: Graph, t: int, attempts: int, cause: BaseException) -> TaskError:
    """The TaskError of task ``t``, which failed ``attempts`` times, last with ``cause``."""
    dep_ptr, dep_idx = graph.dependencies()
    inputs = [graph.name(int(d)) for d in dep_idx[dep_ptr[t] : dep_ptr[t + 1]]]
    error = TaskError(graph.name(t), inputs, attempts, describe_innermost(cause))
    error.__cause__ = cause
    return error


def failure_group(errors: list[TaskError], skipped: int) -> ExceptionGroup[TaskError]:
    """One group of ``errors``; its message counts them and the ``skipped`` tasks."""
    message = f"{len(errors)} task(s) failed"
    if skipped:
        message += f"; {skipped} task(s) did not run"
    return ExceptionGroup(message, errors)
