"""The ``@task`` decorator: call syntax for ``Graph.add`` inside ``with Graph() as g:``.

    @task                      with Graph() as g:
    def inc(x): ...                a = inc(1)        # g.add(inc, 1) -> TaskRef
                                   b = inc(a)        # depends on a
    inc(1) == 2                # outside a graph the plain function runs

Options given to the decorator (``name``, ``cost``, ``resources``) apply to every
task it adds; a fixed ``name`` therefore suits a function called once per graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from chunkgraph.graph._cost import Cost, Resources
from chunkgraph.graph._graph import TaskRef, current_graph

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A function that adds itself as a task when called inside ``with Graph() as g:``.

    Args:
        fn: The function wrapped; called directly outside a ``with Graph()`` block.
        name: The name of the task it adds (unique in a graph: a task called twice needs
            none); None: ``"<fn name>-<id>"``.
        cost: The Cost of each task it adds; None: the default.
        resources: What each task it adds occupies; None: ``{"cpu": 1}``.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        name: str | None = None,
        cost: Cost | None = None,
        resources: Resources | Mapping[str, float] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.cost = cost
        self.resources = resources
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        graph = current_graph.get()
        if graph is None:
            return self.fn(*args, **kwargs)
        return graph.add(
            self.fn, *args, name=self.name, cost=self.cost, resources=self.resources, **kwargs
        )

    def __reduce__(self) -> Any:
        # Pickled by reference to the module-level name, like a plain function.
        qualname: str = getattr(self.fn, "__qualname__", repr(self.fn))
        return qualname


@overload
def task(fn: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    cost: Cost | None = None,
    resources: Resources | Mapping[str, float] | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    cost: Cost | None = None,
    resources: Resources | Mapping[str, float] | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Decorate ``fn`` so that calling it inside ``with Graph() as g:`` adds a task to ``g``.

    Used bare (``@task``) or with options (``@task(cost=Cost(seconds=2))``).

    Args:
        fn: The function, when used bare; None when options are given.
        name: The name of the task each call adds; None: ``"<fn name>-<id>"``.
        cost: The Cost of each task; None: the default.
        resources: What each task occupies (``{"gpu": 1}``); None: ``{"cpu": 1}``.

    Returns:
        A ``Task`` wrapping ``fn``, or the decorator that makes one.

    >>> from chunkgraph.graph import Graph
    >>> @task
    ... def double(x):
    ...     return 2 * x
    >>> with Graph() as g:
    ...     ref = double(double(3))
    >>> len(g), ref.name
    (2, 'double-1')
    >>> double(3)
    6
    """
    if fn is not None:
        return Task(fn)

    def wrap(f: Callable[P, R]) -> Task[P, R]:
        return Task(f, name=name, cost=cost, resources=resources)

    return wrap


__all__ = ["Task", "TaskRef", "task"]
