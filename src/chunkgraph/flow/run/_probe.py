"""One call of ``fn`` before a flow starts: wrong shapes and dtypes fail in a second.

Without it, an ``fn`` that returns one channel for a three-channel dst, an
object array, or NaN for an integer dst fails only inside the first task, after
temporary layers exist and possibly hours into a queue. The probe reads the
inputs over the first bottom-level chunk of the bbox (exactly what that chunk's
``fn`` call will get), calls ``fn`` once, and checks its output with the same
checks the flow applies to every chunk. It costs one bottom chunk's read and
compute; ``apply(..., probe=False)`` skips it (for an ``fn`` with side effects,
or one too expensive to run twice). A flow that calls ``fn`` once in all has no
probe (``fn_calls``): that one call is the probe, and a second would compute, and
read, the whole flow twice. An output dtype that ``apply``'s ``cast`` does
not allow for dst (``_cast``) is a ``ConfigError`` here: the arguments, not a task,
are wrong.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph.flow.plan import FlowSpec, scaled
from chunkgraph.flow.run._device import FlowDevice
from chunkgraph.flow.run._subchunk import call_fn
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.volume import Volume


# The message of the ExceptionGroup a failed probe raises.
PROBE_FAILED = "the apply flow's fn failed its probe call"


class ProbeFailure(ExceptionGroup[TaskError]):
    """fn failed its probe call, before anything was written: the group of one
    ``TaskError`` a failed task would raise, told apart by its type (the command line
    says so), never by its message."""


class _CastRefused(ConfigError):
    """What ``call_fn`` raises in the probe for a cast ``cast=`` refuses (told apart from
    anything ``fn`` itself raises, which the probe reports as a failed task)."""


def first_bottom_chunk(spec: FlowSpec) -> Box:
    """The first (lowest corner) bottom-level chunk of the flow.

    Each level below the top tiles its parent's chunk padded by the parent's
    crop and blend, so the first bottom chunk starts at the bbox corner minus
    those pads of every level above the bottom.

    >>> from chunkgraph.flow.plan import LevelSpec
    >>> from types import SimpleNamespace
    >>> top = LevelSpec((32, 32), (0, 0), (4, 4), "linear")
    >>> bottom = LevelSpec((8, 8), (2, 2), (0, 0), "linear")
    >>> spec = SimpleNamespace(bbox=Box((0, 0), (64, 64)), levels=(top, bottom))
    >>> first_bottom_chunk(spec)
    Box(start=(-4, -4), stop=(4, 4))
    """
    start = list(spec.bbox.start)
    for level in spec.levels[:-1]:
        start = [s - c - b for s, c, b in zip(start, level.crop, level.blend, strict=True)]
    bottom = spec.levels[-1].chunk
    return Box(tuple(start), tuple(s + c for s, c in zip(start, bottom, strict=True)))


def probe_read_box(spec: FlowSpec) -> Box:
    """What the probe reads (dst voxels): the first bottom chunk padded by the bottom
    level's crop and blend. An input cache the flow owns keeps the storage chunks there
    for the first tasks (``_reader_counts``): the probe is one of their readers.

    >>> from chunkgraph.flow.plan import LevelSpec
    >>> from types import SimpleNamespace
    >>> bottom = LevelSpec((8, 8), (2, 2), (0, 0), "linear")
    >>> probe_read_box(SimpleNamespace(bbox=Box((0, 0), (64, 64)), levels=(bottom,)))
    Box(start=(-2, -2), stop=(10, 10))
    """
    bottom = spec.levels[-1]
    return first_bottom_chunk(spec).padded(
        tuple(c + b for c, b in zip(bottom.crop, bottom.blend, strict=True))
    )


def fn_calls(spec: FlowSpec) -> int:
    """How many times the flow calls ``fn``: its top chunks times, at each level below,
    the children that tile a parent's region (chunk padded by its crop and blend).

    >>> from chunkgraph.flow.plan import LevelSpec
    >>> from types import SimpleNamespace
    >>> top = LevelSpec((32, 32), (0, 0), (4, 4), "linear")
    >>> bottom = LevelSpec((8, 8), (2, 2), (0, 0), "linear")
    >>> fn_calls(SimpleNamespace(bbox=Box((0, 0), (64, 64)), levels=(top, bottom)))
    100
    >>> fn_calls(SimpleNamespace(bbox=Box((0, 0), (64, 64)), levels=(bottom,)))
    64
    """
    calls = _tiles(spec.bbox.shape, spec.levels[0].chunk)
    for parent, child in itertools.pairwise(spec.levels):
        calls *= _tiles(parent.region_shape, child.chunk)
    return calls


def _tiles(shape: tuple[int, ...], chunk: tuple[int, ...]) -> int:
    return math.prod(-(-s // c) for s, c in zip(shape, chunk, strict=True))


def probe_fn(
    spec: FlowSpec,
    fn: Callable[..., Any],
    inputs: Mapping[str, Volume],
    dst: Volume,
    device: FlowDevice | None = None,
    timeout: float | None = None,
    retries: int = 0,
) -> tuple[Box, Any]:
    """Call ``fn`` on the first bottom chunk; raise what the flow would raise there, else
    return the chunk and ``fn``'s checked output (``_probe_output`` reuses it).

    With a ``device``, ``fn`` gets device arrays there, as in the flow (one upload per
    input, on the calling thread's device). With a ``timeout`` (apply's, per try), the
    call runs in a thread of its own and a call that overruns is abandoned (a thread cannot
    be killed, as the thread executor abandons a hung try) and tried again, up to
    ``retries`` times, as the flow would retry it (a first call may be slow once: a kernel
    compiles, a cache warms); any other failure fails the probe at once."""
    chunk = first_bottom_chunk(spec)
    read_box = probe_read_box(spec)
    arrays = {name: vol.read(scaled(read_box, spec.scale_of(name))) for name, vol in inputs.items()}
    for array in arrays.values():
        array.flags.writeable = False  # as in the flow: fn gets read-only views

    channels = tuple(dst.channel_shape)
    outputs: list[Any] = []

    def call() -> None:
        if device is None:
            outputs.append(call_fn(spec, fn, arrays, chunk, channels, refused=_CastRefused))
        else:
            with device.bound() as index:
                on_device = {name: device.upload(a, index) for name, a in arrays.items()}
                outputs.append(
                    call_fn(spec, fn, on_device, chunk, channels, device, index, _CastRefused)
                )

    tries = 1
    try:
        if timeout is None:
            call()
        else:
            while True:
                try:
                    _within(call, timeout)
                    break
                except TimeoutError:
                    if tries > retries:
                        raise
                    tries += 1
    except _CastRefused as refused:
        # The arguments are wrong, not a task.
        raise ConfigError(str(refused), field="cast") from None
    except Exception as exc:
        # The same contract as a failing task: one group of TaskError, the cause attached.
        error = TaskError(
            f"apply-probe{chunk}",
            attempts=tries,
            detail=f"{type(exc).__name__}: {exc} (in the probe call of fn on the first "
            "bottom-level chunk, before anything was written; probe=False skips it)",
        )
        error.__cause__ = exc
        raise ProbeFailure(PROBE_FAILED, [error]) from None
    return chunk, outputs[-1]


def _within(call: Callable[[], None], seconds: float) -> None:
    """Run ``call`` in a daemon thread; its exception, or TimeoutError after ``seconds``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name="chunkgraph-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise TimeoutError(
            f"fn did not return within timeout={seconds:g} s; the call was abandoned (a "
            "thread cannot be killed)"
        )
    if outcome[0] is not None:
        raise outcome[0]
