"""Time limits of tasks: validation, the per-task lookup the drivers use, the error.

A driver asks ``timeout_of(t)`` for each task it starts (``None``: no limit).
Today every task gets the run's ``timeout``; a per-task value (from the
graph) plugs in where ``task_timeouts`` builds the lookup, and no driver changes.
A try that runs longer than its limit fails with ``TimeoutError`` and is
retried like any failed try.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real

from chunkgraph._errors import ConfigError

TimeoutOf = Callable[[int], float | None]


def check_timeout(value: object, where: str = "timeout") -> float | None:
    """``value`` as seconds (a float), or None; ConfigError unless a positive finite number.

    >>> check_timeout(2), check_timeout(None)
    (2.0, None)
    """
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(float(value))
        or float(value) <= 0
    ):
        raise ConfigError(
            f"{where} must be a positive number of seconds (e.g. {where}=60.0) or None "
            f"for no limit, got {value!r}"
        )
    return float(value)


def task_timeouts(default: float | None) -> TimeoutOf | None:
    """The lookup ``task -> seconds or None``; None when no task has a limit."""
    if default is None:
        return None
    return lambda t: default


def timeout_error(name: str, seconds: float, consequence: str) -> TimeoutError:
    """The cause recorded for a try of task ``name`` that ran past ``seconds``."""
    return TimeoutError(f"task {name!r} exceeded timeout={seconds:g} s; {consequence}")
