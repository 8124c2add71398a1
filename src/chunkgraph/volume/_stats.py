"""I/O accounting of one ``Volume``: what came from storage, from the cache, went to storage.

Every counter is in *whole storage chunks* and their *decoded* bytes, because
that is what a chunked backend really moves: reading one voxel of a 64^3
float32 chunk costs 1 MiB of decoding. A caller that knows how many bytes it
actually needed gets the read amplification::

    amplification = stats.bytes_read / bytes_needed        (1.0 = no waste)

Chunks clipped by the volume edge count with their clipped size (the bytes
that exist), so reading a whole volume gives amplification 1.0 exactly.
``bytes_read + bytes_from_cache`` is the same for a given read whether the
cache is on or off.

Object stores (volumes behind a URL) also count requests: GETs, PUTs and the
rest (HEAD, LIST, DELETE), the conditional partial-chunk writes that found
another writer first and were done again (``write_conflicts``), and the most
requests in flight at once (``peak_requests_in_flight``) and bytes being
received at once (``peak_bytes_in_flight``): high-water marks, of which a
difference of snapshots keeps the later one's. They are counted by the store
(``_object_zarr``), per stored array: handles made by ``with_cache`` share them.
Volumes elsewhere leave them 0.

State: ``_IOCounters`` holds plain ints under one lock (updates come from many
reader/writer threads at once); ``snapshot()`` freezes them into ``IOStats``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from chunkgraph._errors import ConfigError


@dataclass(frozen=True, slots=True)
class IOStats:
    """A frozen snapshot of a volume's I/O counters.

    Attributes:
        bytes_read: Decoded bytes of whole storage chunks fetched from the backend.
        chunks_read: Storage chunks fetched from the backend.
        bytes_from_cache: Decoded bytes of the cached chunks that served reads.
        cache_hits: Chunks served by the cache.
        cache_misses: Chunks the cache did not hold.
        bytes_written: Bytes handed to the backend (the region written, after cropping).
        chunks_written: Storage chunks touched by writes.
        requests_get: Object-store GETs (whole or ranged).
        requests_put: Object-store PUTs.
        requests_other: Object-store HEAD, LIST and DELETE requests.
        write_conflicts: Conditional partial-chunk writes done again.
        peak_requests_in_flight: The high-water mark of requests at once (not a sum).
        peak_bytes_in_flight: The high-water mark of GET response bytes being received.

    >>> s = IOStats(bytes_read=4096, chunks_read=1)
    >>> s.read_amplification(1024)
    4.0
    >>> (IOStats(bytes_read=5000, chunks_read=2) - s).bytes_read   # I/O between two snapshots
    904
    """

    bytes_read: int = 0  # decoded bytes of whole storage chunks fetched from the backend
    chunks_read: int = 0  # storage chunks fetched from the backend
    bytes_from_cache: int = 0  # decoded bytes of the cached chunks that served reads
    cache_hits: int = 0
    cache_misses: int = 0
    bytes_written: int = 0  # bytes handed to the backend (the region written, after cropping)
    chunks_written: int = 0  # storage chunks touched by writes
    requests_get: int = 0  # object-store GETs (whole or ranged)
    requests_put: int = 0  # object-store PUTs
    requests_other: int = 0  # object-store HEAD, LIST, DELETE
    write_conflicts: int = 0  # conditional partial-chunk writes done again
    peak_requests_in_flight: int = 0  # high-water mark, not a sum
    peak_bytes_in_flight: int = 0  # high-water mark of GET response bytes being received

    def __sub__(self, earlier: IOStats) -> IOStats:
        """The I/O done between snapshot ``earlier`` and this one."""
        return IOStats(
            *(
                getattr(self, f) if f in _MARKS else getattr(self, f) - getattr(earlier, f)
                for f in IOStats.__dataclass_fields__
            )
        )

    @property
    def requests(self) -> int:
        """All object-store requests (0 for volumes elsewhere)."""
        return self.requests_get + self.requests_put + self.requests_other

    def read_amplification(self, bytes_needed: int) -> float:
        """``bytes_read / bytes_needed``: how many bytes storage delivered per byte used.

        Args:
            bytes_needed: The bytes the caller used (> 0; else a ConfigError).
        """
        if bytes_needed <= 0:
            raise ConfigError(f"bytes_needed must be positive, got {bytes_needed}")
        return self.bytes_read / bytes_needed


# Fields that are high-water marks: subtracting snapshots keeps the later one.
_MARKS = frozenset({"peak_requests_in_flight", "peak_bytes_in_flight"})
# Fields the object store counts (merged into Volume.stats), not _IOCounters.
STORE_FIELDS = (
    "requests_get",
    "requests_put",
    "requests_other",
    "write_conflicts",
    "peak_requests_in_flight",
    "peak_bytes_in_flight",
)


class _IOCounters:
    """Mutable, thread-safe counters behind ``Volume.stats`` (all but ``STORE_FIELDS``)."""

    __slots__ = ("_lock", "_values")

    _FIELDS = tuple(f for f in IOStats.__dataclass_fields__ if f not in STORE_FIELDS)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self._FIELDS, 0)

    def add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._values[name] += amount

    def add_read(self, chunks: int, nbytes: int) -> None:
        """``add(chunks_read=..., bytes_read=...)`` without keyword packing: every read calls it."""
        values = self._values
        with self._lock:
            values["chunks_read"] += chunks
            values["bytes_read"] += nbytes

    def snapshot(self) -> IOStats:
        with self._lock:
            return IOStats(**self._values)

    def reset(self) -> None:
        with self._lock:
            self._values = dict.fromkeys(self._FIELDS, 0)
