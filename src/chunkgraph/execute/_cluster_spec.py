"""``ClusterSpec``: a Dask cluster to start, as one checked value (what a spec file's
``executor: {slurm: {...}}`` and ``execute.cluster("slurm", ...)`` say); starting it is
``_dask_clusters``'s.

    ClusterSpec.of("slurm", cores=8, memory="32GiB", jobs=10)    checked here, starts nothing:
      or ClusterSpec.parse({"slurm": {...}})                    ConfigError names the key and
                                                                the valid ones
    spec.stand_in()  ──> what a dry run plans with: runs elsewhere, starts nothing

Policy. One spelling of each option, the same in a spec file and in Python:
dask-jobqueue's names, except ``jobs`` (how many jobs to submit), ``account`` (SLURM's
and PBS's ``account``, LSF's and SGE's ``project``), ``extra_directives``
(``job_extra_directives``: ``#SBATCH`` lines and their kin) and ``prologue``
(``job_script_prologue``: lines run before the worker starts); jobqueue's spelling of a
renamed one is refused with the name to use. ``OPTIONS`` is the one table: which
systems take each option, its check, and the keyword it is passed to the cluster class
as. Every option is checked when the value is made, before anything runs, so that a
misspelled key is refused where it was written. ``memory`` is a size with its unit, or a
number of bytes of at least 64 MiB (a smaller number is a size whose unit was left out);
``walltime`` is a string in one of the forms its system takes (LSF's ``[hh:]mm`` is not
SLURM's ``hh:mm:ss``), never a number (YAML reads an unquoted ``2:00:00`` as 7200). What
only the batch system can judge shows when the jobs are submitted (a partition it does
not have: the submit command's error) or as no worker arriving (``_dask_clusters``).

A dry run starts nothing: it plans with ``ClusterSpec.stand_in()``, an executor that
runs in other processes (so the flow checks that fn pickles and places its layers where
workers on other hosts reach them) and runs nothing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError, UsageError
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


# The least memory a job may ask for: a Dask worker alone takes more, so a smaller number
# is a size whose unit was left out (SLURM's --mem=4000 means MB; here it would be bytes).
_MIN_MEMORY = 64 * 2**20


def _bytes(value: object) -> str | None:
    """A job's memory as Dask reads it: ``"32GiB"``, ``"4 GB"``, or a number of bytes;
    at least ``_MIN_MEMORY``."""
    size = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        from dask.utils import parse_bytes  # deferred: imports dask

        with contextlib.suppress(ValueError, TypeError):
            size = parse_bytes(value)
    if size is not None and size >= _MIN_MEMORY:
        return None
    wrong = "a memory size such as '32GiB' or '4 GB', or a number of bytes, at least 64 MiB"
    if size is not None and str(value).strip().isdigit():
        wrong += " (a number without a unit is bytes: give the unit, e.g. '32GiB')"
    return wrong


def _as_size(value: Any) -> Any:
    """``memory`` as dask-jobqueue takes it: a string (a number of bytes gets its unit)."""
    return f"{value}B" if isinstance(value, int) else value


@dataclass(frozen=True)
class _Form:
    """A string in one grammar (a batch system's walltime): a check, with its JSON Schema."""

    pattern: str
    forms: str

    def __call__(self, value: object) -> str | None:
        if isinstance(value, str) and re.fullmatch(self.pattern, value):
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            yaml = "in YAML, quote it: unquoted, 2:00:00 is the number 7200"
            return f"{self.forms}, a string ({yaml})"
        return self.forms

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^(?:{self.pattern})$"}


# Each system's time limit, as its submit command reads it (sbatch -t, qsub -l walltime,
# bsub -W, qsub -l h_rt).
_WALLTIME = {
    "slurm": _Form(
        r"(\d+-)?\d+(:\d\d){0,2}|INFINITE|UNLIMITED|infinite|unlimited",
        "minutes, mm:ss, hh:mm:ss, d-hh, d-hh:mm or d-hh:mm:ss ('02:00:00' is two hours, "
        "'02:00' two minutes), or UNLIMITED",
    ),
    "pbs": _Form(r"\d+(:\d\d){0,2}", "[[hh:]mm:]ss ('02:00:00' is two hours)"),
    "lsf": _Form(r"\d+(:\d\d)?", "[hh:]mm ('02:00' is two hours)"),
    "sge": _Form(r"\d+|\d+:\d\d:\d\d", "hh:mm:ss or seconds ('02:00:00' is two hours)"),
}


@dataclass(frozen=True)
class _Option:
    """One option: the systems it applies to, its check (per system where their forms
    differ), what it is passed to Dask as (per system where they name it differently;
    None: chunkgraph's own), and how its value is passed (as given, unless ``to_dask``)."""

    kinds: tuple[str, ...]
    check: Callable[[object], str | None] | Mapping[str, Callable[[object], str | None]]
    passed_as: str | Mapping[str, str] | None
    about: str
    to_dask: Callable[[Any], Any] | None = None

    def name_for(self, kind: str) -> str | None:
        return self.passed_as if not isinstance(self.passed_as, Mapping) else self.passed_as[kind]

    def check_for(self, kind: str) -> Callable[[object], str | None]:
        return self.check[kind] if isinstance(self.check, Mapping) else self.check


_J, _K = JOBQUEUE_KINDS, ("kubernetes",)
OPTIONS: dict[str, _Option] = {
    "cores": _Option(_J, _positive_int, "cores", "cores per job"),
    "memory": _Option(_J, _bytes, "memory", "memory per job ('32GiB')", _as_size),
    "walltime": _Option(
        _J, _WALLTIME, "walltime", "time limit of a job ('02:00:00'; LSF '[hh:]mm')"
    ),
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


# Each check's JSON Schema, for `chunkgraph spec-schema` (the checks above are the rule).
_SCHEMA_OF: dict[Callable[[object], str | None], dict[str, Any]] = {
    _positive_int: {"type": "integer", "minimum": 1},
    _seconds: {"type": "number", "exclusiveMinimum": 0},
    _text: {"type": "string", "minLength": 1},
    _texts: {"type": "array", "items": {"type": "string"}},
    _mapping: {"type": "object"},
    _bytes: {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 1}]},
}


