"""The exception hierarchy: one root, each leaf also a matching built-in.

    ChunkgraphError
    ├── ConfigError(ValueError)           bad parameters: what, where, what would be valid
    │   └── AlignmentError                a write that does not cover whole storage chunks
    ├── VolumeNotFoundError(FileNotFoundError)  no volume at that path or name
    ├── CorruptChunkError(ValueError)     a stored chunk that cannot be decoded: key and file
    ├── StoreError(OSError)               an object store failed a request after its retries
    ├── GraphError(ValueError)            a malformed graph: cycle, foreign ref, duplicate name
    ├── PlanError(RuntimeError)           a plan that cannot be made
    ├── UsageError(RuntimeError)          an object used in a state that does not allow it
    ├── TaskError(RuntimeError)           one task failed: its name, its inputs, the cause
    ├── WorkerDiedError(RuntimeError)     a worker process vanished while running a task
    ├── FlowOutputError(ValueError)       an apply flow's fn returned an unusable array
    ├── FlowLockedError(RuntimeError)     the same flow is already running elsewhere
    ├── RunEndedError(RuntimeError)       a late write of an abandoned flow task, dropped
    ├── CallTimeoutError(TimeoutError)    a process-pool call overran; its worker was killed
    ├── RemoteError(RuntimeError)         a worker's exception that could not cross processes
    └── RemoteTraceback                   a worker's traceback text, carried as __cause__

Every class shows its public module (``chunkgraph.ConfigError``) in tracebacks.

Permanent errors. A class with ``permanent = True`` fails the same way on every
try (the same parameters, the same stored bytes, the same ``fn`` output), so
executors never retry it (``is_permanent``; the one rule, kept by the scheduler
every local executor drives and by ``DaskExecutor``): ``ConfigError``,
``CorruptChunkError``, ``FlowOutputError`` (NaN into integers, a wrong shape)
and ``GraphError``. Any exception class of a user's may say the same.

Many failures of one run surface together as a single ``ExceptionGroup`` of
``TaskError``; the original exception (a worker's remote traceback included)
is carried as ``__cause__``.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import ClassVar


class ChunkgraphError(Exception):
    """Root of every error chunkgraph raises on purpose."""

    # True: trying again cannot succeed, so executors do not retry it (is_permanent).
    permanent: ClassVar[bool] = False


def is_permanent(error: BaseException) -> bool:
    """Whether another try cannot succeed: ``error``'s class says so (``permanent = True``,
    which any exception class may set), or it is a group whose every member is permanent.

    >>> is_permanent(ConfigError("bad")), is_permanent(OSError(28, "No space left"))
    (True, False)
    >>> is_permanent(ExceptionGroup("loop", [CorruptChunkError("bad bytes")]))
    True
    """
    if isinstance(error, BaseExceptionGroup):
        return all(is_permanent(e) for e in error.exceptions)
    return getattr(type(error), "permanent", False) is True


class ConfigError(ChunkgraphError, ValueError):
    """A parameter is invalid; the message names it and says what would be valid.

    Where the raiser knows them, ``field`` is the parameter's name as the caller
    spelled it (``"crop_pads"``, ``"memory_limit"``; for a keyword of fn,
    ``"fn_kwargs.NAME"``; for the destination, ``"dst"``), ``level`` the flow level
    (0 = top) and ``axis`` the spatial axis the finding is about. Callers that map
    an error back to where the value came from (the command line: a spec file's
    line) read these, never the message text.

    >>> err = ConfigError("crop_pads = [0, 2] lists 2 levels", field="crop_pads", level=1)
    >>> err.field, err.level, err.axis, str(err)
    ('crop_pads', 1, None, 'crop_pads = [0, 2] lists 2 levels')
    """

    permanent = True

    def __init__(
        self,
        *args: object,
        field: str | None = None,
        level: int | None = None,
        axis: int | None = None,
    ) -> None:
        super().__init__(*args)
        self.field = field
        self.level = level
        self.axis = axis

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword attributes survive a trip through pickle (an error from a worker process).
        return (_rebuild_config_error, (type(self), self.args, self.field, self.level, self.axis))


def _rebuild_config_error(
    cls: type[ConfigError],
    args: tuple[object, ...],
    field: str | None,
    level: int | None,
    axis: int | None,
) -> ConfigError:
    return cls(*args, field=field, level=level, axis=axis)


class AlignmentError(ConfigError):
    """A write to an ``aligned_writes`` volume does not cover whole storage chunks."""


class CorruptChunkError(ChunkgraphError, ValueError):
    """Stored chunks of a volume cannot be decoded (checksum mismatch, truncated, garbled).

    ``volume`` is the volume's path; ``chunks``, ``keys`` and ``files`` are the
    failing chunks' grid indices, storage keys (``c/0/1/2``) and file paths.
    """

    permanent = True  # the stored bytes stay the same until someone rewrites them

    def __init__(
        self,
        message: str,
        *,
        volume: str = "",
        chunks: Sequence[tuple[int, ...]] = (),
        keys: Sequence[str] = (),
        files: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.volume = volume
        self.chunks = tuple(tuple(c) for c in chunks)
        self.keys = tuple(keys)
        self.files = tuple(files)

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields: rebuild through a helper so they survive a process boundary.
        return (_corrupt_chunk_error, (str(self), self.volume, self.chunks, self.keys, self.files))


def _corrupt_chunk_error(
    message: str,
    volume: str,
    chunks: Sequence[tuple[int, ...]],
    keys: Sequence[str],
    files: Sequence[str],
) -> CorruptChunkError:
    return CorruptChunkError(message, volume=volume, chunks=chunks, keys=keys, files=files)


class StoreError(ChunkgraphError, OSError):
    """An object store failed a request after the client's own retries: it did not
    answer, refused the connection, or answered with an error (``code``: the store's
    error code, e.g. ``AccessDenied``, ``InvalidAccessKeyId``; ``""`` when it gave none).

    Not damage: the stored bytes never arrived, so nothing says they are wrong
    (``CorruptChunkError`` is for bytes that arrived and do not decode). ``url`` is the
    object or prefix asked for, ``endpoint`` the server tried.
    """

    def __init__(self, message: str, *, url: str = "", endpoint: str = "", code: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.endpoint = endpoint
        self.code = code

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[object, ...]:
        return (_store_error, (str(self), self.url, self.endpoint, self.code))


def _store_error(message: str, url: str, endpoint: str, code: str) -> StoreError:
    return StoreError(message, url=url, endpoint=endpoint, code=code)


class VolumeNotFoundError(ChunkgraphError, FileNotFoundError):
    """No volume exists at the given path (or under the given memory name)."""


class UsageError(ChunkgraphError, RuntimeError):
    """An object was used in a state that does not allow it (a closed pool, say)."""


class FlowOutputError(ChunkgraphError, ValueError):
    """An apply flow's ``fn`` returned an array the flow cannot use (shape, dtype, NaN)."""

    permanent = True  # fn returns the same array for the same input


