"""Coarser scales from the pyramid a volume has stored, where it has one.

Zoomed out, Neuroglancer asks a layer for chunks downsampled by a factor per axis (its
``scale_key``, e.g. ``4,4,1``). ``neuroglancer.LocalVolume`` computes every such chunk
from full-resolution voxels: a chunk 8x coarser per axis reads 512 times its voxels.
``PyramidVolume`` answers from the **coarsest stored level whose factor divides the
one asked**, downsampling the rest of the way as Neuroglancer would (a mean for
images, a stride for labels); the full-resolution volume is the level of factor 1, so
without a pyramid nothing changes.

    asked 8,8,2   levels 1,1,1  2,2,1  4,4,1   ->  level 4,4,1, then 2,2,2 in memory
    asked 2,2,2   levels 1,1,1  2,2,1  4,4,1   ->  level 2,2,1, then 1,1,2

Which levels are stored (``stored_levels``): the next scales of a multiscale volume (an
OME-Zarr image, a precomputed volume: ``volume.open(root, scale=k)``), or the Zarr v3
siblings ``downsample`` writes beside a plain volume (``raw.zarr`` -> ``raw_s1.zarr``,
``raw_s2.zarr``, ...). A level is used only when its resolution is a whole multiple of
the volume's on every axis and its offset the volume's divided by that factor, so its
voxels lie where the viewer expects them. The viewer may then zoom out as far as the
coarsest level times ``MAX_IN_MEMORY`` allows.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.viewer._layers import (
    VolumeArray,
    dimensions,
    encode_raw,
    layer_kind,
    neuroglancer,
)
from chunkgraph.volume import Volume
from chunkgraph.volume import open as open_volume

# How much coarser than the level it reads a served chunk may be (voxels read per voxel
# served): the bound on one request's read, with or without a pyramid.
MAX_IN_MEMORY = 8**3
# Levels looked for beyond the volume; each is a metadata read, a miss ends the search.
MAX_LEVELS = 16


def stored_levels(volume: Volume) -> dict[tuple[int, ...], Volume]:
    """The volume's stored coarser levels that line up with it, by factor per axis
    (channels first, factor 1), the volume itself as factor 1."""
    n_channel = len(volume.channel_shape)
    found: dict[tuple[int, ...], Volume] = {(1,) * volume.ndim: volume}
    for level in _candidates(volume):
        factor = _factor(volume, level)
        if factor is not None and level.channel_shape == volume.channel_shape:
            found.setdefault((1,) * n_channel + factor, level)
    return found


def _candidates(volume: Volume) -> list[Volume]:
    if volume.format.in_process:
        return []
    cache = volume.cache_bytes  # each level its own cache of the volume's size
    where = volume.level_of
    if where is not None:  # a multiscale volume: its other scales, finest first
        root, _ = where
        return _opened(lambda k: open_volume(root, scale=k, cache_bytes=cache), range(MAX_LEVELS))
    stem, suffix = os.path.splitext(volume.path.rstrip("/"))
    siblings = range(1, MAX_LEVELS + 1)
    return _opened(lambda k: open_volume(f"{stem}_s{k}{suffix}", cache_bytes=cache), siblings)


def _opened(opener: Any, keys: range) -> list[Volume]:
    out = []
    for key in keys:
        try:
            out.append(opener(key))
        except (VolumeNotFoundError, ConfigError):  # no such level: the pyramid ends here
            break
    return out


def _factor(volume: Volume, level: Volume) -> tuple[int, ...] | None:
    """Level's factor per spatial axis when it lines up with ``volume`` and is coarser."""
    if level.spatial_ndim != volume.spatial_ndim:
        return None
    ratios = [b / a for a, b in zip(volume.resolution, level.resolution, strict=True)]
    factor = tuple(round(r) for r in ratios)
    whole = all(
        f >= 1 and math.isclose(r, f, rel_tol=1e-6) for r, f in zip(ratios, factor, strict=True)
    )
    if not whole or factor == (1,) * len(factor):
        return None
    # Exactly on the grid of voxels it reduces (a level half a voxel off would be served
    # shifted), and covering all of them (a level of floor(shape / f) is short by one).
    aligned = all(o == lo * f for o, f, lo in zip(volume.offset, factor, level.offset, strict=True))
    covers = all(
        ls == -(-s // f)
        for s, f, ls in zip(volume.bounds.shape, factor, level.bounds.shape, strict=True)
    )
    return factor if aligned and covers else None


def encode(data_format: str, subvol: np.ndarray[Any, Any]) -> tuple[bytes, str]:
    """A chunk in the encoding the viewer asked for, and its content type."""
    chunks = neuroglancer().chunks
    if data_format == "raw":
        return encode_raw(subvol), "application/octet-stream"
    if data_format == "npz":
        return chunks.encode_npz(subvol), "application/octet-stream"
    if data_format == "jpeg":
        return chunks.encode_jpeg(subvol), "image/jpeg"
    raise ValueError(f"unknown chunk encoding {data_format!r}")


def read_scaled(
    levels: dict[tuple[int, ...], VolumeArray],
    kind: str,
    asked: tuple[int, ...],
    start: tuple[int, ...],
    stop: tuple[int, ...],
) -> np.ndarray[Any, Any] | None:
    """The chunk ``start:stop`` at factor ``asked``, from the coarsest level dividing it;
    None when no level other than full resolution divides it (Neuroglancer's own path)."""
    dividing = [f for f in levels if all(a % b == 0 for a, b in zip(asked, f, strict=True))]
    factor = max(dividing, key=math.prod)
    if factor == (1,) * len(asked):
        return None
    level = levels[factor]
    rest = tuple(a // f for a, f in zip(asked, factor, strict=True))
    index = tuple(
        slice(a * r, min(n, b * r))
        for a, b, r, n in zip(start, stop, rest, level.shape, strict=True)
    )
    subvol = level[index]
    if rest == (1,) * len(rest):
        return subvol
    down = neuroglancer().downsample
    if kind == "image":
        return np.asarray(down.downsample_with_averaging(subvol, rest))
    return np.asarray(down.downsample_with_striding(subvol, rest))


def layer_source(volume: Volume) -> tuple[str, Any]:
    """The layer kind (``layer_kind``) and the Neuroglancer source of ``volume``."""
    n_channel = len(volume.channel_shape)
    kind = layer_kind(volume.dtype)
    levels = {f: VolumeArray(v) for f, v in stored_levels(volume).items()}
    source = pyramid_volume_class()(
        levels=levels,
        data=levels[(1,) * volume.ndim],
        dimensions=dimensions(volume),
        voxel_offset=[0] * n_channel + list(volume.offset),
        volume_type=kind,
        # Chunks go to a browser on this machine: uncompressed is fastest (npz's zlib
        # takes 15 ms for a 64^3 uint8 chunk of noise).
        encoding="raw",
        max_downsampling=MAX_IN_MEMORY * max(math.prod(f) for f in levels),
    )
    return kind, source


@functools.cache
def pyramid_volume_class() -> Any:
    """``PyramidVolume``: a ``LocalVolume`` that reads coarser scales from stored levels
    (made on first use: ``neuroglancer`` is imported only when a view is served)."""
    ng = neuroglancer()

    class PyramidVolume(ng.LocalVolume):  # type: ignore[misc, name-defined]
        def __init__(self, *, levels: dict[tuple[int, ...], VolumeArray], **kwargs: Any):
            super().__init__(**kwargs)
            self.levels = levels

        def get_encoded_subvolume(
            self, data_format: str, start: Any, end: Any, scale_key: str
        ) -> tuple[bytes, str]:
            asked = tuple(int(f) for f in scale_key.split(","))
            first, last = tuple(int(s) for s in start), tuple(int(e) for e in end)
            inside = len(asked) == len(first) == len(last) == self.rank and all(
                f >= 1 and 0 <= a <= b <= -(-n // f)
                for f, a, b, n in zip(asked, first, last, self.shape, strict=False)
            )
            if inside:  # else Neuroglancer's own path refuses it (400)
                subvol = read_scaled(self.levels, self.volume_type, asked, first, last)
                if subvol is not None:
                    return encode(data_format, subvol)
            found: tuple[bytes, str] = super().get_encoded_subvolume(
                data_format, start, end, scale_key
            )
            return found

    return PyramidVolume
