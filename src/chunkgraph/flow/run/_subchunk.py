"""The levels below the top, processed inside one top-level task, in memory.

A top-level task has already read its inputs once, over its chunk padded by
the sum of every level's crop and blend pads. Everything below happens on
slices (read-only views) of those arrays; no level below the top reads
storage. (Direct flows, ``skip_intermediates``, are the one case where lower
levels write: ``stream_chunk`` sends each bottom output straight to dst.)

Geometry of level ``l`` (see ``_flow_spec``)::

    R = chunk.padded(crop_l + blend_l)     the region level l + 1 tiles exactly
    +--------------------------------+
    |  c  |  c  |  c  |  c  |  c  |  |     children c of level l + 1; each returns
    +--------------------------------+     its output over c.padded(blend_{l+1})
                 |
                 v  weighted sum (or max, or plain copy) into an accumulator over R
    acc[R] --crop crop_l--> output over chunk.padded(blend_l)  (returned upward)

The bottom level calls ``fn`` on ``chunk.padded(crop + blend)`` and crops the
crop pad off its answer (or accepts the already-cropped shape).

Races. Children of one level run on the local thread pool
(``chunkgraph.parallel.parallel_map``) in ``2**k`` parity waves, ``k`` the
number of axes with a blend pad: two children of the same parity are at least
one chunk apart on every blended axis, and a blend pad is at most half a chunk,
so their padded outputs never overlap and each wave adds into the accumulator
without locks. A level without blend pads has disjoint children: one wave.

Weights. A child's contribution is multiplied by its per-axis ramps (no ramp on
a face touching ``R``'s edge; the part outside ``R`` is dropped), so the
weights of all children sum to 1 at every voxel of ``R`` and the accumulator
needs no normalising pass. Accumulation is in ``spec.accumulate_dtype``
(float64 for data of <= 32 bits), which keeps an identity ``fn`` exact. A
level whose children do not blend just assembles them, in ``fn``'s dtype.

On a device (``ctx.device``, see ``_device``): ``data`` holds device arrays, the
accumulators are device arrays (allocated like the first child's output) and
every operation uses the device's array module, so nothing below the top
crosses to the host. Children then run one after another in the top-level
task's thread, which is bound to the device: kernels are asynchronous, so one
thread keeps the device busy, queues them in order on one stream, and no pool
thread has to be bound to the device for each call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from chunkgraph._errors import ChunkgraphError, FlowOutputError
from chunkgraph.execute._breakdown import TaskTimer
from chunkgraph.flow.plan import (
    BOX_KEYWORD,
    FlowSpec,
    LevelSpec,
    axis_weights,
    can_saturate,
    cast_refusal,
    count_saturated,
    layer_dtype,
    resolution_hint,
    scaled,
)
from chunkgraph.flow.run._device import FlowDevice
from chunkgraph.flow.run._edge_locks import write_inside
from chunkgraph.flow.run._late_writes import check_run_live
from chunkgraph.flow.run._probe_output import take_probe_output
from chunkgraph.geometry import Box
from chunkgraph.parallel import get_pool, parallel_map
from chunkgraph.parallel._pool import local_pool

if TYPE_CHECKING:
    from chunkgraph.volume import Volume

T = TypeVar("T")

# dtype kinds an fn may return: bool, signed, unsigned, float. Anything else
# (complex, object, strings) cannot be blended or cast into a volume.
_NUMERIC_KINDS = "biuf"


@dataclass
class LevelCounter:
    """How many chunks each level processed, and how many voxels saturated where they
    were cast into dst's dtype (``_cast``); shared by one task's threads."""

    counts: list[int]
    saturated: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, level: int, n: int = 1) -> None:
        with self._lock:
            self.counts[level] += n

    def add_saturated(self, n: int) -> None:
        if n:
            with self._lock:
                self.saturated += n


def cast_counting(
    array: np.ndarray,
    dtype: np.dtype,
    final: np.dtype,
    counted: tuple[Any, ...],
    counter: LevelCounter,
    xp: ModuleType = np,
) -> np.ndarray:
    """``cast_to(array, dtype)``; when that is the cast into dst's dtype ``final``, the
    values of ``array[counted]`` that saturate are added to ``counter``.

    A voxel is cast into dst's dtype once on its way (the levels' dtypes are the
    accumulation dtype, which holds every value ``fn`` returns, until then), and
    ``counted`` is the part of ``array`` whose voxels this chunk alone stands for (see
    ``process_chunk``), so each voxel is counted once.
    """
    if np.dtype(dtype) == final and can_saturate(array.dtype, final):
        counter.add_saturated(count_saturated(array[counted], final, xp))
    return cast_to(array, dtype, xp)


@dataclass(frozen=True)
class SubchunkContext:
    """What every level of one top-level task needs.

    ``data`` maps input names to read-only arrays (channels first, then the
    spatial axes) covering ``data_box`` (dst voxels; each array at its input's own
    resolution, ``scaled(data_box, spec.scale_of(name))``); ``spec.positional_input``
    passes the single input as ``fn``'s first argument instead of by keyword.
    """

    spec: FlowSpec
    fn: Callable[..., Any]
    data: Mapping[str, np.ndarray]
    data_box: Box
    out_channel_shape: tuple[int, ...]
    counter: LevelCounter
    run_token: str = ""  # direct writes check it (_late_writes)
    device: FlowDevice | None = None  # None: the host; else data and levels live there
    device_index: int = 0
    timer: TaskTimer | None = None  # times fn and direct writes (_breakdown); None: not

    def for_each_child(self, run: Callable[[int], T], indices: list[int]) -> list[T]:
        """The children of a level: on the pool, or in order on a device (see above)."""
        if self.device is not None:
            return [run(i) for i in indices]
        return for_each_child(run, indices)

    def to_host(self, array: Any) -> np.ndarray:
        return array if self.device is None else self.device.download(array)


def cast_to(array: np.ndarray, dtype: np.dtype, xp: ModuleType = np) -> np.ndarray:
    """Cast, rounding to nearest when floats become integers (the exactness rule).

    ``xp``: the array module of ``array`` (numpy, or cupy for device arrays).

    Values outside an integer dtype's range saturate at its limits rather than
    wrap around (400 into uint8 is 255, not 144).

    >>> cast_to(np.array([0.4999, 2.5, 3.5000001]), np.dtype("u1")).tolist()
    [0, 2, 4]
    >>> cast_to(np.array([400.0, -100.0]), np.dtype("u1")).tolist()
    [255, 0]
    >>> cast_to(np.array([70_000, -5], dtype="i4"), np.dtype("i2")).tolist()
    [32767, -5]
    """
    dtype = np.dtype(dtype)
    if array.dtype == dtype:
        return array
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        if array.dtype.kind == "f":
            saturated = xp.clip(xp.rint(array), limits.min, limits.max)
            return saturated.astype(dtype)  # type: ignore[no-any-return]
        if array.dtype.kind in "iu" and not np.can_cast(array.dtype, dtype, "safe"):
            # Clip in the source dtype with bounds it can hold, so nothing overflows.
            source = np.iinfo(array.dtype)
            low, high = max(limits.min, source.min), min(limits.max, source.max)
            return xp.clip(array, low, high).astype(dtype)  # type: ignore[no-any-return]
    with np.errstate(over="ignore"):  # a float past a narrower float's range: counted (_cast)
        cast: np.ndarray = array.astype(dtype)
    return cast


def weighted_sum_start(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An empty weighted sum: -0.0, the exact identity of float addition.

    Starting from +0.0 would turn a -0.0 input into +0.0 (``0.0 + -0.0 == +0.0``);
    ``-0.0 + x`` is ``x`` for every x, +0.0 included, so identity flows stay bit-exact.

    >>> float(weighted_sum_start((1,), np.dtype("f8"))[0] + np.float64(-0.0))
    -0.0
    """
    return np.full(shape, -0.0, dtype=dtype)


