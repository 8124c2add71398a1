"""Inside a Dask worker, large buffers are reused, not mapped afresh for every array.

Why. Dask's nanny starts each worker process with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that freed memory goes back to the
system at once. Any threshold set by hand turns off glibc's adaptive rule, which
otherwise raises the mmap threshold to the size of the largest buffer freed: so
in a worker every allocation over 128 KiB (a decoded chunk, a superchunk, fn's
output, an encoded chunk) is a fresh ``mmap`` whose pages the kernel zeroes on
first touch, unmapped again when freed. The dask_backend benchmark flow (1 MiB
chunks) took 1.5-2.5x its time in the client process on a 2-worker LocalCluster
so; the same workers with the thresholds below took 0.9-1.3x.

What. While a flow's call runs on a worker (``_dask_stream``: a batch of a volume
flow's top tasks), the thresholds are the ceilings glibc's adaptive rule reaches by
itself on 64-bit (``MMAP_THRESHOLD``, ``TRIM_THRESHOLD``): what a process not started
by a nanny gets after its first large buffers. The first call to start in a process
sets them, the last to end puts back what the nanny's environment gave (its trim
threshold, glibc's default mmap threshold, ``DASK_MMAP_THRESHOLD``): the worker is the
user's, and the rest of its work (a plain graph's subgraphs, chunkgraph's included,
which hold no large buffers to reuse; anything else it runs) keeps Dask's rule.
Cost while a flow runs: up to ``TRIM_THRESHOLD`` of freed heap per malloc arena stays
in the process for the next buffer instead of going back at once (Dask counts it as
unmanaged memory); after it, the next free gives it back.

Left alone: a worker whose environment sets ``MALLOC_MMAP_THRESHOLD_`` (its owner
chose: set it in ``distributed.nanny.pre-spawn-environ`` to keep Dask's behaviour),
one without ``MALLOC_TRIM_THRESHOLD_`` (glibc's rule is on) or with one that is not a
number, a C library without ``mallopt`` (musl, macOS, Windows); nothing outside a
Dask worker calls it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

# glibc's mallopt parameters (malloc.h) and the ceilings of its adaptive rule on 64-bit:
# DEFAULT_MMAP_THRESHOLD_MAX (4 MiB x sizeof(long)) and twice that for the trim.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

# glibc's mmap threshold when none is set (DEFAULT_MMAP_THRESHOLD_MIN): what a nanny's
# worker has, its trim threshold set by the environment and the adaptive rule off.
DASK_MMAP_THRESHOLD = 128 << 10

# The calls running in this process that want the thresholds set, and the process they
# are counted for (a forked child starts at none).
_holders = 0
_holders_in: int | None = None
_guard = threading.Lock()


@contextlib.contextmanager
def large_buffers_reused() -> Iterator[bool]:
    """Around a flow's call on a Dask worker: glibc's thresholds as its adaptive rule
    would set them while the call runs, put back as they were when the last such call
    in the process ends (module doc); yields whether they are set."""
    global _holders, _holders_in
    trim = _nanny_trim_threshold()
    if trim is None:
        yield False  # its owner chose the thresholds, or glibc's adaptive rule is on
        return
    with _guard:
        if _holders_in != os.getpid():
            _holders, _holders_in = 0, os.getpid()
        reused = _holders > 0 or _thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)
        _holders += reused
    try:
        yield reused
    finally:
        if reused:
            with _guard:
                _holders -= 1
                if _holders == 0:
                    _thresholds(DASK_MMAP_THRESHOLD, trim)


def _thresholds(mmap: int, trim: int) -> bool:
    """Both thresholds set; False where the C library has no ``mallopt`` (or refused)."""
    return _mallopt(M_MMAP_THRESHOLD, mmap) and _mallopt(M_TRIM_THRESHOLD, trim)


def _nanny_trim_threshold() -> int | None:
    """The trim threshold a nanny's environment gave this process, when the thresholds
    are Dask's to change back to (module doc); else None."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return None
    try:
        return int(os.environ["MALLOC_TRIM_THRESHOLD_"])
    except (KeyError, ValueError):
        return None


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt(param, value)``; False where the C library has none or refused."""
    fn = _mallopt_fn()
    return fn is not None and bool(fn(param, value))


@functools.cache
def _mallopt_fn() -> Any:
    """The C library's ``mallopt``, looked up once a process (``find_library`` runs
    ``ldconfig``: milliseconds, and each flow call sets and puts back); None if none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # no such library or function (not glibc)
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn
