"""Small helpers every layer needs, written once."""

from __future__ import annotations

import contextlib
import errno
import math
import operator
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from chunkgraph._errors import ConfigError, StoreError

# errnos of a disk that holds no more: named_os_error says how much room is left there.
_FULL = (errno.ENOSPC, errno.EDQUOT)


def named_os_error(err: OSError, path: str | os.PathLike[str], doing: str) -> OSError:
    """``err`` (met while ``doing`` something at ``path``) as an ``OSError`` of the same errno
    that names the file (``err``'s own, else ``path``) and what was being done, and for a
    full disk how much room its file system has left. A write that fails for want of
    space names no file by itself, and "No space left on device" alone says not where.

    >>> str(named_os_error(OSError(5, "Input/output error"), "/data/a.zarr", "writing it"))
    "[Errno 5] Input/output error, writing it at: '/data/a.zarr'"

    A ``StoreError`` stays one (it names its URL and endpoint already): callers tell a
    store that failed from a file that did, and it says only what was being done.
    """
    if isinstance(err, StoreError):
        return StoreError(f"{err}, {doing}", url=err.url, endpoint=err.endpoint, code=err.code)
    reason = err.strerror or str(err)
    # A URL is not a path: pathlib would fold its '//' (s3://b/x would read s3:/b/x).
    named = os.fspath(err.filename if err.filename is not None else path)
    where = Path(named)
    if err.errno in _FULL:
        room = where
        while not room.exists() and room != room.parent:
            room = room.parent
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage(room)
            reason += (
                f" ({format_bytes(usage.free)} free of {format_bytes(usage.total)} on the file "
                "system holding it: free some space there, or write elsewhere)"
            )
    return OSError(err.errno, f"{reason}, {doing} at", named)


def write_problem(path: str | os.PathLike[str]) -> str | None:
    """Why no file can be made in the directory ``path`` (or, where it does not exist yet,
    in its nearest existing parent, where it would be made), or None when one can.

    It tries: a file is created there and removed. Permission bits and ``os.access`` say
    nothing true for root, nor of a read-only mount or an immutable directory.
    """
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        return f"{where} is a file, not a directory"
    probe = where / f".chunkgraph-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as err:
        return f"no file can be created in {where} ({err.strerror or err})"
    probe.unlink()
    return None


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
