"""Dask clusters that chunkgraph starts: batch systems through dask-jobqueue (SLURM,
PBS, LSF, SGE), Kubernetes through dask-kubernetes.

    ClusterSpec.of("slurm", cores=8, memory="32GiB", jobs=10)    checked here, starts nothing:
      or ClusterSpec.parse({"slurm": {...}})                    ConfigError names the key and
                                                                the valid ones
    spec.start()         ──> ClusterExecutor (a DaskExecutor that owns the cluster)
      the scheduler runs in this process; `jobs` jobs submitted (sbatch, qsub, bsub)
    executor.run(...)    ──> waits for the first worker ("waiting for N workers from slurm"),
                             at most start_timeout seconds, then runs as on any cluster
    executor.close()     ──> the jobs cancelled (scancel, qdel, bkill), the Client and the
                             scheduler closed

Policy. One spelling of each option, the same in a spec file's ``executor:`` and in
``cluster(kind, **options)``: dask-jobqueue's names, except ``jobs`` (how many jobs to
submit), ``account`` (SLURM's and PBS's ``account``, LSF's and SGE's ``project``),
``extra_directives`` (``job_extra_directives``: ``#SBATCH`` lines and their kin) and
``prologue`` (``job_script_prologue``: lines run before the worker starts). Every option
is checked when the spec is made, before anything runs, so that a misspelled key is
refused where it was written; what only the batch system can judge (a queue that does
not exist) shows as no worker arriving, and that error names the command that shows
the jobs (``squeue -j ...``) and the job script.

A dry run starts nothing: it plans with ``ClusterSpec.stand_in()``, an executor that
runs in other processes (so the flow checks that fn pickles and places its layers
where workers on other hosts reach them) and runs nothing.

Why the first worker is awaited and not all of them: a batch queue starts jobs when it
can, and a flow's work is shared as workers arrive (Dask steals for the idle ones); a
run that waited for every job would wait for the slowest queue slot.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError, UsageError
from chunkgraph.execute._dask_executor import DaskExecutor
from chunkgraph.execute._events import Subscriber
from chunkgraph.graph import Graph

if TYPE_CHECKING:
    from chunkgraph.planning import Plan

JOBQUEUE_KINDS = ("slurm", "pbs", "lsf", "sge")
CLUSTER_KINDS = (*JOBQUEUE_KINDS, "kubernetes")
# Seconds to wait for the first worker. A batch queue may take minutes to start a job;
# longer than this, something is wrong more often than the queue is slow, and the error
# says what to look at (``start_timeout: .inf`` waits as long as the queue takes).
DEFAULT_START_TIMEOUT_S = 600.0
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


# -- checking values ----------------------------------------------------------------------


def _positive_int(value: object) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "a positive int"


def _seconds(value: object) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return None if ok else "a number of seconds > 0 (.inf in YAML, math.inf here: no limit)"


def _text(value: object) -> str | None:
    return None if isinstance(value, str) and value.strip() else "a non-empty string"


def _texts(value: object) -> str | None:
    ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    return None if ok else "a list of strings"


def _mapping(value: object) -> str | None:
    ok = isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
    return None if ok else "a mapping with string keys"


def _bytes(value: object) -> str | None:
    """A memory size as Dask reads it: ``"32GiB"``, ``"4 GB"``, or a number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return None
    if isinstance(value, str):
        from dask.utils import parse_bytes  # deferred: imports dask

        try:
            return None if parse_bytes(value) > 0 else "a size > 0"
        except (ValueError, TypeError):
            pass
    return "a memory size such as '32GiB' or '4 GB', or a number of bytes"


@dataclass(frozen=True)
class _Option:
    """One option: the systems it applies to, its check, and what it is passed to Dask as
    (per system where they name it differently; None: chunkgraph's own)."""

    kinds: tuple[str, ...]
    check: Callable[[object], str | None]
    passed_as: str | Mapping[str, str] | None
    about: str

    def name_for(self, kind: str) -> str | None:
        return self.passed_as if not isinstance(self.passed_as, Mapping) else self.passed_as[kind]


