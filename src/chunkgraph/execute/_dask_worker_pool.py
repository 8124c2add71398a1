"""Inside a Dask worker, loops nested in a task share the worker's threads, not all cores.

A task may run parallel loops (a flow's top-level task subchunks its levels
below with ``chunkgraph.parallel``) on the process-wide pool, which is sized
to every usable core by default. A Dask worker process owns only its
``nthreads`` of the machine: with several workers on one host, each one's
pool of all cores would oversubscribe them (2 workers x 1 thread on 2 cores
ran 2 x 2 threads). So the first subgraph a worker process runs sizes the
process-wide pool to the worker's ``nthreads``.
"""

from __future__ import annotations

import os
import threading

from chunkgraph.parallel import set_workers

# The process that has sized its pool (a forked child has its own pool to size).
_sized_in: int | None = None
_guard = threading.Lock()


def size_pool_to_worker() -> None:
    """Make the process-wide pool as large as this Dask worker's thread count, once per
    process; nothing outside a Dask worker's task."""
    global _sized_in
    if _sized_in == os.getpid():
        return
    try:
        from distributed import get_worker

        nthreads = int(get_worker().state.nthreads)
    except (ImportError, ValueError):  # not running in a Dask worker
        return

    with _guard:
        if _sized_in != os.getpid():
            set_workers(max(1, nthreads))
            _sized_in = os.getpid()
