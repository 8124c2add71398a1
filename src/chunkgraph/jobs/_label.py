"""``label``: the connected components of a volume's foreground, as two apply flows and a
reduction between them.

::

    src ──> find: dst=None flow, crop 0 ──> Pieces per chunk (count, first voxels, faces,
                                               │   the foreground's digest)
                                               │  (2 x ndim planes per chunk: dropped after
                                               │   the merge, not kept in the report)
                                               v
                 merge, on the driver (_label_merge): faces -> pairs -> components
                 -> table: provisional id -> final id 1..N (scipy's numbering)
                                               │  (N known: dst's dtype checked, dst made)
                                               v
    src ──> relabel: apply flow, crop 0 ──> dst (each chunk labelled again, mapped)

Why the source is read twice rather than provisional ids written and read back: the
relabel pass must read something the size of the volume, and the source (often uint8
or float32) is no larger than the ids (uint32 or uint64); labelling a chunk again
(scipy.ndimage.label, ~100 M voxels/s on a core here) costs less than encoding,
writing and decoding a volume of provisional ids, and nothing but dst is written.

Chunks. Both passes use the same chunks (``label_chunk``): whole storage chunks of the
source (so each is read once a pass and dst's chunks are written whole), grown to about
``LABEL_VOXELS``. Both passes must: a chunk's pieces are what the table is indexed by.

Exactness and order. dst equals ``scipy.ndimage.label`` of the whole foreground with the
same structure, ids and all: components are numbered 1..N by their first voxel in C
order, whatever the chunks, workers or executor, so two runs write the same bytes.

Resume. The find pass writes nothing and is run again; the same source gives the same
table and the same digests of the chunks' foregrounds, so the relabel flow has the same
flow id (it hashes ``fn_kwargs``: the table and the digests with them) and skips the
chunks it wrote before. A source changed in between, by as little as one voxel, gives
other digests, another flow, and a fresh relabel; a chunk that changed during the
relabel pass is refused (``relabel_chunk``). A resume continues only into a dst this
label made: dst carries the label's mark (its source, threshold, connectivity and
chunk: ``_label_dst``), and a dst without it, or with another's, is refused.

Events. Each pass hands its subscribers events that carry its name (``pass_name``:
"find", "relabel"), so a log of both flows says which pass each event is of.

Words. Refusals are ``JobRefusal``s (``_words``): written once, they name the
parameters as Python callers write them, and as the command line's options there.

dtype. The ids are counted, not cast from the source: relabel returns exactly dst's
dtype, under ``cast="same_kind"`` so that apply's check of the source's dtype against
dst's (meant for fns that pass values through) does not refuse an int16 or uint64 source.
Only the component count decides whether a dtype fits.

Refusals (``ConfigError`` before anything is written): a float source without a
threshold, a connectivity outside 1..ndim, a memory limit below one task's need, a
dtype that is not an integer or too small for the components found (checked after the
find pass, before dst is made), a dst that exists without ``resume``, or with
``resume`` one this label did not start.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.flow import ApplyReport, RunOptions, apply
from chunkgraph.jobs._dst_mark import existing_at
from chunkgraph.jobs._label_chunk import find_pieces, relabel_chunk
from chunkgraph.jobs._label_dst import check_dst, check_mark, check_resumed, label_mark, make_dst
from chunkgraph.jobs._label_merge import Merge, merge
from chunkgraph.jobs._run_options import job_options
from chunkgraph.jobs._words import JobRefusal
from chunkgraph.volume import Volume

if TYPE_CHECKING:
    from chunkgraph.execute import Event, Executor, ExecutorKind, Subscriber
    from chunkgraph.volume import BackendName

# Voxels per chunk both passes label (128 x 64 x 64 over 64^3 storage chunks). scipy
# labels ~100 M voxels/s on one core here, so a call takes ~5 ms; larger chunks mean
# fewer faces for the driver to join (6 / edge of the voxels) and more memory per task
# (~17 bytes a voxel of float32 src: the source, the mask, int32 ids, the output). On the
# benchmark's label case 2^19 took the same time as 2^20 and 2^21, with 31 MiB above
# baseline against 57 and 106.
LABEL_VOXELS = 2**19

# Bytes a task holds per voxel of its chunk beside the source's own: the mask (1), scipy's
# int32 ids (4) and the ids mapped into dst's dtype (up to 8).
_TASK_BYTES_PER_VOXEL = 13


@dataclasses.dataclass(frozen=True)
class LabelReport:
    """What one ``label`` call did.

    Attributes:
        path: Where the labels are.
        components: How many components were found (ids 1..components); None for a
            dry run.
        dtype: dst's dtype.
        connectivity: The connectivity used (1: faces only ... ndim: corners too).
        chunk: The chunk both passes labelled by.
        passes: The find pass's ``ApplyReport`` (its ``values``, every chunk's faces,
            dropped after the merge) and the relabel pass's.
        merge_seconds: The time between the passes: the merge, and making dst.
    """

    path: str
    components: int | None
    dtype: np.dtype[Any]
    connectivity: int
    chunk: tuple[int, ...]
    passes: tuple[ApplyReport, ApplyReport]
    merge_seconds: float = 0.0

    @property
    def dry_run(self) -> bool:
        return any(r.dry_run for r in self.passes)

    @property
    def wall_seconds(self) -> float:
        """The whole call's time: both passes, the merge and making dst."""
        return sum(r.wall_seconds for r in self.passes) + self.merge_seconds

    @property
    def bytes_read(self) -> int:
        return sum(r.bytes_read for r in self.passes)

    @property
    def saturated_voxels(self) -> int:
        return 0  # ids are checked to fit dtype before anything is written

    def summary(self, *, plan: bool = True) -> str:
        """What was found and written, pass by pass.

        Args:
            plan: Add each pass's plan.
        """
        found = "" if self.components is None else f"{self.components} component(s), "
        verb = "would write" if self.dry_run else "wrote"
        lines = [
            f"label (connectivity {self.connectivity}): {found}{verb} {self.dtype} ids to "
            f"{self.path} in {self.wall_seconds:.2f} s, chunks {'x'.join(map(str, self.chunk))}"
        ]
        for name, report in zip(("find", "relabel"), self.passes, strict=True):
            tasks = report.tasks_per_level[0] if report.tasks_per_level else 0
            done = report.top_tasks_skipped
            skipped = f", {done} done before" if done else ""
            read = report.bytes_read / 2**20
            lines.append(
                f"  {name}: {tasks} task(s){skipped}, {read:.1f} MiB read, "
                f"{report.wall_seconds:.2f} s"
            )
            if plan and report.plan is not None:
                lines.extend(f"    {line}" for line in report.plan.summary().splitlines()[:2])
            if name == "find":
                lines.append(f"  merge and making dst: {self.merge_seconds:.2f} s")
        return "\n".join(lines)


