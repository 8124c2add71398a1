"""Broadcasting of the per-level arguments of ``volume.apply`` to per-axis tuples.

Argument shapes (``L`` levels, ``S`` spatial axes)::

    chunk_sizes   a list of L levels, each an int (all axes) or a tuple of S ints;
                  a bare tuple of S ints is one level
    crop_pads     int (all levels, all axes) | tuple of S ints (all levels)
                  | list of L entries, each an int or a tuple of S ints
    blend_pads    same as crop_pads

The container says which: a **tuple** of ints is per axis, a **list** is per
level. So with 3 levels in 3-d, ``crop_pads=[0, 0, 8]`` crops 8 voxels on
every axis at the bottom level only, while ``crop_pads=(0, 0, 8)`` crops the
last axis by 8 at every level. numpy arrays follow the same rule (1-d reads as
a tuple, 2-d as a list of tuples). Wrong lengths name the argument and the
length expected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import per_axis


def listed(value: object) -> object:
    """numpy arrays read like the Python spelling: 1-d -> a tuple (per axis), 2-d -> a list."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return tuple(value.tolist())
    if isinstance(value, np.ndarray) and value.ndim > 1:
        return [tuple(row) for row in value.tolist()]
    return value


def is_per_axis(value: object) -> bool:
    """A tuple of ints is one value per axis (a list is one value per level)."""
    return isinstance(value, tuple) and all(isinstance(v, int | np.integer) for v in value)


def parse_chunk_sizes(chunk_sizes: object, ndim: int) -> list[tuple[int, ...]]:
    """One per-axis chunk per level: a list of levels, or one level's per-axis tuple."""
    chunk_sizes = listed(chunk_sizes)
    if is_per_axis(chunk_sizes):
        chunk_sizes = [chunk_sizes]
    if not isinstance(chunk_sizes, Sequence) or isinstance(chunk_sizes, str):
        raise ConfigError(
            f"chunk_sizes must be a list with one chunk size per level, top first, got "
            f"{chunk_sizes!r}; for one level of {chunk_sizes!r} write [{chunk_sizes!r}]",
            field="chunk_sizes",
        )
    if len(chunk_sizes) == 0:
        raise ConfigError(
            "chunk_sizes is empty; give at least one level, e.g. [(256,) * ndim]",
            field="chunk_sizes",
        )
    out = []
    for level, entry in enumerate(chunk_sizes):
        sizes = located_per_axis(entry, ndim, f"chunk_sizes[{level}]", "chunk_sizes", level)
        if min(sizes) <= 0:
            raise ConfigError(
                f"chunk_sizes[{level}] = {sizes} has a size <= 0; chunk sizes must be positive",
                field="chunk_sizes",
                level=level,
                axis=next(a for a, size in enumerate(sizes) if size <= 0),
            )
        out.append(sizes)
    return out


def located_per_axis(
    value: object, ndim: int, what: str, field: str, level: int | None = None
) -> tuple[int, ...]:
    """``per_axis``, its ``ConfigError`` carrying ``field`` (apply's parameter) and ``level``."""
    try:
        return per_axis(value, ndim, what)
    except ConfigError as err:
        raise ConfigError(*err.args, field=field, level=level) from None


def per_level(name: str, value: object, n_levels: int, ndim: int) -> list[tuple[int, ...]]:
    """Broadcast a pad argument to ``n_levels`` per-axis tuples of non-negative ints."""
    value = listed(value)
    if is_per_axis(value):
        entries: list[object] = [located_per_axis(value, ndim, name, name)] * n_levels
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != n_levels:
            raise ConfigError(
                f"{name} = {list(value)} has {len(value)} entries but there are {n_levels} "
                f"levels (chunk_sizes); a list gives one pad per level: give exactly "
                f"{n_levels}, one value for all levels, or a tuple of {ndim} for per-axis pads",
                field=name,
            )
        entries = list(value)
    else:
        entries = [value] * n_levels
    out = []
    for level, entry in enumerate(entries):
        pads = located_per_axis(entry, ndim, f"{name}[{level}]", name, level)
        if min(pads) < 0:
            raise ConfigError(
                f"{name}[{level}] = {pads} has a negative pad; pads must be >= 0",
                field=name,
                level=level,
                axis=next(a for a, pad in enumerate(pads) if pad < 0),
            )
        out.append(pads)
    return out
