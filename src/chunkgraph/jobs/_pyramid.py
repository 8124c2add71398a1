"""``downsample``: pyramid levels of a volume, each an apply flow at a coarser resolution.

Where the levels go (``format``): a level of an OME-Zarr image or of a precomputed
volume gets its new levels in that image (``volume.add_level``: listed in its
``multiscales`` or its ``info``'s scales); a plain volume gets Zarr v3 volumes beside it
(``format="zarr3"``). Level ``k`` (``vol.zarr`` -> ``vol_s1.zarr``, ``vol_s2.zarr``, ...)
has resolution ``resolution * factor ** k``, offset
``offset / factor ** k`` and shape ``ceil(shape / factor)`` of level ``k - 1``,
written by ``apply`` with a fixed function (``_block_reduce``) whose input,
level ``k - 1``, is ``factor`` times finer: the flow's resolution rule reads each
output chunk's blocks whole, and everything a flow is (automatic sizes aligned to
both levels' storage chunks, done markers, ``resume``, executors, progress,
memory budget) comes with it. Level ``k`` reads level ``k - 1`` once, so the source
is read once and each level above it once: ``1 / prod(factor)`` of the level below.

Partial blocks at the far edge are reduced over the voxels present: the function
gets its chunk's ``box`` and the source's bounds, and crops the fill that reads past
the edge return before reducing.

A task's read of the level below reduces each storage chunk as soon as it is decoded,
where the chunks allow it (``_fused_read`` says when and why not): the task then holds
the level's voxels, never the region at the source's resolution, and writes the same bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import posixpath
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph._util import usable_cores
from chunkgraph.flow import ApplyReport, RunOptions, apply, claimed, refuse_if_written
from chunkgraph.flow.plan import resolve_memory_limit
from chunkgraph.geometry import Box
from chunkgraph.jobs._block_reduce import METHODS, block_reduce, reduced_shape
from chunkgraph.jobs._fused_read import ReducedRead, read_reduced
from chunkgraph.jobs._pyramid_dst import check_image_levels, check_levels, level_marks
from chunkgraph.jobs._run_options import job_options, planning
from chunkgraph.jobs._words import memory_refusal
from chunkgraph.volume import Volume, path_to_open, plain_zarr_backend, shards_by_write_chunks

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber
    from chunkgraph.volume import BackendName


@dataclasses.dataclass(frozen=True)
class DownsampleReport:
    """What one ``downsample`` call did: one ``ApplyReport`` per pass, finest first.

    Attributes:
        paths: ``paths[k]``: where level ``k + 1`` is.
        factor: The factor per spatial axis, per level.
        method: The reduction used (``"mean"``, ``"mode"``, ...).
        passes: One ``ApplyReport`` per pass, finest first.
        levels_per_pass: ``levels_per_pass[i]``: how many levels pass ``i`` wrote from
            one read of its input (the first level as the flow's dst, the others from it
            in memory).
    """

    paths: tuple[str, ...]
    factor: tuple[int, ...]
    method: str
    passes: tuple[ApplyReport, ...]
    levels_per_pass: tuple[int, ...]

    @property
    def dry_run(self) -> bool:
        return any(r.dry_run for r in self.passes)

    @property
    def wall_seconds(self) -> float:
        return sum(r.wall_seconds for r in self.passes)

    @property
    def bytes_read(self) -> int:
        return sum(r.bytes_read for r in self.passes)

    @property
    def saturated_voxels(self) -> int:
        return sum(r.saturated_voxels for r in self.passes)

    def summary(self, *, plan: bool = True) -> str:
        """What was written, pass by pass.

        Args:
            plan: Add each pass's plan.
        """
        verb = "would write" if self.dry_run else "wrote"
        lines = [
            f"downsample ({self.method}, factor {'x'.join(map(str, self.factor))}): {verb} "
            f"{len(self.paths)} level(s) in {len(self.passes)} pass(es), "
            f"{self.wall_seconds:.2f} s"
        ]
        first = 0
        for report, count in zip(self.passes, self.levels_per_pass, strict=True):
            tasks = report.tasks_per_level[0] if report.tasks_per_level else 0
            done = report.top_tasks_skipped
            skipped = f", {done} done before" if done else ""
            which = f"level {first + 1}" if count == 1 else f"levels {first + 1}-{first + count}"
            lines.append(f"  {which}: {tasks} task(s){skipped}, {_reads(report)}")
            lines.extend(f"    {path}" for path in self.paths[first : first + count])
            if plan and report.plan is not None:
                lines.extend(f"    {line}" for line in report.plan.summary().splitlines()[:3])
            first += count
        return "\n".join(lines)


def _reads(report: ApplyReport) -> str:
    """What a pass read, or for a dry run (which reads nothing) what it would read."""
    read, amplification = report.bytes_read, report.read_amplification
    estimate = report.estimate
    if report.dry_run and estimate is not None:  # through the cache the plan sizes
        expected = estimate.expected_bytes_to_read
        read = estimate.bytes_to_read if expected is None else expected
        amplification = read / estimate.needed_bytes if estimate.needed_bytes else 0.0
        return f"would read {read / 2**20:.1f} MiB (predicted amplification {amplification:.2f})"
    return f"read {read / 2**20:.1f} MiB (amplification {amplification:.2f})"


# Bytes a fused pass's task holds per byte of its read: the read itself, and the block
# reductions' temporaries (an accumulator or sorted rows, and the levels above).
FUSED_WORK_COPIES = 4

# Each level above a pass's dst is written from memory by the task that made it; fn
# opens those volumes once per process (the flow passes their places, not the volumes:
# the flow id is made from fn's keywords and must not change between runs). A place
# names the level's shape and dtype too, so a volume made again at the same path with
# other ones is opened afresh; memory volumes are looked up each time (a new one at the
# same name is another array).
_OPENED: dict[tuple[Any, ...], Volume] = {}


def _opened(where: tuple[Any, ...]) -> Volume:
    found = _OPENED.get(where)
    if found is None:
        path, scale, backend = where[:3]
        found = volume.open(path, "r+", scale=scale, backend=backend)
        if not found.location.in_process:
            _OPENED[where] = found
    return found


def downsample_chunk(
    data: np.ndarray[Any, Any] | ReducedRead,
    box: Box,
    *,
    factor: tuple[int, ...],
    method: str,
    src_start: tuple[int, ...],
    src_stop: tuple[int, ...],
    above: tuple[tuple[Any, ...], ...] = (),
) -> np.ndarray:
    """The level's voxels over ``box`` (level voxels) from ``data``, the level below over
    ``box * factor``; voxels of ``data`` outside ``[src_start, src_stop)`` are fill read
    past the edge and take no part. ``above``: the places of the levels above this one
    that this pass writes too, each from the one below it, over ``box / factor ** j``
    (the pass's top chunks cover their chunks whole: ``fused_pass``). ``data`` may come
    already reduced, chunk by chunk as it was read (``read_input``: ``_fused_read``)."""
    spatial = len(factor)
    present = [
        max(0, min(b1 * f, stop) - b0 * f)
        for b0, b1, f, stop in zip(box.start, box.stop, factor, src_stop, strict=True)
    ]
    # The box never starts below the source (the level's bounds are the source's / factor).
    assert all(b * f >= s for b, f, s in zip(box.start, factor, src_start, strict=True))
    reduced: np.ndarray
    if isinstance(data, ReducedRead):  # the level's voxels, partial blocks included
        kept: tuple[Any, ...] = (
            Ellipsis,
            *(slice(0, -(-n // f)) for n, f in zip(present, factor, strict=True)),
        )
        reduced = data.level[kept]
    else:
        index: tuple[Any, ...] = (Ellipsis, *(slice(0, n) for n in present))
        reduced = block_reduce(data[index], factor, method)
    level = reduced
    start = box.start
    for where in above:
        # Only the voxels present go up: a partial block at the edge stays partial.
        level = block_reduce(level, factor, method)
        start = tuple(b // f for b, f in zip(start, factor, strict=True))
        target = _opened(where)
        stop = tuple(b + n for b, n in zip(start, level.shape[-spatial:], strict=True))
        if all(a < b for a, b in zip(start, stop, strict=True)):
            target.write(Box(start, stop), level)
    if reduced.shape[-spatial:] == box.shape:
        return reduced
    # A box past the level's edge (an expanded bbox): its writes are clipped there.
    out = np.zeros(reduced.shape[:-spatial] + box.shape, reduced.dtype)
    written: tuple[Any, ...] = (Ellipsis, *(slice(0, n) for n in reduced.shape[-spatial:]))
    out[written] = reduced
    return out


# The flow reads downsample_chunk's input through it: each chunk reduced as it is decoded.
downsample_chunk.read_input = read_reduced  # type: ignore[attr-defined]


def level_paths(src_path: str, levels: int, dst: str | None) -> list[str]:
    """Where each level goes: ``dst`` with ``{level}`` in it, or ``<stem>_s<k><suffix>``
    beside the source."""
    if dst is not None:
        if "{level}" not in dst:
            raise ConfigError(
                f"dst must contain '{{level}}' so that each level has its own path, got "
                f"{dst!r}; e.g. dst='pyramid/s{{level}}.zarr'",
                field="dst",
            )
        return [dst.format(level=k) for k in range(1, levels + 1)]
    path = src_path.rstrip("/")
    stem, suffix = os.path.splitext(path)
    return [f"{stem}_s{k}{suffix}" for k in range(1, levels + 1)]


def _beside_what(source: Volume) -> str:
    """The path Zarr v3 levels are named beside: the source's, or for a level of a
    multiscale image (a precomputed layer's scale, an OME-Zarr image's array) the image's,
    so that they go next to it, never inside it where its metadata does not list them."""
    path = source.path.rstrip("/")
    return posixpath.dirname(path) if source.format.multiscale else path


def check_downsample(
    src: Volume, factor: object, levels: object, method: object
) -> tuple[int, ...]:
    """The factor per spatial axis; a ``ConfigError`` naming the field for any bad argument."""
    nd = src.spatial_ndim
    if isinstance(factor, bool) or not isinstance(factor, int | Sequence):
        raise ConfigError(
            f"factor must be a positive int or one per spatial axis ({nd}), got {factor!r}",
            field="factor",
        )
    raw = (factor,) * nd if isinstance(factor, int) else tuple(factor)
    if len(raw) != nd or not all(
        isinstance(f, int | np.integer) and not isinstance(f, bool) and f >= 1 for f in raw
    ):
        raise ConfigError(
            f"factor must be {nd} positive integers (one per spatial axis of {src.path!r}), "
            f"got {factor!r}; e.g. factor={(2,) * nd}",
            field="factor",
        )
    factors = tuple(int(f) for f in raw)
    if all(f == 1 for f in factors):
        raise ConfigError(
            f"factor {factors} leaves every axis as it is; give at least one axis a factor "
            f"of 2 or more, e.g. {(2,) * nd}",
            field="factor",
        )
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ConfigError(f"levels must be an int >= 1, got {levels!r}", field="levels")
    if method not in METHODS:
        raise ConfigError(
            f"method {method!r} is not one of {', '.join(METHODS)}: mean for intensities, "
            "mode for labels, stride to take every k-th voxel",
            field="method",
        )
    if method == "mode" and not np.issubdtype(src.dtype, np.integer):
        raise ConfigError(
            f"method 'mode' is for integer labels, and {src.path!r} is {src.dtype}: the most "
            "frequent float in a block is rarely meant; use mean, median, max, min or stride",
            field="method",
        )
    return factors


def default_method(dtype: Any) -> str:
    """How a volume of ``dtype`` is downsampled unless told: 32- and 64-bit integers hold
    labels in this field (a segmentation's ids), and a mean of ids makes ids that exist
    nowhere, so mode; images (8- and 16-bit integers, floats) take the mean.

    >>> [default_method(t) for t in ("uint8", "uint16", "float32", "uint32", "int64")]
    ['mean', 'mean', 'mean', 'mode', 'mode']
    """
    kind = np.dtype(dtype)
    return "mode" if kind.kind in "iu" and kind.itemsize >= 4 else "mean"


def downsample(
    src: Volume | str | os.PathLike[str],
    *,
    factor: int | Sequence[int] = 2,
    levels: int = 1,
    method: str | None = None,
    dst: str | None = None,
    format: str | None = None,
    memory_limit: int | None = None,
    executor: ExecutorKind | Executor | None = None,
    workers: int | None = None,
    resume: bool = False,
    dry_run: bool = False,
    progress: bool = False,
    subscribers: Sequence[Subscriber] = (),
    lock_wait: float = 0.0,
    run: RunOptions | None = None,
) -> DownsampleReport:
    """Write ``levels`` pyramid levels of ``src``, each ``factor`` coarser than the last.

    Each level is an ``apply`` flow (several levels may come from one read of their
    input: a pass), resumable with ``resume=True``.

    Args:
        src: The volume, or a path or URL ``volume.open`` reads.
        factor: How many voxels of a level one voxel of the next spans: an int for
            every spatial axis, or one per spatial axis.
        levels: How many levels to write (>= 1).
        method: ``"mean"`` (intensities), ``"median"``, ``"mode"`` (integer labels),
            ``"max"``, ``"min"`` or ``"stride"``; ``_block_reduce`` states each one's
            rounding and ties. None: ``default_method`` of the source's dtype, mode for
            labels and mean otherwise.
        dst: With ``format="zarr3"``, the new volumes' path with ``{level}`` in it;
            None: beside ``src`` (``vol_s1.zarr``, ...). Refused with the other formats,
            whose levels go into the source's image.
        format: ``"ome-zarr"`` or ``"precomputed"`` (new levels in the source's image),
            or ``"zarr3"`` (plain volumes at ``dst``); None: the source's own format for
            a level of an image when no ``dst`` is given, else ``"zarr3"``.
        memory_limit: Bytes each flow may hold at once; None: half of the memory
            available.
        executor: An executor kind, a Dask scheduler address or an Executor, as for
            ``apply``; None: threads.
        workers: Cores each flow plans for, as for ``apply``; None: the usable cores.
        resume: Continue an interrupted run: each flow skips what it finished.
        dry_run: Plan only: nothing is read, written or created; the report says what
            a run would do.
        progress: Show a progress bar on the terminal.
        subscribers: Callables that receive every ``Event`` of the run.
        lock_wait: Seconds to wait for another flow writing what this one reads or
            writes; 0 (the default) refuses at once with ``FlowLockedError``.
        run: The run options as one ``RunOptions`` (retries and timeout too;
            intermediates and device are refused); a keyword beside it must agree.

    Returns:
        A ``DownsampleReport``: the paths written and each pass's ``ApplyReport``.

    Raises:
        ConfigError: Before anything is made, for a bad factor, level count, method,
            format or dst, or a plan the memory limit refuses.
        FlowLockedError: When another flow is writing the source.

    >>> from chunkgraph import volume
    >>> v = volume.create("ds-doc", (8, 6), (4, 4), "uint8", backend="memory")
    >>> v.write(v.bounds, np.arange(48, dtype="uint8").reshape(8, 6))
    >>> r = downsample(v, factor=2, levels=2, method="max", dst="ds-doc-{level}")
    >>> volume.open("ds-doc-2", backend="memory").read(Box((0, 0), (2, 2))).tolist()
    [[21, 23], [45, 47]]
    >>> for p in ("ds-doc", *r.paths): volume.remove(p)
    """
    options = job_options(
        "downsample", run, memory_limit=memory_limit, executor=executor, workers=workers,
        resume=resume, dry_run=dry_run, progress=progress, subscribers=subscribers,
        lock_wait=lock_wait,
    )  # fmt: skip
    source = volume.open(src) if isinstance(src, str | os.PathLike) else src
    if method is None:
        method = default_method(source.dtype)
    factors = check_downsample(source, factor, levels, method)
    into = output_format(source, format, dst)
    paths = level_paths(_beside_what(source), levels, dst) if into == "zarr3" else []
    marks = level_marks(source, levels, factors, method)
    check_levels(paths, marks, options.resume)
    if into != "zarr3":
        check_image_levels(source, factors, levels, options.resume)
    pyramid = _Pyramid(source, factors, method, into, tuple(paths), tuple(marks))
    if not options.dry_run:
        # Every pass planned first over stand-ins in memory: what the memory limit or the
        # sizes refuse is refused before a level is made or listed in an image's metadata.
        _write(pyramid, planning(options))
        # A source another flow is writing is refused before a level is made or listed
        # (each pass's apply checks again, under its locks).
        refuse_if_written({"src": (source, source.bounds)}, options.lock_wait)
    return _write(pyramid, options)


@dataclasses.dataclass(frozen=True)
class _Pyramid:
    """What one downsample writes (``downsample``'s arguments, checked): the levels'
    paths (Zarr v3 levels; none for levels added to the source's image) and marks."""

    source: Volume
    factors: tuple[int, ...]
    method: str
    into: str
    paths: tuple[str, ...]
    marks: tuple[str, ...]


def _write(pyramid: _Pyramid, options: RunOptions) -> DownsampleReport:
    """Make the levels (stand-ins in memory for a dry run) and write them, pass by pass."""
    source, factors, method, into = pyramid.source, pyramid.factors, pyramid.method, pyramid.into
    dry_run, lock_wait, levels = options.dry_run, options.lock_wait, len(pyramid.marks)
    paths = list(pyramid.paths)
    backend: BackendName = "memory" if dry_run else plain_zarr_backend(source.backend)
    if dry_run:  # nothing is created on disk: the levels are planned over empty stand-ins
        paths_made = [f"dry-run-{os.getpid()}-{id(source)}-{k}" for k in range(levels)]
    else:
        paths_made = paths or [""] * levels
    reports: list[ApplyReport] = []
    counts: list[int] = []
    try:
        marks = ("",) * levels if dry_run else pyramid.marks  # stand-ins: no mark
        made = _make_levels(source, paths_made, paths, factors, backend, into, marks, dry_run)
        if into != "zarr3":
            paths.extend(
                f"{source.path} (level +{k})" if dry_run else level.path
                for k, level in enumerate(made, start=1)
            )
        cores = options.workers or usable_cores()
        limit, _ = resolve_memory_limit(options.memory_limit)
        below, done = source, 0
        while done < levels:
            count, top = fused_pass(below, made[done:], factors, cores, limit)
            first, above = made[done], made[done + 1 : done + count]
            with _claimed_levels(above, below, lock_wait, skip=dry_run):
                report = _apply_refusing_in_own_words(
                    apply,
                    downsample_chunk,
                    below,
                    first,
                    fn_kwargs={
                        "factor": factors,
                        "method": method,
                        "src_start": below.bounds.start,
                        "src_stop": below.bounds.stop,
                        "above": tuple(_place(v) for v in above),
                    },
                    chunk_sizes="auto" if top is None else [top],
                    # A fused pass's top chunk covers the first level's chunks whole:
                    # straight to it, not through temporary layers written, read back
                    # and written again (the automatic plan decides this by itself).
                    skip_intermediates=None if top is None else True,
                    bbox=first.bounds,
                    expand_bbox=True,
                    # Every block reduction returns the level's own dtype.
                    cast="safe",
                    run=options,
                )
            reports.append(report)
            counts.append(count)
            below, done = made[done + count - 1], done + count
    finally:
        if dry_run:
            for path in paths_made:
                if Path(path).name.startswith("dry-run-"):
                    with contextlib.suppress(Exception):  # not made: nothing to remove
                        volume.remove(path)
    return DownsampleReport(tuple(paths), factors, method, tuple(reports), tuple(counts))


# What a downsample refused for its memory limit can change besides the limit (``_words``).
MEMORY_ADVICE = "; each task holds whole chunks of the level it writes and of the level below"


def _apply_refusing_in_own_words(apply: Any, *args: Any, **kwargs: Any) -> ApplyReport:
    """``apply``, whose refusal for the memory limit names downsample's options."""
    try:
        report: ApplyReport = apply(*args, **kwargs)
    except ConfigError as err:
        raise memory_refusal(err, MEMORY_ADVICE) from err.__cause__
    return report


def _make_levels(
    source: Volume,
    paths: Sequence[str],
    real: Sequence[str],
    factor: tuple[int, ...],
    backend: BackendName,
    into: str,
    marks: Sequence[str],
    dry_run: bool,
) -> list[Volume]:
    """Each level, from the one below: a volume at its path with its mark (Zarr v3
    levels, and every stand-in of a dry run), or a level added to the source's image;
    ``real``: the Zarr v3 levels' own paths (none for levels added to the image), named in
    messages where a dry run's stand-ins have made-up ones."""
    names = [repr(p) for p in real] or [f"a new scale beside {source.path!r}"] * len(paths)
    made: list[Volume] = []
    below = source
    for k, path in enumerate(paths):
        _check_offset(below, factor, k, repr(source.path) if k == 0 else names[k - 1])
        if into == "zarr3" or dry_run:
            level = _create_level(volume, below, path, factor, backend, marks[k])
        else:
            level = volume.add_level(
                below, factor, exist_ok=True, **_level_chunks(below), chunks=below.read_chunks
            )
        made.append(level)
        below = level
    return made


def _place(level: Volume) -> tuple[Any, ...]:
    """Where fn reopens a level: a multiscale image's root and scale, or the path and
    its backend; then its shape and dtype (see ``_OPENED``)."""
    reach = level.level_of
    what = (level.shape, level.dtype.str)
    if reach is None:
        return (level.path, None, level.backend, *what)
    root = reach[0]
    return (path_to_open(root, level.backend), reach[1], None, *what)


@contextlib.contextmanager
def _claimed_levels(
    levels: Sequence[Volume], below: Volume, wait: float, *, skip: bool
) -> Iterator[None]:
    """The levels a pass's fn writes besides apply's dst, claimed as apply claims its dst
    (``_dst_lock``): no other flow writes them meanwhile. ``skip``: a dry run, no claims."""
    about = {"flow": f"downsample of {below.path}", "fn": "downsample_chunk"}
    with contextlib.ExitStack() as claims:
        for level in () if skip else levels:
            claims.enter_context(claimed(level, level.bounds, about, wait))
        yield


def fused_pass(
    below: Volume, levels: Sequence[Volume], factor: tuple[int, ...], cores: int, limit: int
) -> tuple[int, tuple[int, ...] | None]:
    """How many of ``levels`` one pass over ``below`` writes, and its top chunk (in the
    first level's voxels; None: one level, sizes planned by the flow).

    Writing ``m`` levels from one read needs a top chunk that covers each level's chunk
    whole: per axis a multiple of level ``j``'s chunk times ``factor ** j`` (j = 0 ..
    m - 1) and of ``below``'s chunk over the factor (reads aligned to its chunks). Worked:
    64^3 chunks everywhere, factor 2: two levels need 128 (256^3 read), three 256 (512^3).
    A multiple past the level's extent is clipped to it (one task across that axis), so a
    task never reads more than the level below: chunks clipped to small levels (70 over
    250 voxels: 63 at level 2) have common multiples many times the volume (630).
    The most levels are fused whose top chunk keeps one task per core within the budget
    (``FUSED_WORK_COPIES`` x the read each) and still makes a task per core, or as many
    tasks as the first level alone makes when that is fewer (a small level's pass is one
    task anyway: the levels above it come with it, saving a pass and a read)."""
    best: tuple[int, tuple[int, ...] | None] = (1, None)
    first = levels[0]
    extent = first.bounds.shape
    itemsize = below.dtype.itemsize * math.prod(below.channel_shape)
    grain = [c // f if c % f == 0 else c for c, f in zip(below.spatial_chunks, factor, strict=True)]
    alone = _tasks(extent, _fused_top(extent, grain, levels[:1], factor))
    for m in range(2, len(levels) + 1):
        top = _fused_top(extent, grain, levels[:m], factor)
        read = math.prod(t * f for t, f in zip(top, factor, strict=True)) * itemsize
        if cores * FUSED_WORK_COPIES * read > limit or _tasks(extent, top) < min(cores, alone):
            break
        best = (m, top)
    return best


def _fused_top(
    extent: tuple[int, ...], grain: list[int], levels: Sequence[Volume], factor: tuple[int, ...]
) -> tuple[int, ...]:
    """The smallest top chunk (first level's voxels) covering each of ``levels``' chunks
    whole and aligned to ``grain`` (the level below's chunks over the factor)."""
    top = []
    for axis, n in enumerate(extent):
        step = math.lcm(
            grain[axis],
            *(lv.spatial_chunks[axis] * factor[axis] ** j for j, lv in enumerate(levels)),
        )
        # A step past the extent (an lcm of chunks clipped to small levels can be many
        # times the volume) means one task across the axis, which covers every level's
        # chunks whole whatever their alignment: the extent itself is enough.
        top.append(min(step, n))
    return tuple(top)


def _tasks(extent: tuple[int, ...], top: tuple[int, ...]) -> int:
    return math.prod(-(-n // t) for n, t in zip(extent, top, strict=True))


# Zarr v3 volumes beside the source, named by its path prefix or by the table's name for
# it (``zarr3``, ``zarr``: one format, spelled either way); or new levels in a multiscale image.
ZARR3_NAMES = volume.format_of("zarr").prefixes
OUTPUT_FORMATS = (*ZARR3_NAMES, *(f.name for f in volume.FORMATS if f.multiscale))


def output_format(source: Volume, format: object, dst: str | None) -> str:
    """Where the levels go (see the module docstring): ``"zarr3"`` for any of
    ``ZARR3_NAMES``, or a multiscale format's name; or a ``ConfigError``."""
    own = source.backend if source.format.multiscale else "zarr3"
    if format is None:
        format = own if dst is None else "zarr3"
    if format in ZARR3_NAMES:
        format = "zarr3"
    if format not in OUTPUT_FORMATS:
        raise ConfigError(
            f"format {format!r} is not one of {', '.join(OUTPUT_FORMATS)} (default: the "
            "source's own: new levels in an OME-Zarr image or a precomputed volume, Zarr v3 "
            "volumes beside a plain one)",
            field="format",
        )
    multiscale = format != "zarr3"
    if multiscale and format != own:
        raise ConfigError(
            f"format {format!r} adds levels to the source's own {format} image, and "
            f"{source.path!r} is a {source.backend} volume: copy it into one first "
            "(volume.create_multiscale, then transfer), or use format='zarr3'",
            field="format",
        )
    if multiscale and dst is not None:
        raise ConfigError(
            f"dst names where Zarr v3 levels go; {format} levels go into the source's image, "
            "so leave dst out (or use format='zarr3')",
            field="dst",
        )
    return str(format)


def _level_chunks(below: Volume) -> dict[str, Any]:
    """A precomputed level's shard extent, passed on only when ``below`` is sharded: its
    write chunks a multiple of its read chunks. A level smaller than its chunk has its
    chunks clipped to its shape, which is no shard (and no multiple)."""
    write, read = below.spatial_chunks, below.read_chunks
    sharded = (
        shards_by_write_chunks(below.backend)
        and write != read
        and all(w % r == 0 for w, r in zip(write, read, strict=True))
    )
    return {"write_chunks": write} if sharded else {}


def _check_offset(below: Volume, factor: tuple[int, ...], k: int, name: str) -> None:
    """Level ``k + 1`` can be made from ``below`` (level ``k``, called ``name``)."""
    uneven = [i for i, (o, f) in enumerate(zip(below.offset, factor, strict=True)) if o % f]
    if uneven:
        what = name if k == 0 else f"level {k} ({name})"
        fewer = f", or fewer levels (at most {k})" if k else ""
        raise ConfigError(
            f"{what} starts at offset {below.offset}, which is no multiple of factor "
            f"{factor} on axis {uneven[0]}: level {k + 1}'s voxels would not line up with "
            f"the blocks; use a factor dividing the offset{fewer}",
            field="factor",
        )


def _create_level(
    volume: Any, below: Volume, path: str, factor: tuple[int, ...], backend: BackendName,
    mark: str,
) -> Volume:  # fmt: skip
    """Level ``below / factor``: same chunks (clipped to its shape), dtype and fill, and
    the downsample's ``mark`` (``_pyramid_dst``)."""
    shape = reduced_shape(below.shape[below.ndim - below.spatial_ndim :], factor)
    chunks = tuple(min(c, n) for c, n in zip(below.spatial_chunks, shape, strict=True))
    resolution = tuple(r * f for r, f in zip(below.resolution, factor, strict=True))
    level: Volume = volume.create(
        path,
        below.channel_shape + shape,
        below.channel_shape + chunks,
        below.dtype,
        fill_value=below.fill_value,
        backend=backend,
        offset=tuple(o // f for o, f in zip(below.offset, factor, strict=True)),
        spatial_ndim=below.spatial_ndim,
        resolution=resolution,
        exist_ok=True,
        made_by=mark,
    )
    return level
