"""The TensorStore backend: the ``zarr3`` driver on the ``file`` key-value store.

It writes exactly the layout zarr-python writes (same ``zarr.json``, same
chunk keys ``c/i/j/k``, same codecs: bytes + zstd level 0 for
``compressor="default"``, bytes alone for ``None``, then ``crc32c`` when
``checksum=True``), so volumes move freely between the two backends. A region
that fails to decode is re-read chunk by chunk to name the damaged chunk
(``CorruptChunkError``, see ``_integrity``). TensorStore is an optional dependency: it is
imported only when this backend is used.

One TensorStore ``Context`` is shared per process so all volumes draw on one
pool of file-I/O and copy threads instead of each starting its own; its
cache pool is left at TensorStore's default (off) because chunk caching is
the ``Volume``'s business (``cache_bytes``), counted in its stats.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.volume._integrity import CRC32C, ChunkLayout, raise_corrupt_chunks
from chunkgraph.volume._storage import Index, VolumeMeta, meta_from_stored

BACKEND = "tensorstore"

# zarr-python's default codec chain for Zarr v3, mirrored so both backends write the same bytes.
_ZSTD = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
# The status codes TensorStore gives bytes that do not decode (a digest mismatch is
# DATA_LOSS; truncated or garbled zstd and short raw chunks are FAILED_PRECONDITION).
_DECODE_STATUSES = ("DATA_LOSS", "FAILED_PRECONDITION")


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError as err:
        raise ConfigError(
            "backend='tensorstore' needs the tensorstore package "
            "(pip install 'chunkgraph[tensorstore]'); or use backend='zarr', same files"
        ) from err
    return tensorstore


@functools.cache
def _context() -> Any:
    return _tensorstore().Context()


def _kvstore(path: str) -> Any:
    if "://" in path:
        return path
    return {"driver": "file", "path": path}


def _json_fill(value: Any) -> Any:
    """A fill value as Zarr v3 JSON (non-finite floats are spelled as strings)."""
    item = np.asarray(value).item()
    if isinstance(item, float) and not math.isfinite(item):
        return "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
    return item


class TensorStoreStorage:
    """A TensorStore handle seen through the ``Storage`` protocol."""

    def __init__(self, path: str, store: Any, meta: VolumeMeta) -> None:
        self.path = path
        self.meta = meta
        self._store = store

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        try:
            return self._read(index)
        except ValueError as error:
            if not _is_decode_error(error):
                raise
            raise_corrupt_chunks(self._layout(), index, self._read, _is_decode_error, error, "read")

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        try:
            self._store[index].write(data).result()
        except ValueError as error:
            # Only a partial-chunk write reads (to merge); a damaged chunk fails it here.
            if not _is_decode_error(error):
                raise
            raise_corrupt_chunks(
                self._layout(), index, self._read, _is_decode_error, error, "write"
            )

    def _read(self, index: Index) -> np.ndarray[Any, Any]:
        return np.asarray(self._store[index].read().result())

    def _layout(self) -> ChunkLayout:
        stored = self._store.spec(retain_context=False).to_json()["metadata"]
        return ChunkLayout(
            path=self.path,
            shape=tuple(stored["shape"]),
            grid=tuple(stored["chunk_grid"]["configuration"]["chunk_shape"]),
            encoding=stored.get("chunk_key_encoding", {"name": "default"}),
            offset=self.meta.offset,
            fill_value=self.meta.fill_value,
        )


def _is_decode_error(error: BaseException) -> bool:
    return isinstance(error, ValueError) and str(error).startswith(_DECODE_STATUSES)


def create_tensorstore(
    path: str, meta: VolumeMeta, compressor: object, checksum: bool, overwrite: bool
) -> TensorStoreStorage:
    ts = _tensorstore()
    if compressor not in ("default", None):
        raise ConfigError(
            f"compressor {compressor!r} is not supported; use 'default' (zstd) or None (raw bytes)"
        )
    bytes_codec: dict[str, Any] = {"name": "bytes"}
    if meta.dtype.itemsize > 1:
        bytes_codec["configuration"] = {"endian": "little"}
    codecs = [bytes_codec] + ([_ZSTD] if compressor == "default" else [])
    if checksum:
        codecs.append({"name": CRC32C})
    spec = {
        "driver": "zarr3",
        "kvstore": _kvstore(path),
        "metadata": {
            "shape": list(meta.shape),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(meta.chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "data_type": meta.dtype.name,
            "fill_value": _json_fill(meta.fill_value),
            "codecs": codecs,
            "attributes": meta.attrs(),
        },
    }
    if overwrite:
        # TensorStore's delete_existing removes only the chunks it knows; clear the directory
        # like zarr's overwrite does so no stale chunk of an older array survives.
        _remove_local(path)
    store = ts.open(spec, create=True, read=True, write=True, context=_context()).result()
    return TensorStoreStorage(path, store, meta)


def open_tensorstore(path: str, mode: str) -> TensorStoreStorage:
    ts = _tensorstore()
    spec = {"driver": "zarr3", "kvstore": _kvstore(path)}
    store = ts.open(spec, open=True, read=True, write=mode == "r+", context=_context()).result()
    stored = store.spec(retain_context=False).to_json()["metadata"]
    chunks = stored["chunk_grid"]["configuration"]["chunk_shape"]
    dtype = np.dtype(store.dtype.numpy_dtype)
    fill = stored.get("fill_value", 0)
    meta = meta_from_stored(
        stored["shape"], chunks, dtype, fill, stored.get("attributes", {}), BACKEND
    )
    return TensorStoreStorage(path, store, meta)


def _remove_local(path: str) -> None:
    if "://" not in path and os.path.isdir(path):
        import shutil

        shutil.rmtree(path)
