"""Stored chunks of a Zarr v3 array moved with zarr's own codecs and store, without its event loop.

Why. zarr-python runs every region read or write as tasks on its event-loop
thread, and each codec on a worker thread from there; the caller waits for
both hops. For one chunk of 32 KiB (zstd + crc32c) the hops cost about ten
times the decoding itself, and every chunked job pays them once per chunk.

What. For an unsharded Zarr v3 array on a regular grid whose codecs all have
zarr's synchronous forms (bytes, transpose, zstd, gzip, blosc, crc32c), on a
store with synchronous get/set/delete (zarr's ``LocalStore``; ``CountedStore``
for an object store), ``WholeChunks`` does what zarr's pipeline does, with the
same objects, on the caller's thread::

    read:  key ─store.get_sync─> bytes ─codecs' _decode_sync (last first)─> chunk ─> region
           (crc32c + zstd + bytes, the usual chain, in one step: ``_fast_decode``)
    write: region ─> chunk (edge padded with fill) ─codecs' _encode_sync─> store.set_sync

so the files are zarr's own byte for byte, checksums included. A missing
chunk reads as ``fill_value``; a chunk written that equals ``fill_value`` is
deleted instead, as zarr does unless the array's ``write_empty_chunks`` is on.

Reads serve any region (zarr too decodes each touched chunk whole); writes only
regions that cover every chunk they touch (one clipped by the array's edge
counts as whole). A partial-chunk write is a read-modify-write (a conditional
one on an object store) and stays on zarr's path, and so does everything on
arrays this does not serve (``whole_chunks_of`` returns None): Zarr v2, other
codecs or pipelines. Sharded arrays have a path of their own on the same
footing (``_shards``).

Pieces. ``read_pieces`` hands each chunk's part of a region to a callback as soon
as it is decoded, instead of copying it into one array for the region: a consumer
that reduces each chunk (a downsample, ``jobs._fused_read``) never holds the region
whole. ``read`` and ``read_pieces`` share one walk over the chunks (``_read_into``).

Several chunks. One chunk is done on the caller's thread. A region of more goes
to a pool of threads, at most ``in_flight_of(store)`` of its chunks at once:
zstd and the store's requests release the GIL, so chunks overlap on a disk (a
64 MiB region reads about 1.8x faster on two cores than chunk after chunk) with
zarr's ``async.concurrency`` of them, and an object store gets as many requests
in flight as its measured request and decode times call for (``_pace``). A
forked child starts a pool of its own (the parent's threads are not in it); an
object store its parent used is refused there (``_object_store.check_not_forked``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_grids import RegularChunkGrid
from zarr.core.codec_pipeline import BatchedCodecPipeline

from chunkgraph.volume._fast_decode import FastDecode, fast_decoder
from chunkgraph.volume._storage import Index

try:  # zarr >= 3.1.6: codecs and stores with synchronous forms
    from zarr.abc.codec import SupportsSyncCodec
    from zarr.abc.store import SupportsSyncStore
except ImportError:  # pragma: no cover - older zarr: everything stays on zarr's path
    SupportsSyncCodec = SupportsSyncStore = None  # type: ignore[assignment,misc]

T = TypeVar("T")
_UNSET = object()  # the fast decoder not looked for yet
R = TypeVar("R")

# One region's chunk cells: (grid coords, slices in the chunk, slices in the region).
Cell = tuple[tuple[int, ...], Index, Index]
# Where a decoded part goes: (slices in the region, an array or the fill scalar).
Put = Callable[[Index, Any], None]
# What ``read_pieces`` hands each piece to: (slices in the region, the piece).
Take = Callable[[Index, np.ndarray[Any, Any]], None]


def whole_chunks_of(array: Any, *, sharded: bool = False) -> WholeChunks | None:
    """The synchronous path for zarr ``array``, or None where zarr's own must serve it.

    ``sharded``: only whether the array is otherwise fit (grid, order, pipeline, store);
    ``_shards`` judges a sharded array's codecs and serves it.
    """
    if SupportsSyncCodec is None:  # pragma: no cover
        return None
    async_array = array._async_array
    meta = async_array.metadata
    pipeline = async_array.codec_pipeline
    if (
        meta.zarr_format != 3
        or (array.shards is not None) != sharded
        or not isinstance(meta.chunk_grid, RegularChunkGrid)
        # Another pipeline (one the user configured) keeps its own way of doing things.
        or type(pipeline) is not BatchedCodecPipeline
        or async_array.config.order != "C"
        or not isinstance(array.store, SupportsSyncStore)
    ):
        return None
    codecs = [
        *pipeline.array_array_codecs,
        pipeline.array_bytes_codec,
        *pipeline.bytes_bytes_codecs,
    ]
    if not sharded and not all(isinstance(codec, SupportsSyncCodec) for codec in codecs):
        return None
    return WholeChunks(array)


class WholeChunks:
    """Reads and whole-chunk writes of one zarr array, done synchronously (module docstring)."""

    def __init__(self, array: Any) -> None:

        async_array = array._async_array
        meta = async_array.metadata
        self._store = array.store
        self._pace = getattr(self._store, "pace", None)
        self._prefix = async_array.store_path.path
        self._meta = meta
        self._shape: tuple[int, ...] = tuple(meta.shape)
        self._chunks: tuple[int, ...] = tuple(meta.chunk_grid.chunk_shape)
        self._prototype = default_buffer_prototype()
        spec = meta.get_chunk_spec((0,) * len(self._shape), async_array.config, self._prototype)
        self._dtype = np.dtype(spec.dtype.to_native_dtype())
        self._fill = spec.fill_value
        self._write_empty = bool(async_array.config.write_empty_chunks)
        # A fill whose bits are all zero (0, False, +0.0) is told by a scan for a set byte.
        zero = not np.asarray(self._fill, self._dtype).reshape(1).view(np.uint8).any()
        self._zero_fill_kind = zero and self._dtype.kind in "biuf"
        # Each codec with the spec of what it is handed, as zarr's pipeline resolves them.
        pipeline = async_array.codec_pipeline
        self._codecs: list[tuple[Any, Any]] = []
        self._fast: FastDecode | object | None = _UNSET
        for codec in (
            *pipeline.array_array_codecs,
            pipeline.array_bytes_codec,
            *pipeline.bytes_bytes_codecs,
        ):
            self._codecs.append((codec, spec))
            spec = codec.resolve_metadata(spec)

    # -- reading -----------------------------------------------------------------------------

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        """A new array holding ``index``: each chunk it touches decoded, missing ones as fill."""
        index = self._bounded(index)
        cells = self._cells(index)
        shape = tuple(s.stop - s.start for s in index)
        if len(cells) == 1 and cells[0][1] == tuple(slice(0, c) for c in self._chunks):
            chunk = self._decoded(cells[0][0])  # the region is one whole chunk
            if chunk is None:
                return np.full(shape, self._fill, dtype=self._dtype)
            if chunk.dtype != self._dtype:  # a big-endian array decodes as stored
                return chunk.astype(self._dtype)
            return chunk if chunk.flags.writeable else chunk.copy()
        out = np.empty(shape, dtype=self._dtype)
        self._read_into(index, out.__setitem__)
        return out

    def read_pieces(self, index: Index, take: Take) -> None:
        """Hand ``take`` the region ``index`` piece by piece, each stored chunk's part (an
        inner chunk's, sharded) as soon as it is decoded: ``take(slices in the region,
        part)``, a missing chunk's part as fill (a read-only broadcast). On the chunk pool,
        in no set order; the pieces tile the region. What a reduction fused into the read
        consumes without the region ever being whole in memory."""

        def put(target: Index, value: Any) -> None:
            take(target, self._piece(target, value))

        self._read_into(self._bounded(index), put)

    def _read_into(self, index: Index, put: Put) -> None:
        """``put(slices in the region, chunk part or fill scalar)`` for each chunk ``index``
        (bounded) touches, on the chunk pool."""

        def fetch(cell: Cell) -> None:
            coords, inside, target = cell
            chunk = self._decoded(coords)
            put(target, self._fill if chunk is None else chunk[inside])

        each(fetch, self._cells(index), in_flight_of(self._store))

    def _piece(self, target: Index, value: Any) -> np.ndarray[Any, Any]:
        """``value`` as an array of the volume's dtype and ``target``'s shape: a fill
        scalar broadcast, a chunk decoded in its stored byte order made native."""
        if not isinstance(value, np.ndarray):
            shape = tuple(s.stop - s.start for s in target)
            return np.broadcast_to(np.asarray(value, self._dtype), shape)
        return value if value.dtype == self._dtype else value.astype(self._dtype)

    def _decoded(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any] | None:
        stored = self._store.get_sync(self._key(coords), prototype=self._prototype)
        return None if stored is None else self._decode(stored)

    def _decode(self, stored: Any) -> np.ndarray[Any, Any]:
        """One stored chunk's bytes through the codecs, last first (timed for a store that
        sizes its requests in flight by it, ``_pace``)."""
        start = time.perf_counter()
        fast = self._fast_decode()
        decoded = None if fast is None else fast(stored.as_numpy_array())
        if decoded is None:  # not a chain _fast_decode knows, or bytes it did not expect
            data = stored
            for codec, spec in reversed(self._codecs):
                data = codec._decode_sync(data, spec)
            decoded = np.asarray(data.as_numpy_array())
        if self._pace is not None:
            self._pace.work(time.perf_counter() - start)
        return decoded

    def _fast_decode(self) -> FastDecode | None:
        """The one-step decoder of ``_codecs`` (``_fast_decode``), made on first use: a
        subclass sets its own ``_codecs`` after this constructor."""
        if self._fast is _UNSET:
            self._fast = fast_decoder(self._codecs)
        return self._fast  # type: ignore[return-value]

    # -- writing -----------------------------------------------------------------------------

    def covers(self, index: Index) -> bool:
        """Whether ``index`` covers every chunk it touches whole (the array's edge counts)."""
        return all(
            s.start % c == 0 and (s.stop % c == 0 or s.stop == n)
            for s, c, n in zip(self._bounded(index), self._chunks, self._shape, strict=True)
        )

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        """Store ``data`` at ``index``, which ``covers`` whole chunks."""
        index = self._bounded(index)
        full = tuple(slice(0, c) for c in self._chunks)

        def put(cell: Cell) -> None:
            coords, inside, source = cell
            part = data[source]
            if inside == full:
                chunk = part
            else:  # clipped by the array's edge: the rest of the stored chunk is fill, as zarr's
                chunk = np.full(self._chunks, self._fill, dtype=self._dtype)
                chunk[inside] = part
            self._put(coords, chunk)

        each(put, self._cells(index), in_flight_of(self._store))

    def _put(self, coords: tuple[int, ...], chunk: np.ndarray[Any, Any]) -> None:
        key = self._key(coords)
        data = self._encode(chunk)
        if data is None:
            self._store.delete_sync(key)
        else:
            self._store.set_sync(key, data)

    def _encode(self, chunk: np.ndarray[Any, Any]) -> Any:
        """The bytes to store for ``chunk``, or None where zarr stores nothing (all fill)."""
        data: Any = self._prototype.nd_buffer.from_numpy_array(chunk)
        if not self._write_empty and self._all_fill(chunk, data):
            return None
        for codec, spec in self._codecs:
            data = codec._encode_sync(data, spec)
            if data is None:  # a codec may say "nothing to store", as zarr's pipeline reads it
                return None
        return data

    def _all_fill(self, chunk: np.ndarray[Any, Any], data: Any) -> bool:
        """zarr's test of an empty chunk (``all_equal``), in one pass for a zero fill.

        zarr compares floats with a fill of 0.0 by their bits (-0.0 is data) and the
        rest by value: for these kinds and a fill of zero bits both mean "no byte set".
        """
        if not self._zero_fill_kind:
            return bool(data.all_equal(self._fill))
        if chunk.dtype.kind == "f":
            chunk = np.ascontiguousarray(chunk).view(np.uint8)
        return not chunk.any()

    # -- helpers -----------------------------------------------------------------------------

    def _bounded(self, index: Index) -> Index:
        """``index`` with every start and stop spelled out (a channel axis comes as ``:``)."""
        return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, self._shape, strict=True))

    def _key(self, coords: tuple[int, ...]) -> str:
        key: str = self._meta.encode_chunk_key(coords)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _cells(self, index: Index) -> list[Cell]:
        return cells_of(index, self._chunks)


