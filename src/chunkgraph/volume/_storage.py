"""The storage layer under ``Volume``: one metadata record and one small protocol.

A backend only moves rectangular regions of an n-d array in *local* index
space (``0 .. shape`` on every axis, channel axes included). Everything about
global coordinates, bounds, fill outside bounds, alignment, caching and
accounting lives once in ``Volume``, so the backends stay thin and identical::

    Volume.read(global box) ──crop, translate──> Storage.read(local slices) -> ndarray
    Volume.write(global box, array) ──check, crop──> Storage.write(local slices, array)

``VolumeMeta`` is what a volume is, independent of its backend; the on-disk
backends persist its chunkgraph-specific part (offset, spatial_ndim,
aligned_writes, creating backend, resolution) in the Zarr array attributes under ``ATTRS_KEY``, so
``open()`` restores it whichever backend wrote it.

Resolution: the size of one voxel along each spatial axis in physical units
(nm, say), default 1 on every axis. A voxel ``i`` covers ``[i * r, (i + 1) * r)``
physically, so volumes of different resolutions meet at physical coordinates
(what the apply flow reads inputs at their own resolution by).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import as_int_tuple

ATTRS_KEY = "chunkgraph"
Index = tuple[slice, ...]


@dataclass(frozen=True)
class VolumeMeta:
    """Shape, chunking, dtype and placement of a volume (all validated on construction)."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: Any
    spatial_ndim: int
    offset: tuple[int, ...]
    aligned_writes: bool
    backend: str
    # Physical size of a voxel per spatial axis (see as_resolution); () means all 1s.
    resolution: tuple[float, ...] = ()
    # What made the volume, as its maker wrote it (a job's identity: ``label`` resumes
    # only into a volume it made); "" for none.
    made_by: str = ""

    def __post_init__(self) -> None:
        ndim = len(self.shape)
        if len(self.chunks) != ndim:
            raise ConfigError(
                f"chunks {self.chunks} has {len(self.chunks)} axes "
                f"but shape {self.shape} has {ndim}"
            )
        if any(s < 0 for s in self.shape) or any(c <= 0 for c in self.chunks):
            raise ConfigError(
                f"shape {self.shape} must be >= 0 and chunks {self.chunks} > 0 on every axis"
            )
        if not 1 <= self.spatial_ndim <= ndim:
            raise ConfigError(f"spatial_ndim must be in 1..{ndim} for shape {self.shape}")
        n_channel = ndim - self.spatial_ndim
        if self.chunks[:n_channel] != self.shape[:n_channel]:
            raise ConfigError(
                f"channel axes must be chunked whole: shape {self.shape}, chunks {self.chunks}, "
                f"spatial_ndim {self.spatial_ndim}; use chunks "
                f"{self.shape[:n_channel] + self.chunks[n_channel:]}"
            )
        if len(self.offset) != self.spatial_ndim:
            raise ConfigError(
                f"offset {self.offset} must have one entry per spatial axis ({self.spatial_ndim})"
            )
        # Frozen: the checked (and defaulted) resolution is set once, here.
        object.__setattr__(self, "resolution", as_resolution(self.resolution, self.spatial_ndim))

    @property
    def channel_ndim(self) -> int:
        return len(self.shape) - self.spatial_ndim

    def attrs(self) -> dict[str, Any]:
        """The JSON attributes the on-disk backends store."""
        ours: dict[str, Any] = {
            "offset": list(self.offset),
            "spatial_ndim": self.spatial_ndim,
            "aligned_writes": self.aligned_writes,
            "backend": self.backend,
            "resolution": list(self.resolution),
        }
        if self.made_by:
            ours["made_by"] = self.made_by
        return {ATTRS_KEY: ours}


def meta_from_stored(
    shape: object,
    chunks: object,
    dtype: np.dtype[Any],
    fill_value: Any,
    attrs: dict[str, Any],
    backend: str,
) -> VolumeMeta:
    """Rebuild ``VolumeMeta`` from what a backend read back (arrays not made by chunkgraph
    open as all-spatial, offset 0, unaligned writes allowed)."""
    shape_t = as_int_tuple(shape, "stored shape")
    ours = attrs.get(ATTRS_KEY, {})
    spatial_ndim = int(ours.get("spatial_ndim", len(shape_t)))
    offset = ours.get("offset", [0] * spatial_ndim)
    return VolumeMeta(
        shape=shape_t,
        chunks=as_int_tuple(chunks, "stored chunks"),
        dtype=np.dtype(dtype),
        # Zarr v2 allows no fill value ("null"): missing chunks then read as 0 here.
        fill_value=np.dtype(dtype).type(0 if fill_value is None else fill_value),
        spatial_ndim=spatial_ndim,
        offset=as_int_tuple(offset, "stored offset"),
        aligned_writes=bool(ours.get("aligned_writes", False)),
        backend=backend,
        resolution=tuple(ours.get("resolution", ())),
        made_by=str(ours.get("made_by", "")),
    )


def as_resolution(value: object, spatial_ndim: int) -> tuple[float, ...]:
    """A voxel size per spatial axis: positive finite numbers, integral ones as ints.

    ``None`` or ``()`` is 1 on every axis; one number is that on every axis.

    >>> as_resolution((4, 4, 40.0), 3), as_resolution(None, 2), as_resolution(0.5, 2)
    ((4, 4, 40), (1, 1), (0.5, 0.5))
    """
    if value is None or value == ():
        return (1,) * spatial_ndim
    items = list(value) if isinstance(value, tuple | list) else [value] * spatial_ndim
    if len(items) != spatial_ndim:
        raise ConfigError(
            f"resolution {value!r} has {len(items)} entries but the volume has {spatial_ndim} "
            "spatial axes; give one voxel size per spatial axis, e.g. (4, 4, 40)"
        )
    out: list[float] = []
    for axis, item in enumerate(items):
        number = (
            float(item)
            if isinstance(item, int | float | np.integer | np.floating)
            and not isinstance(item, bool | np.bool_)
            else math.nan
        )
        if not math.isfinite(number) or number <= 0:
            raise ConfigError(
                f"resolution {value!r} has {item!r} on axis {axis}; a voxel size must be a "
                "positive finite number (physical units per voxel, e.g. nm)"
            )
        out.append(int(number) if number.is_integer() else number)
    return tuple(out)


class Storage(Protocol):
    """What a backend implements; indices are local slices with 0 <= start <= stop <= shape."""

    meta: VolumeMeta
    path: str

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        """A new array (never a view of backend memory) holding ``index``.

        Stored bytes that do not decode raise ``CorruptChunkError`` naming the chunks.
        """
        ...

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        """Store ``data`` (already of the volume's dtype and of the index's shape)."""
        ...