def process_chunk(
    ctx: SubchunkContext, level: int, chunk: Box, owned: Box | None = None
) -> np.ndarray:
    """The unweighted output of ``chunk`` at ``level``, over ``chunk.padded(blend)``.

    ``owned``: the voxels this chunk stands for in saturation counts (``cast_counting``),
    the top chunk's inside dst narrowed by each level's chunk (unpadded) down to this
    one: siblings' chunks are disjoint, so every dst voxel has one owner.
    """
    ctx.counter.add(level)
    spec = ctx.spec.levels[level]
    if level == len(ctx.spec.levels) - 1:
        return _call_fn(ctx, level, chunk)
    owned = chunk if owned is None else owned
    region = chunk.padded(_add(spec.crop, spec.blend))
    child = ctx.spec.levels[level + 1]
    starts, stops, grid = region.split_arrays(child.chunk)
    acc = _Accumulator(
        region, child, ctx.spec.accumulate_dtype, assembly_dtype(ctx.spec, level), ctx.device
    )

    def run_child(i: int) -> None:
        box = Box(tuple(starts[i].tolist()), tuple(stops[i].tolist()))
        mine = owned.intersection(box)
        acc.add(box, process_chunk(ctx, level + 1, box, mine), mine, ctx)

    for wave in parity_waves(grid, tuple(p > 0 for p in child.blend)):
        ctx.for_each_child(run_child, wave.tolist())
    kept: np.ndarray = acc.result()[at(chunk.padded(spec.blend), region)]
    return kept


