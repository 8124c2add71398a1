"""OME-Zarr multiscale images: a group whose ``multiscales`` metadata lists one array per level.

Versions: 0.4 (Zarr v2, ``multiscales`` in the group's ``.zattrs``) and 0.5
(Zarr v3, under ``"ome"`` in the group's ``zarr.json`` attributes); both are read
and written. A chunkgraph volume is one level, an array of the group opened with
zarr-python (on a disk or an object store, as any Zarr array), placed by the
level's metadata::

    axes                       the "space" ones (last, as OME-Zarr requires) are spatial;
                               the others (time, channel) are channel axes, read whole
    scale of the space axes    resolution
    translation                offset, in voxels of that level, by the image's convention
                               (below; an integer: chunkgraph's voxels lie on an integer
                               grid, and a level that fits neither convention is refused,
                               naming the level)

Two conventions place a level's voxels, and the field writes both. ``r0`` is level 0's
scale, ``r`` the level's, ``o`` its offset in its own voxels::

    pixel centre (the spec's examples, ngff-zarr, ome-zarr-py; written by default):
        translation = (o + 1/2) * r - r0 / 2     the centre of the level's first voxel
    corner (levels that share one translation or have none; chunkgraph before):
        translation = o * r                      the corner of the level's first voxel

Level 0 reads the same in both. A level ``f`` times coarser covers ``f`` finer voxels
per voxel, so under the pixel-centre convention its translation moves by half its voxel
minus half of level 0's (``r0 * (f - 1) / 2``), and under the corner one it stays: the
two conventions' levels sit a quarter voxel of level 1 apart. An image's convention is read
from its levels (``image_convention``: corner when every translation is a whole number
of its level's voxels, else pixel centre when every level fits that); new levels of an
image keep its convention, and a new image, or one of a single level, gets pixel centres.

The levels chunkgraph writes also carry chunkgraph's own attributes (offset,
resolution, spatial axes), so each level opens alone as a plain Zarr array too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import zarr

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._storage import VolumeMeta
from chunkgraph.volume._zarr import ZarrStorage, zarr_store

BACKEND = "ome-zarr"
VERSIONS = {"0.4": 2, "0.5": 3}  # OME-Zarr version -> Zarr format


def join(root: str, key: str) -> str:
    return root.rstrip("/") + "/" + key


def read_group_attrs(root: str, options: StoreOptions) -> tuple[dict[str, Any], int] | None:
    """The attributes and Zarr format of the group at ``root``, or None when none is there."""
    store = zarr_store(root, options, read_only=True)
    try:
        group = zarr.open_group(store=store, mode="r")
    except (FileNotFoundError, ValueError, TypeError, KeyError):
        return None
    return group.attrs.asdict(), int(group.metadata.zarr_format)


def multiscale_of(attrs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``(version, the first multiscale)`` of a group's attributes, or None."""
    if isinstance(attrs.get("ome"), dict) and attrs["ome"].get("multiscales"):
        return str(attrs["ome"].get("version", "0.5")), attrs["ome"]["multiscales"][0]
    if attrs.get("multiscales"):
        first = attrs["multiscales"][0]
        return str(first.get("version", "0.4")), first
    return None


def read_multiscale(root: str, options: StoreOptions) -> tuple[str, int, dict[str, Any]]:
    found = read_group_attrs(root, options)
    if found is None:
        raise VolumeNotFoundError(f"no OME-Zarr multiscale group at {root!r}")
    attrs, zarr_format = found
    multiscale = multiscale_of(attrs)
    if multiscale is None:
        raise VolumeNotFoundError(
            f"the Zarr group at {root!r} has no OME-Zarr 'multiscales' metadata; open one of its "
            "arrays by its own path"
        )
    return multiscale[0], zarr_format, multiscale[1]


def describe_levels(multiscale: dict[str, Any]) -> str:
    return ", ".join(f"{i}: {d['path']!r}" for i, d in enumerate(multiscale["datasets"]))


def level_index(multiscale: dict[str, Any], scale: int | str | None, root: str) -> int:
    datasets = multiscale["datasets"]
    paths = [d["path"] for d in datasets]
    if scale is None:
        scale = 0
    if isinstance(scale, str) and scale in paths:
        return paths.index(scale)
    is_int = isinstance(scale, int | np.integer) and not isinstance(scale, bool)
    if is_int and 0 <= int(scale) < len(datasets):
        return int(scale)
    raise ConfigError(
        f"scale {scale!r} is not a level of the OME-Zarr image {root!r}; it has "
        f"{len(datasets)} level(s), by index or path: {describe_levels(multiscale)}",
        field="scale",
    )


