"""Open and create volumes of the formats beside plain Zarr v3: the one place that picks a
format's module for a path (``_formats`` parses the prefix).

Without a prefix, what is at the path decides: an OME-Zarr multiscale group
(v0.4 or v0.5) opens one of its levels, a Zarr v2 array opens as one, and a
Zarr v3 array is left to the plain Zarr path of ``_registry`` (which also
serves volumes the TensorStore backend made).
"""

from __future__ import annotations

from typing import Any

import zarr

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.volume import _n5, _ome_zarr, _precomputed
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._storage import Storage, VolumeMeta
from chunkgraph.volume._zarr import create_zarr, open_zarr, zarr_store


def probe(place: str, options: StoreOptions) -> tuple[str, int] | None:
    """``("array" | "group", zarr format)`` of the Zarr node at ``place``, or None."""
    try:
        node = zarr.open(store=zarr_store(place, options, read_only=True), mode="r")
    except (FileNotFoundError, ValueError, TypeError, KeyError):
        return None
    kind = "group" if isinstance(node, zarr.Group) else "array"
    return kind, int(node.metadata.zarr_format)


def open_format(
    place: str, mode: str, backend: str | None, scale: int | str | None, options: StoreOptions
) -> Storage | None:
    """The storage of the volume at ``place``; None when no format prefix was given and
    ``place`` holds a plain Zarr v3 array (or nothing: the caller says what is missing)."""
    if backend == "precomputed":
        return _precomputed.open_precomputed(place, mode, scale, options)
    if backend == "ome-zarr":
        return _ome_zarr.open_level(place, mode, scale, options)
    if backend == "n5":
        _no_scale(place, scale, "an N5 dataset")
        return _n5.open_n5(place, mode, options)
    found = probe(place, options)
    if found is None:
        if backend == "zarr2":
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
    if backend == "zarr2":
        raise ConfigError(
            f"{place!r} is a Zarr v3 array, not v2; open it as zarr3://, zarr:// or a bare path",
            field="path",
        )
    return None


def _no_scale(place: str, scale: int | str | None, what: str) -> None:
    if scale is not None:
        raise ConfigError(
            f"scale={scale!r} picks a level of a multiscale volume, but {place!r} is {what}; "
            "open it without scale",
            field="scale",
        )


def exists(
    place: str, backend: str, meta: VolumeMeta, key: str | None, options: StoreOptions
) -> bool:
    """Whether the volume a ``create`` of ``backend`` would make at ``place`` is there."""
    if backend == "precomputed":
        try:
            info = _precomputed.read_info(place, options)
        except VolumeNotFoundError:
            return False
        wanted = key or _precomputed.scale_key(meta.resolution)
        return any(s["key"] == wanted for s in info.get("scales", []))
    if backend == "n5":
        try:
            _n5.read_attributes(place, options)
        except VolumeNotFoundError:
            return False
        return True
    return probe(place, options) is not None


def create_format(
    place: str,
    backend: str,
    meta: VolumeMeta,
    compressor: object,
    checksum: bool,
    options: StoreOptions,
    format_options: dict[str, Any],
) -> Storage:
    if backend == "precomputed":
        return _precomputed.create_precomputed(place, meta, options, **format_options)
    unused = sorted(k for k, v in format_options.items() if v is not None)
    if unused:
        raise ConfigError(
            f"{', '.join(unused)} apply to precomputed volumes only, not {backend}",
            field=unused[0],
        )
    if backend == "n5":
        return _n5.create_n5(place, meta, compressor, options)
    return create_zarr(
        place, meta, compressor, checksum, overwrite=False, options=options, zarr_format=2
    )
