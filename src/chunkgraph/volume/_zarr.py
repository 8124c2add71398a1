"""The default backend: Zarr v3 through zarr-python 3 (a local directory store).

Layout on disk is plain Zarr v3 (``zarr.json`` + ``c/…`` chunk files), the
same one the TensorStore backend reads and writes, so either backend opens a
volume made by the other. ``compressor="default"`` is zarr's own default
codec chain (bytes + zstd); ``None`` stores raw bytes.

Paths with a URL scheme (``s3://…``, ``gs://…``) are handed to zarr as they
are and go through its fsspec store; only local directories are exercised by
the test suite.

Regions are read and written in one zarr call each: zarr fetches and decodes
the touched chunks concurrently and performs the read-modify-write of partial
chunks itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from chunkgraph._errors import ConfigError
from chunkgraph.volume._storage import Index, VolumeMeta, meta_from_stored

BACKEND = "zarr"


class ZarrStorage:
    """A zarr-python ``Array`` seen through the ``Storage`` protocol."""

    def __init__(self, path: str, array: Any, meta: VolumeMeta) -> None:
        self.path = path
        self.meta = meta
        self._array = array

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        return np.asarray(self._array[index])

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        self._array[index] = data


def _compressors(compressor: object) -> Any:
    if compressor == "default":
        return "auto"
    if compressor is None:
        return None
    raise ConfigError(
        f"compressor {compressor!r} is not supported; use 'default' (zstd) or None (raw bytes)"
    )


def create_zarr(path: str, meta: VolumeMeta, compressor: object, overwrite: bool) -> ZarrStorage:
    array = zarr.create_array(
        store=path,
        shape=meta.shape,
        chunks=meta.chunks,
        dtype=meta.dtype,
        fill_value=meta.fill_value,
        compressors=_compressors(compressor),
        zarr_format=3,
        attributes=meta.attrs(),
        overwrite=overwrite,
    )
    return ZarrStorage(path, array, meta)


def open_zarr(path: str, mode: str) -> ZarrStorage:
    array = zarr.open_array(store=path, mode=mode, zarr_format=3)
    meta = meta_from_stored(
        array.shape, array.chunks, array.dtype, array.fill_value, array.attrs.asdict(), BACKEND
    )
    return ZarrStorage(path, array, meta)