def _transform(transforms: list[dict[str, Any]], ndim: int) -> tuple[list[float], list[float]]:
    scale, translation = [1.0] * ndim, [0.0] * ndim
    for t in transforms:
        if t.get("type") == "scale":
            scale = [float(x) for x in t["scale"]]
        elif t.get("type") == "translation":
            translation = [float(x) for x in t["translation"]]
    return scale, translation


def _axes(multiscale: dict[str, Any], ndim: int) -> list[dict[str, Any]]:
    axes = multiscale.get("axes")
    if axes is None:  # before 0.4: z, y, x last, spelled as letters
        names = "tczyx"[5 - ndim :]
        axes = list(names)
    return [
        a if isinstance(a, dict) else {"name": a, "type": "space" if a in "zyx" else a}
        for a in axes
    ]


CENTRE, CORNER = "centre", "corner"
DEFAULT_CONVENTION = CENTRE


def _raw_placement(
    multiscale: dict[str, Any], index: int, ndim: int, root: str
) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """``(spatial_ndim, scale, translation)`` of level ``index``'s space axes, composed
    with the multiscale's own transformations."""
    axes = _axes(multiscale, ndim)
    space = [a.get("type") == "space" for a in axes]
    spatial_ndim = sum(space)
    if len(axes) != ndim or spatial_ndim == 0 or any(space[: ndim - spatial_ndim]):
        raise ConfigError(
            f"OME-Zarr image {root!r} has axes {[a.get('name') for a in axes]} for arrays of "
            f"{ndim} dimensions; chunkgraph reads images whose space axes come last",
            field="path",
        )
    dataset = multiscale["datasets"][index]
    scale, translation = _transform(dataset.get("coordinateTransformations", []), ndim)
    outer_scale, outer_translation = _transform(
        multiscale.get("coordinateTransformations", []), ndim
    )
    scale = [s * o for s, o in zip(scale, outer_scale, strict=True)]
    translation = [
        t * o + u for t, o, u in zip(translation, outer_scale, outer_translation, strict=True)
    ]
    first = ndim - spatial_ndim
    return spatial_ndim, tuple(scale[first:]), tuple(translation[first:])


def _voxels(
    translation: tuple[float, ...], scale: tuple[float, ...], base: tuple[float, ...], how: str
) -> tuple[float, ...]:
    """A level's offset in its voxels under convention ``how`` (``base``: level 0's scale)."""
    if how == CORNER:
        return tuple(t / r for t, r in zip(translation, scale, strict=True))
    return tuple((t + b / 2) / r - 0.5 for t, r, b in zip(translation, scale, base, strict=True))


def _whole(voxels: tuple[float, ...]) -> bool:
    return all(math.isclose(v, round(v), abs_tol=1e-6) for v in voxels)


def image_convention(multiscale: dict[str, Any], ndim: int, root: str) -> str | None:
    """The convention every level of the image fits (corner first: both agree where
    nothing is downsampled), or None when no one convention fits them all."""
    placed = [
        _raw_placement(multiscale, i, ndim, root)[1:] for i in range(len(multiscale["datasets"]))
    ]
    base = placed[0][0]
    for how in (CORNER, CENTRE):
        if all(_whole(_voxels(t, r, base, how)) for r, t in placed):
            return how
    return None


def level_placement(
    multiscale: dict[str, Any], index: int, ndim: int, root: str
) -> tuple[int, tuple[float, ...], tuple[int, ...]]:
    """``(spatial_ndim, resolution, offset)`` of level ``index`` from its metadata."""
    spatial_ndim, resolution, translation = _raw_placement(multiscale, index, ndim, root)
    base = _raw_placement(multiscale, 0, ndim, root)[1]
    how = image_convention(multiscale, ndim, root)
    # An image whose levels fit no one convention still opens the levels that fit one.
    for each in (how,) if how else (CORNER, CENTRE):
        voxels = _voxels(translation, resolution, base, each)
        if _whole(voxels):
            return spatial_ndim, resolution, tuple(round(v) for v in voxels)
    dataset = multiscale["datasets"][index]
    corner = _voxels(translation, resolution, base, CORNER)
    centre = _voxels(translation, resolution, base, CENTRE)
    raise ConfigError(
        f"level {index} ({dataset['path']!r}) of OME-Zarr image {root!r} is translated by "
        f"{list(translation)} at scale {list(resolution)}: {_shown(corner)} voxels from "
        f"the origin taking translations as voxel corners, {_shown(centre)} taking them "
        "as voxel centres (with level 0's); chunkgraph places voxels on an integer grid, "
        "so it reads images whose levels are all whole voxels apart under one of the two",
        field="scale",
    )