_J, _K = JOBQUEUE_KINDS, ("kubernetes",)
OPTIONS: dict[str, _Option] = {
    "cores": _Option(_J, _positive_int, "cores", "cores per job"),
    "memory": _Option(_J, _bytes, "memory", "memory per job ('32GiB')"),
    "walltime": _Option(_J, _text, "walltime", "time limit of a job ('02:00:00'; LSF 'hh:mm')"),
    "jobs": _Option(_J, _positive_int, None, "jobs to submit (default 1)"),
    "processes": _Option(_J, _positive_int, "processes", "worker processes per job, <= cores"),
    "queue": _Option(_J, _text, "queue", "queue or partition"),
    "account": _Option(
        _J,
        _text,
        {"slurm": "account", "pbs": "account", "lsf": "project", "sge": "project"},
        "account or project charged",
    ),
    "extra_directives": _Option(
        _J, _texts, "job_extra_directives", "more directive lines (['--gres=gpu:1'])"
    ),
    "prologue": _Option(
        _J, _texts, "job_script_prologue", "shell lines run before the worker starts"
    ),
    "resource_spec": _Option(("pbs", "sge"), _text, "resource_spec", "resource request"),
    "interface": _Option(_J, _text, "interface", "network interface of scheduler and workers"),
    "scheduler_options": _Option(
        _J, _mapping, "scheduler_options", "distributed.Scheduler's options"
    ),
    "worker_extra_args": _Option(_J, _texts, "worker_extra_args", "more `dask worker` args"),
    "local_directory": _Option(_J, _text, "local_directory", "workers' scratch directory"),
    "log_directory": _Option(_J, _text, "log_directory", "where jobs write their output"),
    "python": _Option(_J, _text, "python", "the workers' Python (default: this one)"),
    "job_name": _Option(_J, _text, "job_name", "the jobs' name"),
    "death_timeout": _Option(_J, _seconds, "death_timeout", "seconds a worker waits alone"),
    "image": _Option(_K, _text, "image", "the workers' container image"),
    "workers": _Option(_K, _positive_int, "n_workers", "worker pods (default 1)"),
    "namespace": _Option(_K, _text, "namespace", "Kubernetes namespace"),
    "name": _Option(_K, _text, "name", "the DaskCluster resource's name"),
    "resources": _Option(_K, _mapping, "resources", "pods' resources ({limits: {cpu: 2}})"),
    "env": _Option(_K, _mapping, "env", "environment variables of the pods"),
    "start_timeout": _Option(
        CLUSTER_KINDS, _seconds, None, f"seconds to wait for the first worker "
        f"(default {DEFAULT_START_TIMEOUT_S:g})"
    ),
}  # fmt: skip
# dask-jobqueue's names that chunkgraph spells otherwise: said in the error.
_RENAMED = {"job_extra_directives": "extra_directives", "job_script_prologue": "prologue",
            "n_workers": "jobs (or workers, on kubernetes)", "project": "account"}  # fmt: skip


def valid_options(kind: str) -> list[str]:
    """The options a cluster of ``kind`` takes, in the order of the table.

    >>> valid_options("pbs")[:4]
    ['cores', 'memory', 'walltime', 'jobs']
    """
    return [name for name, option in OPTIONS.items() if kind in option.kinds]