def label(
    src: Volume | str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    threshold: float | None = None,
    connectivity: int = 1,
    dtype: Any = None,
    chunk: Sequence[int] | None = None,
    backend: BackendName | None = None,
    memory_limit: int | None = None,
    executor: ExecutorKind | Executor | None = None,
    workers: int | None = None,
    resume: bool = False,
    dry_run: bool = False,
    progress: bool = False,
    subscribers: Sequence[Subscriber] = (),
    lock_wait: float = 0.0,
    run: RunOptions | None = None,
) -> LabelReport:
    """Label the connected components of ``src``'s foreground into a new volume at ``dst``.

    Args:
        src: The volume (no channel axes), or a path or URL ``volume.open`` reads.
        dst: The new volume's path or URL; new unless ``resume``.
        threshold: Foreground is ``src > threshold``; None: nonzero voxels (refused for
            a float source, whose noise would all be foreground).
        connectivity: Which neighbours touch: 1 (faces: 6 in 3-d), 2 (and edges: 18),
            up to the number of axes (and corners: 26), as in
            ``scipy.ndimage.generate_binary_structure``.
        dtype: dst's integer dtype; None: uint32, or uint64 past 2^32 - 1 components.
            One too small for the components found is refused before dst is made.
        chunk: The chunk both passes label by, whole storage chunks of the source per
            axis; None: the source's chunk grown to about ``LABEL_VOXELS`` (``label_chunk``).
        backend: dst's backend (``"zarr"``, ``"tensorstore"``, ``"memory"``); None: the
            source's where it writes Zarr v3, else ``"zarr"``.
        memory_limit: Bytes each flow may hold at once; None: half of the memory
            available.
        executor: An executor kind, a Dask scheduler address or an Executor, as for
            ``apply``; None: threads.
        workers: Cores each flow plans for, as for ``apply``; None: the usable cores.
        resume: Continue an interrupted label: the find pass runs again (it writes
            nothing), the relabel pass skips the chunks it wrote.
        dry_run: Plan only: nothing is written or created, and the source is not read;
            the report says what a run would do.
        progress: Show a progress bar on the terminal.
        subscribers: Callables that receive every ``Event`` of the run.
        lock_wait: Seconds to wait for another flow writing the source or dst; 0 (the
            default) refuses at once with ``FlowLockedError``.
        run: The run options as one ``RunOptions`` (intermediates and device are
            refused); a keyword beside it must agree.

    Returns:
        A ``LabelReport``. dst holds ``scipy.ndimage.label``'s ids of the whole
        foreground: 0 background, components 1..N by first voxel in C order.

    Raises:
        ConfigError: For a bad argument, before anything is written.

    >>> from chunkgraph import volume
    >>> v = volume.create("lb-doc", (4, 6), (2, 3), "uint8", backend="memory")
    >>> v.write(v.bounds, np.array([[1, 1, 0, 0, 0, 1]] * 2 + [[0, 0, 0, 1, 1, 1]] * 2, "u1"))
    >>> r = label(v, "lb-doc-out", backend="memory")
    >>> r.components, volume.open("lb-doc-out", backend="memory").read(v.bounds).tolist()
    (2, [[1, 1, 0, 0, 0, 2], [1, 1, 0, 0, 0, 2], [0, 0, 0, 2, 2, 2], [0, 0, 0, 2, 2, 2]])
    >>> volume.remove("lb-doc"); volume.remove("lb-doc-out")
    """
    options = job_options(
        "label", run, memory_limit=memory_limit, executor=executor, workers=workers,
        resume=resume, dry_run=dry_run, progress=progress, subscribers=subscribers,
        lock_wait=lock_wait,
    )  # fmt: skip
    source = volume.open(src) if isinstance(src, str | os.PathLike) else src
    _check_source(source, threshold)
    _check_connectivity(connectivity, source.spatial_ndim)
    wanted = _check_dtype(dtype)
    there, existing = existing_at(dst)
    check_dst(source, dst, existing, options.resume)
    chunk = _check_chunk(chunk, source)
    mark = label_mark(source, threshold, connectivity, chunk)
    check_mark(existing, mark)
    _check_memory(options.memory_limit, source, chunk)
    settings = {"bounds": source.bounds, "threshold": threshold, "connectivity": connectivity}
    find = apply(
        find_pieces,
        source,
        None,
        fn_kwargs=settings,
        chunk_sizes=[chunk],
        expand_bbox=True,
        run=_in_pass("find", options, resume=False),  # it writes nothing to resume
    )
    started = time.perf_counter()
    merged = (
        None if options.dry_run else merge(find.values or {}, source.bounds, chunk, connectivity)
    )
    find = dataclasses.replace(find, values=None)  # every chunk's faces: not kept past the merge
    out = _out_dtype(merged, wanted, source)
    check_resumed(existing, source, out)
    target = make_dst(source, dst, out, backend, options.dry_run, mark)
    table = _table(merged, out, source.bounds.shape, chunk)
    between = time.perf_counter() - started
    try:
        kwargs = {**settings, "chunk": chunk, **table}
        relabel = _relabel(source, target, kwargs, chunk, _in_pass("relabel", options))
    except ConfigError:
        if not there and not options.dry_run:  # refused before its tasks: nothing written
            volume.remove(target.path, storage_options=target.storage_options)
        raise
    finally:
        if options.dry_run:
            volume.remove(target.path)
    components = None if merged is None else merged.components
    return LabelReport(
        target.path if not options.dry_run else os.fspath(dst),
        components, out, connectivity, chunk, (find, relabel), between,
    )  # fmt: skip


