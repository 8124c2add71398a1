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

What. The first chunkgraph call in a worker process sets the thresholds to the
ceilings glibc's adaptive rule reaches by itself on 64-bit (``MMAP_THRESHOLD``,
``TRIM_THRESHOLD``): what a process not started by a nanny gets after its first
large buffers. Cost: up to ``TRIM_THRESHOLD`` of freed heap per malloc arena stays
in the process for the next buffer instead of going back at once (Dask counts it as
unmanaged memory).

Left alone: a worker whose environment sets ``MALLOC_MMAP_THRESHOLD_`` (its owner
chose: set it in ``distributed.nanny.pre-spawn-environ`` to keep Dask's behaviour),
one without ``MALLOC_TRIM_THRESHOLD_`` (glibc's rule is on), a C library without
``mallopt`` (musl, macOS, Windows); nothing outside a Dask worker calls it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

# glibc's mallopt parameters (malloc.h) and the ceilings of its adaptive rule on 64-bit:
# DEFAULT_MMAP_THRESHOLD_MAX (4 MiB x sizeof(long)) and twice that for the trim.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

# The process that has set its thresholds (a forked child inherits them).
_set_in: int | None = None
_guard = threading.Lock()


def reuse_large_buffers() -> bool:
    """Called by what runs on a Dask worker (a streamed call, a subgraph): in a process
    that Dask's nanny gave a trim threshold, glibc's thresholds as its adaptive rule
    would set them (module doc), once per process; whether they are."""
    global _set_in
    if _set_in == os.getpid():
        return True
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return False  # its owner chose the thresholds, or glibc's adaptive rule is on
    with _guard:
        if _set_in != os.getpid():
            if not _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
                return False
            _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            _set_in = os.getpid()
    return True


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt(param, value)``; False where the C library has none or refused."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        fn = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # no such library or function (not glibc)
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return bool(fn(param, value))
