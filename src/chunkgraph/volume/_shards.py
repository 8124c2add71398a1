"""Sharded Zarr v3 arrays on the direct path: each shard's index read once, the inner chunks
a read needs in as few ranged reads as the gaps between them allow.

Why. zarr-python reads part of a shard as one request for its index and then
one request per inner chunk, each through its event loop; a 2 x 2 x 2 block of
inner chunks is nine requests, nine round trips of an object store's latency
(20 ms each in a cloud region) where two would do.

What. ``WholeShards`` does what zarr's sharding codec does, with zarr's own
codec objects, on the caller's thread and the chunk pool (``_whole_chunks``)::

    read:  shard whole needed?   GET key ──────────────> index (its end, or start)
           else                  GET index (ranged) ──> entries of the inner chunks needed
                                   sorted by offset, merged where the gap between
                                   two is at most ``gap`` bytes ─> ranged GETs
           each inner chunk ─inner codecs' _decode_sync─> region (or, ``read_pieces``,
                                                           the caller's callback)
    write: shard (edge padded with fill) ─> each inner chunk in Morton order
           ─inner codecs─> bytes + index (index codecs) ─> one PUT

so a shard written here is zarr's byte for byte (inner chunks all fill left
out, a shard of nothing but fill deleted, as zarr does unless
``write_empty_chunks`` is on). ``gap`` is what a request costs in bytes: on an
object store, the bytes its latency could have carried (``Pace.gap``); on a
disk, a page. A missing shard reads as fill; an index that fails its checksum,
or points past its shard's end, is a decode error, which the backend turns into
``CorruptChunkError`` naming the shard (``_integrity``).

Writes of part of a shard read and merge it: they stay on zarr's path (a
conditional one on an object store), as partial-chunk writes do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.core.buffer import numpy_buffer_prototype
from zarr.core.indexing import morton_order_iter

from chunkgraph.volume._storage import Index
from chunkgraph.volume._whole_chunks import (
    Cell,
    Put,
    WholeChunks,
    cells_of,
    each,
    in_flight_of,
    whole_chunks_of,
)

try:
    from zarr.abc.codec import SupportsSyncCodec
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.codecs.sharding import ShardingCodec, ShardingCodecIndexLocation
except ImportError:  # pragma: no cover - older zarr: sharded arrays stay on zarr's path
    ShardingCodec = None  # type: ignore[assignment,misc]

MAX_UINT64 = 2**64 - 1
# Between two inner chunks on a disk: read the gap rather than make two reads of a page apart.
DISK_GAP = 4096
# Inner chunks decoded (or encoded) per task of the pool, at least, for a shard read
# (written) whole.
DECODES_PER_TASK = 8


def whole_shards_of(array: Any) -> WholeShards | None:
    """The direct path for sharded zarr ``array``, or None where zarr's own must serve it."""
    if ShardingCodec is None or array.shards is None:  # pragma: no cover - older zarr
        return None
    pipeline = array._async_array.codec_pipeline
    sharding = pipeline.array_bytes_codec
    if (
        not isinstance(sharding, ShardingCodec)
        or pipeline.array_array_codecs
        or pipeline.bytes_bytes_codecs
        or not all(
            isinstance(c, SupportsSyncCodec) for c in (*sharding.codecs, *sharding.index_codecs)
        )
    ):
        return None
    # Everything else (grid, order, store) as for an unsharded array.
    if whole_chunks_of(array, sharded=True) is None:
        return None
    return WholeShards(array)


@dataclass
class _Fetch:
    """One request's worth of a shard: ``[start, stop)`` of object ``key`` (None: already
    ``data``) and the inner chunks in it: (offset, length, slices in chunk, in region)."""

    key: str
    start: int | None
    stop: int | None
    parts: list[tuple[int, int, Index, Index]] = field(default_factory=list)
    data: Any = None


