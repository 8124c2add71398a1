"""A Dask cluster as the planner sees it: contexts per worker, links, workers elsewhere.

    client.scheduler_info()["workers"]
      worker tcp://10.0.0.5:4000  nthreads 8, memory_limit 32 GiB, resources {"GPU": 1}
        -> Context("tcp://10.0.0.5:4000",      "cpu", slots=8, memory=32 GiB, host="10.0.0.5")
           Context("tcp://10.0.0.5:4000#gpu",  "gpu", slots=1,                host="10.0.0.5")

A context is named after the worker's address (a GPU context adds ``#gpu``),
so a plan made on these contexts says which worker each task belongs on,
and the executor pins it there. Every worker's threads are a CPU context; a
worker whose resources list ``GPU`` (Dask's own spelling, which dask-cuda
and ``dask worker --resources GPU=1`` use) also gets a GPU context of that
many slots: chunkgraph tasks that ask for ``{"gpu": 1}`` are planned there,
and Dask admits them with ``resources={"GPU": 1}``.

Moving data. Inside one worker a result is handed over in memory
(``SHARED_MEMORY``). Between two worker processes on one host it is
serialised and sent through the loopback interface, with a scheduler round
trip first (``LOOPBACK``). Between hosts the planner's default ``NETWORK``
applies, unless ``plan(links=...)`` says otherwise.

A worker is *remote* when its host is none of this machine's addresses: it
may not see this machine's files (``remote_workers``).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping
from typing import Any

import psutil

from chunkgraph.planning import Context, Link
from chunkgraph.planning._contexts import SHARED_MEMORY

# Dask's name for a worker's GPUs in ``resources`` (dask-cuda, ``--resources GPU=1``).
GPU_RESOURCE = "GPU"
# Between worker processes of one host: pickled through loopback TCP (~1 GB/s),
# after a scheduler round trip (~1 ms) that tells the consumer where the data is.
LOOPBACK = Link(bandwidth=1e9, latency=1e-3)
# Separates a worker's address from the suffix of its GPU context's name.
GPU_SUFFIX = "#gpu"


def _workers(client: Any) -> dict[str, Mapping[str, Any]]:
    workers: dict[str, Mapping[str, Any]] = dict(client.scheduler_info()["workers"])
    return workers


def dask_contexts(client: Any) -> tuple[Context, ...]:
    """One CPU Context per worker of ``client``'s cluster (its threads and memory limit),
    and one GPU Context per worker whose resources list ``GPU``; sorted by address.

    Plan on them (``chunkgraph.plan(graph, dask_contexts(client),
    links=dask_links(contexts))``) and a ``DaskExecutor`` runs each task on the
    worker it was planned for.

    Args:
        client: A ``distributed.Client`` connected to the cluster.
    """
    contexts = []
    for address, info in sorted(_workers(client).items()):
        host = str(info.get("host") or address)
        limit = info.get("memory_limit") or math.inf  # 0 / None: no limit
        contexts.append(
            Context(address, "cpu", max(1, int(info.get("nthreads", 1))), memory=limit, host=host)
        )
        gpus = float((info.get("resources") or {}).get(GPU_RESOURCE, 0))
        if gpus > 0:  # a share of one GPU (GPU=0.5) is still a GPU: one slot
            slots = max(1, int(gpus))
            contexts.append(Context(address + GPU_SUFFIX, "gpu", slots, host=host))
    return tuple(contexts)


def worker_address(context: Context) -> str:
    """The address of the worker a ``dask_contexts`` context stands for."""
    return context.name.removesuffix(GPU_SUFFIX)


def dask_links(contexts: tuple[Context, ...]) -> dict[tuple[str, str], Link]:
    """Links between ``dask_contexts`` that share a host (other pairs: the planner's
    ``NETWORK`` default): ``SHARED_MEMORY`` within one worker, ``LOOPBACK`` between
    two worker processes of one host.

    Args:
        contexts: What ``dask_contexts`` returned.

    Returns:
        ``{(name, name): Link}`` for each pair of contexts that share a host.
    """
    links: dict[tuple[str, str], Link] = {}
    by_host: dict[str, list[Context]] = {}
    for ctx in contexts:
        by_host.setdefault(ctx.host, []).append(ctx)
    for group in by_host.values():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                same = worker_address(a) == worker_address(b)
                links[(a.name, b.name)] = SHARED_MEMORY if same else LOOPBACK
    return links


def local_addresses() -> set[str]:
    """This machine's names and IP addresses (loopback included)."""
    names = {"localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname(), socket.getfqdn()}
    for entries in psutil.net_if_addrs().values():
        names.update(entry.address.split("%")[0] for entry in entries)
    return names


def remote_workers(client: Any) -> list[str]:
    """Addresses of the workers whose host is not this machine (in-process and
    ``inproc://`` workers are local), sorted."""
    here = local_addresses()
    out = []
    for address, info in _workers(client).items():
        if address.startswith("inproc://"):
            continue
        if str(info.get("host") or "") not in here:
            out.append(address)
    return sorted(out)
