"""Multiscale volumes (pyramids): create the levels of an OME-Zarr image or a precomputed
volume together with the metadata other tools read, and add a coarser level to one.

Two calls, for two moments of a downsampling run:

* ``create_multiscale(path, levels, dtype)`` makes every level at once, from
  ``Level(shape, chunks, resolution, offset)`` descriptions, and returns them open
  for writing. ``path`` is a Zarr path (an OME-Zarr image: ``version="0.5"`` Zarr
  v3, or ``"0.4"`` Zarr v2) or ``precomputed://…`` (a scale per level, keyed by
  its resolution, e.g. ``"8_8_40"``).
* ``add_level(base, factor)`` makes the level ``factor`` times coarser than an
  open level ``base`` of such an image, and lists it in the image's metadata::

      base: bounds [o, o + s), resolution r   ->   new: bounds [floor(o / f), ceil((o + s) / f)),
                                                   resolution r * f, chunks of base (read chunks
                                                   and shard extent for precomputed), same dtype

  so that new voxel ``j`` covers base voxels ``[j * f, (j + 1) * f)``: a downsample
  writes new level box ``B`` from base box ``B * f``.

>>> import tempfile
>>> from chunkgraph import volume
>>> root = tempfile.mkdtemp() + "/img.zarr"
>>> base, = volume.create_multiscale(root, [volume.Level((64, 64, 16), (32, 32, 8), (4, 4, 40))],
...                                  "uint8")
>>> half = volume.add_level(base, (2, 2, 1))
>>> half.shape, half.resolution, volume.open(root, scale=1).resolution
((32, 32, 16), (8, 8, 40), (8, 8, 40))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from chunkgraph._errors import ConfigError
from chunkgraph._util import as_int_tuple
from chunkgraph.volume import _ome_zarr, _precomputed
from chunkgraph.volume._formats import FORMATS, Format, by_prefix, format_of, split_format
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._registry import _build_meta, _normalise_path, open_volume
from chunkgraph.volume._storage import as_resolution
from chunkgraph.volume._volume import Volume
from chunkgraph.volume._zarr import create_zarr

OME_ZARR = format_of("ome-zarr")


class Level(NamedTuple):
    """One level of a pyramid, as ``create_multiscale`` takes it.

    Attributes:
        shape: Every axis's extent, channels first.
        chunks: Every axis's storage chunk, channels first.
        resolution: The physical size of a voxel per spatial axis.
        offset: Where the spatial axes start, in this level's voxels; None: 0.
        write_chunks: A sharded precomputed scale's shard extent (x, y, z); None:
            unsharded.
    """

    shape: Sequence[int]
    chunks: Sequence[int]
    resolution: Sequence[float]
    offset: Sequence[int] | None = None
    write_chunks: Sequence[int] | None = None


def create_multiscale(
    path: str | os.PathLike[str],
    levels: Sequence[Level | tuple[Any, ...]],
    dtype: Any,
    *,
    version: str = "0.5",
    encoding: str = "raw",
    fill_value: Any = 0,
    compressor: object = "default",
    checksum: bool = True,
    unit: str | None = None,
    name: str | None = None,
    storage_options: Any = None,
) -> list[Volume]:
    """Create a multiscale volume's levels and metadata; return the levels open ``r+``.

    OME-Zarr: the arrays are ``"0"``, ``"1"``, … of the group, its ``multiscales``
    lists them. Precomputed: levels have 3 spatial axes x, y, z and at most one channel
    axis.

    Args:
        path: A Zarr path (an OME-Zarr image) or ``precomputed://...`` (a scale per
            level, keyed by its resolution).
        levels: ``Level(shape, chunks, resolution, offset, write_chunks)`` per level,
            or tuples of those fields, finest first.
        dtype: A numpy dtype or its name, every level's.
        version: The OME-Zarr version: ``"0.5"`` (Zarr v3, the default) or ``"0.4"``
            (Zarr v2).
        encoding: Every precomputed scale's encoding: ``"raw"`` (the default),
            ``"compressed_segmentation"`` or ``"jpeg"``.
        fill_value: What a voxel never written reads as.
        compressor: ``"default"`` or None (raw bytes), as for ``create``.
        checksum: End each Zarr v3 level's codec chain with crc32c, as for ``create``.
        unit: The unit of the space axes in the OME-Zarr metadata (``"nanometer"``);
            None: none written.
        name: The multiscale's name in the OME-Zarr metadata; None: none.
        storage_options: Options of a URL's object store (credentials, endpoint,
            region: obstore's configuration keys); secret ones are never shown, written
            or pickled. None: the environment's.

    Returns:
        The levels, open ``r+``, finest first.
    """
    if not levels:
        raise ConfigError("levels is empty; give at least one Level", field="levels")
    prefix, place = split_format(os.fspath(path))
    opts = StoreOptions.of(storage_options)
    specs = [Level(*lv) if not isinstance(lv, Level) else lv for lv in levels]
    root = _normalise_path(place, "zarr")
    row = None if prefix is None else by_prefix(prefix)
    if row is not None and row.multiscale:  # precomputed://: a scale per level
        return [_add_precomputed(root, lv, dtype, fill_value, encoding, opts) for lv in specs]
    if row is not None and row.engine != OME_ZARR.engine:
        raise ConfigError(
            f"{path!r}: multiscale volumes are OME-Zarr (a Zarr path) or "
            + " or ".join(f"{f.prefixes[0]}://" for f in FORMATS if f.multiscale and f.prefixes)
            + " ones",
            field="path",
        )
    zarr_format = _zarr_format(path, prefix, version)
    first = specs[0]
    ndim, spatial_ndim = len(first.shape), len(first.resolution)
    axes = _ome_zarr.default_axes(ndim, spatial_ndim, unit)
    placed = []
    for index, lv in enumerate(specs):
        meta = _level_meta(lv, dtype, fill_value, index)
        level_path = _ome_zarr.join(root, str(index))
        create_zarr(
            level_path, meta, compressor, checksum, overwrite=False, options=opts,
            zarr_format=zarr_format,
            dimension_names=tuple(a["name"] for a in axes) if zarr_format == 3 else None,
        )  # fmt: skip
        placed.append((str(index), meta.resolution, meta.offset))
    _ome_zarr.write_multiscale(root, version, axes, placed, opts, name)
    return [
        open_volume(root, "r+", backend=OME_ZARR.name, storage_options=opts, scale=i)
        for i in range(len(specs))
    ]


def _zarr_format(path: str | os.PathLike[str], prefix: str | None, version: str) -> int:
    """The Zarr format of an OME-Zarr image of ``version``, checked against a prefix
    that names one (``zarr2://``, ``zarr3://``)."""
    if version not in _ome_zarr.VERSIONS:
        raise ConfigError(
            f"OME-Zarr version {version!r} is not written here; valid: "
            f"{', '.join(_ome_zarr.VERSIONS)} (0.4 is Zarr v2, 0.5 Zarr v3)",
            field="version",
        )
    zarr_format = _ome_zarr.VERSIONS[version]
    if (prefix == "zarr2" and zarr_format != 2) or (prefix == "zarr3" and zarr_format != 3):
        raise ConfigError(
            f"{path!r} asks for {prefix} but OME-Zarr {version} is Zarr v{zarr_format}",
            field="version",
        )
    return zarr_format


def _level_meta(lv: Level, dtype: Any, fill_value: Any, index: int) -> Any:
    shape = as_int_tuple(lv.shape, f"levels[{index}].shape")
    resolution = as_resolution(tuple(lv.resolution), len(lv.resolution))
    return _build_meta(
        shape, lv.chunks, dtype, fill_value, len(resolution), lv.offset, True, "zarr", resolution
    )


def _add_precomputed(
    root: str, lv: Level, dtype: Any, fill_value: Any, encoding: str, opts: StoreOptions
) -> Volume:
    meta = _build_meta(
        lv.shape, lv.chunks, dtype, fill_value, 3, lv.offset, True, "precomputed",
        tuple(lv.resolution),
    )  # fmt: skip
    write = None if lv.write_chunks is None else as_int_tuple(lv.write_chunks, "write_chunks")
    storage = _precomputed.create_precomputed(
        root, meta, opts, encoding=encoding, write_chunks=write
    )
    return Volume(storage, "r+")


def add_level(
    base: Volume,
    factor: Sequence[int] | int,
    *,
    chunks: Sequence[int] | None = None,
    write_chunks: Sequence[int] | None = None,
    exist_ok: bool = False,
) -> Volume:
    """Create the level ``factor`` times coarser than ``base`` and return it open ``r+``.

    ``base`` is a level of an OME-Zarr image or a precomputed volume (see the module
    docstring); the new level is listed in the image's metadata.

    Args:
        base: An open level of an OME-Zarr image or a precomputed volume.
        factor: How many base voxels one new voxel spans: an int for every spatial
            axis, or one per spatial axis.
        chunks: The new level's spatial chunks; None: ``base``'s read chunks.
        write_chunks: A sharded precomputed scale's shard extent; None: ``base``'s
            when it is sharded.
        exist_ok: Open a level already there at that resolution, after checking its
            shape and offset are the ones this would create.

    Returns:
        The new level, open ``r+``.
    """
    reach = base.level_of
    if reach is None:
        raise ConfigError(
            "add_level needs a level of a multiscale volume ("
            + ", ".join(f.title for f in FORMATS if f.multiscale)
            + f"; opened with volume.open(path, scale=...)); {base.path!r} is a "
            f"{base.backend} volume",
            field="base",
        )
    n = base.spatial_ndim
    f = (factor,) * n if isinstance(factor, int) else as_int_tuple(factor, "factor")
    if len(f) != n or any(x < 1 for x in f):
        raise ConfigError(
            f"factor {factor!r} must be one integer >= 1 per spatial axis ({n})", field="factor"
        )
    start = tuple(o // x for o, x in zip(base.bounds.start, f, strict=True))
    stop = tuple(-(-e // x) for e, x in zip(base.bounds.stop, f, strict=True))
    coarser = _Coarser(
        shape=base.channel_shape + tuple(b - a for a, b in zip(start, stop, strict=True)),
        start=start,
        chunks=tuple(base.read_chunks) if chunks is None else as_int_tuple(chunks, "chunks"),
        resolution=tuple(r * x for r, x in zip(base.resolution, f, strict=True)),
        default_chunks=chunks is None,
        write_chunks=write_chunks,
        exist_ok=exist_ok,
    )
    return _ADD_LEVEL[base.format](base, reach, coarser)


class _Coarser(NamedTuple):
    """The level ``add_level`` makes: all axes' shape, spatial start, chunks and resolution,
    whether the chunks are the base's (a sharded base then gives its shards too), and the
    ``write_chunks`` and ``exist_ok`` asked for."""

    shape: tuple[int, ...]
    start: tuple[int, ...]
    chunks: tuple[int, ...]
    resolution: tuple[float, ...]
    default_chunks: bool
    write_chunks: Sequence[int] | None
    exist_ok: bool


def _add_scale(base: Volume, reach: tuple[str, int | str | None], new: _Coarser) -> Volume:
    """A new scale of a precomputed volume, encoded as ``base``'s."""
    root, opts = reach[0], base.storage_options
    sharded = tuple(base.spatial_chunks) != tuple(base.read_chunks)
    shard = new.write_chunks if new.write_chunks is not None else (
        base.spatial_chunks if sharded and new.default_chunks else None
    )  # fmt: skip
    lv = Level(new.shape, base.channel_shape + new.chunks, new.resolution, new.start, shard)
    key = _precomputed.scale_key(as_resolution(new.resolution, base.spatial_ndim))
    info = _precomputed.read_info(root, opts)
    if any(s["key"] == key for s in info["scales"]):
        return _existing(root, base.format, key, new, opts)
    encoding = info["scales"][_precomputed.scale_index(info, reach[1], root)]["encoding"]
    return _add_precomputed(root, lv, base.dtype, 0, encoding, opts)


def _add_ome_level(base: Volume, reach: tuple[str, int | str | None], new: _Coarser) -> Volume:
    """A new level of an OME-Zarr image, listed in its ``multiscales`` in the convention
    its levels were written in."""
    root, opts, n = reach[0], base.storage_options, base.spatial_ndim
    version, zarr_format, multiscale = _ome_zarr.read_multiscale(root, opts)
    res_key = as_resolution(new.resolution, n)
    for i in range(len(multiscale["datasets"])):
        _, level_res, _ = _ome_zarr.level_placement(multiscale, i, base.ndim, root)
        if as_resolution(level_res, n) == res_key:
            return _existing(root, base.format, i, new, opts)
    key = str(len(multiscale["datasets"]))
    while key in {d["path"] for d in multiscale["datasets"]}:
        key = f"{key}_"
    meta = _build_meta(
        new.shape, base.channel_shape + new.chunks, base.dtype, base.fill_value, n, new.start,
        True, "zarr", new.resolution,
    )  # fmt: skip
    create_zarr(
        _ome_zarr.join(root, key), meta, "default", True, overwrite=False, options=opts,
        zarr_format=zarr_format,
        dimension_names=tuple(a["name"] for a in multiscale["axes"]) if zarr_format == 3 else None,
    )  # fmt: skip
    placed = [
        (d["path"], *_ome_zarr.level_placement(multiscale, i, base.ndim, root)[1:])
        for i, d in enumerate(multiscale["datasets"])
    ]
    placed.append((key, meta.resolution, meta.offset))
    # The image's levels keep the convention they were written in (one level: either).
    found = _ome_zarr.image_convention(multiscale, base.ndim, root)
    keep = found if found is not None and len(placed) > 2 else _ome_zarr.DEFAULT_CONVENTION
    _ome_zarr.write_multiscale(
        root, version, multiscale["axes"], placed, opts, multiscale.get("name"), keep
    )
    return open_volume(root, "r+", backend=OME_ZARR.name, storage_options=opts, scale=key)


# How a level is added to a volume of each multiscale format.
_ADD_LEVEL = {format_of("precomputed"): _add_scale, OME_ZARR: _add_ome_level}


def _existing(
    root: str, fmt: Format, scale: int | str, new: _Coarser, opts: StoreOptions
) -> Volume:
    found = open_volume(root, "r+", backend=fmt.name, storage_options=opts, scale=scale)
    if not new.exist_ok:
        raise ConfigError(
            f"the {fmt.name} volume {root!r} already has a level at that resolution "
            f"(scale {scale!r}); pass exist_ok=True to reuse it",
            field="factor",
        )
    if found.shape != new.shape or found.offset != new.start:
        raise ConfigError(
            f"level {scale!r} of {root!r} has shape {found.shape} and offset {found.offset}, "
            f"but this base and factor make shape {new.shape} and offset {new.start}; "
            "remove it first",
            field="factor",
        )
    return found
