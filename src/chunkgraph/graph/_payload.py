"""Finding TaskRefs in a task's arguments at build time and substituting results at run time.

A task's arguments are stored exactly as given. At ``add()`` time they are
scanned once and the task gets a *shape* code that decides how much work the
run-time substitution needs:

    NO_REFS     no TaskRef anywhere: call ``fn(*args, **kwargs)`` as stored
    TOP_REFS    TaskRefs only as direct arguments: one flat pass per call
    NESTED_REFS TaskRefs inside list / tuple / dict values: recursive rebuild

Which containers are searched, and how they are rebuilt (named tuples and
dict subclasses keep their type), is ``_nested``'s rule, the same one the
process pool uses to find arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chunkgraph.graph._nested import collect_leaves, replace_leaves

NO_REFS = 0
TOP_REFS = 1
NESTED_REFS = 2


def scan(value: object, ref_type: type, found: list[Any]) -> bool:
    """Append every ``ref_type`` instance nested in a container ``value`` to ``found``.

    Returns True when at least one was found. ``value`` itself is a container.
    """
    return collect_leaves(value, lambda item: item.__class__ is ref_type, found)


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

    def result_of(item: Any) -> Any:
        return results[item.id] if item.__class__ is ref_type else item

    return (
        tuple(replace_leaves(a, result_of) for a in args),
        {k: replace_leaves(v, result_of) for k, v in (kwargs or {}).items()},
    )