def _schema(check: Callable[[object], str | None]) -> dict[str, Any]:
    return check.schema() if isinstance(check, _Form) else _SCHEMA_OF[check]


def cluster_json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file's cluster, ``{kind: {option: value}}``, made from
    ``OPTIONS``: one key, each kind's options with what they are."""
    kinds = {
        kind: {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {
                name: {**_schema(OPTIONS[name].check_for(kind)), "description": OPTIONS[name].about}
                for name in valid_options(kind)
            },
        }
        for kind in CLUSTER_KINDS
    }
    return {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
        "properties": kinds,
    }


def valid_options(kind: str) -> list[str]:
    """The options a cluster of ``kind`` takes, in the order of the table.

    Args:
        kind: One of ``CLUSTER_KINDS``.

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

    Attributes:
        kind: One of ``CLUSTER_KINDS``.
        options: The cluster's options, each checked (``valid_options(kind)``).

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
            wrong = OPTIONS[name].check_for(kind)(value)
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
        """The spec of a ``kind`` cluster with these options.

        Args:
            kind: One of ``CLUSTER_KINDS``.
            **options: Its options (``valid_options(kind)``).
        """
        return cls(kind, options)

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> ClusterSpec:
        """A spec file's spelling: one key, the kind, whose value holds the options.

        Args:
            given: ``{kind: {option: value, ...}}``.

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
        """An option's value.

        Args:
            name: The option.
            default: What a spec without it gives.
        """
        return self.options.get(name, default)

    @property
    def workers(self) -> int:
        """How many Dask workers the cluster will have once every job runs."""
        if self.kind == "kubernetes":
            return int(self.get("workers", 1))
        return int(self.get("jobs", 1)) * int(self.get("processes", 1))

    def refuse_beside(self, **given: object) -> None:
        """ConfigError for a local executor's option (``workers``, ``timeout``,
        ``gpu_fallback``) given beside this cluster: not None, it would be dropped, since
        the cluster's size is its spec's.

        Args:
            **given: The options, None (or False) where not given.
        """
        for name, value in given.items():
            if value is not None and value is not False:
                raise ConfigError(
                    f"{name}={value!r} does not apply to a {self.kind} cluster (executor="
                    f"{self!r}): its workers are what its spec asks for (jobs, processes, "
                    "cores); leave it unset",
                    field=name,
                )

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
    """A cluster's executor in a dry run: tasks would run in other processes, on other
    hosts; nothing is started, connected to or run. ``spec``: what names the cluster (a
    ``ClusterSpec``, a scheduler's address, a ``distributed.Client``)."""

    def __init__(self, spec: object) -> None:
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
            "ClusterSpec (or the address) itself as executor= to run on it"
        )

    def __repr__(self) -> str:
        return f"ClusterStandIn({self.spec!r})"