def stream_chunk(ctx: SubchunkContext, level: int, chunk: Box, dst: Volume) -> int:
    """Process ``chunk`` and write every bottom output straight to ``dst``; bytes written.

    For direct flows (``skip_intermediates``): no level blends and only the
    bottom crops, so bottom outputs are disjoint and aligned to dst chunks,
    and nothing needs to be assembled in memory. Writes then run in parallel
    with the children and a top-level task never holds its whole output.
    """
    ctx.counter.add(level)
    if level == len(ctx.spec.levels) - 1:
        xp = np if ctx.device is None else ctx.device.xp()
        # Bottom chunks tile the bbox here; a part past dst's edge is not written, nor a
        # part outside the caller's bbox when the tasks tile it grown out to the grid.
        aligned = chunk.intersection(dst.bounds)
        kept = aligned.intersection(ctx.spec.writes)
        if kept.is_empty:
            # Past the caller's bbox, in the grown region's last tasks: nothing to write,
            # and outputs are disjoint here (nothing blends), so fn need not run.
            return 0
        result = _call_fn(ctx, level, chunk)
        cast = cast_counting(result, dst.dtype, ctx.spec.dst_dtype, at(kept, chunk),
                             ctx.counter, xp)  # fmt: skip
        out = ctx.to_host(cast)
        check_run_live(ctx.run_token)
        if kept == aligned:
            if ctx.timer is None:
                dst.write(chunk, out)
            else:
                ctx.timer.write(lambda: dst.write(chunk, out))
            # Only the part inside dst is written (dst.write crops it).
            return int(out.nbytes) * aligned.size // max(chunk.size, 1)
        # The storage chunks the caller's bbox cuts keep their voxels outside it.
        part = out[at(kept, chunk)]
        if ctx.timer is None:
            return write_inside(dst, aligned, kept, part)
        return ctx.timer.write(lambda: write_inside(dst, aligned, kept, part))
    starts, stops, _ = chunk.split_arrays(ctx.spec.levels[level + 1].chunk)

    def run_child(i: int) -> int:
        box = Box(tuple(starts[i].tolist()), tuple(stops[i].tolist()))
        return stream_chunk(ctx, level + 1, box, dst)

    return sum(ctx.for_each_child(run_child, list(range(len(starts)))))


