"""A cache of decoded storage chunks under a byte budget, safe across threads.

Two policies, one per use:

* **LRU** (the default, any reader): least recently used goes first once the stored
  bytes exceed ``capacity``.
* **Planned reads** (``plan_readers``: a flow that knows which chunks it reads again and
  when): a rule ``readers(key)`` says how many reads in all the plan makes of a chunk.
  A fetched chunk is kept only when a later read will want it (``readers(key) > 1``),
  with its count of reads still to come; each hit counts one down, and the chunk goes
  as soon as its last reader has it. A chunk read once is never stored, so the cache
  holds exactly the chunks still shared, whatever order the reads arrive in::

      readers(k) = 3:  fetch ──keep, 2 left──> hit ──1 left──> hit ──0 left: dropped
      readers(k) = 1:  fetch ──not stored

  Two readers that both missed both fetch it: the second ``put`` counts its read down
  on the chunk the first stored (not a new count), so it still goes after its last read.
  Kept chunks are pinned: never evicted to make room; a chunk that would not fit
  beside them is not stored (its later readers fetch it again: the plan's sizing, not
  luck, decides). ``plan_readers(None)`` drops the pins and returns to LRU.

* **Planned parts** (``plan_readers(readers, parts)``: the plan also knows what part of
  the chunk each read takes): a pinned chunk keeps only the bounding box of the parts
  its reads still to come take, cut down after each read (``take``). A halo read of 8
  voxels from a 64-voxel chunk then holds 8 layers, not 64::

      parts(k) = [whole, last 8 layers]:  fetch (whole) ──keep the last 8──> take ──dropped

  A read the plan did not foresee, or one reaching outside what is kept, is a miss (it
  fetches the chunk again), never a wrong answer.

A chunk larger than the whole budget is never stored (it would evict everything and
then itself). Stored arrays are made read-only, so a caller cannot corrupt the cache by
writing into what ``get`` returned.

Staleness. A reader fetches a chunk from storage *outside* the lock (decoding
is slow); a writer may change that chunk meanwhile. To keep the reader from
caching the old bytes after the writer's invalidation, every invalidation
bumps ``epoch``; the reader notes the epoch before fetching and ``put``
refuses the chunk if any invalidation happened since::

    reader: e = cache.epoch ── fetch chunk (old) ─────────── put(k, old, e) -> refused
    writer:                       write chunk ── invalidate(k): epoch += 1

(One global epoch rather than one per key: a refused ``put`` only costs a
later re-fetch, and writes through a cached volume are rare.)

State, all guarded by ``_lock``::

    _chunks   OrderedDict key -> ndarray, least recently used first
    _nbytes   sum of the stored arrays' nbytes (<= capacity)
    _left     key -> reads still to come, for each pinned chunk (planned reads only)
    _parts    key -> the parts (global boxes) those reads take (planned parts only)
    _boxes    key -> the global box of what is kept (given to ``put``)
    _whole    key -> the chunk's own global box (what was kept before any cut)
    _pinned   sum of the pinned arrays' nbytes
    _readers  the plan's rule (None: LRU)
    peak      the most bytes stored at once since the last plan_readers / clear
    epoch     count of invalidations so far
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box

# A plan's rule: how many reads in all the plan makes of the chunk with this key.
Readers = Callable[[Any], int]
# A plan's parts: the part (a global box) each of those reads takes of the chunk.
Parts = Callable[[Any], list[Box]]


class ChunkCache:
    """Decoded chunks keyed by their chunk-grid index: LRU, or kept by a plan of reads.

    Args:
        capacity: The most bytes of chunks kept (>= 0); older chunks are evicted first.

    >>> cache = ChunkCache(capacity=100)
    >>> cache.put((0,), np.zeros(10), cache.epoch)
    True
    >>> cache.get((0,)).nbytes, cache.get((1,))
    (80, None)

    With a plan, a chunk stays until its last reader has it:

    >>> cache.plan_readers(lambda key: 2 if key == (5,) else 1)
    >>> cache.put((5,), np.zeros(4), cache.epoch), cache.put((6,), np.zeros(4), cache.epoch)
    (True, False)
    >>> cache.get((5,)) is not None, cache.get((5,)), len(cache)
    (True, None, 0)

    With the parts, it keeps only what the reads still to come take:

    >>> chunk = Box((0,), (8,))
    >>> cache.plan_readers(lambda key: 2, lambda key: [Box((0,), (8,)), Box((6,), (8,))])
    >>> cache.put((0,), np.arange(8.0), cache.epoch, box=chunk, part=chunk)
    True
    >>> cache.nbytes, cache.take((0,), Box((6,), (8,))), len(cache)
    (16, array([6., 7.]), 0)
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ConfigError(f"cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity = capacity
        self.epoch = 0
        self.peak = 0
        self._chunks: OrderedDict[Hashable, np.ndarray[Any, Any]] = OrderedDict()
        self._nbytes = 0
        self._left: dict[Hashable, int] = {}
        self._parts: dict[Hashable, list[Box]] = {}
        self._boxes: dict[Hashable, Box] = {}
        self._whole: dict[Hashable, Box] = {}
        self._pinned = 0
        self._readers: Readers | None = None
        self._part_rule: Parts | None = None
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def pinned_keys(self) -> frozenset[Hashable]:
        """The chunks a plan keeps for reads still to come."""
        with self._lock:
            return frozenset(self._left)

    def kept_box(self, key: Hashable) -> Box | None:
        """The global box of what is kept of the chunk at ``key`` (None: not cached, or
        stored without its box).

        Args:
            key: The chunk's grid index.
        """
        with self._lock:
            return self._boxes.get(key) if key in self._chunks else None

    def __len__(self) -> int:
        return len(self._chunks)

    def plan_readers(self, readers: Readers | None, parts: Parts | None = None) -> None:
        """Keep chunks by ``readers(key)``, the reads in all a plan makes of each, and
        when given, only the ``parts(key)`` those reads still take (see the module
        docstring); None returns to LRU. Either way what is stored goes, and the peak
        starts again.

        Args:
            readers: The plan's rule, or None.
            parts: The part (global box) each of those reads takes, as many as
                ``readers(key)`` counts; None: keep whole chunks.
        """
        with self._lock:
            self._readers = readers
            self._part_rule = parts if readers is not None else None
            self._forget()

    def get(self, key: Hashable) -> np.ndarray[Any, Any] | None:
        """The cached chunk (read-only), or None; see ``take`` (a chunk kept only in part
        is a miss here).

        Args:
            key: The chunk's grid index.
        """
        return self.take(key)

    def take(self, key: Hashable, part: Box | None = None) -> np.ndarray[Any, Any] | None:
        """``part`` (a global box inside the chunk) of the cached chunk, read-only; the
        whole chunk when ``part`` is None; None on a miss, or when what is kept does not
        cover ``part``. Under LRU the chunk becomes the most recently used; under a plan
        the hit is one of its reads, and the last one drops it.

        Args:
            key: The chunk's grid index.
            part: What the read takes of the chunk (None: all of it).
        """
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is None:
                return None
            kept = self._boxes.get(key)
            if part is None:
                if kept is not None and kept != self._whole.get(key):
                    return None  # kept only in part: the whole is not here
                out = chunk
            elif kept is None or not kept.contains(part):
                return None
            else:
                out = chunk[_spatial(part, kept)]
            if key in self._left:
                self._count_down(key, part)
            else:
                self._chunks.move_to_end(key)
            return out

    def _count_down(self, key: Hashable, part: Box | None) -> None:
        """One of a pinned chunk's reads is done (under the lock): the last drops it; with
        planned parts, what is kept shrinks to the parts still to come."""
        left = self._left[key]
        parts = self._parts.get(key)
        if parts is not None:
            _remove_part(parts, part)
        if left > 1:
            self._left[key] = left - 1
            if parts:
                self._cut_to(key, _bounding(parts))
            return
        del self._left[key]  # its last reader: the chunk goes
        self._parts.pop(key, None)
        self._boxes.pop(key, None)
        self._whole.pop(key, None)
        chunk = self._chunks.pop(key)
        self._nbytes -= chunk.nbytes
        self._pinned -= chunk.nbytes

    def _cut_to(self, key: Hashable, wanted: Box) -> None:
        """Keep only ``wanted`` of a pinned chunk (under the lock), when that is less."""
        kept = self._boxes[key]
        wanted = wanted.intersection(kept)
        if wanted == kept or wanted.is_empty:
            return
        chunk = self._chunks[key]
        cut = chunk[_spatial(wanted, kept)].copy()
        cut.flags.writeable = False
        self._chunks[key] = cut
        self._boxes[key] = wanted
        self._nbytes -= chunk.nbytes - cut.nbytes
        self._pinned -= chunk.nbytes - cut.nbytes

    def put(
        self,
        key: Hashable,
        chunk: np.ndarray[Any, Any],
        epoch: int,
        *,
        box: Box | None = None,
        part: Box | None = None,
    ) -> bool:
        """Store ``chunk`` unless it is too big, an invalidation happened after ``epoch``,
        or (under a plan) no later read wants it. With the plan's parts, only the part
        the later reads take is stored.

        Args:
            key: The chunk's grid index.
            chunk: The decoded chunk; made read-only.
            epoch: The cache's ``epoch`` when the read that decoded ``chunk`` began.
            box: The chunk's global box (spatial axes last); ``take`` needs it.
            part: What the read that fetched it takes of it (None: all of it).

        Returns:
            Whether it was stored.
        """
        if chunk.nbytes > self.capacity:
            return False
        readers, rule = self._readers, self._part_rule
        # The read that fetched it was one of its reads: keep it for the ones still to come.
        left = None if readers is None else readers(key) - 1
        if left is not None and left <= 0:
            return False
        parts = None
        if left is not None and rule is not None and box is not None:
            parts = list(rule(key))  # as many as readers(key) counts; only what is kept
            _remove_part(parts, part)
        chunk, kept = _cut_fetched(chunk, box, parts)  # outside the lock: it copies
        chunk.flags.writeable = False
        with self._lock:
            if epoch != self.epoch or readers is not self._readers:
                return False
            if left is not None and key in self._left:
                self._count_down(key, part)  # stored by another reader that missed: one read less
                return False
            self._drop(key)
            if left is not None and self._pinned + chunk.nbytes > self.capacity:
                return False  # the pins fill the budget: its later readers fetch it again
            self._chunks[key] = chunk
            self._nbytes += chunk.nbytes
            if kept is not None and box is not None:
                self._boxes[key], self._whole[key] = kept, box
            if left is not None:
                self._left[key] = left
                self._pinned += chunk.nbytes
                if parts is not None:
                    self._parts[key] = parts
            self._evict_lru()
            self.peak = max(self.peak, self._nbytes)
            return True

    def _drop(self, key: Hashable) -> None:
        """Forget ``key`` (under the lock)."""
        self._parts.pop(key, None)
        self._boxes.pop(key, None)
        self._whole.pop(key, None)
        old = self._chunks.pop(key, None)
        if old is not None:
            self._nbytes -= old.nbytes
            if self._left.pop(key, None) is not None:
                self._pinned -= old.nbytes

    def _evict_lru(self) -> None:
        """LRU eviction until the budget holds (under the lock). Under a plan every stored
        chunk is pinned and ``put`` already refused what would not fit: nothing to do."""
        while self._nbytes > self.capacity and not self._left:
            key, evicted = self._chunks.popitem(last=False)
            self._boxes.pop(key, None)
            self._whole.pop(key, None)
            self._nbytes -= evicted.nbytes

    def invalidate(self, keys: Iterable[Hashable]) -> None:
        """Drop these chunks (they were written) and refuse puts begun before now.

        Args:
            keys: The grid indices of the chunks written.
        """
        with self._lock:
            self.epoch += 1
            for key in keys:
                self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self.epoch += 1
            self._forget()

    def _forget(self) -> None:
        """Every chunk, part and count gone (under the lock)."""
        self._chunks.clear()
        self._left.clear()
        self._parts.clear()
        self._boxes.clear()
        self._whole.clear()
        self._nbytes = self._pinned = self.peak = 0


def _remove_part(parts: list[Box], part: Box | None) -> None:
    """Strike the read of ``part`` from ``parts``: the equal one, else the first that
    contains it, else the first (a read the plan did not foresee still counts one)."""
    if not parts:
        return
    if part is not None:
        for test in (part.__eq__, lambda p: p.contains(part)):
            for i, p in enumerate(parts):
                if test(p):
                    del parts[i]
                    return
    del parts[0]


def _cut_fetched(
    chunk: np.ndarray[Any, Any], box: Box | None, parts: list[Box] | None
) -> tuple[np.ndarray[Any, Any], Box | None]:
    """What to keep of a fetched ``chunk`` over ``box`` for the reads still to come, which
    take ``parts`` (None: all of it), and the box it covers: a copy of their bounding box
    when that is less than the chunk, so the whole chunk is not kept alive."""
    if not parts or box is None:
        return chunk, box
    kept = _bounding(parts).intersection(box)
    if kept.is_empty or kept == box:
        return chunk, box
    return chunk[_spatial(kept, box)].copy(), kept


def _spatial(box: Box, within: Box) -> tuple[Any, ...]:
    """The index of ``box`` in an array over ``within`` whose last axes are spatial."""
    return (Ellipsis, *box.slices(relative_to=within))


def _bounding(parts: list[Box]) -> Box:
    """The smallest box around every part."""
    out = parts[0]
    for p in parts[1:]:
        out = out.union(p)
    return out
