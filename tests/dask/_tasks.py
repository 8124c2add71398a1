"""Task functions for the Dask tests, importable by the cluster's worker processes
(``tests.dask._tasks``: the cluster fixture puts the repository root on their path)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np


def mix(i: int, *inputs: int) -> int:
    """An order-sensitive combination, so a wrong input or a swapped one shows."""
    value = i + 1
    for k, x in enumerate(inputs):
        value = (value * 31 + (k + 1) * x) % 1_000_003
    return value


def mix_nested(i: int, box: dict[str, list[tuple[int, ...]]], *, scale: int = 1) -> int:
    return mix(i, *box["in"][0]) * scale


def slow_mix(seconds: float, i: int, *inputs: int) -> int:
    time.sleep(seconds)
    return mix(i, *inputs)


def announce_then_sleep(folder: str, seconds: float, i: int) -> int:
    """Leaves a file named after its worker process in ``folder`` as it starts (a test's
    sign that it runs there), then sleeps ``seconds``; returns ``mix(i)``."""
    import os

    (Path(folder) / f"{i}-{os.getpid()}").touch()
    time.sleep(seconds)
    return mix(i)


def where(*_inputs: Any) -> str:
    """The address of the Dask worker this runs on."""
    from distributed import get_worker

    return str(get_worker().address)


def divide(a: float, b: float) -> float:
    return a / b


def fail_once(marker: str, value: int) -> int:
    """Raises the first time (leaving ``marker`` behind), returns ``value`` after."""
    path = Path(marker)
    if not path.exists():
        path.touch()
        raise RuntimeError(f"first try of {marker}")
    return value


def identity(src: np.ndarray) -> np.ndarray:
    return src


def identity_marking(src: np.ndarray, folder: str) -> np.ndarray:
    """``identity``, leaving a file named after the process it ran in in ``folder``."""
    import os

    (Path(folder) / str(os.getpid())).touch()
    return src


def slow_identity(src: np.ndarray) -> np.ndarray:
    time.sleep(0.3)
    return src


def nested_pool_workers(*_inputs: Any) -> int:
    """The worker count of the pool that loops nested in this task would use."""
    from chunkgraph.parallel import get_pool

    return get_pool().workers


def make_lock(*_inputs: Any) -> Any:
    """A result that cannot leave its worker: a lock does not pickle."""
    import threading

    return threading.Lock()


def make_generator(n: int) -> Any:
    """A result that cannot leave its worker: a generator does not pickle."""
    return (i for i in range(n))


def kill_worker_first(counter: str, deaths: int, value: int) -> int:
    """SIGKILL the worker running it on its first ``deaths`` calls (the count is kept in
    the file ``counter``, which survives the worker); then return ``value``."""
    import os
    import signal

    path = Path(counter)
    done = int(path.read_text()) if path.exists() else 0
    if done < deaths:
        path.write_text(str(done + 1))
        os.kill(os.getpid(), signal.SIGKILL)
    return value