def _shown(voxels: tuple[float, ...]) -> str:
    return "(" + ", ".join(f"{v:g}" for v in voxels) + ")"


def open_level(root: str, mode: str, scale: int | str | None, options: StoreOptions) -> ZarrStorage:
    _, zarr_format, multiscale = read_multiscale(root, options)
    index = level_index(multiscale, scale, root)
    key = multiscale["datasets"][index]["path"]
    path = join(root, key)
    store = zarr_store(path, options, read_only=mode == "r")
    array = zarr.open_array(store=store, mode=mode, zarr_format=zarr_format)  # type: ignore[arg-type]
    spatial_ndim, resolution, offset = level_placement(multiscale, index, array.ndim, root)
    n_channel = array.ndim - spatial_ndim
    fill = array.fill_value
    meta = VolumeMeta(
        shape=tuple(array.shape),
        # Channel axes are read and written whole, however they are stored.
        chunks=tuple(array.shape[:n_channel]) + tuple(array.chunks[n_channel:]),
        dtype=np.dtype(array.dtype),
        fill_value=np.dtype(array.dtype).type(0 if fill is None else fill),
        spatial_ndim=spatial_ndim,
        offset=offset,
        aligned_writes=True,
        backend=BACKEND,
        resolution=resolution,
    )
    storage = ZarrStorage(path, array, meta, options)
    storage.reopen = (root, key)
    return storage


def default_axes(ndim: int, spatial_ndim: int, unit: str | None) -> list[dict[str, Any]]:
    """``t, c, z, y, x`` as far as needed: the space axes last, channels before them."""
    space = (
        [{"name": n, "type": "space"} for n in "zyx"[3 - spatial_ndim :]]
        if spatial_ndim <= 3
        else [{"name": f"d{i}", "type": "space"} for i in range(spatial_ndim)]
    )
    if unit:
        for axis in space:
            axis["unit"] = unit
    others = [{"name": "c", "type": "channel"}, {"name": "t", "type": "time"}][
        : ndim - spatial_ndim
    ]
    if len(others) < ndim - spatial_ndim:
        raise ConfigError(
            f"OME-Zarr images have at most a time and a channel axis before the space axes; "
            f"{ndim - spatial_ndim} non-spatial axes were asked for",
            field="spatial_ndim",
        )
    return list(reversed(others)) + space


def write_multiscale(
    root: str,
    version: str,
    axes: list[dict[str, Any]],
    datasets: list[tuple[str, tuple[float, ...], tuple[int, ...]]],
    options: StoreOptions,
    name: str | None = None,
    convention: str = DEFAULT_CONVENTION,
) -> None:
    """Write (or rewrite) the group's ``multiscales``: one dataset per (path, resolution, offset).

    Non-spatial axes get scale 1 and translation 0; the translation of a level is
    placed by ``convention`` (pixel centres by default, see above).
    """
    ndim = len(axes)
    listed = []
    base = datasets[0][1]
    for path, resolution, offset in datasets:
        n_channel = ndim - len(resolution)
        scale = [1.0] * n_channel + [float(r) for r in resolution]
        half = 0.5 if convention == CENTRE else 0.0
        translation = [0.0] * n_channel + [
            float((o + half) * r - half * b)
            for o, r, b in zip(offset, resolution, base, strict=True)
        ]
        transforms: list[dict[str, Any]] = [{"type": "scale", "scale": scale}]
        if any(translation):
            transforms.append({"type": "translation", "translation": translation})
        listed.append({"path": path, "coordinateTransformations": transforms})
    multiscale: dict[str, Any] = {"axes": axes, "datasets": listed}
    if name:
        multiscale["name"] = name
    store = zarr_store(root, options)
    if version == "0.4":
        multiscale = {"version": "0.4", **multiscale}
        group = zarr.open_group(store=store, mode="a", zarr_format=2)
        group.attrs.update({"multiscales": [multiscale]})
    else:
        group = zarr.open_group(store=store, mode="a", zarr_format=3)
        group.attrs.update({"ome": {"version": version, "multiscales": [multiscale]}})