def cells_of(index: Index, grid: tuple[int, ...]) -> list[Cell]:
    """Every cell of ``grid`` that ``index`` (bounded) touches: its coords, and where the
    two overlap in each (slices in the cell, slices in the region)."""
    ranges = [
        range(s.start // c, -(-s.stop // c)) if s.stop > s.start else range(0)
        for s, c in zip(index, grid, strict=True)
    ]
    cells = []
    for coords in itertools.product(*ranges):
        inside, target = [], []
        for k, s, c in zip(coords, index, grid, strict=True):
            lo, hi = max(s.start, k * c), min(s.stop, (k + 1) * c)
            inside.append(slice(lo - k * c, hi - k * c))
            target.append(slice(lo - s.start, hi - s.start))
        cells.append((coords, tuple(inside), tuple(target)))
    return cells


# -- the pool for regions of several chunks ---------------------------------------------------

# Threads at most: the most requests in flight any store is given (``_object_zarr.Pace``).
POOL_THREADS = 64

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def in_flight_of(store: Any) -> int:
    """How many of ``store``'s requests one region keeps in flight: what the store measured
    of itself where it can (an object store's ``in_flight``), else zarr's concurrency."""
    measured = getattr(store, "in_flight", None)
    if callable(measured):
        return max(1, min(POOL_THREADS, int(measured())))
    return max(1, min(POOL_THREADS, int(zarr.config.get("async.concurrency") or 10)))


def each(fn: Callable[[T], R], items: Iterable[T], limit: int) -> list[R]:
    """``fn`` of every item, in order: on this thread for one, else on the pool with at
    most ``limit`` running at once (the first error raised, once those running are done)."""
    todo = list(items)
    if len(todo) <= 1 or limit <= 1:
        return [fn(item) for item in todo]
    pool = _chunk_pool()
    results: list[Any] = [None] * len(todo)
    running: dict[Future[R], int] = {}
    queue = iter(enumerate(todo))
    try:
        for i, item in itertools.islice(queue, limit):
            running[pool.submit(fn, item)] = i
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
                for i, item in itertools.islice(queue, 1):
                    running[pool.submit(fn, item)] = i
    finally:
        wait(running)  # nothing left running behind an error
    return results


def _chunk_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="chunkgraph-chunks")
        return _pool


def _forget_pool() -> None:
    # A forked child has none of the parent's threads: it starts a pool of its own.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
