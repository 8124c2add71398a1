"""Flow functions for the batched-flow tests, importable by the cluster's worker processes
(``tests.dask._batch_tasks``): each call leaves a file, so a test counts the calls."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import numpy as np

# A voxel of this value in a chunk makes ``counted_or_fail`` fail there.
POISON = -7


def counted(folder: str, src: np.ndarray) -> np.ndarray:
    """``src * 3 + 1``; leaves one file in ``folder`` per call."""
    # Named by process, time and first voxel: who ran what, when (a test's diagnostics).
    (Path(folder) / f"{os.getpid()}-{time.time():.3f}-{src.flat[0]}-{uuid.uuid4().hex}").touch()
    return src * 3 + 1


def counted_slowly(folder: str, seconds: float, src: np.ndarray) -> np.ndarray:
    """``counted`` after ``seconds`` of sleep (a worker can be killed mid-batch)."""
    time.sleep(seconds)
    return counted(folder, src)


def counted_or_fail(folder: str, flag: str, src: np.ndarray) -> np.ndarray:
    """``counted``, but a ValueError for a chunk holding ``POISON`` while ``flag`` exists."""
    if os.path.exists(flag) and (src == POISON).any():
        raise ValueError(f"poisoned chunk (pid {os.getpid()})")
    return counted(folder, src)


def nap(seconds: float, i: int) -> int:
    time.sleep(seconds)
    return i * i


def counted_failing_once(folder: str, tried: str, src: np.ndarray) -> np.ndarray:
    """``counted``, but a chunk holding ``POISON`` fails its first try: the try leaves a
    file in ``tried`` named by the chunk's first voxel, and the next try passes."""
    if (src == POISON).any():
        mark = Path(tried) / str(int(src.flat[0]))
        if not mark.exists():
            mark.touch()
            raise ValueError(f"first try of a poisoned chunk (pid {os.getpid()})")
    return counted(folder, src)


def faults_per_buffer(nbytes: int, times: int) -> float:
    """The page faults this process takes, on average, to fill a new ``nbytes`` array
    (after one was made and freed): 0 when malloc reuses the freed buffer, one per page
    when each is mapped afresh."""
    import resource

    np.ones(nbytes, np.uint8)  # made and freed: what a reusing malloc hands out again
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        np.ones(nbytes, np.uint8)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / times
