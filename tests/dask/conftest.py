"""Real Dask clusters for the tests here.

``healthy`` (a Client) and ``cluster``: one LocalCluster of 2 worker processes
shared by the session, for tests that leave its workers as they found them.
Before each test ``healthy`` checks that the cluster has exactly its 2 workers
(a new cluster replaces one that lost a worker for good, so one broken test
never fails all those after it); after the test, that the same 2 workers still
run, in the same processes (a test that killed, restarted or added one fails
there, by name).

``own_cluster``: clusters for one test alone, closed after it: tests that kill
workers, restart them or need workers of their own kind (a GPU, another host).

Worker processes must import this checkout's chunkgraph and the task functions
in ``tests.dask._tasks``: they inherit ``os.environ``, so ``PYTHONPATH`` holds
``src`` and the repository root while the session runs (a nanny's restart of a
killed worker inherits it too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # ``tests.dask._tasks`` for this process

distributed = pytest.importorskip("distributed")

from tests.dask._cluster import (  # noqa: E402  (the root is on sys.path from here)
    START_DEADLINE_S,
    WORKERS,
    running_workers,
    worker_pythonpath,
)


@pytest.fixture(scope="session")
def _worker_environment() -> Iterator[None]:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = worker_pythonpath()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


class _Shared:
    """The session's shared cluster and its Client, replaced when it lost a worker."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self.client: Any = None

    def start(self) -> None:
        self.cluster = distributed.LocalCluster(
            n_workers=WORKERS,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": ":0"},  # /metrics: 8787 may be taken
        )
        self.client = distributed.Client(self.cluster, set_as_default=False)
        self.client.wait_for_workers(WORKERS, timeout=START_DEADLINE_S)

    def worker_pids(self) -> set[int | None]:
        """The process ids of its workers, as their nannies (threads here) know them;
        None for one not running."""
        return {nanny.pid for nanny in list(self.cluster.workers.values())}

    def sound(self) -> bool:
        """Whether it has exactly its workers running, waiting for a killed one to come
        back (its nanny restarts it) up to START_DEADLINE_S."""
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                pids = self.worker_pids()
                if len(running_workers(self.client)) == len(pids) == WORKERS and None not in pids:
                    return True
            except Exception:  # the scheduler itself is gone: replace it all
                return False
            time.sleep(0.1)
        return False

    def close(self) -> None:
        for closing in (self.client, self.cluster):
            with contextlib.suppress(Exception):  # a broken cluster may not close cleanly
                closing.close(timeout=30)


@pytest.fixture(scope="session")
def _shared(_worker_environment: None) -> Iterator[_Shared]:
    shared = _Shared()
    shared.start()
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def healthy(_shared: _Shared) -> Iterator[Any]:
    """The shared cluster's Client, with its 2 workers running, and the same 2 after the test."""
    if not _shared.sound():
        logging.getLogger(__name__).warning("the shared Dask cluster lost a worker: replaced")
        _shared.close()
        _shared.start()
    before, pids = running_workers(_shared.client), _shared.worker_pids()
    yield _shared.client
    # A killed worker shows at once by its process; the scheduler may take a moment.
    after = running_workers(_shared.client) if all(map(_alive, pids)) else set()
    assert after == before, (
        f"the shared cluster's workers changed during this test, or at the end of the one "
        f"before ({sorted(before)} -> {sorted(after)}); a test that kills, restarts or adds "
        "workers uses own_cluster"
    )


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def cluster(healthy: Any, _shared: _Shared) -> Any:
    """The shared LocalCluster (checked by ``healthy``)."""
    return _shared.cluster


@pytest.fixture
def own_cluster(_worker_environment: None) -> Iterator[Callable[..., tuple[Any, Any]]]:
    """Starts clusters of worker processes for this test only; all closed after it.

    ``own_cluster()``: 2 plain workers. ``own_cluster(cpu={}, gpu={"resources":
    {"GPU": 1}})``: one worker per name, with those ``distributed.Nanny`` options.
    Returns ``(cluster, client)`` once every worker runs.
    """
    with contextlib.ExitStack() as stack:

        def start(**workers: dict[str, Any]) -> tuple[Any, Any]:
            workers = workers or {f"w{i}": {} for i in range(WORKERS)}
            options = {"nthreads": 1, "dashboard_address": None, "silence_logs": logging.WARN}
            made = distributed.SpecCluster(
                scheduler={
                    "cls": distributed.Scheduler,
                    # its HTTP server (/metrics) on a free port: 8787 may be taken
                    "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"},
                },
                workers={
                    name: {"cls": distributed.Nanny, "options": {**options, **extra}}
                    for name, extra in workers.items()
                },
                silence_logs=logging.WARN,
            )
            stack.callback(made.close, timeout=30)
            client = distributed.Client(made, set_as_default=False)
            stack.callback(client.close, timeout=30)
            client.wait_for_workers(len(workers), timeout=START_DEADLINE_S)
            return made, client

        yield start