def _relabel(
    source: Volume,
    target: Volume,
    kwargs: dict[str, Any],
    chunk: tuple[int, ...],
    options: RunOptions,
) -> ApplyReport:
    """The relabel flow: each chunk labelled again and mapped through the table."""
    return apply(
        relabel_chunk,
        source,
        target,
        fn_kwargs=kwargs,
        chunk_sizes=[chunk],
        expand_bbox=True,
        skip_intermediates=True,  # chunks of whole dst chunks, no overlap: write once
        # fn returns exactly dst's dtype (the table's): the ids are counted, not cast
        # from src, so the default rule's check of src's dtype against dst's is moot.
        cast="same_kind",
        run=options,
    )


def _in_pass(name: str, options: RunOptions, **changes: Any) -> RunOptions:
    """``options`` for one pass: its subscribers get events that carry the pass's name."""
    subscribers = tuple(_PassEvents(name, s) for s in options.subscribers)
    return dataclasses.replace(options, subscribers=subscribers, **changes)


@dataclasses.dataclass(frozen=True)
class _PassEvents:
    """A subscriber of one pass: each event handed on with ``pass_name`` set."""

    name: str
    subscriber: Subscriber

    def __call__(self, event: Event) -> None:
        self.subscriber(dataclasses.replace(event, pass_name=self.name))


