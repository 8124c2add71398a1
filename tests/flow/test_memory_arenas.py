"""``apply`` caps glibc's malloc arenas for the threads it starts, unless the user chose a cap.

Arenas are counted from glibc's own report (``malloc_info``) in a fresh interpreter, after a
small flow and then eight threads that allocate: each new thread gets a new arena until the
cap is reached.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from chunkgraph.volume._apply import malloc_arena_limit

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc arenas are a glibc feature",
)

_CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, tempfile, threading
    import numpy as np
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    src = volume.create("arena-src", (16, 16), (4, 4), "float32", backend="memory")
    src.write(Box((0, 0), (16, 16)), np.arange(256, dtype="float32").reshape(16, 16))
    dst = volume.create("arena-dst", (16, 16), (4, 4), "float32", backend="memory")
    volume.apply(lambda x: x, src, dst, chunk_sizes=[(8, 8), (4, 4)], crop_pads=[0, 1],
                 executor="sync", intermediates=tempfile.mkdtemp())
    assert (dst.read(Box((0, 0), (16, 16))) == src.read(Box((0, 0), (16, 16)))).all()

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    barrier = threading.Barrier(8)

    def allocate():
        barrier.wait()  # all eight alive at once, each asking for memory
        libc.malloc(4096)
        barrier.wait()

    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = os.path.join(tempfile.mkdtemp(), "info.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    print(open(path).read().count("<heap nr="))
    """
)


def _arenas(env_extra: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_apply_caps_arenas_for_later_threads() -> None:
    cores = len(os.sched_getaffinity(0))
    limit = malloc_arena_limit({}, cores)
    assert limit is not None
    assert 1 <= _arenas({}) <= limit


def test_a_cap_the_user_chose_is_kept() -> None:
    # Eight threads allocating at once under the user's cap of 8 get more than one arena:
    # apply did not lower it.
    assert 1 < _arenas({"MALLOC_ARENA_MAX": "8"}) <= 8


def test_limit_rule() -> None:
    assert malloc_arena_limit({}, 1) == 1
    assert malloc_arena_limit({}, 15) == 1
    assert malloc_arena_limit({}, 16) == 2
    assert malloc_arena_limit({"MALLOC_ARENA_MAX": "3"}, 16) is None
