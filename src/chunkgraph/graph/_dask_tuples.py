"""Dask's tuple-task graph format, read without ``dask._task_spec`` (older dask).

The format, as dask documents it (``docs/spec``) and its ``core._execute_task``
evaluates it; a graph is a dict from keys to values:

    key       a str, bytes, int, float, or a tuple of these
    task      a tuple whose first element is callable: ``(func, arg1, arg2, ...)``
    argument  a key of the graph     -> that key's value
              a task                 -> its result (nested tasks run inline)
              a list                 -> a list of its elements, each an argument
              anything else          -> itself (tuples that are neither tasks nor
                                        keys, dicts, arrays: literals)

A value that is a task, or a list holding tasks or keys, is a task here; a
value that is another key is an alias; any other value is data. A key that is
unhashable or not in the graph is never a reference, so ``"x"`` is a literal
string unless the graph has a key ``"x"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chunkgraph.graph._dask_nodes import ALIAS, DATA, TASK, Key, key_name
from chunkgraph.graph._graph import Graph


def _is_task(value: object) -> bool:
    return type(value) is tuple and bool(value) and callable(value[0])


def _collect(arg: object, graph: Mapping[Key, Any], found: dict[Key, None]) -> None:
    """Add every key ``arg`` refers to (as an argument) to ``found``, in order."""
    if isinstance(arg, list):
        for item in arg:
            _collect(item, graph, found)
    elif _is_task(arg):
        for item in arg[1:]:  # type: ignore[index]
            _collect(item, graph, found)
    else:
        try:
            if arg in graph:
                found[arg] = None
        except TypeError:  # unhashable: a literal
            pass


def evaluate(arg: Any, values: Mapping[Key, Any]) -> Any:
    """The value of argument ``arg`` given the values of the keys it refers to."""
    if isinstance(arg, list):
        return [evaluate(item, values) for item in arg]
    if type(arg) is tuple and arg and callable(arg[0]):
        return arg[0](*[evaluate(item, values) for item in arg[1:]])
    try:
        return values.get(arg, arg)
    except TypeError:
        return arg


class TupleCall:
    """Evaluates one tuple task (or list), given its dependencies' values in ``keys`` order."""

    __slots__ = ("expr", "key", "keys")

    def __init__(self, key: Key, expr: Any, keys: tuple[Key, ...]) -> None:
        self.key = key
        self.expr = expr
        self.keys = keys

    def __call__(self, *values: Any) -> Any:
        return evaluate(self.expr, dict(zip(self.keys, values, strict=True)))

    @property
    def __name__(self) -> str:  # chunkgraph names a task "<fn name>-<id>": use the key's
        return key_name(self.key)

    def __repr__(self) -> str:
        return f"TupleCall({self.key!r})"


class TupleNodes:
    """A graph of tuple tasks, read by the rules in the module doc."""

    def __init__(self, dsk: Mapping[Key, Any]) -> None:
        self.nodes = dsk
        self._deps: dict[Key, tuple[Key, ...]] = {}

    def kind(self, key: Key) -> tuple[int, Any]:
        value = self.nodes[key]
        if _is_task(value):
            return TASK, value
        if isinstance(value, list):
            return (TASK, value) if self.dependencies(key) else (DATA, value)
        try:
            if value in self.nodes:
                return ALIAS, value
        except TypeError:
            pass
        return DATA, value

    def dependencies(self, key: Key) -> tuple[Key, ...]:
        deps = self._deps.get(key)
        if deps is None:
            found: dict[Key, None] = {}
            _collect(self.nodes[key], self.nodes, found)
            deps = self._deps[key] = tuple(found)
        return deps

    def add(self, graph: Graph, key: Key, node: Any, resolved: dict[Key, Any]) -> Any:
        keys = self.dependencies(key)
        return graph.add(TupleCall(key, node, keys), *[resolved[k] for k in keys])
