"""label's dst: a new volume that carries the label's mark, or, resumed, one whose mark
is this label's.

The mark (``label_mark``, a job's mark: ``_dst_mark``) is what makes one label the same
label again: the source's place, the threshold, the connectivity and the chunk, kept in
dst's chunkgraph attributes when label makes it. A resume continues into dst only when
dst carries the same mark; a dst without it, another source's, or one started with other
settings is refused, naming what differs (``_dst_mark``'s rules).

The source's contents are not in the mark: a source changed before a resume gives
other digests and so another relabel flow, which writes every chunk again (``_label``'s
module doc). A format whose metadata has no room for the mark (precomputed) keeps
none: a resume there is checked by shape and dtype only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.jobs._dst_mark import Maker, job_mark, refuse_bucket_root, refuse_existing
from chunkgraph.jobs._dst_mark import check_mark as check_job_mark
from chunkgraph.jobs._words import JobRefusal
from chunkgraph.volume import Volume, plain_zarr_backend

if TYPE_CHECKING:
    from chunkgraph.geometry import Box
    from chunkgraph.volume import BackendName

# How label speaks of its dst in a refusal.
LABEL = Maker("label")


def label_mark(
    source: Volume, threshold: float | None, connectivity: int, chunk: Sequence[int]
) -> str:
    """The mark of the label of ``source`` with these settings (module doc)."""
    settings = {
        "threshold": None if threshold is None else float(threshold),
        "connectivity": int(connectivity),
        "chunk": [int(c) for c in chunk],
    }
    return job_mark("label", source, settings)


def check_dst(
    source: Volume, dst: str | os.PathLike[str], existing: Volume | None, resume: bool
) -> None:
    """dst is not the source, is new unless resumed, and is not a bucket's root (the
    relabel flow keeps its state beside dst)."""
    if existing is not None and existing.location.same_as(source.location):
        raise ConfigError(
            f"dst {os.fspath(dst)!r} is the source {source.path!r} itself: label writes "
            "its ids to a new volume; give another dst",
            field="dst",
        )
    if existing is not None and not resume:
        refuse_existing(LABEL, "dst", dst, existing)
    refuse_bucket_root(LABEL, dst)


def check_mark(existing: Volume | None, mark: str) -> None:
    """A dst resumed into carries this label's ``mark`` (module doc)."""
    check_job_mark(LABEL, "dst", existing, mark, _setting)


def _setting(name: str, value: Any) -> str:
    """One setting in label's words: "threshold 0.5", "chunk 128x64x64"."""
    if name == "threshold":
        return "no threshold (nonzero voxels)" if value is None else f"threshold {value!r}"
    if name == "chunk":
        return "chunk " + "x".join(map(str, value))
    return f"{name} {value}"


def check_resumed(existing: Volume | None, source: Volume, dtype: np.dtype[Any]) -> None:
    """A dst a resumed label continues into is the one it would make."""
    if existing is None:
        return
    if existing.shape != source.shape or existing.dtype != dtype:
        raise JobRefusal(
            "dst {dst!r} is a {has} volume of shape {shape}, and this label writes {dtype} "
            "ids of shape {wanted}: it is not this label's output; give a new dst ({resume} "
            "continues only the same label)",
            field="dst", dst=existing.path, has=existing.dtype, shape=existing.shape,
            dtype=dtype, wanted=source.shape,
        )  # fmt: skip


def make_dst(
    source: Volume,
    dst: str | os.PathLike[str],
    dtype: np.dtype[Any],
    backend: BackendName | None,
    dry_run: bool,
    mark: str,
) -> Volume:
    """dst (a stand-in in memory for a dry run): the source's grid, chunks and place, and
    the label's ``mark``."""
    bounds: Box = source.bounds
    chosen: BackendName = "memory" if dry_run else (backend or plain_zarr_backend(source.backend))
    return volume.create(
        f"label-plan-{os.getpid()}-{id(source)}" if dry_run else dst,
        bounds.shape,
        tuple(min(c, n) for c, n in zip(source.spatial_chunks, bounds.shape, strict=True)),
        dtype,
        fill_value=0,
        backend=chosen,
        offset=bounds.start,
        resolution=source.resolution,
        exist_ok=True,
        made_by=mark,
    )