class FlowLockedError(ChunkgraphError, RuntimeError):
    """Another run holds the flow's lock (the same flow started twice on one destination),
    or another flow is writing an overlapping region of the destination.

    ``lock``: the lock file or lease; ``holder``: who holds it, as a person reads it
    ("process 12 on host 'a' (since ...)", or "another run" when its owner record is
    unreadable); ``destination``: the destination another flow is writing ("" when it is
    this flow that is already running); ``lapses_in``: seconds until a lease its holder
    stopped renewing lapses (None for a lock the kernel releases, ``flock``); ``reads``:
    the name of this flow's input that ``destination`` is, when the flow was refused for
    reading what another flow writes ("" when it would write there).
    """

    def __init__(
        self,
        message: str,
        lock: str = "",
        holder: str = "another run",
        destination: str = "",
        lapses_in: float | None = None,
        reads: str = "",
    ) -> None:
        super().__init__(message)
        self.lock = lock
        self.holder = holder
        self.destination = destination
        self.lapses_in = lapses_in
        self.reads = reads

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (str(self), self.lock, self.holder, self.destination, self.lapses_in, self.reads),
        )


class RunEndedError(ChunkgraphError, RuntimeError):
    """A flow task tried to write after its run had ended; the write was dropped."""


class CallTimeoutError(ChunkgraphError, TimeoutError):
    """A call ran longer than its ``timeout``; its worker was killed and replaced."""

    def __init__(self, seconds: float, pid: int | None) -> None:
        super().__init__(
            f"call exceeded timeout={seconds:g} s; its worker process {pid} was killed "
            "(SIGKILL) and replaced"
        )
        self.seconds = seconds
        self.pid = pid

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.seconds, self.pid))


class RemoteTraceback(ChunkgraphError):
    """The traceback text of an exception raised in a worker process."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class RemoteError(ChunkgraphError, RuntimeError):
    """Stands in for a worker's exception that cannot cross processes (it does not
    pickle, or it is a SystemExit); the message is its last traceback line."""


class GraphError(ChunkgraphError, ValueError):
    """The task graph is malformed (a cycle, a foreign reference, a duplicate name)."""

    permanent = True


class PlanError(ChunkgraphError, RuntimeError):
    """No valid plan exists for the graph on the given contexts."""


class WorkerDiedError(ChunkgraphError, RuntimeError):
    """A worker process died (crash, ``os._exit``, killed) while running a task."""


class TaskError(ChunkgraphError, RuntimeError):
    """A task failed after all its tries.

    ``task`` is the task's name, ``inputs`` the names of the tasks it consumed,
    ``attempts`` how many times it ran; the original error is ``__cause__``.
    """

    def __init__(
        self,
        task: str,
        inputs: Sequence[str] = (),
        attempts: int = 1,
        detail: str = "",
    ) -> None:
        self.task = task
        self.inputs = tuple(inputs)
        self.attempts = attempts
        self.detail = detail
        shown = ", ".join(self.inputs[:8]) + (", ..." if len(self.inputs) > 8 else "")
        message = f"task {task!r} failed after {attempts} attempt(s)"
        if self.inputs:
            message += f"; inputs: [{shown}]"
        if detail:
            message += f": {detail}"
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the fields when the error crosses a process boundary, and the original
        # error as its traceback's text (pickle drops ``__cause__``).
        cause = self.__cause__
        text = "" if cause is None else "".join(traceback.format_exception(cause)).rstrip()
        return (_task_error, (type(self), self.task, self.inputs, self.attempts, self.detail, text))


def _task_error(
    cls: type[TaskError],
    task: str,
    inputs: Sequence[str],
    attempts: int,
    detail: str,
    cause: str,
) -> TaskError:
    """A ``TaskError`` unpickled, its cause the original error's traceback text."""
    error = cls(task, inputs, attempts, detail)
    if cause:
        error.__cause__ = RemoteTraceback(cause)
    return error


# Tracebacks and reprs name the public spelling, not this private module. Pickle
# finds each class there too (``chunkgraph`` exports every one of them).
for _cls in (
    ChunkgraphError,
    ConfigError,
    AlignmentError,
    VolumeNotFoundError,
    CorruptChunkError,
    StoreError,
    GraphError,
    PlanError,
    UsageError,
    TaskError,
    WorkerDiedError,
    FlowOutputError,
    FlowLockedError,
    RunEndedError,
    CallTimeoutError,
    RemoteError,
    RemoteTraceback,
):
    _cls.__module__ = "chunkgraph"
del _cls
