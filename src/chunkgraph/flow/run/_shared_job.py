"""A flow's job is unpickled once per process, so the tasks run there share its caches.

An executor that runs tasks in other processes (Dask workers, the process
pool) pickles every task's arguments on its own, so each top-level task
would unpickle its own ``TopJob``: its input volumes reopened, with empty
chunk caches. But a task's halo is its neighbours' storage chunks, which the
cache is there to keep: on a LocalCluster the benchmark flow read its input
3.4 times instead of once. So a job pickles as its run token beside its
fields (pickled once per job), and a process that already holds the job of
that token hands it out again instead of unpickling a copy.

Runs are told apart by their token (new for every run), so a process never
serves one run's cached data to another. It keeps the jobs of the last
``KEPT_RUNS`` runs, with their caches, until later runs push them out.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

# Runs whose jobs a process keeps: two flows may run on one cluster at once.
KEPT_RUNS = 2

_jobs: OrderedDict[str, Any] = OrderedDict()
_guard = threading.Lock()


def pickle_fields(fields: tuple[Any, ...]) -> bytes:
    """A job's fields, cloudpickled (``fn`` may live in ``__main__``)."""
    data: bytes = cloudpickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def shared_job(cls: type, token: str, fields: bytes) -> Any:
    """This process's job of run ``token``: the one unpickled before, or ``cls(*fields)``."""
    if not token:  # no run to share it with
        return cls(*pickle.loads(fields))
    with _guard:
        job = _jobs.get(token)
        if job is None:
            job = cls(*pickle.loads(fields))
            _jobs[token] = job
            while len(_jobs) > KEPT_RUNS:
                _jobs.popitem(last=False)
        else:
            _jobs.move_to_end(token)
        return job
