"""Open and create volumes of the formats beside plain Zarr v3: the one place that binds a
row of the table (``_formats``) to the module that reads and writes it.

Without a prefix, what is at the path decides: an OME-Zarr multiscale group
(v0.4 or v0.5) opens one of its levels, a Zarr v2 array opens as one, an
``info`` file a precomputed volume, an N5 ``attributes.json`` an N5 dataset, and
a Zarr v3 array is left to the plain Zarr path of ``_registry`` (which also
serves volumes the TensorStore backend made).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import zarr

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.volume import _n5, _ome_zarr, _precomputed
from chunkgraph.volume._formats import FORMATS, Format, format_of
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._storage import Storage, VolumeMeta
from chunkgraph.volume._zarr import create_zarr, open_zarr, zarr_store

Scale = int | str | None


class _Engine(NamedTuple):
    """What serves one format: open a volume (a level, for a multiscale one), say whether
    the volume a ``create`` would make is there, make it, read the metadata that says what
    is at a bare path (None: found by Zarr's own metadata), and key the level a ``create``
    adds (None: a ``create`` makes the whole volume)."""

    open: Callable[[str, str, Scale, StoreOptions], Storage] | None
    exists: Callable[[str, VolumeMeta, StoreOptions], bool] | None
    create: Callable[[str, VolumeMeta, object, bool, StoreOptions, dict[str, Any]], Storage] | None
    read_metadata: Callable[[str, StoreOptions], object] | None = None
    scale_key: Callable[[VolumeMeta], str] | None = None


def probe(place: str, options: StoreOptions) -> tuple[str, int] | None:
    """``("array" | "group", zarr format)`` of the Zarr node at ``place``, or None."""
    try:
        node = zarr.open(store=zarr_store(place, options, read_only=True), mode="r")
    except (FileNotFoundError, ValueError, TypeError, KeyError):
        return None
    kind = "group" if isinstance(node, zarr.Group) else "array"
    return kind, int(node.metadata.zarr_format)


def _open_n5(place: str, mode: str, scale: Scale, options: StoreOptions) -> Storage:
    _no_scale(place, scale, "an N5 dataset")
    return _n5.open_n5(place, mode, options)


def _scale_key(meta: VolumeMeta) -> str:
    return _precomputed.scale_key(meta.resolution)


def _scale_exists(place: str, meta: VolumeMeta, options: StoreOptions) -> bool:
    try:
        info = _precomputed.read_info(place, options)
    except VolumeNotFoundError:
        return False
    return any(s["key"] == _scale_key(meta) for s in info.get("scales", []))


def _n5_exists(place: str, meta: VolumeMeta, options: StoreOptions) -> bool:
    try:
        _n5.read_attributes(place, options)
    except VolumeNotFoundError:
        return False
    return True


def _create_precomputed(
    place: str, meta: VolumeMeta, compressor: object, checksum: bool, options: StoreOptions,
    format_options: dict[str, Any],
) -> Storage:  # fmt: skip
    return _precomputed.create_precomputed(place, meta, options, **format_options)


def _create_n5(
    place: str, meta: VolumeMeta, compressor: object, checksum: bool, options: StoreOptions,
    format_options: dict[str, Any],
) -> Storage:  # fmt: skip
    return _n5.create_n5(place, meta, compressor, options)


def _create_zarr2(
    place: str, meta: VolumeMeta, compressor: object, checksum: bool, options: StoreOptions,
    format_options: dict[str, Any],
) -> Storage:  # fmt: skip
    return create_zarr(
        place, meta, compressor, checksum, overwrite=False, options=options, zarr_format=2
    )


_ENGINES = {
    format_of("precomputed"): _Engine(
        _precomputed.open_precomputed,
        _scale_exists,
        _create_precomputed,
        _precomputed.read_info,
        _scale_key,
    ),
    format_of("n5"): _Engine(_open_n5, _n5_exists, _create_n5, _n5.read_attributes),
    format_of("zarr2"): _Engine(None, None, _create_zarr2),
    format_of("ome-zarr"): _Engine(_ome_zarr.open_level, None, None),
}
# The formats found at a bare path by their own metadata file, in the table's order.
_SNIFFED = tuple(f for f in FORMATS if f in _ENGINES and _ENGINES[f].read_metadata)


def open_format(
    place: str, mode: str, backend: str | None, scale: Scale, options: StoreOptions
) -> Storage | None:
    """The storage of the volume at ``place``; None when no format prefix was given and
    ``place`` holds a plain Zarr v3 array (or nothing: the caller says what is missing)."""
    engine = None if backend is None else _ENGINES.get(format_of(backend))
    if engine is not None and engine.open is not None:
        return engine.open(place, mode, scale, options)
    found = probe(place, options)
    if found is None and backend is None:
        sniffed = _sniff(place, options)
        if sniffed is not None:
            return open_format(place, mode, sniffed.name, scale, options)
    if found is None:
        if engine is not None:  # a format Zarr metadata shows (Zarr v2) was asked for
            raise VolumeNotFoundError(f"no Zarr v2 array or OME-Zarr image at {place!r}")
        if scale is not None:
            raise VolumeNotFoundError(
                f"no multiscale volume at {place!r} (asked for scale={scale!r})"
            )
        return None
    kind, zarr_format = found
    if kind == "group":
        return _ome_zarr.open_level(place, mode, scale, options)
    _no_scale(place, scale, f"a single Zarr v{zarr_format} array")
    if zarr_format == 2:
        return open_zarr(place, mode, options, zarr_format=2)
    if engine is not None:
        raise ConfigError(
            f"{place!r} is a Zarr v3 array, not v2; open it as zarr3://, zarr:// or a bare path",
            field="path",
        )
    return None


def _sniff(place: str, options: StoreOptions) -> Format | None:
    """The format whose own metadata is at ``place`` (an ``info`` file: a precomputed
    volume; an ``attributes.json`` with dimensions: an N5 dataset), or None."""
    if "://" not in place:
        return next(
            (f for f in _SNIFFED if os.path.isfile(os.path.join(place, f.metadata[0]))), None
        )
    for fmt in _SNIFFED:
        try:
            _ENGINES[fmt].read_metadata(place, options)  # type: ignore[misc]  # see _SNIFFED
        except (VolumeNotFoundError, ConfigError):
            continue
        return fmt
    return None


def _no_scale(place: str, scale: Scale, what: str) -> None:
    if scale is not None:
        raise ConfigError(
            f"scale={scale!r} picks a level of a multiscale volume, but {place!r} is {what}; "
            "open it without scale",
            field="scale",
        )


def exists(place: str, fmt: Format, meta: VolumeMeta, options: StoreOptions) -> bool:
    """Whether the volume a ``create`` of ``fmt`` would make at ``place`` is there."""
    found = _ENGINES[fmt].exists
    return probe(place, options) is not None if found is None else found(place, meta, options)


def scale_to_create(fmt: Format, meta: VolumeMeta) -> str | None:
    """The key of the level a ``create`` of ``fmt`` adds (a precomputed scale is keyed by
    its resolution), or None where a ``create`` makes the whole volume."""
    key = _ENGINES[fmt].scale_key
    return None if key is None else key(meta)


def create_format(
    place: str,
    fmt: Format,
    meta: VolumeMeta,
    compressor: object,
    checksum: bool,
    options: StoreOptions,
    format_options: dict[str, Any],
) -> Storage:
    """Make a new volume of ``fmt`` (a format a path prefix names, beside Zarr v3) at ``place``."""
    make = _ENGINES[fmt].create
    if make is None:  # no prefix names it: its levels are made together
        raise ConfigError(f"{fmt.title}s are made by volume.create_multiscale", field="path")
    return make(place, meta, compressor, checksum, options, format_options)
