"""How many requests an object store is given at once, from what its requests measured.

Policy. A thread that fetches a chunk and then decodes it waits ``L`` (a
request's whole duration: its round trip and its bytes) for every ``W`` it
works (the decode). The bytes the process can take in are ``cores x S / W`` a
second (``S`` a chunk's size); the requests in flight that keep them coming
are that bandwidth times the latency over the size, plus those being decoded::

    in flight = cores x S/W x L / S + cores = cores x (1 + L / W),
                within [cores, MAX_IN_FLIGHT]

At 20 ms a request this is the most allowed. Measured against moto on two
cores, a whole-array read is as fast with it as with zarr's ``async.concurrency``
of 10 (0.30 against 0.28 s for 64 chunks of 220 KiB; 0.83 against 0.85 s for 256
of 16 KiB): moto's own time per request is the limit there, not the client's.

The ``gap``: two byte ranges of one object closer than the bytes one round trip
could have carried (the shortest request's time ``L0`` x the median rate ``B``
of large requests beyond it) are cheaper read as one request, the bytes
between them included, than as two (``_shards``).

Every GET of a store (endpoint and bucket) adds its duration and size, and
every chunk decoded its time, to the store's one ``Pace``, over the last
``WINDOW`` of each. Until ``MIN_SAMPLES`` are in, zarr's ``async.concurrency``
and ``DEFAULT_GAP`` serve.

    >>> pace = Pace()
    >>> for _ in range(16):
    ...     pace.sample(0.020, 1000)           # small: the round trip
    ...     pace.sample(0.030, 1_000_000)      # 1 MB in 10 ms beyond it: 100 MB/s
    ...     pace.work(0.005)                   # 5 ms to decode a chunk
    >>> pace.in_flight(cores=2), pace.gap()
    (12, 2000000)
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
    """Request and decode times of one store, as measured (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque(maxlen=WINDOW)
        self._work: deque[float] = deque(maxlen=WINDOW)
        self._new = 0
        self._estimate: tuple[float, float, float] | None = None  # (L0 s, B bytes/s, L s)

    def sample(self, seconds: float, nbytes: int) -> None:
        """One GET: ``nbytes`` received ``seconds`` after it was sent."""
        with self._lock:
            self._samples.append((seconds, nbytes))
            self._new += 1
            if self._new >= EVERY or (self._estimate is None and len(self._samples) >= MIN_SAMPLES):
                self._new = 0
                self._estimate = _estimate(list(self._samples))

    def work(self, seconds: float) -> None:
        """One chunk decoded in ``seconds``."""
        self._work.append(seconds)  # a deque's append is atomic

    def estimate(self) -> tuple[float, float, float] | None:
        """(shortest request s, bytes/s of a large one beyond that, mean request s)."""
        with self._lock:
            return self._estimate

    def in_flight(self, cores: int) -> int:
        found, work = self.estimate(), list(self._work)
        if found is None or len(work) < MIN_SAMPLES:
            return int(zarr.config.get("async.concurrency") or 10)
        wanted = cores * (1 + found[2] / max(statistics.fmean(work), 1e-6))
        return max(cores, min(MAX_IN_FLIGHT, math.ceil(wanted - 1e-6)))

    def gap(self) -> int:
        found = self.estimate()
        if found is None or found[1] <= 0:
            return DEFAULT_GAP
        return max(0, min(MAX_GAP, int(found[0] * found[1])))


def _estimate(samples: list[tuple[float, int]]) -> tuple[float, float, float]:
    floor = min(seconds for seconds, _ in samples)
    mean = statistics.fmean(seconds for seconds, _ in samples)
    large = [(s, n) for s, n in samples if n >= LARGE]
    rate = statistics.median(n / max(s - floor, 1e-4) for s, n in large) if large else 0.0
    return floor, rate, mean


_paces: dict[tuple[str | None, str], Pace] = {}
_paces_lock = threading.Lock()


def pace_of(endpoint: str | None, bucket: str) -> Pace:
    """The one ``Pace`` of a store (endpoint and bucket) in this process."""
    with _paces_lock:
        return _paces.setdefault((endpoint, bucket), Pace())
