"""``transfer``: copy, rechunk or convert a volume, as an apply flow with an identity function.

The destination is made with the chunks (and shards) asked for, the source's
resolution and the bbox's start as its offset, so global coordinates carry over.
The flow's automatic sizes then align the top-level regions to both the source's
storage chunks and dst's (shards, when dst is sharded: a sharded volume's chunks
are its shards), so each source chunk is read about once, each dst chunk or shard
written whole by one task, memory stays within ``memory_limit``, and a run
interrupted anywhere resumes with ``resume=True``. A dtype change is the flow's
``cast`` (``_cast``): ``"safe"`` by default, ``"same_kind"`` or ``"unsafe"`` to narrow.

dst is a new volume: one already there is refused (it would be overwritten) unless the
transfer is resumed, which continues an interrupted transfer into it, and only one this
transfer made: dst carries the transfer's mark (its source, bbox, chunks, shards, dtype
and cast: ``_dst_mark``), and a dst without it, or with another's, is refused.

A refused transfer writes nothing: dst that is the source itself, a bucket's root (the
flow's state goes beside dst), a conversion the cast refuses and a plan the memory
limit refuses (planned first over an in-memory stand-in of dst) are refused before dst
is made, and a dst this call made is removed again if the flow refuses it.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph._util import as_int_tuple
from chunkgraph.flow import ApplyReport, RunOptions, apply, refuse_if_written
from chunkgraph.flow.plan import (
    CAST_RULES,
    DEFAULT_CAST,
    SaturationWarning,
    cast_allowed,
    conversion_refusal,
    warn_if_saturated,
)
from chunkgraph.geometry import Box
from chunkgraph.jobs._dst_mark import (
    Maker,
    check_mark,
    existing_at,
    job_mark,
    refuse_bucket_root,
    refuse_existing,
    setting,
)
from chunkgraph.jobs._run_options import job_options, planning
from chunkgraph.jobs._words import JobRefusal, memory_refusal
from chunkgraph.volume import Volume, plain_zarr_backend

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber
    from chunkgraph.volume import BackendName


def copy_chunk(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The identity: transfer's function (the flow casts and writes)."""
    return data


def transfer(
    src: Volume | str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    dtype: Any = None,
    bbox: Box | None = None,
    backend: BackendName | None = None,
    cast: str = DEFAULT_CAST,
    memory_limit: int | None = None,
    executor: ExecutorKind | Executor | None = None,
    workers: int | None = None,
    resume: bool = False,
    dry_run: bool = False,
    progress: bool = False,
    subscribers: Sequence[Subscriber] = (),
    lock_wait: float = 0.0,
    run: RunOptions | None = None,
) -> ApplyReport:
    """Copy ``src`` into a new volume at ``dst``: rechunk, reshard, convert its dtype or format.

    Args:
        src: The volume, or a path or URL ``volume.open`` reads.
        dst: The new volume's path or URL, with an optional format prefix
            (``precomputed://``, ``n5://``, ``zarr2://``); not the source, not a bucket's
            root, and new unless ``resume``.
        chunks: The new volume's spatial chunks; None: the source's.
        shards: Zarr v3 shards (all axes, multiples of the chunks); None: unsharded.
        dtype: The new volume's dtype; None: the source's.
        bbox: The region copied, a Box over the source's spatial axes in global voxels,
            inside its bounds; None: all of it.
        backend: The new volume's backend (``"zarr"``, ``"tensorstore"``, ``"memory"``);
            None: the source's where it writes Zarr v3, else ``"zarr"``.
        cast: Which conversions into ``dtype`` are allowed, as for ``apply``:
            ``"safe"`` (the default), ``"same_kind"`` or ``"unsafe"``.
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
        The copy's ``ApplyReport``.

    Raises:
        ConfigError: Before dst is made, for a bad argument, an existing dst without
            ``resume`` (with it, one this transfer did not start: another tool's volume,
            another source's or other settings' transfer), a conversion ``cast`` refuses,
            or a plan the memory limit refuses.
        FlowLockedError: When another flow is writing the source or dst.

    >>> from chunkgraph import volume
    >>> v = volume.create("tr-doc", (8, 8), (2, 2), "uint8", backend="memory")
    >>> v.write(v.bounds, np.arange(64, dtype="uint8").reshape(8, 8))
    >>> r = transfer(v, "tr-doc-out", chunks=(4, 8), dtype="uint16", backend="memory")
    >>> out = volume.open("tr-doc-out", backend="memory")
    >>> out.chunks, out.dtype.name, bool((out.read(out.bounds) == v.read(v.bounds)).all())
    ((4, 8), 'uint16', True)
    >>> volume.remove("tr-doc"); volume.remove("tr-doc-out")
    """
    options = job_options(
        "transfer", run, memory_limit=memory_limit, executor=executor, workers=workers,
        resume=resume, dry_run=dry_run, progress=progress, subscribers=subscribers,
        lock_wait=lock_wait,
    )  # fmt: skip
    source = volume.open(src) if isinstance(src, str | os.PathLike) else src
    region = source.bounds if bbox is None else bbox
    if not isinstance(region, Box) or region.ndim != source.spatial_ndim:
        raise ConfigError(
            f"bbox must be a Box over the {source.spatial_ndim} spatial axes of "
            f"{source.path!r}, got {bbox!r}",
            field="bbox",
        )
    inside = region.intersection(source.bounds)
    if inside != region or region.is_empty:
        raise ConfigError(
            f"bbox {region} is not inside {source.path!r}'s bounds {source.bounds}; give a "
            "non-empty box within them",
            field="bbox",
        )
    _check_dtype(source, dtype, cast)
    chunks, shards = _sizes(source, "chunks", chunks), _sizes(source, "shards", shards)
    there, existing = existing_at(dst)
    _check_dst(source, dst, existing, options.resume)
    mark = transfer_mark(source, region, chunks, shards, dtype, cast)
    check_mark(TRANSFER, "dst", existing, mark, setting)
    copy = _Copy(source, dst, region, chunks, shards, dtype, backend, cast, mark)
    try:
        if not options.dry_run:
            # The plan first, over a stand-in of dst in memory: what the memory limit or
            # the sizes refuse is refused before dst exists.
            _run(copy, planning(options))
            # A source another flow is writing is refused before dst is made (apply
            # checks again, under its locks).
            refuse_if_written({"src": (source, region)}, options.lock_wait)
        report = _run(copy, options, made=not there)
    except ConfigError as err:
        raise memory_refusal(err, MEMORY_ADVICE) from err.__cause__
    return report


