"""label's dst: a new volume that carries the label's mark, or, resumed, one whose mark
is this label's.

The mark (``label_mark``) is what makes one label the same label again: the source's
place, the threshold, the connectivity and the chunk, as JSON text kept in dst's
chunkgraph attributes when label makes it (``volume.create(made_by=...)``). A resume
continues into dst only when dst carries the same mark:

* no mark: dst was not made by label (another tool's volume, or one made by hand that
  happens to have the same shape and dtype): refused, nothing of it is written;
* another source's mark: refused;
* the same source, other settings (a new threshold, say): refused, naming the settings
  dst was started with and this label's, and both ways on.

The source's contents are not in the mark: a source changed before a resume gives
other digests and so another relabel flow, which writes every chunk again (``_label``'s
module doc). A format whose metadata has no room for the mark (precomputed) keeps
none: a resume there is checked by shape and dtype only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.jobs._label_words import LabelRefusal
from chunkgraph.volume import Volume, is_object_url, plain_zarr_backend, split_format, split_url

if TYPE_CHECKING:
    from chunkgraph.geometry import Box
    from chunkgraph.volume import BackendName

# Formats whose metadata keeps no mark (create's made_by): resumed by shape and dtype.
_UNMARKED_FORMATS = ("precomputed",)


def label_mark(
    source: Volume, threshold: float | None, connectivity: int, chunk: Sequence[int]
) -> str:
    """The mark of the label of ``source`` with these settings (module doc)."""
    settings = {
        "source": source.location.identity(),
        "threshold": None if threshold is None else float(threshold),
        "connectivity": int(connectivity),
        "chunk": [int(c) for c in chunk],
    }
    return json.dumps({"label": settings}, sort_keys=True)


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
        raise LabelRefusal(
            "dst {dst!r} already exists (a {dtype} volume of shape {shape}), and label "
            "makes a new volume: give a new path, or {remove}; to continue an interrupted "
            "label into it, pass {resume}",
            field="dst", dst=os.fspath(dst), dtype=existing.dtype, shape=existing.shape,
        )  # fmt: skip
    _, place = split_format(os.fspath(dst))
    if is_object_url(place) and not split_url(place)[2]:
        raise ConfigError(
            f"dst {os.fspath(dst)!r} is a bucket's root, and label keeps its state beside "
            f"dst: put the volume under a prefix, e.g. {place.rstrip('/')}/NAME.zarr",
            field="dst",
        )


def check_mark(existing: Volume | None, mark: str) -> None:
    """A dst resumed into carries this label's ``mark`` (module doc)."""
    if existing is None or existing.format.name in _UNMARKED_FORMATS:
        return
    found = _settings(existing.made_by)
    now = _settings(mark) or {}
    if found is None:
        raise LabelRefusal(
            "dst {dst!r} (a {dtype} volume of shape {shape}) was not made by label, and "
            "{resume} continues only a label that made its dst: nothing was written to it. "
            "Give a new dst, or {remove} and label again",
            field="dst", dst=existing.path, dtype=existing.dtype, shape=existing.shape,
        )  # fmt: skip
    if found["source"] != now["source"]:
        raise LabelRefusal(
            "dst {dst!r} was made by a label of another source ({was}), and {resume} "
            "continues only that label: nothing was written to it. Give a new dst, or "
            "{remove} and label again",
            field="dst", dst=existing.path, was=found["source"].removeprefix("disk:"),
        )  # fmt: skip
    changed = [k for k in ("threshold", "connectivity", "chunk") if found[k] != now[k]]
    if changed:
        was = " and ".join(_setting(k, found[k]) for k in changed)
        asked = " and ".join(_setting(k, now[k]) for k in changed)
        raise LabelRefusal(
            "dst {dst!r} was started by a label with {was}, and this one has {asked}: "
            "{resume} continues only the label that started dst, and nothing was written "
            "to it. To continue that label, give {was} again; to label with {asked}, give "
            "a new dst, or {remove}",
            field=changed[0], dst=existing.path, was=was, asked=asked,
        )  # fmt: skip


def _settings(mark: str) -> dict[str, Any] | None:
    """The settings a mark holds; None for text that is not a label's mark."""
    try:
        found = json.loads(mark)
    except ValueError:
        return None
    settings = found.get("label") if isinstance(found, dict) else None
    keys = {"source", "threshold", "connectivity", "chunk"}
    return settings if isinstance(settings, dict) and keys <= set(settings) else None


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
        raise LabelRefusal(
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
