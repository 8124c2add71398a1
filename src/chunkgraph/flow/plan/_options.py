"""``RunOptions``: how one flow runs, as one value, checked once.

Policy. ``apply``, ``apply(dst=None)``, ``reduce_deferred``, the jobs
(``downsample``, ``transfer``) and the command line take the same run options
(executor, workers, retries, timeout, resume, lock_wait, probe, progress,
dry_run, subscribers, memory_limit, intermediates, device), either as keywords
or as one value, ``run=RunOptions(...)``. Making a ``RunOptions`` is the one
place that checks them (``__post_init__``, also under ``RunOptions.of`` and
``dataclasses.replace``): every path holds one before it plans or touches
anything, so a bad value is refused the same way wherever it is given, by a
``ConfigError`` whose ``field`` is the parameter's name. Nothing after it
re-checks them. A caller passes the value on (``run=``) instead of spelling
the options out again.

``run=`` beside keywords (``RunOptions.of(run=...)``). ``run`` is the result. A
keyword equal to apply's default counts as not given (a keyword signature
cannot tell otherwise) and takes run's value; a keyword that agrees with run is
accepted; one that says otherwise is a ``ConfigError`` naming the keyword and
``run``, since which of the two was meant cannot be known. A caller that does
not use an option (``reduce_deferred`` has no ``dry_run``) refuses a ``run``
that sets it (``refuse_unused``), rather than ignore it.

State. A frozen dataclass. ``retries`` is ``None`` when not given: an executor
kind then retries ``DEFAULT_RETRIES`` times, and an ``Executor`` keeps its own
setting; an explicit value beside an ``Executor`` is refused there
(``execute.resolve_executor``), never dropped. Within a ``RunOptions``, whether
an option was given is ``None`` versus a value. ``device`` and
``gpu_fallback`` are one explicit state, ``DeviceChoice``::

    device="cpu"                      -> CPU
    device="gpu"                      -> GPU          (none here: ConfigError)
    device="gpu", gpu_fallback=True   -> GPU_OR_CPU   (none here: the CPU, reported)
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError
from chunkgraph.execute import EXECUTOR_KINDS, ClusterSpec, resolve_executor
from chunkgraph.execute._executor import is_dask_client, is_scheduler_address
from chunkgraph.execute._limits import check_timeout
from chunkgraph.flow.plan._auto_sizes import DEFAULT_MEMORY_SHARE
from chunkgraph.volume import is_url
from chunkgraph.volume._object_store import SCHEMES, broken_url, split_url

if TYPE_CHECKING:
    from chunkgraph.execute import Subscriber

# The options that are a real bool.
_FLAGS = ("resume", "probe", "progress", "dry_run")
# Flow tasks are idempotent: a try lost to a dead worker or a transient I/O error
# simply runs again.
DEFAULT_RETRIES = 2


class DeviceChoice(enum.Enum):
    """Where the levels below the top compute, as asked (``_device`` finds the GPU)."""

    CPU = "cpu"
    GPU = "gpu"
    GPU_OR_CPU = "gpu_or_cpu"

    @property
    def device(self) -> str:
        """``apply``'s ``device=``: ``"cpu"`` or ``"gpu"``."""
        return "cpu" if self is DeviceChoice.CPU else "gpu"

    @property
    def gpu_fallback(self) -> bool:
        return self is DeviceChoice.GPU_OR_CPU

    @classmethod
    def of(cls, device: object, gpu_fallback: object) -> DeviceChoice:
        """The state of ``device=`` and ``gpu_fallback=`` (a fallback without a GPU asked
        for changes nothing).

        >>> DeviceChoice.of("gpu", True), DeviceChoice.of("cpu", True)
        (<DeviceChoice.GPU_OR_CPU: 'gpu_or_cpu'>, <DeviceChoice.CPU: 'cpu'>)
        """
        if device not in ("cpu", "gpu") or not isinstance(device, str):
            raise ConfigError(
                f"device must be one of 'cpu', 'gpu', got {device!r}: 'cpu' runs fn on numpy "
                "arrays, 'gpu' on device arrays (CuPy)",
                field="device",
            )
        _check_bool("gpu_fallback", gpu_fallback)
        if device == "cpu":
            return cls.CPU
        return cls.GPU_OR_CPU if gpu_fallback else cls.GPU