class _ChildFailed(Exception):
    """Carries a child chunk's own exception through ``parallel_map`` untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def for_each_child(run: Callable[[int], T], indices: list[int]) -> list[T]:
    """``parallel_map(run, indices)`` over a level's children, raising the first failing
    child's own exception rather than a group.

    A group per level would nest: with three levels, ``fn``'s error would reach the
    task two groups deep, and the executor's ``TaskError`` would show only the outer
    group's message. The chunk and level are in the error's note (``call_fn``); the
    note added here counts the children that failed beside it.
    """
    # The pool this level runs on (a flow's own, see _top_task.flow_pool) is the one the
    # levels nested in its children use too, whichever of its threads runs them.
    pool = get_pool()

    def guarded(i: int) -> T:
        try:
            with local_pool(pool):
                return run(i)
        except Exception as error:
            raise _ChildFailed(error) from None

    failures: list[Exception] = []
    try:
        # grain=1: a child is a whole chunk of fn's work, always worth a task of its own.
        # A measured grain would be cached under ``guarded``'s code, shared by every flow
        # of the process: a fast fn's model would keep a later slow fn's children in one
        # sequential piece.
        return parallel_map(guarded, indices, grain=1)
    except ExceptionGroup as group:
        failures = [e.error if isinstance(e, _ChildFailed) else e for e in group.exceptions]
    # Raised outside the except block, so the group does not become its __context__.
    first = failures[0]
    if len(failures) > 1:
        first.add_note(f"{len(failures) - 1} other chunk(s) of the same level failed too")
    raise first


def assembly_dtype(spec: FlowSpec, level: int) -> np.dtype:
    """The dtype in which ``level`` assembles children that do not blend.

    Decided from the flow, never from what ``fn`` returned for one chunk (a
    labelling ``fn`` may return uint8 zeros for an empty chunk and uint32
    labels elsewhere). It is the dtype the level's output is next combined
    in: the layer's dtype at the top (its output is cast to that anyway), the
    accumulation dtype where the level itself blends into its parent, else
    its parent's. Casting each child there is the same elementwise cast the
    whole output would get later, so results do not change.

    >>> from types import SimpleNamespace as N
    >>> from chunkgraph.flow.plan import LevelSpec
    >>> lv = lambda b: LevelSpec((8,), (0,), (b,), "linear")
    >>> spec = N(levels=(lv(0), lv(2), lv(0)), dst_dtype=np.dtype("u1"),
    ...          accumulate_dtype=np.dtype("f8"))
    >>> [str(assembly_dtype(spec, level)) for level in range(2)]
    ['uint8', 'float64']
    """
    if level == 0:
        return layer_dtype(spec)
    if any(spec.levels[level].blend):
        return np.dtype(spec.accumulate_dtype)
    return assembly_dtype(spec, level - 1)


def parity_waves(grid: tuple[int, ...], axes: tuple[bool, ...]) -> list[np.ndarray]:
    """Flat C-order indices of a grid, grouped so no two of a group are neighbours on ``axes``.

    >>> [w.tolist() for w in parity_waves((2, 3), (False, True))]
    [[0, 2, 3, 5], [1, 4]]
    """
    index = np.indices(grid).reshape(len(grid), -1)
    key = np.zeros(index.shape[1], dtype=np.int64)
    bit = 0
    for axis, used in enumerate(axes):
        if used:
            key |= (index[axis] % 2) << bit
            bit += 1
    waves = [np.flatnonzero(key == k) for k in range(2**bit)]
    return [w for w in waves if w.size]


def _call_fn(ctx: SubchunkContext, level: int, chunk: Box) -> np.ndarray:
    probed = take_probe_output(ctx.run_token, chunk)
    if probed is not None:  # the probe's call was this chunk's (_probe_output)
        return probed
    spec = ctx.spec.levels[level]
    read = chunk.padded(_add(spec.crop, spec.blend))
    arrays = {
        name: array[input_view(ctx.spec, name, read, ctx.data_box)]
        for name, array in ctx.data.items()
    }
    return call_fn(
        ctx.spec,
        ctx.fn,
        arrays,
        chunk,
        ctx.out_channel_shape,
        ctx.device,
        ctx.device_index,
        timer=ctx.timer,
    )


def input_view(spec: FlowSpec, name: str, box: Box, origin: Box) -> tuple[Any, ...]:
    """Index of dst box ``box`` in input ``name``'s array over dst box ``origin``, both
    scaled to the input's resolution."""
    scale = spec.scale_of(name)
    return at(scaled(box, scale), scaled(origin, scale))


