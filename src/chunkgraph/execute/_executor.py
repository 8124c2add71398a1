"""The ``Executor`` protocol, and turning what a user passes as ``executor=`` into one.

Whatever runs a graph (``LocalExecutor`` today, a ``DaskExecutor`` later)
implements one small interface, so ``run()`` and the flow accept any of them:

    run(graph, targets, *, subscribers, plan)  -> {task id: result}
    in_process                           True when tasks run in this process

``in_process`` is what callers check before they build tasks: tasks shipped to
other processes must pickle and cannot use objects that live only here (a
memory volume, a lock). An executor whose workers may be on other machines
also implements ``ChecksPaths``, so a caller can ask it whether they see a
file path before it hands them one.

``executor=`` may also be a Dask scheduler address, ``"tcp://host:8786"``
(anything with ``://``: ``tls://``, ``ucx://``, ... go to Dask untouched): a
``DaskExecutor`` that connects for the call and closes its Client after it; or a
``ClusterSpec`` (``_cluster_spec``): a cluster started for the call by ``_dask_clusters``
(jobs on a batch system, pods on Kubernetes) and shut down after it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from chunkgraph._errors import ConfigError
from chunkgraph.execute._cluster_spec import ClusterSpec
from chunkgraph.execute._dask_clusters import start_cluster
from chunkgraph.execute._dask_executor import DaskExecutor
from chunkgraph.execute._events import Subscriber
from chunkgraph.execute._local import EXECUTOR_KINDS, ExecutorKind, LocalExecutor
from chunkgraph.graph import Graph

if TYPE_CHECKING:
    from chunkgraph.planning import Plan


@runtime_checkable
class Executor(Protocol):
    """Runs a Graph: the interface every executor implements (``LocalExecutor``, ...)."""

    @property
    def in_process(self) -> bool:
        """True when tasks run in the calling process (they need not pickle)."""
        ...

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        """Run what ``targets`` need.

        Args:
            graph: The graph to run.
            targets: Task ids whose results are wanted; None: every sink.
            subscribers: Callables that receive this run's events, besides the
                executor's own.
            plan: A Plan of ``graph`` to follow; None: the executor plans, or runs by its own order.

        Returns:
            ``{task id: result}`` for the targets.

        Raises:
            ExceptionGroup: Of ``TaskError``, one per failed task; no partial result is
                returned.
        """
        ...


@runtime_checkable
class ChecksPaths(Protocol):
    """An executor whose workers may not see this machine's files."""

    def check_paths(self, paths: Mapping[str, str]) -> None:
        """Check that every worker can reach ``paths``.

        Args:
            paths: ``{what: path}``, paths on this machine's file system.

        Raises:
            ConfigError: Naming the first path a worker cannot reach.
        """
        ...


