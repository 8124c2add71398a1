"""Broadcasting of the per-level arguments of ``volume.apply`` to per-axis tuples.

Argument shapes (``L`` levels, ``S`` spatial axes)::

    chunk_sizes   one entry per level, each an int (all axes) or S ints
    crop_pads     int | S ints | L entries of (int | S ints)
    blend_pads    same as crop_pads

A flat sequence of ints for a pad is per axis when its length is ``S`` and per
level when it is ``L``; when ``L == S`` and the entries differ, the meaning is
ambiguous and the call is refused with both spellings shown. A flat list of
ints for ``chunk_sizes`` (with ``S > 1``) is refused for the same reason:
``[64, 64, 64]`` could be one 3-d level or three levels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunkgraph._errors import ConfigError


def as_int(value: object, what: str) -> int:
    """A Python int from an int or numpy integer (bools are refused: True is not a size)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def listed(value: object) -> object:
    """numpy arrays count as sequences of arguments."""
    return value.tolist() if isinstance(value, np.ndarray) and value.ndim > 0 else value


def per_axis(value: object, ndim: int, what: str) -> tuple[int, ...]:
    """An int (all axes) or ``ndim`` ints -> ``ndim`` ints."""
    value = listed(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != ndim:
            raise ConfigError(
                f"{what} = {tuple(value)} has {len(value)} entries; expected {ndim}, "
                f"one per spatial axis (or a single int for all axes)"
            )
        return tuple(as_int(v, f"{what}[{i}]") for i, v in enumerate(value))
    return (as_int(value, what),) * ndim


def parse_chunk_sizes(chunk_sizes: object, ndim: int) -> list[tuple[int, ...]]:
    chunk_sizes = listed(chunk_sizes)
    if not isinstance(chunk_sizes, Sequence) or isinstance(chunk_sizes, str):
        raise ConfigError(
            f"chunk_sizes must be a list with one chunk size per level, top first, got "
            f"{chunk_sizes!r}; for one level of {chunk_sizes!r} write [{chunk_sizes!r}]"
        )
    if len(chunk_sizes) == 0:
        raise ConfigError("chunk_sizes is empty; give at least one level, e.g. [(256,) * ndim]")
    if ndim > 1 and all(isinstance(c, int | np.integer) for c in chunk_sizes):
        raise ConfigError(
            f"chunk_sizes = {list(chunk_sizes)} is a flat list of ints: write one entry per "
            f"level, each with {ndim} per-axis sizes, e.g. [{tuple(chunk_sizes)}] for one level "
            f"or [({chunk_sizes[0]},) * {ndim}, ...] for several"
        )
    out = []
    for level, entry in enumerate(chunk_sizes):
        sizes = per_axis(entry, ndim, f"chunk_sizes[{level}]")
        if min(sizes) <= 0:
            raise ConfigError(
                f"chunk_sizes[{level}] = {sizes} has a size <= 0; chunk sizes must be positive"
            )
        out.append(sizes)
    return out


def per_level(name: str, value: object, n_levels: int, ndim: int) -> list[tuple[int, ...]]:
    """Broadcast a pad argument to ``n_levels`` per-axis tuples of non-negative ints."""
    value = listed(value)
    if not isinstance(value, Sequence) or isinstance(value, str):
        entries: list[object] = [value] * n_levels
    elif all(isinstance(v, int | np.integer) for v in value) and len(value) == ndim:
        flat = tuple(int(v) for v in value)
        if len(value) == n_levels and len(set(flat)) > 1:
            raise ConfigError(
                f"{name} = {list(flat)} is ambiguous with {n_levels} levels over {ndim} spatial "
                f"axes: write {[flat] * n_levels} for these pads per axis at every level, or "
                f"{[(v,) * ndim for v in flat]} for one pad per level"
            )
        entries = [flat] * n_levels
    elif len(value) == n_levels:
        entries = list(value)
    else:
        raise ConfigError(
            f"{name} has {len(value)} entries but there are {n_levels} levels (chunk_sizes) "
            f"and {ndim} spatial axes; give one int for all, {ndim} ints (one per axis), or "
            f"exactly {n_levels} entries (one per level)"
        )
    out = []
    for level, entry in enumerate(entries):
        pads = per_axis(entry, ndim, f"{name}[{level}]")
        if min(pads) < 0:
            raise ConfigError(f"{name}[{level}] = {pads} has a negative pad; pads must be >= 0")
        out.append(pads)
    return out