def call_fn(
    spec: FlowSpec,
    fn: Callable[..., Any],
    arrays: Mapping[str, np.ndarray],
    chunk: Box,
    channels: tuple[int, ...],
    device: FlowDevice | None = None,
    device_index: int = 0,
    refused: type[ChunkgraphError] = FlowOutputError,
    timer: TaskTimer | None = None,
) -> np.ndarray:
    """``fn`` on one bottom chunk's arrays; its output checked, cropped to chunk + blend.

    With a ``device``, ``arrays`` are device arrays and so is the output (a host array
    ``fn`` returns is uploaded to ``device_index``). An output dtype that ``spec.cast``
    does not allow for dst raises ``refused`` (the probe: ``ConfigError``). A ``timer``
    times the call as compute over the voxels ``fn`` is given (``_breakdown``)."""
    bottom = spec.levels[-1]
    read_box = chunk.padded(_add(bottom.crop, bottom.blend))
    out_box = chunk.padded(bottom.blend)
    extra = {BOX_KEYWORD: read_box} if spec.pass_box else {}
    try:
        args = tuple(arrays.values()) if spec.positional_input else ()
        call: Callable[[], Any] = (
            (lambda: fn(*args, **extra)) if args else (lambda: fn(**arrays, **extra))
        )
        result = call() if timer is None else timer.call_fn(call, read_box.size)
    except Exception as exc:
        level = len(spec.levels) - 1
        exc.add_note(
            f"in the apply flow's fn on chunk {chunk} at level {level}, the bottom, "
            f"which read {read_box}"
        )
        if isinstance(exc, ValueError) and "read-only" in str(exc):
            exc.add_note(
                "fn's input arrays are read-only views of what was read (neighbouring chunks "
                "share them); copy one before changing it in place: x = x.copy()"
            )
        raise
    if device is None:
        result, xp = np.asarray(result), np
    else:
        result, xp = device.on_device(result, device_index), device.xp()
    try:
        out = _checked_output(result, channels, chunk, read_box, out_box)
    except FlowOutputError as error:
        # Spatial axes that fit: a channel mismatch, which the message explains already.
        spatial = tuple(result.shape[result.ndim - chunk.ndim :])
        fits = spatial in (read_box.shape, out_box.shape)
        hint = "" if fits else resolution_hint(spec, spatial, read_box)
        if not hint:
            raise
        raise FlowOutputError(f"{error}. {hint}") from None
    _check_finite(out, spec.dst_dtype, chunk, out_box, xp)
    # Every chunk: an fn may return another dtype where a chunk has no objects, say.
    refusal = cast_refusal(out.dtype, spec.dst_dtype, spec.cast, f" (on chunk {chunk})")
    if refusal:
        raise refused(refusal)
    return out


def _check_finite(
    out: np.ndarray, dst: np.dtype, chunk: Box, out_box: Box, xp: ModuleType = np
) -> None:
    """NaN and inf have no integer value: refuse them rather than write an arbitrary one."""
    if out.dtype.kind != "f" or np.dtype(dst).kind not in "iu":
        return
    finite = xp.isfinite(out)
    if bool(finite.all()):
        return
    bad = xp.argwhere(~finite)[0].tolist()[out.ndim - chunk.ndim :]
    where = tuple(int(s + i) for s, i in zip(out_box.start, bad, strict=True))
    raise FlowOutputError(
        f"fn returned {int(out.size - finite.sum())} NaN or infinite value(s) for chunk {chunk} "
        f"(the first near {where}), which an integer dst ({np.dtype(dst)}) cannot hold; replace "
        "them in fn (e.g. np.nan_to_num(out, nan=0, posinf=..., neginf=...)) or write to a "
        "float dst"
    )


def _checked_output(
    out: np.ndarray, channels: tuple[int, ...], chunk: Box, read_box: Box, out_box: Box
) -> np.ndarray:
    if out.dtype.kind not in _NUMERIC_KINDS:
        raise FlowOutputError(
            f"fn returned dtype {out.dtype} for chunk {chunk}; it must return a real numeric "
            f"array (bool, integer or float) that can be cast to the destination"
        )
    full = channels + read_box.shape
    cropped = channels + out_box.shape
    if out.shape == cropped:
        return out
    if out.shape == full:
        cropped_out: np.ndarray = out[at(out_box, read_box)]
        return cropped_out
    mismatch = _channel_mismatch(out.shape, channels, read_box.shape, out_box.shape)
    if mismatch:
        raise FlowOutputError(
            f"fn returned shape {out.shape} for chunk {chunk}: its channels do not match "
            f"dst's: {mismatch}"
        )
    raise FlowOutputError(
        f"fn returned shape {out.shape} for chunk {chunk}; expected {full} (the input shape: "
        f"chunk + 2*crop + 2*blend) or {cropped} (already cropped to chunk + 2*blend)"
    )


