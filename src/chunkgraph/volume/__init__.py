"""Chunked n-d volumes: Zarr v3 (default), TensorStore and in-memory storage, on a local
disk or in an object store (``s3://``, ``gs://``, through the zarr backend); and the
formats of the field by prefix (``precomputed://``, ``zarr2://``, ``n5://``, OME-Zarr
images by level), with pyramids made by ``create_multiscale`` and ``add_level``.

    >>> import numpy as np
    >>> from chunkgraph import volume
    >>> from chunkgraph.geometry import Box
    >>> v = volume.create("scratch", (8, 8), (4, 4), "float32", backend="memory")
    >>> v.write(Box((0, 0), (4, 8)), np.ones((4, 8), "float32"))
    >>> float(v.read(Box((2, 2), (6, 6))).sum()), v.stats.chunks_read
    (8.0, 4)
    >>> volume.remove("scratch")

Storage-layer design: ``_storage.py`` (the backend protocol), ``_volume.py``
(coordinates, fill, alignment, cache, accounting), ``_registry.py``
(create/open/remove), one module per backend (``_whole_chunks.py``: the zarr backend's
reads and whole-chunk writes without zarr's event loop), ``_integrity.py`` (chunk checksums,
errors naming a damaged chunk), ``_cache.py``, ``_stats.py``; for object stores
``_object_store.py`` (reaching a bucket), ``_object_zarr.py`` (counted and
conditional zarr stores), ``_remote.py`` (a volume as a set of objects); formats:
``_formats.py`` (the table of formats, what each can do, path prefixes),
``_format_open.py`` (which module serves a format),
``_precomputed.py`` (with ``_precomputed_chunks.py``: other writers' chunk files,
damaged chunks named), ``_n5.py`` and ``_ts_view.py`` (TensorStore's drivers),
``_ome_zarr.py``, ``_pyramid.py``. The apply flow
lives in ``chunkgraph.flow``; ``volume.apply`` and its types are re-exported
from there on first use (the flow sits above the storage layer).
"""

from typing import Any

from chunkgraph._errors import CorruptChunkError
from chunkgraph.volume._cache import ChunkCache
from chunkgraph.volume._formats import (
    FORMATS,
    BackendName,
    Format,
    format_of,
    path_to_open,
    plain_zarr_backend,
    relative_place,
    shards_by_write_chunks,
    split_format,
)
from chunkgraph.volume._location import Location, is_url, place_of
from chunkgraph.volume._object_store import is_object_url, split_url
from chunkgraph.volume._pyramid import Level, add_level, create_multiscale
from chunkgraph.volume._registry import create, remove
from chunkgraph.volume._registry import open_volume as open
from chunkgraph.volume._stats import IOStats
from chunkgraph.volume._volume import Volume

# The flow's public names, reachable as ``chunkgraph.volume.<name>`` for user code
# written against that spelling; imported lazily so that storage does not import the flow.
_FLOW_NAMES = ("ApplyReport", "FlowEstimate", "FlowLockedError", "FlowOutputError", "apply")


def __getattr__(name: str) -> Any:
    if name in _FLOW_NAMES:
        from chunkgraph import flow  # deferred: a re-export from the layer above

        return getattr(flow, name)
    raise AttributeError(f"module 'chunkgraph.volume' has no attribute {name!r}")


__all__ = [
    "FORMATS",
    "ApplyReport",
    "BackendName",
    "ChunkCache",
    "CorruptChunkError",
    "FlowEstimate",
    "FlowLockedError",
    "FlowOutputError",
    "Format",
    "IOStats",
    "Level",
    "Location",
    "Volume",
    "add_level",
    "apply",
    "create",
    "create_multiscale",
    "format_of",
    "is_object_url",
    "is_url",
    "open",
    "path_to_open",
    "place_of",
    "plain_zarr_backend",
    "relative_place",
    "remove",
    "shards_by_write_chunks",
    "split_format",
    "split_url",
]
