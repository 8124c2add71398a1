"""The chunk cache: LRU under a byte budget, the staleness guard, its use by Volume."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import ChunkCache, Volume

MakeVolume = Callable[..., Volume]


def test_lru_evicts_least_recently_used_within_budget() -> None:
    cache = ChunkCache(capacity=3 * 80)
    for k in range(3):
        assert cache.put(k, np.zeros(10), cache.epoch)
    assert cache.get(0) is not None  # 0 becomes most recent; 1 is now the oldest
    cache.put(3, np.zeros(10), cache.epoch)
    assert cache.get(1) is None
    assert all(cache.get(k) is not None for k in (0, 2, 3))
    assert cache.nbytes == 240 and len(cache) == 3


def test_oversized_chunk_is_not_stored() -> None:
    cache = ChunkCache(capacity=100)
    cache.put("small", np.zeros(5), cache.epoch)
    assert not cache.put("big", np.zeros(100), cache.epoch)
    assert cache.get("small") is not None and cache.get("big") is None


def test_put_after_invalidation_is_refused() -> None:
    cache = ChunkCache(capacity=1000)
    epoch = cache.epoch  # a reader starts fetching chunk 7 ...
    cache.invalidate([7])  # ... a writer rewrites chunk 7 meanwhile
    assert not cache.put(7, np.zeros(4), epoch)
    assert cache.get(7) is None
    assert cache.put(7, np.zeros(4), cache.epoch)


def test_cached_arrays_are_read_only() -> None:
    cache = ChunkCache(capacity=1000)
    cache.put(0, np.zeros(4), cache.epoch)
    chunk = cache.get(0)
    assert chunk is not None
    with pytest.raises(ValueError, match="read-only"):
        chunk[0] = 1


def test_negative_capacity_rejected() -> None:
    with pytest.raises(ConfigError, match=">= 0"):
        ChunkCache(-1)


def test_volume_cache_hits_misses_and_bytes(backend: str, make_volume: MakeVolume) -> None:
    v = make_volume(backend, (8, 8), (4, 4), "float32", cache_bytes=1 << 20)
    data = np.arange(64, dtype="float32").reshape(8, 8)
    v.write(v.bounds, data)
    box = Box((2, 2), (6, 6))  # all four chunks
    np.testing.assert_array_equal(v.read(box), data[2:6, 2:6])
    s = v.stats
    assert (s.cache_misses, s.cache_hits, s.chunks_read, s.bytes_read) == (4, 0, 4, 4 * 64)
    np.testing.assert_array_equal(v.read(Box((0, 0), (4, 8))), data[:4])
    s = v.stats
    assert (s.cache_misses, s.cache_hits, s.chunks_read) == (4, 2, 4)
    assert s.bytes_from_cache == 2 * 64


def test_write_invalidates_cached_chunks(backend: str, make_volume: MakeVolume) -> None:
    v = make_volume(backend, (8, 8), (4, 4), "int32", cache_bytes=1 << 20)
    v.read(v.bounds)  # caches all four chunks (fill value)
    v.write(Box((0, 4), (4, 8)), np.full((4, 4), 5, "int32"))
    got = v.read(v.bounds)
    assert np.all(got[:4, 4:] == 5) and np.all(got[:4, :4] == 0)
    s = v.stats
    assert (s.cache_misses, s.cache_hits) == (5, 3)  # only the written chunk was re-fetched


def test_cache_matches_uncached_reads_including_fill(backend: str, make_volume: MakeVolume) -> None:
    cached = make_volume(backend, (9, 7), (4, 3), "int16", fill_value=-3, offset=(2, 2))
    data = np.arange(63, dtype="int16").reshape(9, 7)
    cached.write(cached.bounds, data)
    from chunkgraph import volume

    on = volume.open(cached.path, cache_bytes=1 << 16, backend=backend)
    off = volume.open(cached.path, backend=backend)
    for box in (
        Box((0, 0), (5, 5)),
        Box((3, 4), (12, 8)),
        Box((2, 2), (11, 9)),
        Box((20, 0), (21, 3)),
    ):
        np.testing.assert_array_equal(on.read(box), off.read(box))
        np.testing.assert_array_equal(on.read(box), off.read(box))  # second pass: from cache
    # The cache changes where bytes come from, never how many storage-chunk bytes a read involves.
    assert on.stats.bytes_read + on.stats.bytes_from_cache == off.stats.bytes_read
    assert on.stats.cache_hits > 0


def test_missing_chunks_are_fetched_in_one_backend_call(make_volume: MakeVolume) -> None:
    v = make_volume("memory", (12, 4), (4, 4), "int16", cache_bytes=1 << 16)
    v.write(v.bounds, np.arange(48, dtype="int16").reshape(12, 4))
    calls: list[tuple[slice, ...]] = []
    storage = v._storage  # the real memory storage, wrapped only to observe its calls
    real_read = storage.read
    storage.read = lambda index: calls.append(index) or real_read(index)  # type: ignore[method-assign]
    v.read(Box((4, 0), (8, 4)))  # caches the middle chunk
    calls.clear()
    got = v.read(Box((0, 0), (12, 4)))  # chunks 0 and 2 miss: one call spanning all three
    assert calls == [(slice(0, 12), slice(0, 4))]
    np.testing.assert_array_equal(got, np.arange(48).reshape(12, 4))
    s = v.stats
    assert (s.cache_misses, s.cache_hits, s.chunks_read) == (4, 0, 4)  # the middle one re-fetched
    calls.clear()
    v.read(Box((0, 0), (12, 4)))
    assert calls == [] and v.stats.cache_hits == 3


def test_small_budget_keeps_evicting(make_volume: MakeVolume) -> None:
    v = make_volume("memory", (16,), (4,), "float64", cache_bytes=2 * 32)  # room for two chunks
    v.read(Box((0,), (16,)))
    assert (v.stats.cache_misses, v.stats.cache_hits) == (4, 0)
    # Only the two most recent chunks (8..16) survived; the second pass re-fetches 0..8.
    v.read(Box((0,), (16,)))
    assert (v.stats.cache_misses, v.stats.cache_hits) == (6, 2)
    v.read(Box((8,), (16,)))  # 0..8 displaced 8..16 again
    assert (v.stats.cache_misses, v.stats.cache_hits) == (8, 2)


def test_concurrent_cached_reads_and_writes_stay_consistent(make_volume: MakeVolume) -> None:
    """Readers keep filling the cache while a writer rewrites every chunk five times; once the
    writes are done, no stale chunk may survive in the cache (the epoch guard)."""
    v = make_volume("zarr", (8, 32), (8, 4), "int32", cache_bytes=1 << 20)
    boxes = v.bounds.split((8, 4))
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            v.read(v.bounds)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for value in range(1, 6):
        for b in boxes:
            v.write(b, np.full(b.shape, value, "int32"))
    stop.set()
    for t in threads:
        t.join()
    assert np.all(v.read(v.bounds) == 5)


# --- planned reads: kept until the last reader, never by LRU luck ------------------------


def test_planned_chunks_stay_until_their_last_reader_then_go() -> None:
    """readers: chunk "a" three reads, "b" two, "c" one (never stored)."""
    counts = {"a": 3, "b": 2, "c": 1}
    cache = ChunkCache(capacity=10 * 80)
    cache.plan_readers(counts.__getitem__)
    assert cache.put("a", np.zeros(10), cache.epoch)  # first read: 2 to come
    assert cache.put("b", np.zeros(10), cache.epoch)  # first read: 1 to come
    assert not cache.put("c", np.zeros(10), cache.epoch)  # its only read: nothing to keep
    assert cache.pinned_keys == {"a", "b"} and cache.nbytes == 160
    assert cache.get("b") is not None  # its last reader: gone at once
    assert cache.pinned_keys == {"a"} and cache.get("b") is None
    assert cache.get("a") is not None and cache.pinned_keys == {"a"}
    assert cache.get("a") is not None and len(cache) == 0 and cache.nbytes == 0
    assert cache.peak == 160


def test_two_readers_that_both_missed_leave_no_pin_behind() -> None:
    """Two of a chunk's readers miss at once and both fetch it: the second put is its
    second read, so the chunk goes after its last read instead of staying pinned."""
    cache = ChunkCache(capacity=1000)
    cache.plan_readers(lambda key: 2)
    epoch = cache.epoch  # both readers begin before either stores
    assert cache.put((0,), np.zeros(4), epoch)  # the first read: one to come
    assert not cache.put((0,), np.zeros(4), epoch)  # the second, its last: nothing to keep
    assert cache.pinned_keys == frozenset() and len(cache) == 0 and cache.nbytes == 0
    # Three reads, two of them misses: the third still finds it, then it goes.
    cache.plan_readers(lambda key: 3)
    epoch = cache.epoch
    assert cache.put("a", np.zeros(4), epoch) and not cache.put("a", np.zeros(4), epoch)
    assert cache.pinned_keys == {"a"}
    assert cache.get("a") is not None and cache.pinned_keys == frozenset()
    assert cache.nbytes == 0 and cache.get("a") is None


def test_pins_are_never_evicted_a_chunk_past_the_budget_is_not_stored() -> None:
    cache = ChunkCache(capacity=2 * 80)
    cache.plan_readers(lambda key: 2)
    assert cache.put(0, np.zeros(10), cache.epoch) and cache.put(1, np.zeros(10), cache.epoch)
    assert not cache.put(2, np.zeros(10), cache.epoch)  # no room beside the pins
    assert cache.pinned_keys == {0, 1}
    cache.plan_readers(None)  # back to LRU: the pins go
    assert len(cache) == 0 and cache.pinned_keys == frozenset()
    for k in range(3):
        cache.put(k, np.zeros(10), cache.epoch)
    assert cache.get(0) is None and cache.get(2) is not None


def test_a_volume_keeps_a_planned_chunk_for_its_later_readers(
    backend: str, make_volume: MakeVolume
) -> None:
    """8 x 12 in 4 x 4 chunks, read as two boxes that share the middle column of chunks:
    those are fetched once and dropped after the second box; the others never stored."""
    v = make_volume(backend, (8, 12), (4, 4), "float32", cache_bytes=1 << 20)
    data = np.arange(96, dtype="float32").reshape(8, 12)
    v.write(v.bounds, data)
    first, second = Box((0, 0), (8, 6)), Box((0, 6), (8, 12))
    v.plan_reads(lambda key: 2 if key[1] == 1 else 1)  # column 1 of chunks is shared
    np.testing.assert_array_equal(v.read(first), data[:, :6])
    assert v.cache_peak == 2 * 64
    np.testing.assert_array_equal(v.read(second), data[:, 6:])
    s = v.stats
    assert (s.chunks_read, s.cache_hits, s.bytes_read) == (6, 2, 6 * 64)  # each chunk once
    np.testing.assert_array_equal(v.read(second), data[:, 6:])  # past the plan: read again
    assert v.stats.chunks_read == 10


# --- planned parts: a pinned chunk keeps only what its later readers take ----------------


def test_a_planned_chunk_keeps_only_the_parts_its_later_readers_take() -> None:
    """A chunk over [0, 16) read three times: [0, 16) by the reader that fetches it, then
    [12, 16) and [14, 16): 4 voxels are kept, then 2, then none."""
    whole = Box((0,), (16,))
    parts = [whole, Box((12,), (16,)), Box((14,), (16,))]
    cache = ChunkCache(capacity=1000)
    cache.plan_readers(lambda key: 3, lambda key: list(parts))
    data = np.arange(16.0)
    assert cache.put("k", data.copy(), cache.epoch, box=whole, part=whole)
    assert cache.nbytes == 4 * 8 and cache.kept_box("k") == Box((12,), (16,))
    assert cache.get("k") is None  # the whole chunk is not kept: a miss, not a wrong answer
    assert cache.take("k", Box((8,), (16,))) is None  # reaches outside what is kept
    got = cache.take("k", Box((12,), (16,)))
    assert got is not None and not got.flags.writeable
    np.testing.assert_array_equal(got, data[12:])
    assert cache.nbytes == 2 * 8 and cache.kept_box("k") == Box((14,), (16,))
    np.testing.assert_array_equal(cache.take("k", Box((14,), (16,))), data[14:])
    assert len(cache) == 0 and cache.nbytes == 0 and cache.peak == 4 * 8


def test_a_part_reader_that_fetches_first_leaves_the_whole_chunk_for_the_next() -> None:
    """The same chunk fetched first by the reader of [12, 16) (reads arrive in any order):
    the whole reader is still to come, so the whole chunk is kept."""
    whole = Box((0,), (16,))
    cache = ChunkCache(capacity=1000)
    cache.plan_readers(lambda key: 2, lambda key: [whole, Box((12,), (16,))])
    data = np.arange(16.0)
    assert cache.put("k", data.copy(), cache.epoch, box=whole, part=Box((12,), (16,)))
    assert cache.kept_box("k") == whole and cache.nbytes == 16 * 8
    np.testing.assert_array_equal(cache.take("k", whole), data)
    assert len(cache) == 0


def test_a_volume_with_planned_parts_reads_exactly_and_keeps_the_thin_part(
    backend: str, make_volume: MakeVolume
) -> None:
    """8 x 12 in 4 x 4 chunks, read as [0, 6) and [5, 12) along axis 1: chunk column 1
    ([4, 8)) is read [4, 6) then [5, 8), so [5, 8) is kept after the first read."""
    v = make_volume(backend, (8, 12), (4, 4), "float32", cache_bytes=1 << 20)
    data = np.arange(96, dtype="float32").reshape(8, 12)
    v.write(v.bounds, data)
    first, second = Box((0, 0), (8, 6)), Box((0, 5), (8, 12))

    def parts(key: tuple[int, ...]) -> list[Box]:
        rows, cols = (4 * key[0], 4 * key[0] + 4), (4 * key[1], 4 * key[1] + 4)
        if key[1] != 1:
            return [Box((rows[0], cols[0]), (rows[1], cols[1])).intersection(first)]
        return [Box((rows[0], 4), (rows[1], 6)), Box((rows[0], 5), (rows[1], 8))]

    v.plan_reads(lambda key: 2 if key[1] == 1 else 1, parts)
    np.testing.assert_array_equal(v.read(first), data[:, :6])
    assert v.cache_peak == 2 * 4 * 3 * 4  # two chunks, 4 x 3 voxels kept of each
    np.testing.assert_array_equal(v.read(second), data[:, 5:])
    s = v.stats
    assert (s.chunks_read, s.cache_hits, s.bytes_read) == (6, 2, 6 * 64)  # each chunk once
    assert s.bytes_from_cache == 2 * 64  # counted as whole chunks, like a fetch
