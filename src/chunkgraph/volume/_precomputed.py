"""Neuroglancer precomputed volumes, through TensorStore's ``neuroglancer_precomputed`` driver.

One ``info`` file lists the scales of a volume; a chunkgraph volume is one
scale, chosen by index or key (``scale=1``, ``scale="8_8_40"``). Axes are the
format's own ``x, y, z`` (what Neuroglancer, CloudVolume and the ``info`` say),
with the channels first when there are several::

    info scale                     Volume
    size, voxel_offset             shape, offset (x, y, z)
    resolution                     resolution
    chunk_sizes[0]                 read_chunks
    chunk_sizes[0], or the shard   chunks (what a write must cover whole)

A sharded scale stores many chunks in one shard object, written whole; its
write chunk (TensorStore's ``write_chunk``) is the shard's extent, so it is the
volume's ``chunks``: the flow then gives each shard one writer. Creating a
sharded scale is asking for ``write_chunks`` (a multiple of ``chunks``);
TensorStore picks the sharding parameters that make each shard that box.

Encodings: ``raw`` (any of the format's dtypes), ``compressed_segmentation``
(uint32, uint64 labels), ``jpeg`` (uint8, 1 or 3 channels, lossy); ``png`` is read
too. Other encodings (CloudVolume's compresso, crackle, fpzip, ...) and gzip or
damaged chunks: ``_precomputed_chunks``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.volume._formats import PRECOMPUTED_DTYPES
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._precomputed_chunks import PrecomputedView, chunk_layout, stored_suffix
from chunkgraph.volume._storage import VolumeMeta
from chunkgraph.volume._ts_view import (
    kvstore_spec,
    shared_context,
    tensorstore_module,
)

BACKEND = "precomputed"
ENCODINGS = ("raw", "compressed_segmentation", "jpeg")
# What TensorStore decodes: the encodings chunkgraph writes, and png.
READ_ENCODINGS = (*ENCODINGS, "png")
DTYPES = PRECOMPUTED_DTYPES
_ENCODING_DTYPES = {"compressed_segmentation": ("uint32", "uint64"), "jpeg": ("uint8",)}
_NOTE = (
    "precomputed volumes are written by whole chunks (whole shards when sharded): their "
    "encodings and shards are written whole, and TensorStore does not make a partial "
    "write atomic on an object store"
)


def read_info(root: str, options: StoreOptions) -> dict[str, Any]:
    ts = tensorstore_module("precomputed")
    store = ts.KvStore.open(kvstore_spec(root, options), context=shared_context()).result()
    found = store.read("info").result()
    if found.state != "value":
        raise VolumeNotFoundError(f"no precomputed volume at {root!r} (no info file there)")
    info: dict[str, Any] = json.loads(bytes(found.value))
    return info


def describe_scales(info: dict[str, Any]) -> str:
    return ", ".join(
        f"{i}: {s['key']!r} (size {tuple(s['size'])}, resolution {tuple(s['resolution'])})"
        for i, s in enumerate(info.get("scales", []))
    )


def scale_index(info: dict[str, Any], scale: int | str | None, root: str) -> int:
    """The index in ``info["scales"]`` that ``scale`` (index, key, or None for 0) names."""
    scales = info.get("scales", [])
    keys = [s["key"] for s in scales]
    if scale is None:
        scale = 0
    if isinstance(scale, str) and scale in keys:
        return keys.index(scale)
    is_int = isinstance(scale, int | np.integer) and not isinstance(scale, bool)
    if is_int and 0 <= int(scale) < len(scales):
        return int(scale)
    raise ConfigError(
        f"scale {scale!r} is not in precomputed volume {root!r}; it has "
        f"{len(scales)} scale(s), by index or key: {describe_scales(info)}",
        field="scale",
    )


def open_precomputed(
    root: str, mode: str, scale: int | str | None, options: StoreOptions
) -> PrecomputedView:
    info = read_info(root, options)
    index = scale_index(info, scale, root)
    ts = tensorstore_module("precomputed")
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": kvstore_spec(root, options),
        "scale_index": index,
    }
    chosen: dict[str, Any] = info["scales"][index]
    _check_readable(root, info, chosen)
    suffix = stored_suffix(root, chosen, options)
    store = ts.open(spec, open=True, read=True, write=mode == "r+", context=shared_context())
    return _as_view(root, store.result(), chosen, int(info["num_channels"]), options, suffix)


def _check_readable(root: str, info: dict[str, Any], scale: dict[str, Any]) -> None:
    """ConfigError for a scale TensorStore cannot decode (CloudVolume's other codecs, a
    dtype outside the format), naming it, instead of TensorStore's parse error."""
    encoding = scale.get("encoding")
    if encoding not in READ_ENCODINGS:
        raise ConfigError(
            f"scale {scale.get('key')!r} of precomputed volume {root!r} is encoded as "
            f"{encoding!r}, which chunkgraph does not read; it reads "
            f"{', '.join(READ_ENCODINGS)}. Re-encode the scale to one of them (CloudVolume, "
            "igneous), e.g. raw or compressed_segmentation for labels, raw or jpeg for images",
            field="path",
        )
    dtype = info.get("data_type")
    if dtype not in DTYPES:
        raise ConfigError(
            f"precomputed volume {root!r} has data_type {dtype!r}, which chunkgraph does not "
            f"read; it reads {', '.join(DTYPES)}",
            field="path",
        )


