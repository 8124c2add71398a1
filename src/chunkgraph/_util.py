"""Small helpers every layer needs, written once."""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterable

import numpy as np

from chunkgraph._errors import ConfigError


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # platforms without affinity support
        return max(1, os.cpu_count() or 1)


def as_int(value: object, what: str) -> int:
    """A Python int from an int or numpy integer; bools and floats are refused.

    >>> as_int(np.int64(3), "size")
    3
    """
    if isinstance(value, bool | np.bool_):
        raise ConfigError(f"{what} must be an integer, got {value!r} (a bool is not a size)")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(
            f"{what} must be an integer, got {value!r} ({type(value).__name__}); "
            f"pass a whole number such as {_whole(value)}"
        ) from None


def _whole(value: object) -> str:
    try:
        return str(int(value))  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return "8"


def as_int_tuple(values: object, what: str, ndim: int | None = None) -> tuple[int, ...]:
    """A tuple of Python ints from a sequence (list, tuple, 1-d array), its length checked.

    >>> as_int_tuple(np.array([4, 5]), "shape", 2)
    (4, 5)
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ConfigError(f"{what} must be 1-d, got an array of shape {values.shape}")
        values = values.tolist()
    if not isinstance(values, Iterable) or isinstance(values, str | bytes):
        raise ConfigError(f"{what} must be a sequence of integers, got {values!r}")
    items = list(values)
    if ndim is not None and len(items) != ndim:
        raise ConfigError(
            f"{what} = {tuple(items)} has {len(items)} entries; expected {ndim}, one per axis"
        )
    return tuple(as_int(v, f"{what}[{i}]") for i, v in enumerate(items))


def per_axis(value: object, ndim: int, what: str) -> tuple[int, ...]:
    """An int for every axis, or one int per axis (a sequence or a 1-d array).

    >>> per_axis(3, 2, "pad"), per_axis((1, 2), 2, "pad")
    ((3, 3), (1, 2))
    """
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        try:
            return as_int_tuple(value, what, ndim)
        except ConfigError as err:
            if "entries; expected" in str(err):
                raise ConfigError(f"{err} (or a single int for all axes)") from None
            raise
    return (as_int(value, what),) * ndim


def divisors(n: int) -> list[int]:
    """The divisors of a positive ``n``, ascending, in O(sqrt(n)).

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def format_bytes(nbytes: float) -> str:
    """Bytes in binary units, about three significant figures: the one spelling of a size.

    >>> format_bytes(512), format_bytes(131_072), format_bytes(37_748_736), format_bytes(5.2e17)
    ('512 B', '128 KiB', '36.0 MiB', '462 PiB')
    """
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value, power = abs(float(nbytes)), 0
    while value >= 1024 and power < len(units) - 1:
        value /= 1024
        power += 1
    sign = "-" if nbytes < 0 else ""
    if power == 0:
        return f"{sign}{int(value)} B"
    digits = 1 if value < 100 else 0
    return f"{sign}{value:.{digits}f} {units[power]}"