# What a transfer refused for its memory limit can change besides the limit (``_words``).
MEMORY_ADVICE = (
    "; the least transfer plans for is a region of whole source and dst chunks, so "
    "smaller dst chunks ({chunks}) need less"
)

# How transfer speaks of its dst in a refusal.
TRANSFER = Maker("transfer")


def transfer_mark(
    source: Volume,
    region: Box,
    chunks: Sequence[int] | None,
    shards: Sequence[int] | None,
    dtype: Any,
    cast: str,
) -> str:
    """The mark of the transfer of ``region`` of ``source`` with these settings, each as
    dst has it (``chunks=None``: the source's, the same as naming them)."""
    settings = {
        "bbox": [list(region.start), list(region.stop)],
        "chunks": _listed(source.spatial_chunks if chunks is None else chunks),
        "shards": _listed(shards),
        "dtype": np.dtype(source.dtype if dtype is None else dtype).name,
        "cast": cast,
    }
    return job_mark("transfer", source, settings)


def _listed(values: Any) -> Any:
    """A sequence as a list (a mark keeps (8, 8) and [8, 8] alike); anything else as it
    is, for ``volume.create`` to refuse by name."""
    return list(values) if isinstance(values, Sequence) else values


@dataclasses.dataclass(frozen=True)
class _Copy:
    """What one transfer copies, where, and how (``transfer``'s arguments, checked)."""

    source: Volume
    dst: str | os.PathLike[str]
    region: Box
    chunks: Sequence[int] | None
    shards: Sequence[int] | None
    dtype: Any
    backend: BackendName | None
    cast: str
    mark: str


