"""Functions that the spec-file tests name in ``function:``; copied beside each test's spec.

Importable by module name alone (``spec_functions:scale``), so a process worker
unpickles them; the marker file makes a failure happen on the first run only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scipy.ndimage import gaussian_filter

NOT_CALLABLE = 42


def scale(x: np.ndarray[Any, Any], factor: float = 2.0, offset: float = 0.0) -> Any:
    """Elementwise: each voxel times factor plus offset."""
    return x * factor + offset


def smooth(x: np.ndarray[Any, Any], sigma: float = 1.0) -> Any:
    """A gaussian filter: needs crop pads of about 4 sigma to match the whole-array result."""
    return gaussian_filter(x, sigma=sigma)


def add(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> Any:
    """Two named inputs."""
    return a + b


def fail_once(x: np.ndarray[Any, Any], box: Any, marker: str, start: list[int]) -> Any:
    """Identity, except on the chunk whose read box starts at ``start`` while no marker exists."""
    if list(box.start) == list(start) and not Path(marker).exists():
        raise ValueError(f"chunk at {list(start)} refused\nsecond line of the message")
    return x


def slow(x: np.ndarray[Any, Any], started: str, seconds: float) -> Any:
    """Identity after a nap; touches ``started`` first so a test knows the run is under way."""
    import time

    Path(started).touch()
    time.sleep(seconds)
    return x


def record_pid(x: np.ndarray[Any, Any], directory: str) -> Any:
    """Identity; leaves a file named by the calling process's id in ``directory``."""
    import os

    (Path(directory) / str(os.getpid())).touch()
    return x


def pool2(x: np.ndarray[Any, Any]) -> Any:
    """A 2x2x1 mean: (2a, 2b, c) voxels -> (a, b, c), half the resolution in y and x."""
    return x.reshape(x.shape[0] // 2, 2, x.shape[1] // 2, 2, -1).mean(axis=(1, 3))


def gate(x: np.ndarray[Any, Any], started: str, release: str) -> Any:
    """Identity once ``release`` exists (a minute at most); touches ``started`` first."""
    import time

    Path(started).touch()
    deadline = time.monotonic() + 60
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return x