# -- the value ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster to start, checked and not started: ``kind`` and its options.

    ``executor=`` takes one (or ``{"slurm": {...}}``, a spec file's spelling): the run
    starts the cluster, runs on it, and cancels its jobs at the end.

    >>> ClusterSpec.of("slurm", cores=8, memory="32GiB", jobs=2)
    ClusterSpec(slurm: cores=8, memory='32GiB', jobs=2)
    >>> ClusterSpec.of("slurm", cores=8, memory="32GiB", gres=1)
    Traceback (most recent call last):
    chunkgraph.ConfigError: executor.slurm.gres: unknown option of a slurm cluster; ...
    """

    kind: str
    options: Mapping[str, Any]

    def __post_init__(self) -> None:
        kind = self.kind
        if kind not in CLUSTER_KINDS:
            raise ConfigError(
                f"executor: {kind!r} is not a cluster chunkgraph starts; give one of "
                f"{', '.join(CLUSTER_KINDS)} (e.g. {{'slurm': {{'cores': 8, 'memory': "
                "'32GiB'}}), a local kind or a Dask scheduler address",
                field="executor",
            )
        if not isinstance(self.options, Mapping):
            raise ConfigError(
                f"executor.{kind}: the options are a mapping (cores: 8, memory: 32GiB, ...), "
                f"got {self.options!r}",
                field=f"executor.{kind}",
            )
        valid = valid_options(kind)
        for name, value in self.options.items():
            if name not in valid:
                renamed = f" (dask-jobqueue's {name!r} is {_RENAMED[name]!r} here)" if (
                    name in _RENAMED) else ""  # fmt: skip
                raise ConfigError(
                    f"executor.{kind}.{name}: unknown option of a {kind} cluster{renamed}; "
                    f"valid: {', '.join(valid)}",
                    field=f"executor.{kind}.{name}",
                )
            wrong = OPTIONS[name].check(value)
            if wrong is not None:
                raise ConfigError(
                    f"executor.{kind}.{name} must be {wrong}, got {value!r}",
                    field=f"executor.{kind}.{name}",
                )
        self._check_together()
        # Kept as given, in a mapping no caller can change under the value.
        object.__setattr__(self, "options", dict(self.options))

    def _check_together(self) -> None:
        kind, options = self.kind, self.options
        if kind not in JOBQUEUE_KINDS:
            return
        cores, processes = options.get("cores"), options.get("processes")
        if cores is not None and processes is not None and processes > cores:
            raise ConfigError(
                f"executor.{kind}.processes ({processes}) is more than cores ({cores}): each "
                "worker process gets cores // processes threads; give processes <= cores",
                field=f"executor.{kind}.processes",
            )
        for name in ("cores", "memory"):
            if name not in options and _site_default(kind, name) is None:
                raise ConfigError(
                    f"executor.{kind}.{name} is needed: how much each job asks for (e.g. "
                    f"cores: 8, memory: 32GiB; or set jobqueue.{kind}.{name} in Dask's "
                    "jobqueue.yaml)",
                    field=f"executor.{kind}.{name}",
                )

    @classmethod
    def of(cls, kind: str, **options: Any) -> ClusterSpec:
        """The spec of a ``kind`` cluster (one of ``CLUSTER_KINDS``) with these options."""
        return cls(kind, options)

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> ClusterSpec:
        """A spec file's spelling: one key, the kind, whose value holds the options.

        >>> ClusterSpec.parse({"pbs": {"cores": 4, "memory": "8GB", "queue": "short"}}).kind
        'pbs'
        """
        if not isinstance(given, Mapping) or len(given) != 1:
            raise ConfigError(
                f"executor: a cluster to start is one key, its kind ({', '.join(CLUSTER_KINDS)}), "
                f"holding its options, e.g. {{slurm: {{cores: 8, memory: 32GiB}}}}; got {given!r}",
                field="executor",
            )
        ((kind, options),) = given.items()
        return cls(kind, options if options is not None else {})

    def get(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    @property
    def workers(self) -> int:
        """How many Dask workers the cluster will have once every job runs."""
        if self.kind == "kubernetes":
            return int(self.get("workers", 1))
        return int(self.get("jobs", 1)) * int(self.get("processes", 1))

    def start(
        self, *, retries: int = 0, say: Callable[[str], None] | None = None
    ) -> ClusterExecutor:
        """Start this cluster and submit its jobs (``start_cluster``)."""
        return start_cluster(self, retries=retries, say=say)

    def stand_in(self) -> ClusterStandIn:
        """What a dry run plans with: runs in other processes, starts nothing."""
        return ClusterStandIn(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"ClusterSpec({self.kind}: {shown})"


def _site_default(kind: str, name: str) -> Any:
    """A site's own default (``jobqueue.KIND.NAME`` in Dask's config): clusters' admins
    often set cores and memory there."""
    import dask.config  # deferred: imports dask

    return dask.config.get(f"jobqueue.{kind}.{name}", None)


class ClusterStandIn:
    """A ``ClusterSpec``'s executor in a dry run: tasks would run in other processes, on
    other hosts; nothing is started and nothing runs."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec

    @property
    def in_process(self) -> bool:
        return False

    def check_paths(self, paths: Mapping[str, str]) -> None:
        """Nothing to ask yet: the run checks its workers once they arrive."""

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        raise UsageError(
            f"{self!r} stands in for a cluster in a dry run and runs nothing; give the "
            "ClusterSpec itself as executor= to start it"
        )

    def __repr__(self) -> str:
        return f"ClusterStandIn({self.spec!r})"


# -- starting -----------------------------------------------------------------------------


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
    """Start the cluster ``spec`` describes and submit its jobs; ``say`` receives the
    line that says what the first run waits for (default: the ``chunkgraph.execute``
    logger, at INFO)."""
    from distributed import Client  # deferred: imports distributed

    started = _kubernetes(spec) if spec.kind == "kubernetes" else _jobqueue(spec)
    try:
        client = Client(started, set_as_default=False)  # type: ignore[no-untyped-call]
        return ClusterExecutor(started, client, spec, retries=retries, say=say)
    except BaseException:
        started.close()
        raise


def _jobqueue(spec: ClusterSpec) -> Any:
    """A dask-jobqueue cluster of ``spec``, its jobs submitted."""
    try:
        import dask_jobqueue  # deferred: an optional package
    except ImportError as err:
        raise _missing("dask-jobqueue", "dask", spec) from err
    made = getattr(dask_jobqueue, _JOBQUEUE_CLASS[spec.kind])
    try:
        started = made(**_passed(spec))
    except (ValueError, TypeError, OSError) as err:
        raise ConfigError(
            f"executor.{spec.kind}: dask-jobqueue refused {spec!r}: {err}", field="executor"
        ) from err
    started.scale(jobs=int(spec.get("jobs", 1)))
    return started


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
        as_named = OPTIONS[name].name_for(spec.kind)
        if as_named is not None:
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
        """As ``DaskExecutor.run``, once a worker has joined."""
        self.wait_for_workers()
        return super().run(graph, targets, subscribers=subscribers, plan=plan)

    def check_paths(self, paths: Mapping[str, str]) -> None:
        """As ``DaskExecutor.check_paths``, asked of the workers once one has joined."""
        self.wait_for_workers()
        super().check_paths(paths)

    def ship_module(self, path: str) -> None:
        """As ``DaskExecutor.ship_module``, once a worker has joined (so that one that
        cannot import it says so now)."""
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
