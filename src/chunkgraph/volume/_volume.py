"""``Volume``: a chunked n-d array placed in global coordinates, read and written by boxes.

Coordinates. The trailing ``spatial_ndim`` axes are spatial; any leading axes
are channels, always read and written whole. ``bounds`` is the spatial box
``[offset, offset + spatial_shape)`` in a global space shared by all volumes;
storage chunks are aligned to ``offset``. ``read``/``write`` take spatial
boxes in global coordinates::

    read(box):   box ∩ bounds ──translate by -offset──> backend region
                 (the rest of box is fill_value)
    write(box):  check dtype/shape ─> crop to bounds ─> check alignment ─> backend
                 ─> invalidate cached chunks ─> count

Reads. With the cache off (``cache_bytes=0``) the needed region is fetched in
one backend call and returned as is (no copy when the box lies inside the
bounds). With the cache on, the region is assembled chunk by chunk from the
cache (LRU, or kept by a plan of reads: ``plan_reads``); the missing chunks are
fetched together in one backend call covering their bounding box. Either way the stats
count the whole storage chunks involved (see ``_stats``).

Writes. ``aligned_writes=True`` volumes accept only boxes that, once cropped
to the bounds, cover whole storage chunks (a chunk clipped by the volume edge
is whole); this is what makes concurrent writers of disjoint boxes race-free.
``aligned_writes=False`` lets the backend read-modify-write partial chunks;
the caller then owns each chunk. Every check runs before anything is written.

A write the file system refuses (a full disk, a read-only mount) raises an
``OSError`` of the same ``errno`` that names the volume's path and the box, and for
a full disk how much room is left there (``_util.named_os_error``): the store's own
error names neither.

Thread safety: concurrent reads, and concurrent writes to disjoint storage
chunks, are safe (backends are, the cache and counters lock). Pickling an
on-disk volume pickles its path, mode and cache size; it is reopened where
it is unpickled. A volume on an object store pickles its URL and its public
storage options (the names of secret ones, never their values): the receiving
process's environment supplies credentials (``_remote``).
"""

from __future__ import annotations

import copyreg
import dataclasses
import itertools
import math
import os
from collections.abc import Callable
from operator import le, sub
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from chunkgraph._errors import AlignmentError, ConfigError
from chunkgraph._util import named_os_error
from chunkgraph.geometry import Box
from chunkgraph.volume._cache import ChunkCache
from chunkgraph.volume._formats import Format, format_of
from chunkgraph.volume._location import Location
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._stats import IOStats, _IOCounters

if TYPE_CHECKING:
    from collections.abc import Callable

    from chunkgraph.volume._storage import Index, Storage


