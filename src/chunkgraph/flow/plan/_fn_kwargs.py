"""``fn_kwargs``: non-volume keyword arguments of ``fn`` (a threshold, a model's settings).

They are bound once, before anything else looks at ``fn``: ``apply`` works on
``functools.partial(fn, **fn_kwargs)``. Everything downstream then sees one
callable, so the rest follows without a second code path:

* the flow id hashes a partial's function and keywords (``_fingerprint``):
  other values are another flow (it runs again), the same values resume it;
* ``validate_flow`` checks the partial's signature as it checks any ``fn``;
* a process executor pickles the partial with its keywords.

A keyword must not be an input's name or ``box``: the flow passes those at
each call, and a call's keywords would silently replace a partial's. Nor may it
name the parameter that receives a single (unnamed) input's array, ``fn``'s
first positional one: the call ``fn(array)`` would then give it twice.

>>> import numpy as np
>>> def scale(src, *, factor):
...     return src * factor
>>> bound = with_fn_kwargs(scale, {"factor": 3}, ("src",))
>>> int(bound(np.array(2)))
6
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from chunkgraph._errors import ConfigError

# The keyword under which fn receives its chunk's box (see _spec.BOX_KEYWORD).
_RESERVED = ("box",)


def with_fn_kwargs(
    fn: Callable[..., Any],
    fn_kwargs: object,
    input_names: Iterable[str],
    positional_input: bool = False,
) -> Callable[..., Any]:
    """``fn`` with ``fn_kwargs`` bound (``fn`` itself when there are none);
    ``positional_input``: the flow calls ``fn(array)`` with its single input."""
    if fn_kwargs is None:
        return fn
    if not isinstance(fn_kwargs, Mapping):
        raise ConfigError(
            f"fn_kwargs must be a dict of keyword -> value, got {type(fn_kwargs).__name__}: "
            f"{fn_kwargs!r}; e.g. fn_kwargs={{'threshold': 0.5}}",
            field="fn_kwargs",
        )
    if not fn_kwargs:
        return fn
    if not callable(fn):
        raise ConfigError(f"fn must be callable, got {type(fn).__name__}: {fn!r}", field="fn")
    taken = set(input_names) | set(_RESERVED)
    for key in fn_kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigError(
                f"fn_kwargs key {key!r} is not a keyword; use an identifier",
                field=f"fn_kwargs.{key}",
            )
        if key in taken:
            what = "the chunk's box" if key in _RESERVED else f"input {key!r}'s array"
            raise ConfigError(
                f"fn_kwargs[{key!r}] clashes with {what}, which the flow passes to fn by that "
                "keyword at every call; rename the keyword (or the input)",
                field=f"fn_kwargs.{key}",
            )
    _check_accepted(fn, fn_kwargs)
    if positional_input:
        _check_not_the_array(fn, fn_kwargs)
    return functools.partial(fn, **fn_kwargs)


def _check_not_the_array(fn: Callable[..., Any], fn_kwargs: Mapping[str, Any]) -> None:
    """A ConfigError when a keyword names the parameter ``fn(array)`` fills."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    first = next((p for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY), None)
    keyword = first is not None and first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    if first is not None and keyword and first.name in fn_kwargs:
        raise ConfigError(
            f"fn_kwargs[{first.name!r}] clashes with the input's array, which the flow "
            f"passes to fn as its first argument ({first.name!r}) at every call; rename "
            "the keyword, or give the input by name (inputs={'NAME': volume})",
            field=f"fn_kwargs.{first.name}",
        )


def _check_accepted(fn: Callable[..., Any], fn_kwargs: Mapping[str, Any]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins may have no signature to check
        return
    try:
        signature.bind_partial(**fn_kwargs)
    except TypeError as err:
        raise ConfigError(
            f"fn {getattr(fn, '__name__', fn)!r}{signature} does not accept fn_kwargs "
            f"{sorted(fn_kwargs)}: {err}; give fn those keyword parameters (or **kwargs)",
            field=_refused_keyword(signature, fn_kwargs),
        ) from None


def _refused_keyword(signature: inspect.Signature, fn_kwargs: Mapping[str, Any]) -> str:
    """The field of the first keyword ``signature`` cannot take (``fn_kwargs.NAME``), or
    ``fn_kwargs`` when the keywords are refused together."""
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return "fn_kwargs"
    for key in fn_kwargs:
        param = params.get(key)
        if param is None or param.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            return f"fn_kwargs.{key}"
    return "fn_kwargs"
