"""Which containers chunkgraph looks inside, and how it rebuilds them: one rule for all.

Two walks need the rule and must agree. The graph finds the TaskRefs in a
task's arguments when it is added and puts results in their place when it
runs (``_payload``); the process pool finds the numpy arrays in a call's
arguments and results and sends the large ones through shared memory
(``execute.pool._shm``). An array the pool did not look for would silently
be pickled through a pipe, so both walk with the functions here.

Opened: ``list``, ``tuple``, ``dict`` and their subclasses (named tuples,
``defaultdict``, ``OrderedDict``, ...); of a dict only the values, never the
keys. Everything else is a *leaf*, never looked inside (numpy arrays, sets,
other objects), which keeps walks cheap for tasks that carry large arrays.

A rebuilt container keeps its type:

    list, tuple, dict            a new one of the same type
    named tuple                  ``value._make(items)``
    other list / dict subclass   a shallow copy (``copy.copy``), refilled, so a
                                 defaultdict keeps its factory and attributes stay
    other tuple subclass         a plain tuple (its constructor is unknown)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

CONTAINERS = (list, tuple, dict)


def collect_leaves(value: object, wanted: Callable[[Any], bool], found: list[Any]) -> bool:
    """Append every leaf ``x`` of container ``value`` with ``wanted(x)`` to ``found``, in order.

    Returns True when one was found.

    Args:
        value: A list, tuple or dict (values), nested to any depth.
        wanted: Called on each leaf; true keeps it.
        found: The list the wanted leaves are appended to.

    >>> found = []
    >>> collect_leaves([1, (2, "a"), {"k": 3}], lambda x: isinstance(x, int), found), found
    (True, [1, 2, 3])
    """
    hit = False
    items = value.values() if isinstance(value, dict) else value
    for item in items:  # type: ignore[attr-defined]
        if isinstance(item, CONTAINERS):
            if collect_leaves(item, wanted, found):
                hit = True
        elif wanted(item):
            found.append(item)
            hit = True
    return hit


def has_leaf(value: object, wanted: Callable[[Any], bool]) -> bool:
    """Whether any leaf of ``value`` (a container, or a leaf itself) is ``wanted``.

    Args:
        value: A leaf, or a list, tuple or dict nested to any depth.
        wanted: Called on each leaf until one is true.
    """
    if not isinstance(value, CONTAINERS):
        return wanted(value)
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if has_leaf(item, wanted) if isinstance(item, CONTAINERS) else wanted(item):
            return True
    return False


def replace_leaves(value: Any, new: Callable[[Any], Any]) -> Any:
    """``value`` with every leaf ``x`` replaced by ``new(x)``; containers are rebuilt.

    Every container is a fresh one (see the module doc for its type), so the
    caller may hand it to code that mutates it; ``value`` itself is unchanged.

    Args:
        value: A leaf, or a list, tuple or dict (also a named tuple) nested to any depth.
        new: Called on each leaf; its value takes the leaf's place.

    >>> from collections import namedtuple
    >>> Pair = namedtuple("Pair", "a b")
    >>> replace_leaves([Pair(1, 2), {"k": 3}], lambda x: -x)
    [Pair(a=-1, b=-2), {'k': -3}]
    """
    if not isinstance(value, CONTAINERS):
        return new(value)
    # Leaves are most items: calling ``new`` on them directly, not through a
    # recursive call, makes a rebuild about a third cheaper.
    cls = value.__class__
    if cls is dict or isinstance(value, dict):
        out = {
            k: replace_leaves(v, new) if isinstance(v, CONTAINERS) else new(v)
            for k, v in value.items()  # type: ignore[union-attr]
        }
        if cls is dict:
            return out
        mapping: dict[Any, Any] = copy.copy(value)  # type: ignore[arg-type]
        mapping.update(out)
        return mapping
    items = [replace_leaves(v, new) if isinstance(v, CONTAINERS) else new(v) for v in value]
    if cls is list:
        return items
    if cls is tuple:
        return tuple(items)
    if isinstance(value, list):
        sequence: list[Any] = copy.copy(value)
        sequence[:] = items
        return sequence
    if hasattr(value, "_make"):  # a named tuple
        return value._make(items)
    return tuple(items)
