"""What the Dask tests and their fixtures share: deadlines and looks at a cluster."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]

# Workers of the shared cluster, one thread each.
WORKERS = 2
# Seconds for worker processes to start or come back after a kill. Generous: on a
# loaded 2-core machine a process importing numpy, distributed and chunkgraph takes
# seconds, and a deadline that is too short fails a test that would have passed.
START_DEADLINE_S = 60.0


def worker_pythonpath() -> str:
    """PYTHONPATH for worker processes: this checkout's src, the repository root, the rest."""
    parts = [str(_ROOT / "src"), str(_ROOT)]
    parts += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def wait_until(condition: Callable[[], object], seconds: float, what: str) -> None:
    """Return once ``condition()`` is true; fail the test, saying ``what``, after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.05)


def running_workers(client: Any) -> set[str]:
    """Addresses of the workers the scheduler counts as running."""
    workers = client.scheduler_info()["workers"]
    return {a for a, info in workers.items() if info.get("status") == "running"}
