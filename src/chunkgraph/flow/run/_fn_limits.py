"""``fn_resources``: at most ``k`` calls of ``fn`` at once per named resource.

``fn_resources={"gpu": 1}`` lets one bottom call hold the GPU while the
other cores keep reading, blending and writing. Each call of ``fn`` acquires
one slot of every named resource (in name order, so two flows never wait on
each other in a cycle) and releases them when it returns.

Why a semaphore and not the graph's ``resources``: bottom calls are not graph
tasks. A top-level task reads its superchunk once and runs the levels below
on the local pool, so the executor only ever sees top tasks; resources on
them would hold the GPU for a whole top task (its reads, blending and writes
too) and still let its many bottom calls run at once. The limit belongs
around the call itself.

Scope: one semaphore per (name, k) and process. Under ``executor="threads"``
(the default) that is the whole flow, and flows in one process that name the
same resource with the same ``k`` share it. Under process executors each
worker process has its own: at most ``k`` calls per worker process.

The limit is not part of the flow id: it changes when ``fn`` runs, never
what it computes, so a run with another limit resumes the same flow.

>>> limited = limit_calls(abs, {"gpu": 1})
>>> limited(-3), limit_calls(abs, None) is abs
(3, True)
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

from chunkgraph._errors import ConfigError

_SEMAPHORES: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_GUARD = threading.Lock()


def _semaphore(name: str, slots: int) -> threading.BoundedSemaphore:
    with _GUARD:
        return _SEMAPHORES.setdefault((name, slots), threading.BoundedSemaphore(slots))


class LimitedFn:
    """``fn`` whose calls hold one slot of each resource; pickles as fn and the limits."""

    def __init__(self, fn: Callable[..., Any], limits: tuple[tuple[str, int], ...]) -> None:
        self.fn = fn
        self.limits = limits

    @property
    def __signature__(self) -> inspect.Signature:
        # validate_flow reads fn's parameters (the inputs, ``box``) through the wrapper.
        return inspect.signature(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with contextlib.ExitStack() as held:
            for name, slots in self.limits:
                held.enter_context(_semaphore(name, slots))
            return self.fn(*args, **kwargs)


def limit_calls(fn: Callable[..., Any], fn_resources: object) -> Callable[..., Any]:
    """``fn`` limited to ``fn_resources`` (``{name: k}``) concurrent calls; ``fn`` when None."""
    if fn_resources is None:
        return fn
    if not isinstance(fn_resources, Mapping):
        raise ConfigError(
            f"fn_resources must be a dict of resource name -> the most calls of fn that may "
            f"hold it at once, got {type(fn_resources).__name__}: {fn_resources!r}; "
            "e.g. fn_resources={'gpu': 1}",
            field="fn_resources",
        )
    for name, slots in fn_resources.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"fn_resources names must be non-empty strings, got {name!r}",
                field="fn_resources",
            )
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ConfigError(
                f"fn_resources[{name!r}] = {slots!r} is not a positive int; give the most calls "
                f"of fn that may hold {name!r} at once, e.g. {{{name!r}: 1}}",
                field="fn_resources",
            )
    if not fn_resources:
        return fn
    return LimitedFn(fn, tuple(sorted(fn_resources.items())))
