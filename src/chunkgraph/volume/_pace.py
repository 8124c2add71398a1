"""How many requests an object store is given at once, from what its requests measured.

Policy. A GET costs a round trip (latency ``L``) and its bytes at the rate one
request is served (``B``). A thread that waits on requests one after another
spends ``L / (L + S/B)`` of its time waiting for a request of ``S`` bytes;
``1 + L * B / S`` requests in flight per thread hide that wait, and every core
can decode one chunk while the others' bytes travel, so::

    in flight = cores x (1 + L x B / S),   within [cores, MAX_IN_FLIGHT]

and the bytes a round trip could have carried, ``L x B``, is the ``gap``: two
byte ranges of one object closer than that are cheaper read as one request
(the bytes between them included) than as two (``_shards``).

Measured, not configured: every GET of a store (endpoint and bucket) adds its
duration and size to ``Pace``; ``L`` is the shortest of the last ``WINDOW``
(a request's floor), ``B`` the median rate of the large ones beyond that floor,
``S`` their mean size. Until ``MIN_SAMPLES`` GETs are in, zarr's
``async.concurrency`` and ``DEFAULT_GAP`` serve.

    >>> pace = Pace()
    >>> for _ in range(16):
    ...     pace.sample(0.020, 1000)           # small: the latency
    ...     pace.sample(0.030, 1_000_000)      # 1 MB in 10 ms beyond it: 100 MB/s
    >>> pace.in_flight(cores=2), pace.gap()
    (6, 2000000)
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque

import zarr

# The most requests in flight for one region (the chunk pool's threads).
MAX_IN_FLIGHT = 64
WINDOW = 256
MIN_SAMPLES = 8
# A request this large or larger tells the rate; smaller ones mostly the latency.
LARGE = 64 * 1024
DEFAULT_GAP = 1024 * 1024
MAX_GAP = 16 * 1024 * 1024
# Recomputed every this many samples (a few sorts of WINDOW numbers, not per request).
EVERY = 16


class Pace:
    """Latency and bandwidth of one store as its GETs measured them (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque(maxlen=WINDOW)
        self._new = 0
        self._estimate: tuple[float, float, float] | None = None  # (L s, B bytes/s, S bytes)

    def sample(self, seconds: float, nbytes: int) -> None:
        """One GET: ``nbytes`` received ``seconds`` after it was sent."""
        with self._lock:
            self._samples.append((seconds, nbytes))
            self._new += 1
            if self._new >= EVERY or (self._estimate is None and len(self._samples) >= MIN_SAMPLES):
                self._new = 0
                self._estimate = _estimate(list(self._samples))

    def estimate(self) -> tuple[float, float, float] | None:
        """(latency s, bytes/s of one request, mean bytes of a large request), once known."""
        with self._lock:
            return self._estimate

    def in_flight(self, cores: int) -> int:
        found = self.estimate()
        if found is None:
            return int(zarr.config.get("async.concurrency") or 10)
        latency, rate, size = found
        wanted = cores * (1 + latency * rate / size)
        return max(cores, min(MAX_IN_FLIGHT, math.ceil(wanted - 1e-6)))

    def gap(self) -> int:
        found = self.estimate()
        if found is None:
            return DEFAULT_GAP
        latency, rate, _ = found
        return max(0, min(MAX_GAP, int(latency * rate)))


def _estimate(samples: list[tuple[float, int]]) -> tuple[float, float, float]:
    latency = min(seconds for seconds, _ in samples)
    large = [(s, n) for s, n in samples if n >= LARGE]
    if not large:  # only small requests: their size is the size; the rate is unknown, so
        # counted as what moves a request's size in its latency (one more in flight a thread)
        size = max(1.0, statistics.fmean(n for _, n in samples))
        return latency, size / max(latency, 1e-6), size
    rate = statistics.median(n / max(s - latency, 1e-4) for s, n in large)
    return latency, rate, statistics.fmean(n for _, n in large)


_paces: dict[tuple[str | None, str], Pace] = {}
_paces_lock = threading.Lock()


def pace_of(endpoint: str | None, bucket: str) -> Pace:
    """The one ``Pace`` of a store (endpoint and bucket) in this process."""
    with _paces_lock:
        return _paces.setdefault((endpoint, bucket), Pace())
