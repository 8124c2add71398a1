"""N5 datasets, through TensorStore's ``n5`` driver (a local directory or ``s3://``).

Axes are in the order of the dataset's ``attributes.json`` (``dimensions``,
``blockSize``), as TensorStore presents them: x first for data written by the
Java tools. The dataset's ``resolution`` attribute (the convention of n5-viewer
and BigDataViewer) is the volume's resolution; chunkgraph's own attributes
(offset, spatial axes) sit beside it under ``"chunkgraph"``, which other
tools ignore. ``compressor="default"`` is gzip, what every N5 reader decodes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._storage import ATTRS_KEY, VolumeMeta, meta_from_stored
from chunkgraph.volume._ts_view import (
    TensorStoreView,
    kvstore_spec,
    shared_context,
    tensorstore_module,
)

BACKEND = "n5"
_NOTE = (
    "N5 volumes here are written by whole blocks: TensorStore does not make a partial-block "
    "write atomic on an object store"
)
_ATTRIBUTES = "attributes.json"


def _kvstore(path: str, options: StoreOptions) -> Any:
    ts = tensorstore_module("N5")
    return ts.KvStore.open(kvstore_spec(path, options), context=shared_context()).result()


def read_attributes(path: str, options: StoreOptions) -> dict[str, Any]:
    found = _kvstore(path, options).read(_ATTRIBUTES).result()
    if found.state != "value":
        raise VolumeNotFoundError(f"no N5 dataset at {path!r} (no attributes.json there)")
    attrs: dict[str, Any] = json.loads(bytes(found.value))
    if "dimensions" not in attrs:
        raise VolumeNotFoundError(f"{path!r} is an N5 group, not a dataset (no 'dimensions')")
    return attrs


def open_n5(path: str, mode: str, options: StoreOptions) -> TensorStoreView:
    attrs = read_attributes(path, options)
    ts = tensorstore_module("N5")
    spec = {"driver": "n5", "kvstore": kvstore_spec(path, options)}
    store = ts.open(spec, open=True, read=True, write=mode == "r+", context=shared_context())
    return _as_view(path, store.result(), attrs, options)


def _as_view(
    path: str, store: Any, attrs: dict[str, Any], options: StoreOptions
) -> TensorStoreView:
    dtype = np.dtype(store.dtype.numpy_dtype)
    ours = dict(attrs.get(ATTRS_KEY, {}))
    ndim = len(attrs["dimensions"])
    spatial_ndim = int(ours.get("spatial_ndim", ndim))
    resolution = attrs.get("resolution")
    if resolution is not None and "resolution" not in ours:
        ours["resolution"] = list(resolution)[ndim - spatial_ndim :]
    ours["aligned_writes"] = True
    chunks = [int(b) for b in attrs["blockSize"]]
    shape = [int(d) for d in attrs["dimensions"]]
    n_channel = ndim - spatial_ndim
    meta = meta_from_stored(
        shape, shape[:n_channel] + chunks[n_channel:], dtype, 0, {ATTRS_KEY: ours}, BACKEND
    )
    return TensorStoreView(
        path,
        store,
        meta,
        options,
        read_chunks=tuple(chunks[n_channel:]),
        alignment_note=_NOTE,
        reopen=(path, None),
    )


def create_n5(
    path: str, meta: VolumeMeta, compressor: object, options: StoreOptions
) -> TensorStoreView:
    if compressor not in ("default", None):
        raise ConfigError(
            f"compressor {compressor!r} is not supported; use 'default' (gzip) or None (raw)",
            field="compressor",
        )
    if meta.fill_value != 0:
        raise ConfigError(
            f"N5 reads missing blocks as 0, not fill_value={meta.fill_value!r}; use fill_value=0",
            field="fill_value",
        )
    ts = tensorstore_module("N5")
    spec = {
        "driver": "n5",
        "kvstore": kvstore_spec(path, options),
        "metadata": {
            "dimensions": list(meta.shape),
            "blockSize": list(meta.chunks),
            "dataType": meta.dtype.name,
            "compression": {"type": "gzip"} if compressor == "default" else {"type": "raw"},
        },
    }
    try:
        store = ts.open(spec, create=True, context=shared_context()).result()
    except ValueError as err:
        raise ConfigError(f"cannot create N5 dataset {path!r}: {err}", field="path") from err
    kv = _kvstore(path, options)
    attrs = json.loads(bytes(kv.read(_ATTRIBUTES).result().value))
    n_channel = meta.channel_ndim
    attrs["resolution"] = [1] * n_channel + list(meta.resolution)
    attrs.update(meta.attrs())
    kv.write(_ATTRIBUTES, json.dumps(attrs).encode()).result()
    return _as_view(path, store, attrs, options)