def _run(copy: _Copy, options: RunOptions, *, made: bool = False) -> ApplyReport:
    """Make dst (a stand-in in memory for a dry run) and copy into it; a dst this call made
    is removed again when the flow refuses it, and a stand-in always."""
    source, region, dry_run = copy.source, copy.region, options.dry_run
    spatial_chunks = tuple(source.spatial_chunks if copy.chunks is None else copy.chunks)
    shards = None if copy.shards is None else tuple(copy.shards)
    if dry_run and shards is not None:
        # A sharded volume's chunks are its shards, what the plan aligns writes to.
        spatial_chunks, shards = shards, None
    channels = source.channel_shape
    backend: BackendName = (
        "memory" if dry_run else (copy.backend or plain_zarr_backend(source.backend))
    )
    target = volume.create(
        f"transfer-plan-{os.getpid()}-{id(copy)}" if dry_run else copy.dst,
        channels + region.shape,
        channels + tuple(min(c, n) for c, n in zip(spatial_chunks, region.shape, strict=False)),
        source.dtype if copy.dtype is None else copy.dtype,
        fill_value=source.fill_value,
        backend=backend,
        offset=region.start,
        spatial_ndim=source.spatial_ndim,
        resolution=source.resolution,
        shards=None if shards is None else channels + shards,
        exist_ok=True,
        made_by="" if dry_run else copy.mark,
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SaturationWarning)
            report = apply(
                copy_chunk,
                source,
                target,
                bbox=region,
                expand_bbox=True,
                cast=copy.cast,
                run=options,  # never probed: the identity needs none (_run_options)
            )
    except ConfigError:
        if made and not dry_run:  # nothing was written: the refusal came before the tasks
            volume.remove(target.path, storage_options=target.storage_options)
        raise
    finally:
        if dry_run:
            volume.remove(target.path)
    for each in caught:  # saturation in transfer's words below; other warnings as they were
        if not issubclass(each.category, SaturationWarning):
            warnings.warn_explicit(each.message, each.category, each.filename, each.lineno)
    warn_if_saturated(report.saturated_voxels, target, copy.cast, values="the source's values")
    return report


def _check_dst(
    source: Volume, dst: str | os.PathLike[str], existing: Volume | None, resume: bool
) -> None:
    """dst is not the source (a copy onto itself rewrites every chunk in place for nothing)
    nor a bucket's root (the flow's state goes beside dst, and there is no beside there),
    and is new unless the transfer is resumed (it would overwrite another volume)."""
    if existing is not None and existing.location.same_as(source.location):
        raise ConfigError(
            f"dst {os.fspath(dst)!r} is the source {source.path!r} itself: a transfer "
            "onto itself would rewrite every chunk in place and change nothing; give "
            "another dst (to rechunk or convert in place, transfer to a new path, then "
            "replace the source with it)",
            field="dst",
        )
    if existing is not None and not resume:
        refuse_existing(TRANSFER, "dst", dst, existing)
    refuse_bucket_root(TRANSFER, dst)


def _sizes(source: Volume, name: str, sizes: Sequence[int] | None) -> tuple[int, ...] | None:
    """``chunks`` or ``shards`` (``name``) as ints, one per spatial axis of ``source``
    and positive: checked before dst's mark is compared, so that a resume with sizes no
    run could use is refused for them, as a fresh run is."""
    if sizes is None:
        return None
    try:
        found = as_int_tuple(sizes, name)
    except ConfigError as err:
        raise ConfigError(str(err), field=name) from err
    nd = source.spatial_ndim
    if len(found) != nd or any(n < 1 for n in found):
        what = f"has {len(found)} axes" if len(found) != nd else "has a size below 1"
        raise ConfigError(
            f"{name} {found} {what}, and {source.path!r} has {nd} spatial axes: give a "
            "positive size per spatial axis (the source's chunks: "
            f"{','.join(map(str, source.spatial_chunks))})",
            field=name,
        )
    return found


def _check_dtype(source: Volume, dtype: Any, cast: str) -> None:
    """The conversion ``cast`` refuses, as a ``ConfigError`` before dst is made."""
    if not isinstance(cast, str) or cast not in CAST_RULES:
        raise JobRefusal(
            "{cast} must be one of {rules}, got {given!r}: 'safe' (the default) converts "
            "only into dtypes that hold every value of the source's, 'same_kind' also into "
            "narrower integers or floats, 'unsafe' also floats into integers",
            field="cast", rules=", ".join(repr(r) for r in CAST_RULES), given=cast,
        )  # fmt: skip
    if dtype is None:
        return
    try:
        target = np.dtype(dtype)
    except TypeError as err:
        raise ConfigError(f"dtype {dtype!r} is not a numpy dtype: {err}", field="dtype") from err
    if not cast_allowed(source.dtype, target, cast):  # type: ignore[arg-type]
        raise ConfigError(conversion_refusal(source.dtype, target, cast), field="cast")  # type: ignore[arg-type]
