"""One real Dask cluster for the tests here: a LocalCluster of 2 worker processes.

Its worker processes must import this checkout's chunkgraph and the task
functions in ``tests.dask._tasks``: they inherit ``os.environ``, so the
fixture puts ``src`` and the repository root on ``PYTHONPATH`` while it
starts them (and the nanny's restarts of a killed worker inherit it too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # ``tests.dask._tasks`` for this process

distributed = pytest.importorskip("distributed")


def worker_pythonpath() -> str:
    """PYTHONPATH for worker processes: this checkout's src, the repository root, the rest."""
    parts = [str(_ROOT / "src"), str(_ROOT)]
    parts += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = worker_pythonpath()
    try:
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as made:
            yield made
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="session")
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster, set_as_default=False) as made:
        yield made


@pytest.fixture
def healthy(client: Any) -> Iterator[Any]:
    """The client, with both workers up before and after the test (a test may kill one)."""
    client.wait_for_workers(2, timeout=60)
    yield client
    client.wait_for_workers(2, timeout=60)
