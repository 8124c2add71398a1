"""``transfer``: copy, rechunk or convert a volume, as an apply flow with an identity function.

The destination is made with the chunks (and shards) asked for, the source's
resolution and the bbox's start as its offset, so global coordinates carry over.
The flow's automatic sizes then align the top-level regions to both the source's
storage chunks and dst's (shards, when dst is sharded: a sharded volume's chunks
are its shards), so each source chunk is read about once, each dst chunk or shard
written whole by one task, memory stays within ``memory_limit``, and a run
interrupted anywhere resumes with ``resume=True``. A dtype change is the flow's
``cast`` (``_cast``): ``"safe"`` by default, ``"same_kind"`` or ``"unsafe"`` to narrow.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.flow._cast import DEFAULT_CAST, cast_allowed, cast_refusal, check_cast_rule
from chunkgraph.flow._report import ApplyReport
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber
    from chunkgraph.volume._registry import BackendName


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
) -> ApplyReport:
    """Copy ``src`` (within ``bbox``, global voxels; default all of it) into a new volume
    at ``dst`` with spatial ``chunks`` (default the source's), Zarr v3 ``shards`` (None:
    unsharded), ``dtype`` (default the source's, converted under ``cast``) and ``backend``
    (default the source's). ``dst`` may carry a format prefix (``precomputed://``,
    ``n5://``, ``zarr2://``) and ``src`` be any volume ``volume.open`` reads.

    >>> from chunkgraph import volume
    >>> v = volume.create("tr-doc", (8, 8), (2, 2), "uint8", backend="memory")
    >>> v.write(v.bounds, np.arange(64, dtype="uint8").reshape(8, 8))
    >>> r = transfer(v, "tr-doc-out", chunks=(4, 8), dtype="uint16", backend="memory")
    >>> out = volume.open("tr-doc-out", backend="memory")
    >>> out.chunks, out.dtype.name, bool((out.read(out.bounds) == v.read(v.bounds)).all())
    ((4, 8), 'uint16', True)
    >>> volume.remove("tr-doc"); volume.remove("tr-doc-out")
    """
    from chunkgraph import volume
    from chunkgraph.flow._apply import apply

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
    spatial_chunks = tuple(source.spatial_chunks if chunks is None else chunks)
    channels = source.channel_shape
    target = volume.create(
        dst,
        channels + region.shape,
        channels + tuple(min(c, n) for c, n in zip(spatial_chunks, region.shape, strict=False)),
        source.dtype if dtype is None else dtype,
        fill_value=source.fill_value,
        backend=typing.cast("BackendName", "memory" if dry_run else (backend or _plain(source))),
        offset=region.start,
        spatial_ndim=source.spatial_ndim,
        resolution=source.resolution,
        shards=None if shards is None else channels + tuple(shards),
        exist_ok=True,
    )
    try:
        return apply(
            copy_chunk,
            source,
            target,
            bbox=region,
            expand_bbox=True,
            memory_limit=memory_limit,
            executor=executor,
            workers=workers,
            resume=resume,
            dry_run=dry_run,
            progress=progress,
            subscribers=subscribers,
            # The identity needs no probe, and one would read a bottom chunk twice.
            probe=False,
            cast=cast,
        )
    finally:
        if dry_run:
            volume.remove(target.path)


def _plain(source: Volume) -> str:
    """dst's backend by default: the source's, or zarr when the source is in another format
    (a format prefix on dst, ``precomputed://``, ``n5://``, ``zarr2://``, chooses its own)."""
    return source.backend if source.backend in ("zarr", "tensorstore", "memory") else "zarr"


def _check_dtype(source: Volume, dtype: Any, cast: str) -> None:
    """The conversion ``cast`` refuses, as a ``ConfigError`` before dst is made."""
    rule = check_cast_rule(cast)
    if dtype is None:
        return
    try:
        target = np.dtype(dtype)
    except TypeError as err:
        raise ConfigError(f"dtype {dtype!r} is not a numpy dtype: {err}", field="dtype") from err
    if not cast_allowed(source.dtype, target, rule):
        raise ConfigError(cast_refusal(source.dtype, target, rule), field="cast")