@dataclass(frozen=True)
class RunOptions:
    """How one flow runs, as one value: ``apply(..., run=RunOptions(workers=4, resume=True))``.

    Every field is checked when the value is made (``RunOptions(...)``, ``.of``, or
    ``dataclasses.replace``): a bad one is a ``ConfigError`` whose ``field`` names it.

    Args:
        executor: ``"threads"`` (None: the default), ``"adaptive"``, ``"processes"``,
            ``"sync"``, a Dask scheduler address (``"tcp://host:8786"``), a
            ``distributed.Client``, an ``Executor``, or a cluster to start for the run: a
            ``ClusterSpec`` or its spec-file spelling, ``{"slurm": {"cores": 8, ...}}``
            (kept as a ``ClusterSpec``; a dry run starts none).
        workers: The executor's size; None: all cores.
        retries: Tries after a task's first; None: 2 for an executor kind, an
            ``Executor``'s own setting (a value beside one is refused).
        timeout: Seconds a task may run before it is stopped; None: no limit.
        resume: Continue an interrupted flow: finished tasks are skipped.
        lock_wait: Seconds to wait while the flow runs elsewhere or another flow writes
            what it reads or writes (0: refused at once, ``math.inf``: as long as it takes).
        probe: Call fn once on the first chunk before the run.
        progress: Show a progress bar.
        dry_run: Plan and estimate; write nothing.
        subscribers: Callables, each given every ``Event`` of the run.
        memory_limit: The memory budget in bytes; None: a share of what is available.
        intermediates: Where the flow's state goes: a folder or an object-store URL;
            None: beside dst.
        device: ``DeviceChoice.CPU``, ``.GPU`` or ``.GPU_OR_CPU`` (``RunOptions.of``
            takes apply's ``device=`` and ``gpu_fallback=`` instead).
    """

    # a kind, a Dask scheduler address, a distributed.Client, an Executor or a ClusterSpec;
    # None: threads
    executor: Any = None
    workers: int | None = None
    retries: int | None = None
    timeout: float | None = None
    resume: bool = False
    lock_wait: float = 0.0
    probe: bool = True
    progress: bool = False
    dry_run: bool = False
    subscribers: tuple[Subscriber, ...] = ()
    memory_limit: int | None = None
    intermediates: Path | str | None = None
    device: DeviceChoice = DeviceChoice.CPU

    def __post_init__(self) -> None:
        """Each field checked, in the order ``apply`` names them, and kept in one form
        (a real bool, a float, a tuple, a Path or a URL)."""
        for name in _FLAGS:
            _check_bool(name, getattr(self, name))
        if not isinstance(self.device, DeviceChoice):
            raise ConfigError(
                f"device must be a DeviceChoice (CPU, GPU or GPU_OR_CPU), got "
                f"{self.device!r}; RunOptions.of(device='gpu', gpu_fallback=True) takes "
                "apply's spelling",
                field="device",
            )
        if isinstance(self.executor, Mapping):  # a spec file's {slurm: {...}}
            object.__setattr__(self, "executor", ClusterSpec.parse(self.executor))
        _check_executor_kind(self.executor, self.workers, self.retries, self.timeout)
        with _field("device"):
            check_executor(self.device.device, self.executor)
        with _field("timeout"):
            seconds = check_timeout(self.timeout)
        kept = {
            "workers": _checked_workers(self.workers),
            "retries": _checked_retries(self.retries),
            "timeout": seconds,
            "lock_wait": _checked_lock_wait(self.lock_wait),
            "subscribers": _checked_subscribers(self.subscribers),
            "memory_limit": _checked_memory_limit(self.memory_limit),
            "intermediates": _checked_intermediates(self.intermediates),
            **{name: bool(getattr(self, name)) for name in _FLAGS},
        }
        for name, value in kept.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @classmethod
    def of(
        cls,
        *,
        run: object = None,
        executor: object = None,
        workers: object = None,
        retries: object = None,
        timeout: object = None,
        resume: object = False,
        lock_wait: object = 0.0,
        probe: object = True,
        progress: object = False,
        dry_run: object = False,
        subscribers: Sequence[Subscriber] = (),
        memory_limit: object = None,
        intermediates: object = None,
        device: object = "cpu",
        gpu_fallback: object = False,
    ) -> RunOptions:
        """The options as ``apply`` takes them, each checked: ConfigError with ``field``.

        ``run``: a ``RunOptions`` given beside the keywords (``apply(run=...)``): it is
        the result, and a keyword left at its default takes its value; a keyword that
        says otherwise is refused (``field`` the keyword, the message naming ``run``),
        since which of the two was meant cannot be known. One that agrees is accepted.

        Args:
            run: A ``RunOptions`` the keywords are checked against; None: none.
            executor: As the field of the same name (the class's ``Args``).
            workers: As the field.
            retries: As the field.
            timeout: As the field.
            resume: As the field.
            lock_wait: As the field.
            probe: As the field.
            progress: As the field.
            dry_run: As the field.
            subscribers: As the field.
            memory_limit: As the field.
            intermediates: As the field.
            device: ``"cpu"`` or ``"gpu"`` (with ``gpu_fallback``: the ``device`` field).
            gpu_fallback: With ``device="gpu"``, the CPU where no GPU is found.

        Returns:
            The checked ``RunOptions``.

        >>> RunOptions.of(retries=1, device="gpu").device
        <DeviceChoice.GPU: 'gpu'>
        >>> RunOptions.of(run=RunOptions(workers=2)).workers
        2
        """
        given: dict[str, Any] = dict(
            executor=executor, workers=workers, retries=retries, timeout=timeout,
            resume=resume, lock_wait=lock_wait, probe=probe, progress=progress,
            dry_run=dry_run, subscribers=subscribers, memory_limit=memory_limit,
            intermediates=intermediates,
        )  # fmt: skip
        keywords = cls(**given, device=DeviceChoice.of(device, gpu_fallback))
        # Beside run, device and gpu_fallback are compared as given: a fallback asked for
        # beside run's GPU must not vanish into a CPU choice that equals the default.
        given_device = {"device": device, "gpu_fallback": gpu_fallback}
        return keywords if run is None else keywords._beside(run, given_device)

    def _beside(self, run: object, device: Mapping[str, object]) -> RunOptions:
        """``run``, when every keyword given beside it (``self``, with ``device`` and
        ``gpu_fallback`` as given) agrees with it."""
        if not isinstance(run, RunOptions):
            raise ConfigError(
                f"run must be a RunOptions (chunkgraph.RunOptions(workers=4, ...)) or None, "
                f"got {run!r} ({type(run).__name__})",
                field="run",
            )
        mine, theirs = self.apply_kwargs() | dict(device), run.apply_kwargs()
        for name, value in mine.items():
            if value != _DEFAULTS[name] and value != theirs[name]:
                in_run = (
                    "RunOptions.of(device=..., gpu_fallback=...)"
                    if name in ("device", "gpu_fallback")
                    else f"dataclasses.replace(run, {name}=...)"
                )
                raise ConfigError(
                    f"{name}={value!r} is given beside run=, whose {name} is "
                    f"{theirs[name]!r}: give each run option once, either in run "
                    f"({in_run}) or as a keyword without run",
                    field=name,
                )
        return run

    def apply_kwargs(self) -> dict[str, Any]:
        """The options as ``apply``'s keyword arguments (what a caller holding them passes).

        >>> RunOptions.of(device="gpu", gpu_fallback=True).apply_kwargs()["gpu_fallback"]
        True
        """
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return given | {"device": self.device.device, "gpu_fallback": self.device.gpu_fallback}

    def refuse_unused(self, caller: str, unused: Mapping[str, str]) -> None:
        """ConfigError when an option ``caller`` does not use (``unused``: each one's name
        and why) is not at its default: given, it would be ignored silently.

        Args:
            caller: The function's name, for the message (``"reduce_deferred"``).
            unused: Each option the caller has no use for, and why.

        Raises:
            ConfigError: Naming the first such option that is not at its default.

        >>> RunOptions(dry_run=True).refuse_unused("f", {"dry_run": "it writes nothing"})
        Traceback (most recent call last):
        chunkgraph.ConfigError: f takes no dry_run (it writes nothing); leave run.dry_run at ...
        """
        given = self.apply_kwargs()
        for name, why in unused.items():
            if given[name] != _DEFAULTS[name]:
                raise ConfigError(
                    f"{caller} takes no {name} ({why}); leave run.{name} at its default, "
                    f"{_DEFAULTS[name]!r}",
                    field=name,
                )