def _channel_mismatch(
    shape: tuple[int, ...],
    channels: tuple[int, ...],
    full: tuple[int, ...],
    cropped: tuple[int, ...],
) -> str:
    """What is wrong when the spatial axes of ``fn``'s output fit but its channels do not
    match dst's; empty when that is not the problem.

    >>> _channel_mismatch((1, 8, 8), (3,), (12, 12), (8, 8))[:48]
    'its channel axis 0 has 1 channel(s), dst has 3 ('
    >>> _channel_mismatch((8, 9), (3,), (12, 12), (8, 8))
    ''
    >>> _channel_mismatch((8, 8, 3), (3,), (12, 12), (8, 8))[:40]
    'it puts the channels last, dst has them '
    """
    n = len(full)
    valid = f"return shape {channels + full}"
    if cropped != full:
        valid += f" (the input's) or {channels + cropped} (cropped to chunk + 2*blend)"
    if len(shape) >= n and shape[len(shape) - n :] in (full, cropped):
        have = shape[: len(shape) - n]
        if not channels:
            return (
                f"it has channel axes {have} before the {n} spatial axes, but dst has no "
                f"channel axis; {valid}, or create dst with channel shape {have} (shape "
                f"{have} + the spatial shape, spatial_ndim={n})"
            )
        if not have:
            return (
                f"it has no channel axis, dst has channel shape {channels}; {valid} "
                "(channels first)"
            )
        if len(have) == len(channels):
            axes = [a for a, (h, c) in enumerate(zip(have, channels, strict=True)) if h != c]
            axis = axes[0]
            return (
                f"its channel axis {axis} has {have[axis]} channel(s), dst has "
                f"{channels[axis]} (dst channel shape {channels}, output channel shape "
                f"{have}); {valid}, or create dst with channel shape {have}"
            )
        return (
            f"it has {len(have)} channel axes {have}, dst has {len(channels)}: {channels}; {valid}"
        )
    last = len(shape) - len(channels)
    if channels and shape[:last] in (full, cropped) and shape[last:] == channels:
        return (
            f"it puts the channels last, dst has them first "
            f"(channel shape {channels}, then the spatial axes); "
            f"{valid}, e.g. np.moveaxis(out, -1, 0)"
        )
    return ""


class _Accumulator:
    """Sums (or maxes, or copies) children's outputs over ``region``.

    ``add`` is called concurrently only for children whose padded outputs are
    disjoint (one parity wave), so it needs no lock beyond the lazy allocation.
    """

    def __init__(
        self,
        region: Box,
        child: LevelSpec,
        accumulate: np.dtype,
        assemble: np.dtype,
        device: FlowDevice | None = None,
    ) -> None:
        self.region = region
        self.child = child
        self.accumulate = np.dtype(accumulate)
        self.assemble = np.dtype(assemble)
        self.blends = any(p > 0 for p in child.blend)
        self.device = device
        self.xp = np if device is None else device.xp()
        self._array: np.ndarray | None = None
        self._lock = threading.Lock()

    def _allocate(self, sample: np.ndarray) -> np.ndarray:
        with self._lock:
            if self._array is None:
                shape = sample.shape[: sample.ndim - self.region.ndim] + self.region.shape
                # Disjoint children: every voxel is assigned exactly once, in the
                # dtype the output is next combined in (see assembly_dtype).
                dtype = self.assemble if not self.blends else self.accumulate
                fill: Any = None
                if self.blends:
                    maxing = self.child.blend_mode == "max"
                    fill = lowest(self.accumulate) if maxing else -0.0  # weighted_sum_start
                self._array = self._full(shape, fill, dtype, sample)
            return self._array

    def _full(self, shape: tuple[int, ...], fill: Any, dtype: np.dtype, sample: Any) -> Any:
        if self.device is not None:
            return self.device.full(shape, fill, dtype, like=sample)
        if fill is None:
            return np.empty(shape, dtype=dtype)
        return np.full(shape, fill, dtype=dtype)

    def add(self, box: Box, out: np.ndarray, owned: Box, ctx: SubchunkContext) -> None:
        """Combine child ``box``'s output; ``owned``: its voxels in saturation counts."""
        acc = self._allocate(out)
        padded = box.padded(self.child.blend)
        part_box = padded.intersection(self.region)
        target = acc[at(part_box, self.region)]
        part = out[at(part_box, padded)]
        if not self.blends:
            counted = at(owned.intersection(part_box), part_box)
            final = ctx.spec.dst_dtype
            target[...] = cast_counting(part, self.assemble, final, counted, ctx.counter, self.xp)
        elif self.child.blend_mode == "max":
            self.xp.maximum(target, part, out=target)
        else:
            weights = weights_over(padded, self.child, self.region, part_box, self.xp)
            add_weighted(target, part, weights)

    def result(self) -> np.ndarray:
        if self._array is None:
            raise AssertionError("an accumulator was read before any child contributed")
        return self._array