def label_chunk(storage: Sequence[int], extent: Sequence[int]) -> tuple[int, ...]:
    """The chunk both passes label by: ``storage`` (the source's chunk) doubled on its
    shortest axis (the first of equals) that is shorter than the volume, until it holds
    ``LABEL_VOXELS``.

    >>> label_chunk((64, 64, 64), (256, 512, 512)), label_chunk((64, 64, 64), (64, 64, 1000))
    ((128, 64, 64), (64, 64, 128))
    """
    chunk = list(storage)
    while math.prod(chunk) < LABEL_VOXELS:
        growable = [k for k in range(len(chunk)) if chunk[k] < extent[k]]
        if not growable:
            break
        axis = min(growable, key=lambda k: chunk[k])
        chunk[axis] *= 2
    return tuple(chunk)


def _check_chunk(chunk: Sequence[int] | None, source: Volume) -> tuple[int, ...]:
    """The chunk given, checked (whole storage chunks: each read once, dst's written
    whole), or ``label_chunk``'s."""
    storage = source.spatial_chunks
    if chunk is None:
        return label_chunk(storage, source.bounds.shape)
    given = tuple(chunk) if isinstance(chunk, Sequence) else ()
    if len(given) != len(storage) or not all(
        isinstance(c, int | np.integer) and c > 0 and c % s == 0
        for c, s in zip(given, storage, strict=True)
    ):
        raise JobRefusal(
            "{chunk} must be {n} positive multiples of the source's chunks {storage}, one "
            "per axis, got {given!r}; e.g. {example}, or leave it out",
            field="chunk", n=len(storage), storage=storage, given=chunk,
            example=tuple(2 * s for s in storage),
        )  # fmt: skip
    return tuple(int(c) for c in given)