def check_optional_bool(name: str, value: object) -> None:
    """``value`` must be None (decided by the flow) or a real bool."""
    if value is not None:
        _check_bool(name, value)


def _check_bool(name: str, value: object) -> None:
    """A real bool: ``"no"`` or ``0.5`` would silently read as True."""
    import numpy as np

    if not isinstance(value, bool | np.bool_):
        raise ConfigError(
            f"{name} must be True or False, got {value!r} ({type(value).__name__})", field=name
        )


@contextlib.contextmanager
def _field(name: str) -> Iterator[None]:
    """Gives a ConfigError raised inside it the ``field`` it is about, when it has none."""
    try:
        yield
    except ConfigError as error:
        error.field = error.field or name
        raise


def _check_executor_kind(
    executor: object, workers: object, retries: object, timeout: object
) -> None:
    """A kind, an address, a Client, a ClusterSpec (checked when it was made) or an
    Executor (which one is ``resolve_executor``'s), with no option beside an Executor,
    which carries its own: checked when the value is made, so that a misspelled kind is
    refused where it was written. A ClusterSpec is started only by the run."""
    if executor is None or is_dask_client(executor):
        return
    if isinstance(executor, ClusterSpec):
        executor.refuse_beside(workers=workers, timeout=timeout)
        return
    if isinstance(executor, str) and (executor in EXECUTOR_KINDS or is_scheduler_address(executor)):
        return
    with _field("executor"):
        # An Executor comes back as it is, unless an option is given beside it.
        resolve_executor(executor, workers=workers, retries=retries, timeout=timeout)  # type: ignore[arg-type]


