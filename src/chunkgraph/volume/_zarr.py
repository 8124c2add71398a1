"""The default backend: Zarr v3 through zarr-python 3 (a local directory or an object store).

Layout on disk is plain Zarr v3 (``zarr.json`` + ``c/…`` chunk files), the
same one the TensorStore backend reads and writes, so either backend opens a
volume made by the other. ``compressor="default"`` is zarr's own default
codec chain (bytes + zstd); ``None`` stores raw bytes. ``checksum=True`` (the
default of ``create``) appends ``crc32c`` to either chain (see ``_integrity``).

URLs (``s3://…``, ``gs://…``) go through zarr's ``ObjectStore`` over the
obstore store of ``_object_store`` (endpoint and credentials from the
environment, ``storage_options`` on top), rooted at the URL: the array's keys
are ``zarr.json`` and ``c/…`` under it, as on disk. Its requests are counted
(``RequestCounter``), and a write covering some chunk only in part is a
conditional read-modify-write, done again from the start when another writer
changed one of its chunks meanwhile (``_object_zarr``): adjacent unaligned
writes from any number of processes keep each other's voxels, with no lock.

Reads, and writes of whole chunks, of an unsharded array go straight to the
store and zarr's codecs on the caller's thread, without zarr's event loop
(``_whole_chunks``: the per-call cost of that loop is most of a small chunk's).
The rest is one zarr call per region: zarr fetches and decodes the touched
chunks concurrently and performs the read-modify-write of partial chunks
itself. A region that fails to decode is re-read chunk by chunk to
name the damaged chunk (``CorruptChunkError``); that costs nothing until a
read fails.

zarr runs a region's chunk reads and writes as tasks on an event loop of its own
(in a thread). When one of them fails (a full disk), zarr raises at once and the
region's other tasks go on, orphaned; zarr stops that loop at exit under any
still pending, and asyncio then prints "Task was destroyed but it is pending!" and
"Future exception was never retrieved" for each. ``settle_zarr_loop`` cancels them
and waits for them to end first, at exit (before zarr's own clean-up).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import random
import time
import uuid
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.core import sync as zarr_sync

from chunkgraph._errors import ChunkgraphError, ConfigError
from chunkgraph._util import named_os_error
from chunkgraph.volume._integrity import ChunkLayout, raise_corrupt_chunks
from chunkgraph.volume._object_store import (
    StoreOptions,
    endpoint_of,
    is_object_url,
    object_store,
    split_url,
)
from chunkgraph.volume._object_zarr import (
    CONFLICTS,
    ConditionalStore,
    CountedStore,
    RequestCounter,
)
from chunkgraph.volume._shards import whole_shards_of
from chunkgraph.volume._storage import Index, VolumeMeta, meta_from_stored
from chunkgraph.volume._store_errors import is_store_failure
from chunkgraph.volume._whole_chunks import Take, whole_chunks_of

BACKEND = "zarr"

# A partial-chunk write that keeps meeting other writers gives up after this many
# tries, sleeping a random 0..(2 ** try) ms (at most MAX_BACKOFF_S) between them.
MAX_CONFLICT_TRIES = 64
MAX_BACKOFF_S = 0.5

# How long exit waits for the tasks of zarr's loop to end once cancelled: a write
# already handed to a thread finishes in its own time, and nothing awaits it.
SETTLE_TIMEOUT_S = 5.0


class ZarrStorage:
    """A zarr-python ``Array`` seen through the ``Storage`` protocol."""

    # For a level of a multiscale image: (the image's root, the level's key), what
    # ``open`` takes to reach the level again in another process.
    reopen: tuple[str, int | str | None] | None = None
    # Set for a sharded array: the spatial chunks inside a shard (``Volume.read_chunks``).
    read_chunks: tuple[int, ...] | None = None

    def __init__(
        self, path: str, array: Any, meta: VolumeMeta, options: StoreOptions | None = None
    ) -> None:
        self.path = path
        self.meta = meta
        self.options = options or StoreOptions()
        self._array = array
        store = array.store
        self.requests: RequestCounter | None = (
            store.counter if isinstance(store, CountedStore) else None
        )
        # Reads and whole-chunk writes without zarr's event loop, where it can (_whole_chunks).
        self._direct = whole_chunks_of(array) or whole_shards_of(array)

    def stamp(self) -> str | None:
        """The token written when chunkgraph created this array in a bucket (None for one
        on a disk, which ``Volume.stamp`` tells by its inode, or made by another tool)."""
        token = self._array.attrs.get(CREATED_KEY)
        return f"created:{token}" if isinstance(token, str) else None

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        try:
            return self._read(index)
        except Exception as error:
            if not _is_decode_error(error):
                raise
            raise_corrupt_chunks(self._layout(), index, self._read, _is_decode_error, error, "read")

    def read_pieces(self, index: Index, take: Take) -> bool:
        """``index`` handed to ``take`` chunk by chunk as each is decoded
        (``WholeChunks.read_pieces``); False, with nothing read, off the direct path."""
        direct = self._direct
        if direct is None:
            return False
        try:
            direct.read_pieces(index, take)
        except Exception as error:
            if not _is_decode_error(error):
                raise
            raise_corrupt_chunks(self._layout(), index, self._read, _is_decode_error, error, "read")
        return True

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        try:
            if self._direct is not None and self._direct.covers(index):
                self._direct.write(index, data)
            elif self.requests is not None and not self._whole_chunks(index):
                self._write_conditionally(index, data)
            else:
                self._array[index] = data
        except Exception as error:
            # Only a partial-chunk write reads (to merge); a damaged chunk fails it here.
            if not _is_decode_error(error):
                raise
            raise_corrupt_chunks(
                self._layout(), index, self._read, _is_decode_error, error, "write"
            )

    def _read(self, index: Index) -> np.ndarray[Any, Any]:
        if self._direct is not None:
            return self._direct.read(index)
        return np.asarray(self._array[index])

    def _whole_chunks(self, index: Index) -> bool:
        """Whether ``index`` covers every chunk it touches whole (zarr reads none of them)."""
        grid = self._array.shards or self._array.chunks  # a shard is stored whole
        for s, c, n in zip(index, grid, self._array.shape, strict=True):
            start, stop, _ = s.indices(n)
            if start % c or (stop % c and stop != n):
                return False
        return True

    def _write_conditionally(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        """The region written through a ``ConditionalStore``, again while another writer wins."""
        from zarr.core.array import Array, AsyncArray
        from zarr.storage import StorePath

        plain = self._array
        assert self.requests is not None
        for attempt in range(MAX_CONFLICT_TRIES):
            # A fresh view per try: it remembers the ETags of this try's reads only.
            counted = plain.store
            view = ConditionalStore(
                counted.store, self.requests, url=counted.url, endpoint=counted.endpoint
            )
            config: Any = {"order": plain.order, "write_empty_chunks": True}
            array = Array(AsyncArray(plain.metadata, StorePath(view), config))
            try:
                array[index] = data
                return
            except CONFLICTS:
                self.requests.conflict()
                time.sleep(random.uniform(0, min(MAX_BACKOFF_S, 0.001 * 2**attempt)))
        raise OSError(
            f"writing {index} of {self.path!r}: a chunk it shares with other writers changed "
            f"before each of {MAX_CONFLICT_TRIES} conditional writes; too many writers share "
            "these chunks at once: align the writes to the chunks, or write fewer at a time"
        )

    def _layout(self) -> ChunkLayout:
        array = self._array
        return ChunkLayout(
            path=self.path,
            shape=tuple(array.shape),
            grid=tuple(array.shards or array.chunks),
            encoding=array.metadata.chunk_key_encoding.to_dict(),
            offset=self.meta.offset,
            fill_value=self.meta.fill_value,
        )


def _is_decode_error(error: BaseException) -> bool:
    # zarr's codecs fail with many types (ValueError from crc32c and short raw chunks,
    # RuntimeError from zstd and blosc, zlib.error from gzip); an OSError (StoreError
    # included) is the store failing to deliver bytes, not bytes failing to decode, and
    # so is any failed request that reaches here untranslated, and chunkgraph's own
    # refusals (a ConfigError is a ValueError too).
    return not isinstance(error, OSError | ChunkgraphError) and not is_store_failure(error)


def _compressors(compressor: object, checksum: bool) -> Any:
    if compressor not in ("default", None):
        raise ConfigError(
            f"compressor {compressor!r} is not supported; use 'default' (zstd) or None (raw bytes)"
        )
    if not checksum:
        return "auto" if compressor == "default" else None
    # Spelled out (zarr's "auto" is this zstd) because the checksum must come last.
    zstd = [ZstdCodec(level=0, checksum=False)] if compressor == "default" else []
    return [*zstd, Crc32cCodec()]


def zarr_store(path: str, options: StoreOptions, read_only: bool = False) -> Any:
    """What zarr is handed as ``store``: the directory, or a counted ``ObjectStore`` for a URL."""
    if not is_object_url(path):
        return path
    endpoint = endpoint_of(split_url(path)[0], options)
    store = object_store(path, options)
    return CountedStore(store, RequestCounter(), read_only=read_only, url=path, endpoint=endpoint)


def create_zarr(
    path: str,
    meta: VolumeMeta,
    compressor: object,
    checksum: bool,
    overwrite: bool,
    options: StoreOptions | None = None,
    zarr_format: int = 3,
    dimension_names: tuple[str, ...] | None = None,
    inner: tuple[int, ...] | None = None,
) -> ZarrStorage:
    """A new array; Zarr v2 ones (``zarr_format=2``) have ``/`` between chunk indices, as
    OME-Zarr 0.4 asks, and no checksum (v2 has room for one compressor, the last codec).
    ``inner``: a sharded Zarr v3 array's inner chunks (``meta.chunks`` are then its shards).
    """
    opts = options or StoreOptions()
    extra: dict[str, Any] = {}
    if zarr_format == 2:
        extra["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
        checksum = False
    elif dimension_names is not None:
        extra["dimension_names"] = dimension_names
    try:
        array = zarr.create_array(
            store=zarr_store(path, opts),
            shape=meta.shape,
            chunks=meta.chunks if inner is None else inner,
            shards=None if inner is None else meta.chunks,
            dtype=meta.dtype,
            fill_value=meta.fill_value,
            compressors=_compressors(compressor, checksum),
            zarr_format=zarr_format,  # type: ignore[arg-type]
            attributes=_created_attrs(path, meta),
            overwrite=overwrite,
            **extra,
        )
    except OSError as err:  # a read-only or full disk: zarr's own error names no file
        raise named_os_error(err, path, "creating the volume") from err
    storage = ZarrStorage(path, array, meta, opts)
    if inner is not None:  # as open_zarr sees it: reads decode the chunks inside a shard
        storage.read_chunks = tuple(inner[meta.channel_ndim :])
    return storage


# A token written once, when chunkgraph creates an array in a bucket: an object has no
# inode, and zarr.json written again with the same content has the same ETag, so this is
# what tells a volume deleted and created again at the same URL from the one before.
CREATED_KEY = "chunkgraph_created"


def _created_attrs(path: str, meta: VolumeMeta) -> dict[str, Any]:
    attrs = meta.attrs()
    if is_object_url(path):
        attrs[CREATED_KEY] = uuid.uuid4().hex
    return attrs


def open_zarr(
    path: str, mode: str, options: StoreOptions | None = None, zarr_format: int = 3
) -> ZarrStorage:
    opts = options or StoreOptions()
    store = zarr_store(path, opts, read_only=mode == "r")
    array = zarr.open_array(store=store, mode=mode, zarr_format=zarr_format)  # type: ignore[arg-type]
    backend = BACKEND if zarr_format == 3 else "zarr2"
    # A sharded array (made elsewhere) is written by whole shards: they are its chunks here,
    # and the chunks inside them what a read decodes.
    shards = array.shards if zarr_format == 3 else None
    meta = meta_from_stored(
        array.shape, shards or array.chunks, array.dtype, array.fill_value,
        array.attrs.asdict(), backend,
    )  # fmt: skip
    storage = ZarrStorage(path, array, meta, opts)
    if shards is not None:
        storage.read_chunks = tuple(array.chunks[meta.channel_ndim :])
    return storage


def settle_zarr_loop(timeout: float = SETTLE_TIMEOUT_S) -> None:
    """Cancel the tasks left on zarr's event loop and wait until they have ended."""
    loop = zarr_sync.loop[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def settle() -> None:
        here = asyncio.current_task()
        orphans = [t for t in asyncio.all_tasks() if t is not here]
        for task in orphans:
            task.cancel()
        await asyncio.gather(*orphans, return_exceptions=True)

    # At exit nothing is left to tell of a loop that does not answer in time.
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(settle(), loop).result(timeout)


# Registered after zarr's own (importing zarr registered it), so it runs before it.
atexit.register(settle_zarr_loop)