def _as_view(
    root: str,
    store: Any,
    scale: dict[str, Any],
    channels: int,
    options: StoreOptions,
    suffix: str = "",
) -> PrecomputedView:
    ts = tensorstore_module("precomputed")
    # TensorStore's axes are x, y, z, channel, from voxel_offset; a Volume's start at 0
    # with channels first (and none when there is one).
    view = store[ts.d["channel"][0]] if channels == 1 else store[ts.d["channel"].transpose[0]]
    view = view.translate_to[0]
    layout = store.chunk_layout
    write = tuple(int(c) for c in layout.write_chunk.shape[:3])
    read = tuple(int(c) for c in layout.read_chunk.shape[:3])
    size = tuple(int(s) for s in scale["size"])
    # A shard wider than the volume is the volume: say so in the chunks, as zarr would.
    write = tuple(min(w, s) if s else w for w, s in zip(write, size, strict=True))
    channel_shape = () if channels == 1 else (channels,)
    meta = VolumeMeta(
        shape=channel_shape + size,
        chunks=channel_shape + write,
        dtype=np.dtype(store.dtype.numpy_dtype),
        fill_value=np.dtype(store.dtype.numpy_dtype).type(0),
        spatial_ndim=3,
        offset=tuple(int(o) for o in scale.get("voxel_offset", (0, 0, 0))),
        aligned_writes=True,
        backend=BACKEND,
        resolution=tuple(float(r) for r in scale["resolution"]),
    )
    path = root.rstrip("/") + "/" + scale["key"]
    stored = store.spec(retain_context=False).to_json()["scale_metadata"]
    return PrecomputedView(
        path,
        view,
        meta,
        options,
        read_chunks=read,
        alignment_note=_NOTE,
        reopen=(root, scale["key"]),
        # A damaged chunk is named by the stored object it is in, a chunk or its shard, as
        # TensorStore has them (a created scale's sharding is TensorStore's choice).
        layout=chunk_layout(root, stored, meta.shape, channel_shape + write, suffix),
        suffix=suffix,
        kvstore=store.kvstore,
    )


def check_encoding(encoding: str, dtype: np.dtype[Any], channels: int) -> None:
    """ConfigError for an encoding the format cannot store this dtype or channel count in."""
    if encoding not in ENCODINGS:
        raise ConfigError(
            f"encoding {encoding!r} is not a precomputed encoding; valid: {', '.join(ENCODINGS)}",
            field="encoding",
        )
    if dtype.name not in DTYPES:
        raise ConfigError(
            f"dtype {dtype.name} cannot be stored in a precomputed volume; valid: "
            f"{', '.join(DTYPES)}",
            field="dtype",
        )
    allowed = _ENCODING_DTYPES.get(encoding)
    if allowed is not None and dtype.name not in allowed:
        raise ConfigError(
            f"encoding {encoding!r} stores {' or '.join(allowed)} only, not {dtype.name}; "
            f"use encoding='raw' for {dtype.name} (raw stores {', '.join(DTYPES)})",
            field="encoding",
        )
    if encoding == "jpeg" and channels not in (1, 3):
        raise ConfigError(
            f"encoding 'jpeg' stores 1 or 3 channels, not {channels}; use encoding='raw'",
            field="encoding",
        )


