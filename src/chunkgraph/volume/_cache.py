"""An LRU cache of decoded storage chunks under a byte budget, safe across threads.

Policy: least recently used goes first once the stored bytes exceed
``capacity``. A chunk larger than the whole budget is never stored (it would
evict everything and then itself). Stored arrays are made read-only, so a
caller cannot corrupt the cache by writing into what ``get`` returned.

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
    epoch     count of invalidations so far
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError


class ChunkCache:
    """LRU of decoded chunks keyed by their chunk-grid index.

    Args:
        capacity: The most bytes of chunks kept (>= 0); older chunks are evicted first.

    >>> cache = ChunkCache(capacity=100)
    >>> cache.put((0,), np.zeros(10), cache.epoch)
    True
    >>> cache.get((0,)).nbytes, cache.get((1,))
    (80, None)
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ConfigError(f"cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity = capacity
        self.epoch = 0
        self._chunks: OrderedDict[Hashable, np.ndarray[Any, Any]] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._chunks)

    def get(self, key: Hashable) -> np.ndarray[Any, Any] | None:
        """The cached chunk (read-only) and mark it recently used, or None.

        Args:
            key: The chunk's grid index.
        """
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
            return chunk

    def put(self, key: Hashable, chunk: np.ndarray[Any, Any], epoch: int) -> bool:
        """Store ``chunk`` unless it is too big or an invalidation happened after ``epoch``.

        Args:
            key: The chunk's grid index.
            chunk: The decoded chunk; made read-only.
            epoch: The cache's ``epoch`` when the read that decoded ``chunk`` began.

        Returns:
            Whether it was stored.
        """
        if chunk.nbytes > self.capacity:
            return False
        chunk.flags.writeable = False
        with self._lock:
            if epoch != self.epoch:
                return False
            old = self._chunks.pop(key, None)
            if old is not None:
                self._nbytes -= old.nbytes
            self._chunks[key] = chunk
            self._nbytes += chunk.nbytes
            while self._nbytes > self.capacity:
                _, evicted = self._chunks.popitem(last=False)
                self._nbytes -= evicted.nbytes
            return True

    def invalidate(self, keys: Iterable[Hashable]) -> None:
        """Drop these chunks (they were written) and refuse puts begun before now.

        Args:
            keys: The grid indices of the chunks written.
        """
        with self._lock:
            self.epoch += 1
            for key in keys:
                old = self._chunks.pop(key, None)
                if old is not None:
                    self._nbytes -= old.nbytes

    def clear(self) -> None:
        with self._lock:
            self.epoch += 1
            self._chunks.clear()
            self._nbytes = 0
