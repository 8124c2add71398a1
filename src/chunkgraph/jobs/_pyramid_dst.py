"""downsample's levels beside the source: new volumes that carry the downsample's mark,
or, resumed, ones whose mark is this downsample's.

A level (Zarr v3, beside the source or at ``dst``) is made with its mark (a job's mark:
``_dst_mark``): the source's place, the level's number, the factor and the method, which
make one level the same level again. A level already there is refused without
``resume`` (the downsample would write over it); with ``resume`` it is continued only
when it carries this level's mark, and refused, naming it and what differs, when it
has none (another tool's volume), another source's, or other settings. Nothing is made
or written before every level is checked.

Levels added to the source's own image (OME-Zarr, precomputed: ``volume.add_level``)
keep no mark: the image already lists them. A level already in the image at a new
level's resolution is refused without ``resume`` too (another tool's level would be
written over without a word); with ``resume`` it is reused when its shape and offset
are the ones this downsample makes (``add_level``'s ``exist_ok``), and written again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chunkgraph.jobs._dst_mark import (
    Maker,
    check_mark,
    existing_at,
    image_levels,
    job_mark,
    refuse_existing,
    setting,
)
from chunkgraph.jobs._words import JobRefusal
from chunkgraph.volume import Volume

# How downsample speaks of its levels in a refusal.
DOWNSAMPLE = Maker(
    "downsample",
    noun="levels",
    started="them",
    makes="new levels",
    new_path="another {dst_template}",
    new_dst="another {dst_template}",
)


def level_marks(source: Volume, levels: int, factor: tuple[int, ...], method: str) -> list[str]:
    """The mark of each level ``1 .. levels`` of ``source`` (module doc)."""
    return [
        job_mark("downsample", source, {"level": k, "factor": list(factor), "method": method})
        for k in range(1, levels + 1)
    ]


def check_levels(paths: Sequence[str], marks: Sequence[str], resume: bool) -> None:
    """The levels at ``paths`` are new, or with ``resume`` this downsample's (module doc)."""
    for k, (path, mark) in enumerate(zip(paths, marks, strict=False), start=1):
        _, existing = existing_at(path)
        if existing is None:
            continue
        if not resume:
            refuse_existing(DOWNSAMPLE, f"level {k}", path, existing)
        check_mark(DOWNSAMPLE, f"level {k}", existing, mark, setting)


def check_image_levels(source: Volume, factor: tuple[int, ...], levels: int, resume: bool) -> None:
    """Without ``resume``, none of the levels ``1 .. levels`` this downsample adds to
    ``source``'s image is in it already (module doc)."""
    if resume:
        return
    there = image_levels(source)
    for k in range(1, levels + 1):
        wanted = [r * f**k for r, f in zip(source.resolution, factor, strict=True)]
        for scale, level in enumerate(there):
            if all(math.isclose(a, b) for a, b in zip(level.resolution, wanted, strict=True)):
                _refuse_image_level(source, k, scale, level)


def _refuse_image_level(source: Volume, k: int, scale: int, level: Volume) -> None:
    reach = source.level_of
    raise JobRefusal(
        "level {k} is already in the image {root!r} (scale {scale}: a {dtype} volume of "
        "shape {shape}, resolution {resolution}), and downsample makes new levels: nothing "
        "was written. To write this downsample's level over it, pass {resume}; to keep "
        "it, give {zarr3} for Zarr v3 levels beside the image",
        field="dst", k=k, root=reach[0] if reach else source.path, scale=scale,
        dtype=level.dtype, shape=level.shape, resolution=level.resolution,
    )  # fmt: skip