def resolve_executor(
    executor: ExecutorKind | Executor | ClusterSpec,
    *,
    workers: int | None = None,
    retries: int | None = None,
    timeout: float | None = None,
    gpu_fallback: bool | None = None,
) -> Executor:
    """The Executor that ``executor=`` names.

    A kind becomes a ``LocalExecutor`` with these options; a scheduler address or a
    ``distributed.Client`` a ``DaskExecutor`` with ``retries``; a ``ClusterSpec`` the
    cluster it describes, started now (its jobs submitted), with ``retries``; an
    Executor is returned as it is. An option is given when it is not None: an explicit
    value equal to a kind's default (``retries=0``) is refused beside an Executor too,
    never dropped.

    Args:
        executor: A kind (one of ``EXECUTOR_KINDS``), a scheduler address
            (``"tcp://host:8786"``, any ``protocol://``), a ``distributed.Client``, a
            ``ClusterSpec``, or an Executor.
        workers: A kind's number of workers; None: not given.
        retries: Extra tries per task, for a kind or a Dask cluster; None: not given.
        timeout: Seconds per try of a task, for a kind; None: not given.
        gpu_fallback: For a kind: run GPU tasks on CPU workers where no GPU is found;
            None: not given.

    Raises:
        ConfigError: For anything else, for bad options, and for options given beside
            an Executor.

    >>> resolve_executor("sync", retries=1).retries
    1
    """
    if is_scheduler_address(executor) or is_dask_client(executor):
        if gpu_fallback:
            raise ConfigError(
                f"gpu_fallback=True applies to this machine's executors, not to a Dask "
                f"cluster (executor={executor!r}), whose GPUs are its workers' resources; "
                "leave it unset",
                field="gpu_fallback",
            )
        return _dask_executor(executor, workers, retries or 0, timeout)
    if isinstance(executor, ClusterSpec):
        executor.refuse_beside(workers=workers, timeout=timeout, gpu_fallback=gpu_fallback)
        return start_cluster(executor, retries=_checked_retries(retries or 0))
    if isinstance(executor, str):
        if executor not in EXECUTOR_KINDS:
            raise ConfigError(
                f"executor must be one of {EXECUTOR_KINDS}, a Dask scheduler address "
                "('tcp://host:8786') or an Executor (such as LocalExecutor('threads', "
                f"workers=4)), got {executor!r}",
                field="executor",
            )
        return LocalExecutor(
            executor, workers, retries or 0, (), timeout, gpu_fallback=bool(gpu_fallback)
        )
    if not isinstance(executor, Executor):
        raise ConfigError(
            f"executor must be one of {EXECUTOR_KINDS}, a Dask scheduler address "
            "('tcp://host:8786'), a distributed.Client, or an Executor (an object with "
            f"run(graph, targets, *, subscribers, plan) and in_process), got {executor!r}",
            field="executor",
        )
    given = {
        name: value
        for name, value in (
            ("workers", workers),
            ("retries", retries),
            ("timeout", timeout),
            ("gpu_fallback", gpu_fallback),
        )
        if value is not None
    }
    if given:
        options = ", ".join(f"{name}={value!r}" for name, value in given.items())
        if isinstance(executor, LocalExecutor):
            hint = f"set them on the executor instead (e.g. LocalExecutor('threads', {options}))"
        elif _is_dask_executor(executor):
            hint = (
                "give retries to it (DaskExecutor(client, retries=1)); a Dask cluster's "
                "workers are what it started, and it has no per-task timeout"
            )
        else:
            hint = f"set them on the executor ({type(executor).__name__}) instead"
        raise ConfigError(
            f"{options} given beside executor={executor!r}, which has its own settings; {hint}",
            field=next(iter(given)),
        )
    return executor


def close_resolved(chosen: Executor, given: object) -> None:
    """Close ``chosen`` when ``resolve_executor`` made it from ``given`` (an address: the
    Client opened for this one call, which would otherwise stay connected for as long as
    anything, such as a raised exception's traceback, holds the executor). An Executor the
    caller passed is theirs and stays open."""
    if chosen is not given:
        close = getattr(chosen, "close", None)
        if callable(close):
            close()


def _is_dask_executor(executor: object) -> bool:
    """A ``DaskExecutor``: only when its module was imported (it needs distributed), so
    asking imports nothing."""
    module = sys.modules.get("chunkgraph.execute._dask_executor")
    return module is not None and isinstance(executor, module.DaskExecutor)


def is_scheduler_address(executor: object) -> bool:
    """A Dask scheduler's address: any protocol, ``tcp://host:8786``, ``inproc://...``.

    Args:
        executor: Anything given as ``executor=``; only a string can be an address.

    >>> is_scheduler_address("tcp://10.0.0.1:8786"), is_scheduler_address("threads")
    (True, False)
    """
    if not isinstance(executor, str):
        return False
    address = urlsplit(executor)
    return bool(address.scheme and address.netloc)


def is_dask_client(obj: object) -> bool:
    """A ``distributed.Client`` (recognised without importing distributed)."""
    kind = type(obj)
    return kind.__name__ == "Client" and kind.__module__.startswith("distributed")


def _dask_executor(
    address: Any, workers: int | None, retries: int, timeout: float | None
) -> Executor:
    """The DaskExecutor of ``executor=address`` or of a Client (Dask is imported only
    here); one made of a Client leaves it open when closed (it is the caller's)."""
    if workers is not None or timeout is not None:
        raise ConfigError(
            f"workers={workers!r} and timeout={timeout!r} do not apply to a Dask cluster "
            f"(executor={address!r}): its workers are what the cluster started; leave them unset",
            field="workers" if workers is not None else "timeout",
        )
    return DaskExecutor(address, retries=_checked_retries(retries))


def _checked_retries(retries: object) -> int:
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"retries must be an int >= 0, got {retries!r}", field="retries")
    return retries
