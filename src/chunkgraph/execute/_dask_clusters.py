"""Starting the Dask cluster a ``ClusterSpec`` describes: batch systems through
dask-jobqueue (SLURM, PBS, LSF, SGE), Kubernetes through dask-kubernetes; and
``ClusterExecutor``, the ``DaskExecutor`` that owns it.

    start_cluster(spec)  ──> ClusterExecutor: the scheduler runs in this process; `jobs`
                             jobs submitted (sbatch, qsub, bsub) and their submissions
                             awaited, or the pods asked for
    executor.run(...)    ──> waits for the first worker ("waiting for N worker(s) from
                             slurm"), at most start_timeout seconds, then runs as on any
                             cluster
    executor.close()     ──> the jobs cancelled (scancel, qdel, bkill), the Client and the
                             scheduler closed

Why the first worker is awaited and not all of them: a batch queue starts jobs when it
can, and a flow's work is shared as workers arrive (Dask steals for the idle ones); a
run that waited for every job would wait for the slowest queue slot.

A job the batch system refuses (a partition it does not have: the submit command exits
non-zero) fails the start at once: a ConfigError in the submit command's words, with the
job script, and the jobs it did take cancelled (dask-jobqueue would only log it, and the
run would wait ``start_timeout`` for nothing). No worker within ``start_timeout``: a
ConfigError that names the command that shows the jobs (``squeue -j ...``) and prints
the job script, since what went wrong (a prologue that fails, a node that cannot reach
the scheduler) is the batch system's to tell.

Executors never print: the waiting line goes to ``say`` (the command line's stderr), by
default the ``chunkgraph.execute`` logger.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError
from chunkgraph.execute._cluster_spec import (
    DEFAULT_START_TIMEOUT_S,
    JOBQUEUE_KINDS,
    OPTIONS,
    ClusterSpec,
)
from chunkgraph.execute._dask_executor import DaskExecutor
from chunkgraph.execute._events import Subscriber
from chunkgraph.graph import Graph

if TYPE_CHECKING:
    from chunkgraph.planning import Plan

# What shows a system's jobs, named by the error when no worker arrives.
_STATUS_COMMAND = {
    "slurm": "squeue -j {ids}",
    "pbs": "qstat {ids}",
    "lsf": "bjobs {ids}",
    "sge": "qstat -j {ids}",
    "kubernetes": "kubectl get pods -l dask.org/cluster-name={name}",
}
_JOBQUEUE_CLASS = {
    "slurm": "SLURMCluster",
    "pbs": "PBSCluster",
    "lsf": "LSFCluster",
    "sge": "SGECluster",
}
_log = logging.getLogger("chunkgraph.execute")


def cluster(kind: str, *, retries: int = 0, **options: Any) -> ClusterExecutor:
    """Start a Dask cluster on a batch system or Kubernetes; the executor that owns it.

    The jobs are submitted now; the first run waits for the first worker (at most
    ``start_timeout`` seconds). ``close()``, or the end of ``with``, cancels the jobs and
    closes the scheduler.

    Args:
        kind: ``"slurm"``, ``"pbs"``, ``"lsf"``, ``"sge"`` (dask-jobqueue) or
            ``"kubernetes"`` (dask-kubernetes).
        retries: Extra tries of a failed task, as ``DaskExecutor``'s.
        **options: The cluster's options (``valid_options(kind)``; docs/executors.md).

    Raises:
        ConfigError: For an unknown option or a bad value (naming it and the valid ones),
            a missing package, or a cluster that cannot start.

    >>> with chunkgraph.execute.cluster("slurm", cores=8, memory="32GiB", jobs=10,
    ...                                 walltime="02:00:00") as ex:  # doctest: +SKIP
    ...     chunkgraph.apply(fn, src, dst, executor=ex)
    """
    return start_cluster(ClusterSpec.of(kind, **options), retries=retries)


def start_cluster(
    spec: ClusterSpec, *, retries: int = 0, say: Callable[[str], None] | None = None
) -> ClusterExecutor:
    """Start the cluster ``spec`` describes and submit its jobs.

    Args:
        spec: The cluster, checked already.
        retries: Extra tries of a failed task, as ``DaskExecutor``'s.
        say: Receives the line that says what the first run waits for; None: the
            ``chunkgraph.execute`` logger, at INFO.

    Raises:
        ConfigError: For a missing package, or a cluster that cannot start.
    """
    from distributed import Client  # deferred: imports distributed

    started = _kubernetes(spec) if spec.kind == "kubernetes" else _jobqueue(spec)
    try:
        client = Client(started, set_as_default=False)  # type: ignore[no-untyped-call]
        return ClusterExecutor(started, client, spec, retries=retries, say=say)
    except BaseException:
        started.close()
        raise


def import_jobqueue() -> Any:
    """``dask_jobqueue``, without the Ctrl-C handler its import installs: that handler
    calls ``sys.exit()``, so an interrupted run would end with exit 0 as if it had
    finished (and stay so for the rest of the process)."""
    before = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue  # deferred: an optional package
    finally:
        if before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, before)
    return dask_jobqueue


def _jobqueue(spec: ClusterSpec) -> Any:
    """A dask-jobqueue cluster of ``spec``, its jobs submitted."""
    try:
        dask_jobqueue = import_jobqueue()
    except ImportError as err:
        raise _missing("dask-jobqueue", "dask", spec) from err
    made = getattr(dask_jobqueue, _JOBQUEUE_CLASS[spec.kind])
    submitted = _Submissions(int(spec.get("jobs", 1)))
    _quiet_said()
    try:
        started = made(**_passed(spec), job_cls=submitted.job_class(made.job_cls))
    except (ValueError, TypeError, OSError) as err:
        raise ConfigError(
            f"executor.{spec.kind}: dask-jobqueue refused {spec!r}: {err}", field="executor"
        ) from err
    try:
        started.scale(jobs=submitted.jobs)
        timeout = float(spec.get("start_timeout", DEFAULT_START_TIMEOUT_S))
        # A submit command that hangs: past start_timeout, the wait for workers tells.
        if submitted.wait(None if math.isinf(timeout) else timeout) and submitted.refused:
            raise submitted.error(spec, made.job_cls.submit_command, started.job_script())
    except BaseException:
        started.close()  # cancels the jobs that were taken
        raise
    return started


class _Submissions:
    """Each job's submission (sbatch, qsub, bsub), seen as it returns.

    dask-jobqueue submits the jobs in its event loop, and a refused one (the submit
    command's non-zero exit) only shows as tracebacks in that loop's log; the jobs' own
    class (``job_class``) reports here instead, and its refusals stay out of the log,
    since ``error`` says them.
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.taken = 0
        self.refused: list[str] = []
        self._returned = threading.Event()
        self._lock = threading.Lock()

    def job_class(self, base: type) -> type:
        """``base`` (the system's dask-jobqueue job), reporting each submission here."""
        from distributed.core import Status  # deferred: imports distributed

        submissions = self

        class Reported(base):  # type: ignore[misc,valid-type]
            async def start(self) -> None:
                try:
                    await super().start()
                except Exception as err:
                    # What closing the cluster expects of a job that never ran.
                    self.status = Status.failed
                    submissions.returned(err)
                    raise
                submissions.returned(None)

            async def close(self) -> None:
                await super().close()  # cancels the job (scancel, qdel, bkill)
                # What closing the cluster expects of each job it made, which the
                # traceback of a refusal beside it may keep alive.
                self.status = Status.closed

        Reported.__name__ = Reported.__qualname__ = base.__name__
        return Reported

    def returned(self, refused: Exception | None) -> None:
        with self._lock:
            if refused is None:
                self.taken += 1
            else:
                setattr(refused, _SAID, True)
                self.refused.append(str(refused))
            if self.taken + len(self.refused) == self.jobs:
                self._returned.set()

    def wait(self, timeout: float | None) -> bool:
        """Whether every submission returned within ``timeout`` seconds."""
        return self._returned.wait(timeout)

    def error(self, spec: ClusterSpec, command: str, script: str) -> ConfigError:
        """The refusal, in the submit command's words, with the job script."""
        # dask-jobqueue's text of a failed command ends with its stderr.
        said = self.refused[0].split("\nstderr:\n", 1)[-1].strip()
        taken = f"; the {self.taken} it took are cancelled" if self.taken else ""
        return ConfigError(
            f"executor.{spec.kind}: `{command}` refused {len(self.refused)} of {self.jobs} "
            f"job(s){taken}:\n{said}\nCheck queue, account, extra_directives and the "
            f"resources asked for against the site's limits. The job script:\n{script}",
            field="executor",
        )


# Set on a refusal that a ConfigError says: the event loop's tracebacks of it are dropped.
_SAID = "_chunkgraph_said"


def _said_elsewhere(record: logging.LogRecord) -> bool:
    """False for a log record of an exception a ConfigError says (see ``_SAID``)."""
    return not getattr(record.exc_info[1] if record.exc_info else None, _SAID, False)


def _quiet_said() -> None:
    """Filter where an event loop logs the exceptions it lost (once per process)."""
    for name in ("tornado.application", "asyncio"):
        logger = logging.getLogger(name)
        if _said_elsewhere not in logger.filters:
            logger.addFilter(_said_elsewhere)


def _kubernetes(spec: ClusterSpec) -> Any:
    """A dask-kubernetes cluster (the Dask operator's ``KubeCluster``) of ``spec``."""
    try:
        from dask_kubernetes.operator import KubeCluster  # deferred: optional
    except ImportError as err:
        raise _missing("dask-kubernetes", "kubernetes", spec) from err
    import kr8s  # deferred: dask-kubernetes's client of the Kubernetes API

    try:
        # Credentials first: a KubeCluster that fails to start stays registered for the
        # package's exit hook, which tries again (and prints its traceback) at exit.
        kr8s.api()
        return KubeCluster(**{"n_workers": 1, **_passed(spec)}, quiet=True)
    except Exception as err:  # kr8s and the operator raise many types
        raise ConfigError(
            f"executor.kubernetes: cannot start a Dask cluster on Kubernetes "
            f"({type(err).__name__}: {err}); check that `kubectl get pods` works here "
            "(KUBECONFIG, the context) and that the Dask operator is installed in the "
            "cluster (helm install dask-kubernetes-operator)",
            field="executor",
        ) from err


def _passed(spec: ClusterSpec) -> dict[str, Any]:
    """The options as the cluster class's keyword arguments (chunkgraph's own left out)."""
    passed = {}
    for name, value in spec.options.items():
        option = OPTIONS[name]
        as_named = option.name_for(spec.kind)
        if as_named is not None:
            value = option.to_dask(value) if option.to_dask else value
            passed[as_named] = list(value) if isinstance(value, tuple) else value
    return passed


def _missing(package: str, extra: str, spec: ClusterSpec) -> ConfigError:
    return ConfigError(
        f"executor: a {spec.kind} cluster needs {package}, which is not installed here; "
        f"pip install 'chunkgraph[{extra}]' (or {package} alone)",
        field="executor",
    )


# -- the executor that owns it ------------------------------------------------------------


class ClusterExecutor(DaskExecutor):
    """A ``DaskExecutor`` on a cluster it started (``start_cluster``), which it owns.

    ``run``, ``check_paths`` and ``ship_module`` first wait for a worker
    (``wait_for_workers``); ``close()`` cancels the jobs, then closes the Client and the
    scheduler (also when the executor is collected, at the latest).

    Args:
        started: The cluster (a dask-jobqueue or dask-kubernetes cluster object).
        client: A ``distributed.Client`` of it.
        spec: What it was started from.
        retries: Extra tries of a failed task, as ``DaskExecutor``'s.
        say: Receives the line that says what the first run waits for.
    """

    def __init__(
        self,
        started: Any,
        client: Any,
        spec: ClusterSpec,
        *,
        retries: int = 0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(client, retries=retries)
        self.cluster = started
        self.spec = spec
        self._say = say or _log.info
        self._arrived = False
        # The client first: closed after the cluster, it would try to reconnect to it.
        self._shut = weakref.finalize(self, _shut_down, client, started)

    def close(self) -> None:
        """Cancel the jobs, close the Client and the scheduler; closing again does nothing."""
        super().close()
        self._shut()

    def job_ids(self) -> list[str]:
        """The batch system's ids of the jobs submitted (none for Kubernetes)."""
        jobs = getattr(self.cluster, "workers", {}) or {}
        return [str(j.job_id) for j in jobs.values() if getattr(j, "job_id", None)]

    def wait_for_workers(self) -> None:
        """Return once a worker has joined; ConfigError after ``start_timeout`` seconds,
        naming the command that shows the jobs and the job script."""
        if self._arrived:
            return
        self._check_open()
        timeout = float(self.spec.get("start_timeout", DEFAULT_START_TIMEOUT_S))
        if not self.client.scheduler_info()["workers"]:
            self._say(
                f"waiting for {self.spec.workers} worker(s) from {self.spec.kind} "
                f"({self._where()}) ..."
            )
            try:
                self.client.wait_for_workers(1, timeout=None if math.isinf(timeout) else timeout)
            except TimeoutError as err:
                raise self._none_came(timeout) from err
        self._arrived = True

    def _where(self) -> str:
        ids = self.job_ids()
        command = _STATUS_COMMAND[self.spec.kind].format(
            ids=",".join(ids) if ids else "...", name=getattr(self.cluster, "name", "")
        )
        jobs = f"jobs {', '.join(ids)}; " if ids else ""
        return f"{jobs}`{command}` shows them; scheduler {self.address}"

    def _none_came(self, timeout: float) -> ConfigError:
        kind = self.spec.kind
        script = ""
        if kind in JOBQUEUE_KINDS:
            script = f"\nThe job script:\n{self.cluster.job_script()}"
        logs = self.spec.get("log_directory")
        told = f" their output is in {logs}," if logs else ""
        return ConfigError(
            f"no worker of the {kind} cluster arrived within {timeout:g} s ({self._where()}):"
            f"{told} are the jobs still queued, or did they fail? Check queue, account and "
            f"the prologue's lines (the workers must import chunkgraph), or give "
            f"start_timeout more seconds.{script}",
            field="executor",
        )

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        """As ``DaskExecutor.run``, once a worker has joined.

        Args:
            graph: The graph to run.
            targets: Task ids whose results are wanted; None: every sink.
            subscribers: Callables that receive this run's events.
            plan: A Plan of ``graph`` to follow; None: planned on the cluster's workers.
        """
        self.wait_for_workers()
        return super().run(graph, targets, subscribers=subscribers, plan=plan)

    def check_paths(self, paths: Mapping[str, str]) -> None:
        """As ``DaskExecutor.check_paths``, asked of the workers once one has joined.

        Args:
            paths: ``{what: path}``, paths on this machine's file system.
        """
        self.wait_for_workers()
        super().check_paths(paths)

    def ship_module(self, path: str) -> None:
        """As ``DaskExecutor.ship_module``, once a worker has joined (so that one that
        cannot import it says so now).

        Args:
            path: A module file (``name.py``) or a package directory (``name/``).
        """
        self.wait_for_workers()
        super().ship_module(path)

    def __repr__(self) -> str:
        return f"ClusterExecutor({self.spec!r}, {self.address!r}, retries={self.retries})"


def _shut_down(client: Any, started: Any) -> None:
    """Cancel the jobs (closing a jobqueue cluster runs scancel and its kin), then close."""
    try:
        client.close()
    finally:
        started.close()