class WholeShards(WholeChunks):
    """Reads and whole-shard writes of one sharded zarr array (module docstring).

    The storage "chunk" of ``WholeChunks`` is the shard here (keys, cells, ``covers``);
    ``_codecs`` are the inner chunks' codecs.
    """

    def __init__(self, array: Any) -> None:
        super().__init__(array)
        async_array = array._async_array
        sharding = async_array.codec_pipeline.array_bytes_codec
        shard_spec = self._meta.get_chunk_spec(
            (0,) * len(self._shape), async_array.config, self._prototype
        )
        self._inner: tuple[int, ...] = tuple(sharding.chunk_shape)
        self._per_shard = tuple(s // c for s, c in zip(self._chunks, self._inner, strict=True))
        spec = sharding._get_chunk_spec(shard_spec)
        self._codecs = []
        for codec in sharding.codecs:
            self._codecs.append((codec, spec))
            spec = codec.resolve_metadata(spec)
        spec = sharding._get_index_chunk_spec(self._per_shard)
        self._index_codecs: list[tuple[Any, Any]] = []
        for codec in sharding.index_codecs:
            self._index_codecs.append((codec, spec))
            spec = codec.resolve_metadata(spec)
        self._index_size = int(sharding._shard_index_size(self._per_shard))
        self._index_at_end = sharding.index_location == ShardingCodecIndexLocation.end
        self._order = list(morton_order_iter(self._per_shard))
        gap = getattr(self._store, "gap", None)
        self._gap = gap if callable(gap) else lambda: DISK_GAP

    # -- reading -----------------------------------------------------------------------------

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        index = self._bounded(index)
        out = np.empty(tuple(s.stop - s.start for s in index), dtype=self._dtype)
        self._read_into(index, out.__setitem__)
        return out

    def _read_into(self, index: Index, put: Put) -> None:
        limit = in_flight_of(self._store)
        # First each shard's index (or the shard itself), then the ranges they point to.
        fetches = [f for found in each(self._plan(put), cells_of(index, self._chunks), limit)
                   for f in found]  # fmt: skip
        each(lambda fetch: self._place(fetch, put), fetches, limit)

    def _plan(self, put: Put) -> Any:
        def plan(cell: Cell) -> list[_Fetch]:
            coords, inside, target = cell
            key = self._key(coords)
            inner = self._inner_cells(inside, target)
            if len(inner) == self._stored_inner(coords):  # all of it: one request
                return self._whole(key, inner, put)
            entries = self._index_of(key)
            if entries is None:
                put(target, self._fill)
                return []
            return self._coalesced(key, entries, inner, put)

        return plan

    def _inner_cells(self, inside: Index, target: Index) -> list[Cell]:
        """The inner chunks of one shard's part ``inside``, placed in the region's ``target``."""
        cells = []
        for coords, within, local in cells_of(inside, self._inner):
            placed = tuple(
                slice(t.start + s.start, t.start + s.stop)
                for t, s in zip(target, local, strict=True)
            )
            cells.append((coords, within, placed))
        return cells

    def _stored_inner(self, coords: tuple[int, ...]) -> int:
        """How many inner chunks of shard ``coords`` lie in the array (the edge clips)."""
        n = 1
        for k, s, c, size in zip(coords, self._chunks, self._inner, self._shape, strict=True):
            n *= -(-(min(s, size - k * s)) // c)
        return n

    def _whole(self, key: str, inner: list[Cell], put: Put) -> list[_Fetch]:
        stored = self._store.get_sync(key, prototype=self._prototype)
        if stored is None:
            for _, _, target in inner:
                put(target, self._fill)
            return []
        raw = stored.as_numpy_array()
        size = len(raw)
        if size < self._index_size:
            raise ValueError(f"shard {key!r} is {size} bytes, shorter than its index")
        at = size - self._index_size if self._index_at_end else 0
        entries = self._decode_index(stored[at : at + self._index_size], key, size)
        found = self._parts(entries, inner, put)
        # The decoding is spread over the pool: a few inner chunks per task.
        return [
            _Fetch(key, None, None, found[i : i + DECODES_PER_TASK], raw)
            for i in range(0, len(found), DECODES_PER_TASK)
        ]

    def _index_of(self, key: str) -> np.ndarray[Any, Any] | None:
        wanted = (
            SuffixByteRequest(self._index_size)
            if self._index_at_end
            else RangeByteRequest(0, self._index_size)
        )
        stored = self._store.get_sync(key, prototype=numpy_buffer_prototype(), byte_range=wanted)
        if stored is None:
            return None
        if len(stored) != self._index_size:
            raise ValueError(
                f"shard {key!r} is {len(stored)} bytes, shorter than its index ({self._index_size})"
            )
        return self._decode_index(stored, key, None)

    def _decode_index(self, stored: Any, key: str, size: int | None) -> np.ndarray[Any, Any]:
        data = stored
        for codec, spec in reversed(self._index_codecs):
            data = codec._decode_sync(data, spec)  # the checksum fails a damaged index here
        entries = np.asarray(data.as_numpy_array())
        used = entries[..., 0] != MAX_UINT64
        ends = entries[..., 0][used] + entries[..., 1][used]
        if size is not None and ends.size and int(ends.max()) > size:
            raise ValueError(f"the index of shard {key!r} points past its end ({size} bytes)")
        return entries

    def _parts(
        self, entries: np.ndarray[Any, Any], inner: list[Cell], put: Put
    ) -> list[tuple[int, int, Index, Index]]:
        """(offset, length, within, target) of each stored inner chunk; the rest filled."""
        found = []
        for coords, within, target in inner:
            offset, length = (int(v) for v in entries[coords])
            if offset == MAX_UINT64:
                put(target, self._fill)
            else:
                found.append((offset, length, within, target))
        return found

    def _coalesced(
        self, key: str, entries: np.ndarray[Any, Any], inner: list[Cell], put: Put
    ) -> list[_Fetch]:
        """The ranged reads of ``inner``: entries sorted by offset, merged across small gaps."""
        gap = self._gap()
        fetches: list[_Fetch] = []
        for part in sorted(self._parts(entries, inner, put), key=lambda p: p[0]):
            offset, length = part[0], part[1]
            last = fetches[-1] if fetches else None
            if last is not None and last.stop is not None and offset - last.stop <= gap:
                last.stop = max(last.stop, offset + length)
            else:
                last = _Fetch(key, offset, offset + length)
                fetches.append(last)
            last.parts.append(part)
        return fetches

    def _place(self, fetch: _Fetch, put: Put) -> None:
        raw, base = fetch.data, 0
        if raw is None:
            assert fetch.start is not None and fetch.stop is not None
            got = self._store.get_sync(
                fetch.key,
                prototype=self._prototype,
                byte_range=RangeByteRequest(fetch.start, fetch.stop),
            )
            if got is None:  # deleted since its index was read: fill, as a missing shard
                for *_, target in fetch.parts:
                    put(target, self._fill)
                return
            raw, base = got.as_numpy_array(), fetch.start
            if len(raw) != fetch.stop - fetch.start:
                raise ValueError(f"shard {fetch.key!r} ends before its index says")
        for offset, length, within, target in fetch.parts:
            piece = self._prototype.buffer.from_array_like(
                raw[offset - base : offset - base + length]
            )
            put(target, self._decode(piece)[within])

    # -- writing -----------------------------------------------------------------------------

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        index = self._bounded(index)
        cells = cells_of(index, self._chunks)
        limit = in_flight_of(self._store)
        full = tuple(slice(0, c) for c in self._chunks)

        def put(cell: Cell, limit: int) -> None:
            coords, inside, source = cell
            shard = data[source]
            if inside != full:  # clipped by the array's edge: padded with fill, as zarr's
                shard = np.full(self._chunks, self._fill, dtype=self._dtype)
                shard[inside] = data[source]
            self._put_shard(coords, shard, limit)

        if len(cells) == 1:  # one shard: its inner chunks are encoded on the pool
            put(cells[0], limit)
        else:  # several: one shard a task
            each(lambda cell: put(cell, 1), cells, limit)

    def _put_shard(self, coords: tuple[int, ...], shard: np.ndarray[Any, Any], limit: int) -> None:
        key = self._key(coords)
        nd = self._prototype.nd_buffer.from_numpy_array(shard)
        if not self._write_empty and self._all_fill(shard, nd):
            self._store.delete_sync(key)
            return

        def encode(group: list[tuple[int, ...]]) -> list[Any]:
            return [
                self._encode(
                    shard[
                        tuple(
                            slice(i * c, (i + 1) * c) for i, c in zip(k, self._inner, strict=True)
                        )
                    ]
                )
                for k in group
            ]

        # A few inner chunks a task: one task each would cost more in hand-offs than zstd.
        step = max(DECODES_PER_TASK, -(-len(self._order) // limit))
        groups = [self._order[i : i + step] for i in range(0, len(self._order), step)]
        encoded = [chunk for group in each(encode, groups, limit) for chunk in group]
        entries = np.full((*self._per_shard, 2), MAX_UINT64, dtype="<u8")
        buffers, offset = [], 0
        for k, chunk in zip(self._order, encoded, strict=True):
            if chunk is None or len(chunk) == 0:
                continue
            entries[k] = (offset, len(chunk))
            offset += len(chunk)
            buffers.append(chunk)
        if not buffers:
            self._store.delete_sync(key)
            return
        index = self._encode_index(entries)
        if self._index_at_end:
            buffers.append(index)
        else:  # the offsets count the index before the chunks
            entries[entries[..., 0] != MAX_UINT64, 0] += len(index)
            buffers.insert(0, self._encode_index(entries))
        self._store.set_sync(key, self._prototype.buffer.create_zero_length().combine(buffers))

    def _encode_index(self, entries: np.ndarray[Any, Any]) -> Any:
        data: Any = self._prototype.nd_buffer.from_numpy_array(entries)
        for codec, spec in self._index_codecs:
            data = codec._encode_sync(data, spec)
        return data