def _checked_workers(workers: object) -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(
            f"workers must be a positive int or None (all cores), got {workers!r}", field="workers"
        )
    return workers


def _checked_retries(retries: object) -> int | None:
    if retries is None:
        return None
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be an int >= 0, got {retries!r}", field="retries")
    return retries


def _checked_lock_wait(lock_wait: object) -> float:
    if isinstance(lock_wait, bool) or not isinstance(lock_wait, int | float) or not lock_wait >= 0:
        raise ConfigError(
            f"lock_wait must be a number of seconds >= 0 (0 refuses a busy flow at once, "
            f"math.inf waits for it), got {lock_wait!r}",
            field="lock_wait",
        )
    return float(lock_wait)


def _checked_memory_limit(memory_limit: object) -> int | None:
    if memory_limit is None:
        return None
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit <= 0:
        raise ConfigError(
            f"memory_limit must be a positive number of bytes (e.g. 4 * 2**30) or None for "
            f"{DEFAULT_MEMORY_SHARE:.0%} of the memory available rounded down to a power of "
            f"two, got {memory_limit!r}",
            field="memory_limit",
        )
    return memory_limit


def _checked_intermediates(intermediates: object) -> Path | str | None:
    """A folder (a Path) or an object-store URL (kept as text: ``s3://bucket/state``)."""
    if intermediates is None:
        return None
    if not isinstance(intermediates, str | os.PathLike):
        raise ConfigError(
            f"intermediates must be a directory path, an object-store URL "
            f"(s3://bucket/path) or None, got {intermediates!r}",
            field="intermediates",
        )
    problem = broken_url(os.fspath(intermediates), (*SCHEMES, "file"))
    if problem:
        raise ConfigError(
            f"intermediates: {problem}; give a directory path or s3://BUCKET/path",
            field="intermediates",
        )
    if isinstance(intermediates, str) and is_url(intermediates):
        try:
            split_url(intermediates)
        except ConfigError as err:
            raise ConfigError(str(err), field="intermediates") from None
        return intermediates.rstrip("/")
    return Path(intermediates)


def _checked_subscribers(subscribers: object) -> tuple[Any, ...]:
    if isinstance(subscribers, str | bytes) or not isinstance(subscribers, Iterable):
        raise ConfigError(
            f"subscribers must be a sequence of callables (each receives every event), got "
            f"{subscribers!r}",
            field="subscribers",
        )
    given = tuple(subscribers)
    bad = [s for s in given if not callable(s)]
    if bad:
        raise ConfigError(
            f"subscribers must be callables (each receives every event), got {bad[0]!r}",
            field="subscribers",
        )
    return given


def check_executor(device: object, executor: object) -> None:
    """ConfigError when ``device="gpu"`` would run in other processes (``processes``, a
    Dask address or Client, an Executor that is not ``in_process``): the backend (and a
    test's fake) is per process, and its device arrays cannot be shipped to a worker.
    Checked before looking for a GPU here, which says nothing of a cluster's workers."""
    if device != "gpu":
        return
    if isinstance(executor, str):
        elsewhere = executor == "processes" or is_scheduler_address(executor)
    elif isinstance(executor, ClusterSpec):
        elsewhere = True
    elif executor is None:
        elsewhere = False
    else:
        elsewhere = is_dask_client(executor) or getattr(executor, "in_process", True) is False
    if not elsewhere:
        return
    given = executor
    raise ConfigError(
        f"device='gpu' runs in this process's threads, but executor={given!r} runs tasks in "
        "other processes; use executor='threads' (the default) or 'sync', or device='cpu'",
        field="device",
    )


# apply's run keywords at their defaults: a keyword equal to its default counts as not given.
_DEFAULTS = RunOptions().apply_kwargs()
