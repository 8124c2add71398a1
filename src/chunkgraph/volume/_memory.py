"""The memory backend: numpy arrays in a process-local registry, by name.

For temporary layers and tests. A memory volume lives as long as its registry
entry (``volume.remove(name)`` drops it) and is visible only in this
process: it cannot be pickled to another one (``Volume`` refuses with a
message saying to use an on-disk backend).

``read`` returns a copy, never a view, so callers can mutate what they got
without touching the stored data, exactly like the on-disk backends.

The array is made on the first write: until then reads give the fill value, and a
volume only planned over (a dry run's stand-in for a destination, which ``downsample``
and ``transfer`` plan over before every run) holds no memory, however large.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from chunkgraph._errors import VolumeNotFoundError
from chunkgraph.volume._storage import Index, VolumeMeta

BACKEND = "memory"


class MemoryStorage:
    """One numpy array seen through the ``Storage`` protocol."""

    def __init__(self, path: str, meta: VolumeMeta) -> None:
        self.path = path
        self.meta = meta
        self._data: np.ndarray[Any, Any] | None = None  # made by the first write
        self._made = threading.Lock()

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        data = self._data
        if data is None:  # never written: the fill, as a view of one value, then copied
            data = np.broadcast_to(
                np.asarray(self.meta.fill_value, self.meta.dtype), self.meta.shape
            )
        return data[index].copy()

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        if self._data is None:
            with self._made:
                if self._data is None:
                    self._data = np.full(self.meta.shape, self.meta.fill_value, self.meta.dtype)
        self._data[index] = data


_REGISTRY: dict[str, MemoryStorage] = {}
_REGISTRY_LOCK = threading.Lock()


def memory_exists(name: str) -> bool:
    return name in _REGISTRY


def create_memory(name: str, meta: VolumeMeta) -> MemoryStorage:
    storage = MemoryStorage(name, meta)
    with _REGISTRY_LOCK:
        _REGISTRY[name] = storage
    return storage


def open_memory(name: str) -> MemoryStorage:
    with _REGISTRY_LOCK:
        storage = _REGISTRY.get(name)
    if storage is None:
        raise VolumeNotFoundError(f"no memory volume named {name!r} in this process")
    return storage


def remove_memory(name: str) -> bool:
    with _REGISTRY_LOCK:
        return _REGISTRY.pop(name, None) is not None
