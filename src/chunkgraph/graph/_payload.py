"""Finding TaskRefs in a task's arguments at build time and substituting results at run time.

A task's arguments are stored exactly as given. At ``add()`` time they are
scanned once and the task gets a *shape* code that decides how much work the
run-time substitution needs:

    NO_REFS     no TaskRef anywhere: call ``fn(*args, **kwargs)`` as stored
    TOP_REFS    TaskRefs only as direct arguments: one flat pass per call
    NESTED_REFS TaskRefs inside list / tuple / dict values: recursive rebuild

The scan recurses only into ``list``, ``tuple`` (named tuples included) and
``dict``; it never looks inside numpy arrays, sets or other objects, which
keeps ``add()`` cheap for tasks that carry large arrays as arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

NO_REFS = 0
TOP_REFS = 1
NESTED_REFS = 2

_CONTAINERS = (list, tuple, dict)


def scan(value: object, ref_type: type, found: list[Any]) -> bool:
    """Append every ``ref_type`` instance nested in a container ``value`` to ``found``.

    Returns True when at least one was found. ``value`` itself is a container.
    """
    hit = False
    items = value.values() if isinstance(value, dict) else value
    for item in items:  # type: ignore[attr-defined]
        if item.__class__ is ref_type:
            found.append(item)
            hit = True
        elif isinstance(item, _CONTAINERS) and scan(item, ref_type, found):
            hit = True
    return hit


def substitute(value: Any, ref_type: type, lookup: Callable[[Any], Any]) -> Any:
    """Return ``value`` with every nested ``ref_type`` replaced by ``lookup(ref)``."""
    cls = value.__class__
    if cls is ref_type:
        return lookup(value)
    if isinstance(value, dict):
        if cls is dict:
            return {k: substitute(v, ref_type, lookup) for k, v in value.items()}
        # A subclass (defaultdict, OrderedDict) keeps its type and settings.
        out = copy.copy(value)
        for k, v in value.items():
            out[k] = substitute(v, ref_type, lookup)
        return out
    if isinstance(value, list):
        return [substitute(v, ref_type, lookup) for v in value]
    if isinstance(value, tuple):
        items = [substitute(v, ref_type, lookup) for v in value]
        if hasattr(value, "_make"):  # a named tuple keeps its type
            return value._make(items)
        return tuple(items)
    return value


def resolve_call(
    shape: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    ref_type: Any,  # Any, not type: an ``is`` test on a type would narrow items to object
    results: Sequence[Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Return ``(args, kwargs)`` with TaskRefs replaced by ``results[ref.id]``."""
    if shape == NO_REFS:
        return args, kwargs or {}
    if shape == TOP_REFS:
        new_args = tuple(results[a.id] if a.__class__ is ref_type else a for a in args)
        if not kwargs:
            return new_args, {}
        new_kwargs = {k: results[v.id] if v.__class__ is ref_type else v for k, v in kwargs.items()}
        return new_args, new_kwargs

    def lookup(ref: Any) -> Any:
        return results[ref.id]

    return (
        tuple(substitute(a, ref_type, lookup) for a in args),
        {k: substitute(v, ref_type, lookup) for k, v in (kwargs or {}).items()},
    )