class Volume:
    """A chunked array in global coordinates; create with ``volume.create`` / ``volume.open``.

    Args:
        storage: The backend's open array (what ``create`` and ``open`` make).
        mode: ``"r"`` (read only) or ``"r+"`` (read and write).
        cache_bytes: The size of this handle's chunk cache; 0 turns it off.

    >>> from chunkgraph import volume
    >>> v = volume.create("doc-example", (4, 4), (2, 2), "uint8", backend="memory", offset=(10, 10))
    >>> v.write(Box((10, 10), (12, 14)), np.ones((2, 4), "uint8"))
    >>> v.read(Box((11, 9), (13, 11))).tolist()
    [[0, 1], [0, 0]]
    >>> volume.remove("doc-example")
    """

    def __init__(self, storage: Storage, mode: str, cache_bytes: int = 0) -> None:
        if mode not in ("r", "r+"):
            raise ConfigError(f"mode must be 'r' or 'r+', got {mode!r}")
        if cache_bytes < 0:
            raise ConfigError(
                f"cache_bytes must be >= 0 (0 turns the cache off), got {cache_bytes}"
            )
        meta = storage.meta
        self._storage = storage
        self._meta = meta
        self._mode = mode
        self._cache_bytes = cache_bytes
        self._offset = meta.offset
        self._cache = ChunkCache(cache_bytes) if cache_bytes > 0 else None
        self._counters = _IOCounters()
        n_channel = meta.channel_ndim
        self._channel_shape: tuple[int, ...] = meta.shape[:n_channel]
        self._spatial_chunks: tuple[int, ...] = meta.chunks[n_channel:]
        # What a read decodes: the chunk inside a shard in a sharded format. Reads are
        # cached and counted by it; writes are checked and counted by the shard.
        found = getattr(storage, "read_chunks", None)
        self._read_chunks: tuple[int, ...] = self._spatial_chunks if found is None else found
        self._spatial_shape = meta.shape[n_channel:]
        self._bounds = Box(
            meta.offset, tuple(o + s for o, s in zip(meta.offset, self._spatial_shape, strict=True))
        )
        self._channel_index: Index = tuple(slice(None) for _ in self._channel_shape)
        self._itemsize = meta.dtype.itemsize * math.prod(self._channel_shape)

    # -- description -----------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """'r' (read-only) or 'r+' (read and write)."""
        return self._mode

    @property
    def cache_bytes(self) -> int:
        """Byte budget of this handle's chunk cache (0: off)."""
        return self._cache_bytes

    @property
    def bounds(self) -> Box:
        """The spatial box the volume covers in global coordinates."""
        return self._bounds

    @property
    def channel_shape(self) -> tuple[int, ...]:
        """Shape of the leading non-spatial axes (``()`` when there are none)."""
        return self._channel_shape

    @property
    def spatial_chunks(self) -> tuple[int, ...]:
        """Storage chunk shape over the spatial axes."""
        return self._spatial_chunks

    @property
    def read_chunks(self) -> tuple[int, ...]:
        """The spatial chunk a read decodes: ``spatial_chunks`` except in a sharded format,
        where ``spatial_chunks`` is the shard (what a write must cover whole) and this the
        chunk inside it (what the flow aligns its reads to)."""
        return self._read_chunks

    @property
    def level_of(self) -> tuple[str, int | str | None] | None:
        """For a level of a multiscale volume (OME-Zarr, precomputed): the root of its image
        and its scale key, as ``volume.open(root, scale=key)`` takes them; else None."""
        found = getattr(self._storage, "reopen", None)
        if found is None or not self.format.multiscale:
            return None
        root, key = found
        return str(root), key

    @property
    def path(self) -> str:
        return self._storage.path

    @property
    def backend(self) -> str:
        return self._meta.backend

    @property
    def format(self) -> Format:
        """The volume's format and what it can do (a row of ``volume.FORMATS``).

        >>> from chunkgraph import volume
        >>> v = volume.create("doc-format", (4,), (2,), "uint8", backend="memory")
        >>> v.format.multiscale, v.format.conditional_writes, v.format.in_process
        (False, False, True)
        >>> volume.remove("doc-format")
        """
        return format_of(self._meta.backend)

    @property
    def storage_options(self) -> StoreOptions:
        """The options the object store behind a URL was reached with (empty elsewhere)."""
        options = getattr(self._storage, "options", None)
        return options if isinstance(options, StoreOptions) else StoreOptions()

    def stamp(self) -> str | None:
        """Which stored array this is, beyond its place: different once the volume was
        deleted and created again at the same path or URL (a flow's records of work done
        hold it, so a resume never trusts work whose output is gone). On a disk the inode
        and modification time of ``zarr.json``; in a bucket the token chunkgraph wrote when
        it created the array. None where neither is known (memory; a bucket array made by
        another tool)."""
        where = self.location.local_dir
        if where is None:
            stamp = getattr(self._storage, "stamp", None)
            return stamp() if callable(stamp) else None
        try:
            meta = os.stat(where / "zarr.json")
        except OSError:
            return None
        return f"{meta.st_ino}:{meta.st_mtime_ns}"

    @property
    def location(self) -> Location:
        """Where the data lives and what that place can do (``volume._location``)."""
        return Location.of(self._storage.path, self._meta.backend, self.storage_options.public())

    @property
    def shape(self) -> tuple[int, ...]:
        return self._meta.shape

    @property
    def chunks(self) -> tuple[int, ...]:
        return self._meta.chunks

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._meta.dtype

    @property
    def fill_value(self) -> Any:
        return self._meta.fill_value

    @property
    def ndim(self) -> int:
        return len(self._meta.shape)

    @property
    def spatial_ndim(self) -> int:
        return self._meta.spatial_ndim

    @property
    def offset(self) -> tuple[int, ...]:
        return self._offset

    @property
    def resolution(self) -> tuple[float, ...]:
        """Physical size of one voxel per spatial axis (default 1s); see ``_storage``."""
        return self._meta.resolution

    @property
    def aligned_writes(self) -> bool:
        return self._meta.aligned_writes

    @property
    def made_by(self) -> str:
        """What made the volume, as ``create(made_by=...)`` wrote it; "" for none."""
        return self._meta.made_by

    @property
    def stats(self) -> IOStats:
        snapshot = self._counters.snapshot()
        requests = getattr(self._storage, "requests", None)
        if requests is None:
            return snapshot
        return dataclasses.replace(snapshot, **requests.snapshot())

    def reset_stats(self) -> None:
        self._counters.reset()
        requests = getattr(self._storage, "requests", None)
        if requests is not None:
            requests.reset()

    def __repr__(self) -> str:
        return (
            f"Volume({self.path!r}, backend={self.backend!r}, mode={self._mode!r}, "
            f"shape={self.shape}, chunks={self.chunks}, dtype={self.dtype.name}, "
            f"bounds={self._bounds})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # How a Volume travels is the registry's to say (it reopens it on the other side):
        # ``_registry`` registers it with ``copyreg``; a subclass travels the same way.
        return copyreg.dispatch_table[Volume](self)  # type: ignore[return-value]

    def with_cache(self, cache_bytes: int) -> Volume:
        """Another handle on the same stored array, with its own chunk cache and counters.

        What ``apply`` reads through when it owns the cache of an input the caller
        opened without one; the caller's handle and its stats are left alone.

        Args:
            cache_bytes: The new handle's chunk cache size; 0 turns it off.
        """
        return Volume(self._storage, self._mode, cache_bytes)

    def plan_reads(
        self,
        readers: Callable[[tuple[int, ...]], int] | None,
        parts: Callable[[tuple[int, ...]], list[Box]] | None = None,
    ) -> None:
        """Keep cached chunks by a plan of reads (``_cache``): ``readers(key)`` is how many
        reads of the chunk at grid index ``key`` (of ``read_chunks``, from the offset) the
        plan makes in all; a chunk stays cached until the last of them, and one read once
        is not stored. With ``parts(key)``, the global box each of those reads takes, only
        what the reads still to come take is kept. None: back to LRU. Without a cache,
        nothing to do.

        Args:
            readers: The plan's rule, or None.
            parts: The plan's parts, or None (whole chunks are kept).
        """
        if self._cache is not None:
            self._cache.plan_readers(readers, parts)

    @property
    def cache_peak(self) -> int:
        """The most bytes this handle's cache held at once since its plan was set (0: no
        cache)."""
        return 0 if self._cache is None else self._cache.peak

    # -- reading -----------------------------------------------------------------------------

    def read(self, box: Box) -> np.ndarray[Any, Any]:
        """The data in ``box`` (global coordinates), ``fill_value`` outside the bounds.

        Args:
            box: A spatial box in global coordinates (channels are read whole).

        Returns:
            An array of shape ``channel_shape + box.shape`` and the volume's dtype.
        """
        self._check_box(box, "read")
        bounds = self._bounds
        inside = all(map(le, bounds.start, box.start)) and all(map(le, box.stop, bounds.stop))
        if inside and self._cache is None and not box.is_empty:
            # Hot path: a box inside the bounds is one backend call, returned without a copy.
            self._count_read(box)
            return self._storage.read(self._local_index(box))
        inner = box if inside else box.intersection(bounds)
        out = self._empty(box, filled=not inside)
        if inner.is_empty:
            return out
        target = out[self._channel_index + inner.slices(relative_to=box)]
        if self._cache is None:
            self._count_read(inner)
            target[...] = self._storage.read(self._local_index(inner))
        else:
            self._read_through_cache(inner, target, self._cache)
        return out

    def read_pieces(self, box: Box, take: Callable[[Box, np.ndarray[Any, Any]], None]) -> bool:
        """Hand ``take`` the data in ``box`` piece by piece, each stored chunk's part (an
        inner chunk's, sharded) as soon as it is decoded, so that the box is never whole
        in memory. The pieces tile ``box``; they come on the chunk pool's threads, in no
        set order. Counted as ``read(box)`` is.

        Args:
            box: A spatial box inside the bounds (global coordinates).
            take: Called as ``take(piece, data)`` for each piece: ``piece`` a spatial box
                inside ``box``, ``data`` its voxels (shape ``channel_shape + piece.shape``;
                do not change them: a missing chunk's fill is one value, broadcast).

        Returns:
            True; False, with nothing read, where this handle cannot: a chunk cache, a box
            reaching past the bounds or empty, channel axes split across chunks, a backend
            without the direct whole-chunk path (``_whole_chunks``): ``read`` serves those.
        """
        bounds, n_channel = self._bounds, len(self._channel_shape)
        inside = all(map(le, bounds.start, box.start)) and all(map(le, box.stop, bounds.stop))
        pieces = getattr(self._storage, "read_pieces", None)
        if (
            not inside
            or box.is_empty
            or self._cache is not None
            or pieces is None
            or self._meta.chunks[:n_channel] != self._channel_shape
        ):
            return False

        def spatial(target: Index, data: np.ndarray[Any, Any]) -> None:
            start = [b + s.start for b, s in zip(box.start, target[n_channel:], strict=True)]
            stop = [b + s.stop for b, s in zip(box.start, target[n_channel:], strict=True)]
            take(Box.unchecked(tuple(start), tuple(stop)), data)

        if not pieces(self._local_index(box), spatial):
            return False
        self._count_read(box)
        return True

    def _read_through_cache(
        self, inner: Box, target: np.ndarray[Any, Any], cache: ChunkCache
    ) -> None:
        """Assemble ``inner`` from cached chunks; fetch the missing ones in one backend call.

        The fetch covers the bounding box of the missing chunks; a cached chunk that
        happens to lie inside it is taken from the fetched block too (and counted as
        fetched), so ``bytes_read + bytes_from_cache`` is all the chunk bytes involved.
        """
        chunks = self._chunks_of(inner)
        # A hit is the part of the chunk this read takes (a planned cache may keep no more).
        ready: dict[tuple[int, ...], np.ndarray[Any, Any]] = {}
        for key, chunk_box in chunks:
            cached = cache.take(key, chunk_box.intersection(inner))
            if cached is not None:
                ready[key] = cached
        hits = set(ready)  # each got counted as one of its planned reads: never put again
        missing = [chunk_box for key, chunk_box in chunks if key not in ready]
        fetched: set[tuple[int, ...]] = set()
        if missing:
            block_box = missing[0]
            for chunk_box in missing[1:]:
                block_box = block_box.union(chunk_box)
            epoch = cache.epoch
            block = self._storage.read(self._local_index(block_box))
            for key, chunk_box in chunks:
                if block_box.contains(chunk_box):
                    # Its own buffer: a cached chunk must not keep the whole block alive.
                    chunk = block[self._channel_index + chunk_box.slices(relative_to=block_box)]
                    ready[key] = chunk.copy()
                    if key not in hits:
                        part = chunk_box.intersection(inner)
                        cache.put(key, ready[key], epoch, box=chunk_box, part=part)
                    fetched.add(key)
        fetched_bytes = hit_bytes = 0
        for key, chunk_box in chunks:
            chunk = ready[key]
            part = chunk_box.intersection(inner)
            if key in fetched:
                fetched_bytes += chunk.nbytes
                chunk = chunk[self._channel_index + part.slices(relative_to=chunk_box)]
            else:
                hit_bytes += chunk.nbytes // max(1, part.size) * chunk_box.size
            target[self._channel_index + part.slices(relative_to=inner)] = chunk
        self._counters.add(
            cache_hits=len(chunks) - len(fetched),
            cache_misses=len(fetched),
            bytes_from_cache=hit_bytes,
            chunks_read=len(fetched),
            bytes_read=fetched_bytes,
        )

    # -- writing -----------------------------------------------------------------------------

    def write(self, box: Box, array: np.ndarray[Any, Any]) -> None:
        """Store ``array`` (shape ``channel_shape + box.shape``) at ``box``, cropped to bounds.

        Args:
            box: A spatial box in global coordinates; with ``aligned_writes``, once cropped
                to the bounds, it must cover whole storage chunks.
            array: The data, shape ``channel_shape + box.shape``, of the volume's dtype or
                one that casts into it safely.

        Raises:
            AlignmentError: For a box that cuts storage chunks of an ``aligned_writes``
                volume.
            ConfigError: For a read-only volume, or an array of the wrong shape or dtype.
            OSError: When the store refuses the write (a full disk, a read-only mount),
                naming the volume and the box.
        """
        self._write(box, array, merging=False)

    def merge_write(self, box: Box, array: np.ndarray[Any, Any]) -> None:
        """``write`` where ``box`` may cut storage chunks, even with ``aligned_writes=True``.

        Only where ``location.conditional_writes``: each cut chunk is merged by a
        conditional read-modify-write, so other writers of its other voxels (other
        flows, processes, machines) keep theirs. Elsewhere a caller must hold such
        chunks itself (``flow._edge_locks``) and write whole chunks.

        Args:
            box: A spatial box in global coordinates, which may cut storage chunks.
            array: The data, shape ``channel_shape + box.shape``.
        """
        if not self.location.conditional_writes:
            raise ConfigError(
                f"volume {self.path!r} ({self.location.kind}, backend {self.backend!r}) has no "
                "conditional writes: write whole storage chunks (volume.chunk_aligned(box)) "
                "and hold the chunks a write cuts while reading and writing them back"
            )
        self._write(box, array, merging=True)

    def _write(self, box: Box, array: np.ndarray[Any, Any], merging: bool) -> None:
        if self._mode != "r+":
            raise ConfigError(
                f"volume {self.path!r} is open read-only (mode={self._mode!r}); "
                f"open it with mode='r+' to write"
            )
        self._check_box(box, "write")
        data = self._checked_array(box, array)
        inner = box.intersection(self._bounds)
        if inner.is_empty:
            return
        if self.aligned_writes and not merging:
            self._check_aligned(box, inner)
        if inner != box:
            data = data[self._channel_index + inner.slices(relative_to=box)]
        try:
            self._storage.write(self._local_index(inner), data)
        except OSError as err:  # the store's own says neither the volume nor the box
            raise named_os_error(err, self.path, f"writing {inner} of the volume") from err
        if self._cache is not None:
            self._cache.invalidate(key for key, _ in self._chunks_of(inner))
        n_chunks = math.prod(len(r) for r in self._grid_range(inner, self._spatial_chunks))
        self._counters.add(bytes_written=data.nbytes, chunks_written=n_chunks)

    def _checked_array(self, box: Box, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        data = np.asarray(array)
        expected = self._channel_shape + box.shape
        if data.shape != expected:
            raise ConfigError(
                f"array of shape {data.shape} does not fit box {box}: expected "
                f"channel_shape {self._channel_shape} + box.shape {box.shape} = {expected}"
            )
        if data.dtype != self.dtype:
            if not np.can_cast(data.dtype, self.dtype, "safe"):
                raise ConfigError(
                    f"cannot write {data.dtype} data to {self.dtype} volume {self.path!r}: only "
                    f"safe casts are done implicitly; cast it yourself, e.g. "
                    f"array.astype({self.dtype.name!r}), if the loss is intended"
                )
            data = data.astype(self.dtype)
        return data

    def _check_aligned(self, box: Box, inner: Box) -> None:
        ok = all(
            (a - o) % c == 0 and ((b - o) % c == 0 or b == e)
            for a, b, o, c, e in zip(
                inner.start,
                inner.stop,
                self._offset,
                self._spatial_chunks,
                self._bounds.stop,
                strict=True,
            )
        )
        if ok:
            return
        grown, shrunk = self.chunk_aligned(inner, "outer"), self.chunk_aligned(inner, "inner")
        nearest = f"{grown} (grown)" + ("" if shrunk.is_empty else f" or {shrunk} (shrunk)")
        shared = (
            "; or create the volume with aligned_writes=False (partial-chunk writes here are "
            "conditional: any number of writers may share a chunk)"
            if self.location.conditional_writes
            else "; or create the volume with aligned_writes=False if each partial chunk has a "
            "single writer"
        )
        note = getattr(self._storage, "alignment_note", None)
        if note:  # a format whose chunks are only ever written whole
            shared = f" ({note})"
        raise AlignmentError(
            f"write box {box} (cropped to bounds: {inner}) does not cover whole storage chunks of "
            f"volume {self.path!r}: chunk grid {self._spatial_chunks} at offset {self._offset}. "
            f"Nearest aligned: {nearest}{shared}"
        )

    def chunk_aligned(self, box: Box, direction: Literal["outer", "inner"] = "outer") -> Box:
        """``box`` cropped to the bounds and snapped to whole storage chunks.

        ``outer`` grows to the chunks it touches, ``inner`` shrinks to the chunks it
        covers; either way the volume edge counts as a chunk boundary, so the result
        is always a valid ``aligned_writes`` box (possibly empty).

        Args:
            box: A spatial box in global coordinates.
            direction: ``"outer"`` (grow to the chunks it touches, the default) or
                ``"inner"`` (shrink to the chunks it covers).

        >>> from chunkgraph import volume
        >>> v = volume.create("doc-align", (10,), (4,), "uint8", backend="memory")
        >>> v.chunk_aligned(Box((5,), (9,))), v.chunk_aligned(Box((3,), (12,)), "inner")
        (Box(start=(4,), stop=(10,)), Box(start=(4,), stop=(10,)))
        >>> volume.remove("doc-align")
        """
        self._check_box(box, "chunk_aligned")
        inner = box.intersection(self._bounds)
        snapped = inner.snapped(self._spatial_chunks, self._offset, direction)
        if direction == "inner":
            # The edge of the volume is a chunk boundary too: keep a stop that reaches it.
            stop = tuple(
                e if b == e else s
                for b, e, s in zip(inner.stop, self._bounds.stop, snapped.stop, strict=True)
            )
            snapped = Box(
                snapped.start, tuple(max(a, b) for a, b in zip(snapped.start, stop, strict=True))
            )
        return snapped.intersection(self._bounds)

    # -- helpers -----------------------------------------------------------------------------

    def _check_box(self, box: object, op: str) -> None:
        if not isinstance(box, Box):
            raise ConfigError(f"{op} takes a chunkgraph.geometry.Box, got {box!r}")
        if box.ndim != self.spatial_ndim:
            raise ConfigError(
                f"{op} box {box} has {box.ndim} axes but the volume has {self.spatial_ndim} "
                f"spatial axes (channel axes {self._channel_shape} are always taken whole)"
            )

    def _local_index(self, box: Box) -> Index:
        return self._channel_index + tuple(
            map(slice, map(sub, box.start, self._offset), map(sub, box.stop, self._offset))
        )

    def _empty(self, box: Box, filled: bool) -> np.ndarray[Any, Any]:
        shape = self._channel_shape + box.shape
        if filled:
            return np.full(shape, self.fill_value, dtype=self.dtype)
        return np.empty(shape, dtype=self.dtype)

    def _grid_range(self, box: Box, grid: tuple[int, ...]) -> list[range]:
        """Per spatial axis, the indices on chunk grid ``grid`` that ``box`` (inside bounds)
        touches."""
        return [
            range((a - o) // c, -((o - b) // c))
            for a, b, o, c in zip(box.start, box.stop, self._offset, grid, strict=True)
        ]

    def _chunks_of(self, box: Box) -> list[tuple[tuple[int, ...], Box]]:
        """``(grid index, chunk box clipped to bounds)`` for every read chunk ``box`` touches."""
        out = []
        for key in itertools.product(*self._grid_range(box, self._read_chunks)):
            start = tuple(
                o + k * c for o, k, c in zip(self._offset, key, self._read_chunks, strict=True)
            )
            stop = tuple(
                min(a + c, e)
                for a, c, e in zip(start, self._read_chunks, self._bounds.stop, strict=True)
            )
            out.append((key, Box.unchecked(start, stop)))
        return out

    def _count_read(self, inner: Box) -> None:
        """Count the whole (edge-clipped) storage chunks behind ``inner`` without listing them."""
        n_chunks = n_voxels = 1
        for a, b, o, c, e in zip(
            inner.start,
            inner.stop,
            self._offset,
            self._read_chunks,
            self._bounds.stop,
            strict=True,
        ):
            lo, hi = (a - o) // c, -((o - b) // c)  # first and one-past-last chunk index
            n_chunks *= hi - lo
            n_voxels *= min(o + hi * c, e) - (o + lo * c)
        self._counters.add_read(n_chunks, n_voxels * self._itemsize)