def _table(
    merged: Merge | None, dtype: np.dtype[Any], extent: Sequence[int], chunk: Sequence[int]
) -> dict[str, np.ndarray[Any, Any]]:
    """The relabel pass's arrays (``relabel_chunk``'s keywords); zeros for a dry run."""
    if merged is None:
        grid = tuple(-(-n // c) for n, c in zip(extent, chunk, strict=True))
        zeros = np.zeros(grid, np.int64)
        return {
            "offsets": zeros,
            "counts": zeros,
            "digests": zeros.astype(np.uint64),
            "table": np.zeros(1, dtype),
        }
    return {
        "offsets": merged.offsets,
        "counts": merged.counts,
        "digests": merged.digests,
        "table": merged.table.astype(dtype),
    }


def _check_memory(limit: int | None, source: Volume, chunk: Sequence[int]) -> None:
    """A memory limit given holds one task: its chunk of the source and what labelling
    it takes (``_TASK_BYTES_PER_VOXEL``)."""
    if limit is None:
        return
    need = math.prod(chunk) * (source.dtype.itemsize + _TASK_BYTES_PER_VOXEL)
    if limit < need:
        raise JobRefusal(
            "{memory_limit} {limit} bytes is below what one label task holds: about {need} "
            "bytes ({mib:.1f} MiB) for a chunk of {size} {dtype} voxels; give at least "
            "that, or a smaller {chunk} (whole storage chunks {storage})",
            field="memory_limit", limit=limit, need=need, mib=need / 2**20,
            size="x".join(map(str, chunk)), dtype=source.dtype, storage=source.spatial_chunks,
        )  # fmt: skip


def _check_source(source: Volume, threshold: float | None) -> None:
    if source.channel_shape:
        raise ConfigError(
            f"src {source.path!r} has channel axes {source.channel_shape}; label takes a "
            "volume of spatial axes only: label one channel (transfer it out) at a time",
            field="src",
        )
    if threshold is not None:
        if not isinstance(threshold, int | float | np.number) or isinstance(threshold, bool):
            raise ConfigError(
                f"threshold must be a number (foreground is src > threshold), got {threshold!r}",
                field="threshold",
            )
        return
    if source.dtype.kind not in "biu":
        raise JobRefusal(
            "src {src!r} is {dtype} and no threshold was given: without one the foreground "
            "is every nonzero voxel, which in a float volume is nearly all of it; give "
            "{threshold}, foreground being src > T, or label an integer or bool mask",
            field="threshold", src=source.path, dtype=source.dtype,
        )  # fmt: skip


def _check_connectivity(connectivity: Any, ndim: int) -> None:
    if isinstance(connectivity, bool) or not isinstance(connectivity, int | np.integer):
        valid = False
    else:
        valid = bool(1 <= connectivity <= ndim)
    if not valid:
        counts = ", ".join(
            f"{k} ({sum(_far(ndim, j) for j in range(1, k + 1))} neighbours)"
            for k in range(1, ndim + 1)
        )
        raise JobRefusal(
            "{connectivity} must be one of {counts} for a volume of {ndim} axes, got "
            "{given!r}: 1 joins voxels that share a face, {ndim} also those that share only "
            "an edge or a corner",
            field="connectivity", counts=counts, ndim=ndim, given=connectivity,
        )  # fmt: skip


def _far(ndim: int, changed: int) -> int:
    """Neighbours that differ on exactly ``changed`` axes."""
    return int(math.comb(ndim, changed) * 2**changed)


def _check_dtype(dtype: Any) -> np.dtype[Any] | None:
    if dtype is None:
        return None
    try:
        wanted: np.dtype[Any] = np.dtype(dtype)
    except TypeError as err:
        raise JobRefusal(
            "{dtype} {given!r} is not a numpy dtype: {err}", field="dtype", given=dtype, err=err
        ) from err
    if wanted.kind not in "iu":
        raise JobRefusal(
            "{dtype} {wanted} cannot hold label ids; give an integer dtype (uint32, uint64, "
            "or a narrower one the components fit), or leave it out",
            field="dtype", wanted=wanted,
        )  # fmt: skip
    return wanted


def _out_dtype(merged: Merge | None, wanted: np.dtype[Any] | None, source: Volume) -> np.dtype[Any]:
    """dst's dtype: ``wanted`` if the components fit it, else a ConfigError; without
    one, uint32 unless more components than it holds."""
    if merged is None:
        return wanted or np.dtype("uint32")
    if wanted is None:
        return np.dtype("uint32" if merged.components <= np.iinfo("uint32").max else "uint64")
    largest = int(np.iinfo(wanted).max)
    if merged.components > largest:
        raise JobRefusal(
            "{dtype} {wanted} holds ids up to {largest}, and {src!r} has {components} "
            "components; give a wider integer dtype (uint32, uint64) or leave {dtype} out "
            "(nothing was written)",
            field="dtype", wanted=wanted, largest=largest, src=source.path,
            components=merged.components,
        )  # fmt: skip
    return wanted