# A weighted sum multiplies each contribution (a child's output, a layer part) by its
# weights before adding it; done in one go, that float64 product is as large as the part
# (up to a whole reduction box: twice the bytes of float32 data). Slabs of about this many
# bytes bound it; much smaller slabs would only add per-call overhead.
WEIGHTED_SLAB_BYTES = 8 * 2**20


def add_weighted(target: np.ndarray, data: np.ndarray, weights: np.ndarray) -> None:
    """``target += data * weights`` in slabs along the first spatial axis (same values).

    ``weights`` has one axis per spatial axis and broadcasts against ``data``,
    whose leading axes are channels. Each voxel sees exactly the operations of
    the one-go expression, so the result is identical, bit for bit.

    >>> target, data = np.zeros((3, 5)), np.ones((3, 5), dtype=np.float32)
    >>> add_weighted(target, data, np.array([[0.5], [1.0], [2.0]]))
    >>> target[:, 0].tolist()
    [0.5, 1.0, 2.0]
    """
    axis = data.ndim - weights.ndim
    n = data.shape[axis]
    row_bytes = data[(slice(None),) * axis + (slice(0, 1),)].size * np.dtype(np.float64).itemsize
    step = max(1, WEIGHTED_SLAB_BYTES // max(1, row_bytes))
    for lo in range(0, n, step):
        rows = (slice(None),) * axis + (slice(lo, lo + step),)
        w = weights if weights.shape[0] == 1 else weights[lo : lo + step]
        target[rows] += data[rows] * w


def weights_over(
    padded: Box, level: LevelSpec, region: Box, part: Box, xp: ModuleType = np
) -> np.ndarray:
    """Blend weights of the chunk whose padded box is ``padded``, restricted to ``part``.

    Faces of ``padded`` reaching ``region``'s edge get no ramp. The result
    broadcasts against ``part.shape`` (it is an outer product of axis ramps).
    With ``xp`` a device's array module, the product is formed there, in the same
    order (the ramps, a few KiB, are copied over by ``xp.asarray``).

    >>> level = LevelSpec(chunk=(4,), crop=(0,), blend=(1,), blend_mode="linear")
    >>> w = weights_over(Box((3,), (9,)), level, Box((0,), (12,)), Box((3,), (9,)))
    >>> w.round(3).tolist()
    [0.333, 0.667, 1.0, 1.0, 0.667, 0.333]
    """
    low = tuple(a > r for a, r in zip(padded.start, region.start, strict=True))
    high = tuple(b < r for b, r in zip(padded.stop, region.stop, strict=True))
    factors = axis_weights(padded.shape, level.blend, level.blend_mode, low, high)
    rel = part.slices(relative_to=padded)
    weight: np.ndarray = xp.ones((1,) * padded.ndim)
    for axis, factor in enumerate(factors):
        index = [slice(None)] * padded.ndim
        index[axis] = rel[axis]
        weight = weight * xp.asarray(factor[tuple(index)])
    return weight


def at(box: Box, origin: Box) -> tuple[Any, ...]:
    """Index of ``box`` in an array (channel axes first) whose spatial origin is ``origin``.

    >>> at(Box((2, 3), (4, 7)), Box((1, 1), (9, 9)))
    (Ellipsis, slice(1, 3, None), slice(2, 6, None))
    """
    return (Ellipsis, *box.slices(relative_to=origin))


def lowest(dtype: np.dtype) -> Any:
    """The identity of ``max`` in ``dtype``: its smallest value (-inf for floats)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return False
    if dtype.kind == "f":
        return -np.inf
    return np.iinfo(dtype).min


def _add(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))