def scale_key(resolution: tuple[float, ...]) -> str:
    """The usual key of a scale: its resolution joined by ``_`` (``"8_8_40"``)."""
    return "_".join(f"{r:g}" for r in resolution)


def create_precomputed(
    root: str,
    meta: VolumeMeta,
    options: StoreOptions,
    *,
    encoding: str = "raw",
    write_chunks: tuple[int, ...] | None = None,
    layer_type: str | None = None,
    key: str | None = None,
) -> PrecomputedView:
    """Add a scale to the precomputed volume at ``root`` (writing its ``info`` if new).

    ``meta`` is as ``create`` built it: spatial axes x, y, z last, channels first.
    """
    if meta.spatial_ndim != 3 or meta.channel_ndim > 1:
        raise ConfigError(
            f"a precomputed volume has 3 spatial axes (x, y, z) and at most one channel axis "
            f"before them; shape {meta.shape} with spatial_ndim={meta.spatial_ndim} is not one",
            field="shape",
        )
    channels = meta.shape[0] if meta.channel_ndim else 1
    check_encoding(encoding, meta.dtype, channels)
    if meta.fill_value != 0:
        raise ConfigError(
            f"precomputed volumes read missing chunks as 0, not fill_value={meta.fill_value!r}; "
            "use fill_value=0",
            field="fill_value",
        )
    spatial_chunks = meta.chunks[meta.channel_ndim :]
    resolution = meta.resolution
    scale: dict[str, Any] = {
        "key": key or scale_key(resolution),
        "size": list(meta.shape[meta.channel_ndim :]),
        "chunk_size": list(spatial_chunks),
        "resolution": [float(r) for r in resolution],
        "voxel_offset": list(meta.offset),
        "encoding": encoding,
    }
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    spec: dict[str, Any] = {
        "driver": "neuroglancer_precomputed",
        "kvstore": kvstore_spec(root, options),
        "scale_metadata": scale,
        "multiscale_metadata": {
            "data_type": meta.dtype.name,
            "num_channels": channels,
            "type": layer_type
            or ("segmentation" if encoding == "compressed_segmentation" else "image"),
        },
    }
    if write_chunks is not None:
        shard = tuple(int(w) for w in write_chunks)
        if len(shard) != 3 or any(
            w <= 0 or w % c for w, c in zip(shard, spatial_chunks, strict=True)
        ):
            raise ConfigError(
                f"write_chunks {write_chunks!r} must be 3 multiples of chunks {spatial_chunks} "
                "(x, y, z): the extent of one shard",
                field="write_chunks",
            )
        _check_power_of_two_grid(shard, spatial_chunks)
        spec["schema"] = {"chunk_layout": {"write_chunk": {"shape": [*shard, channels]}}}
    ts = tensorstore_module("precomputed")
    try:
        store = ts.open(spec, create=True, open=True, context=shared_context()).result()
    except ValueError as err:
        raise ConfigError(
            f"cannot add scale {scale['key']!r} to precomputed volume {root!r}: {err}",
            field="path",
        ) from err
    return _as_view(root, store, scale, channels, options)


def _check_power_of_two_grid(shard: tuple[int, ...], chunks: tuple[int, ...]) -> None:
    # A shard is a box only when it holds a power-of-two number of chunks on each axis
    # (the format orders chunks by a Morton code and cuts shards from it by bits).
    counts = tuple(s // c for s, c in zip(shard, chunks, strict=True))
    if all(n & (n - 1) == 0 for n in counts):
        return
    nearest = tuple(c * 2 ** round(math.log2(n)) for n, c in zip(counts, chunks, strict=True))
    raise ConfigError(
        f"write_chunks {shard} hold {counts} chunks of {chunks} per axis; a precomputed shard "
        f"is a box only with a power of two on each axis, e.g. write_chunks {nearest}",
        field="write_chunks",
    )
