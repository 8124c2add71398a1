"""The device backend: the one place that touches CuPy.

Everything GPU-related in chunkgraph (detection, the executor's GPU workers,
device residency, ``volume.apply(device="gpu")``) goes through a
``DeviceBackend``, so the same code runs on

* ``CupyBackend``: NVIDIA GPUs through CuPy (the ``gpu`` extra);
* ``FakeBackend``: ``n`` pretend devices whose arrays are a numpy subclass
  (``FakeDeviceArray``). Tests use it where no GPU exists, to check placement,
  residency and transfers: every crossing between host and a device goes
  through ``to_device``/``to_host`` and is counted, and an array knows which
  device holds it. It computes on the host and measures nothing about speed.

``active_backend()`` is the backend in use: the one installed with
``use_backend`` (a context manager, per process), else CuPy when it imports
and sees a device, else None (no GPUs: GPU contexts are simply absent).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Protocol

import numpy as np


class DeviceBackend(Protocol):
    """What chunkgraph needs from a GPU runtime."""

    name: str

    def device_count(self) -> int:
        """How many devices this process may use (``CUDA_VISIBLE_DEVICES`` honoured)."""
        ...

    def device_memory(self, index: int) -> tuple[int, int]:
        """``(free, total)`` bytes of device ``index``."""
        ...

    def using(self, index: int) -> contextlib.AbstractContextManager[None]:
        """Bind the calling thread to device ``index`` for the block."""
        ...

    def current_device(self) -> int:
        """The device the calling thread is bound to (0 when none was chosen)."""
        ...

    def xp(self) -> ModuleType:
        """The array module for device arrays (``cupy``; numpy for the fake)."""
        ...

    def is_device_array(self, obj: object) -> bool: ...

    def device_of(self, array: Any) -> int:
        """The index of the device that holds ``array``."""
        ...

    def to_device(self, array: np.ndarray, index: int) -> Any:
        """A copy of host ``array`` on device ``index`` (counted as a transfer)."""
        ...

    def to_host(self, array: Any) -> np.ndarray:
        """A host copy of device ``array`` (counted as a transfer)."""
        ...

    def trim_pool(self, index: int) -> None:
        """Give the memory pool's cached, unused blocks of device ``index`` back."""
        ...


class FakeDeviceArray(np.ndarray):
    """An array a ``FakeBackend`` device holds; numpy operations on it keep the type
    (and the device), as CuPy operations keep their arrays on the device."""

    fake_device: int = 0  # not ``device``: numpy arrays have one (the array API's "cpu")

    def __array_finalize__(self, obj: object) -> None:
        self.fake_device = getattr(obj, "fake_device", 0)


class FakeBackend:
    """``count`` pretend devices of ``memory`` bytes each, for tests without a GPU."""

    name = "fake"

    def __init__(self, count: int = 1, memory: int = 1 << 30) -> None:
        self.count = count
        self.memory = memory
        self.uploads = 0  # host -> device copies
        self.downloads = 0  # device -> host copies
        self.bytes_moved = 0
        self.trims = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def device_count(self) -> int:
        return self.count

    def device_memory(self, index: int) -> tuple[int, int]:
        return self.memory, self.memory

    @contextlib.contextmanager
    def using(self, index: int) -> Iterator[None]:
        before = getattr(self._local, "device", None)
        self._local.device = index
        try:
            yield
        finally:
            self._local.device = before

    def current_device(self) -> int:
        device = getattr(self._local, "device", None)
        return 0 if device is None else int(device)

    def bound_device(self) -> int | None:
        """The device the calling thread is bound to by ``using``; None when it is not
        (a test can tell a GPU worker from a CPU one, which ``current_device`` cannot)."""
        device = getattr(self._local, "device", None)
        return None if device is None else int(device)

    def xp(self) -> ModuleType:
        return np

    def is_device_array(self, obj: object) -> bool:
        return isinstance(obj, FakeDeviceArray)

    def device_of(self, array: Any) -> int:
        return int(array.fake_device)

    def to_device(self, array: np.ndarray, index: int) -> Any:
        out = np.array(array, copy=True).view(FakeDeviceArray)
        out.fake_device = index
        with self._lock:
            self.uploads += 1
            self.bytes_moved += out.nbytes
        return out

    def to_host(self, array: Any) -> np.ndarray:
        out = np.array(array, copy=True).view(np.ndarray)
        with self._lock:
            self.downloads += 1
            self.bytes_moved += out.nbytes
        return out

    def trim_pool(self, index: int) -> None:
        with self._lock:
            self.trims += 1


class CupyBackend:
    """NVIDIA GPUs through CuPy."""

    name = "cupy"

    def __init__(self, cupy: ModuleType) -> None:
        self._cp = cupy

    def device_count(self) -> int:
        return int(self._cp.cuda.runtime.getDeviceCount())

    def device_memory(self, index: int) -> tuple[int, int]:
        with self._cp.cuda.Device(index):
            free, total = self._cp.cuda.runtime.memGetInfo()
        return int(free), int(total)

    def using(self, index: int) -> contextlib.AbstractContextManager[None]:
        return self._cp.cuda.Device(index)  # type: ignore[no-any-return]

    def current_device(self) -> int:
        return int(self._cp.cuda.runtime.getDevice())

    def xp(self) -> ModuleType:
        return self._cp

    def is_device_array(self, obj: object) -> bool:
        return isinstance(obj, self._cp.ndarray)

    def device_of(self, array: Any) -> int:
        return int(array.device.id)

    def to_device(self, array: np.ndarray, index: int) -> Any:
        with self._cp.cuda.Device(index):
            return self._cp.asarray(array)

    def to_host(self, array: Any) -> np.ndarray:
        return self._cp.asnumpy(array)  # type: ignore[no-any-return]

    def trim_pool(self, index: int) -> None:
        with self._cp.cuda.Device(index):
            self._cp.get_default_memory_pool().free_all_blocks()
            self._cp.get_default_pinned_memory_pool().free_all_blocks()


_installed: list[DeviceBackend] = []
_probed: list[DeviceBackend | None] = []


@contextlib.contextmanager
def use_backend(backend: DeviceBackend) -> Iterator[DeviceBackend]:
    """Make ``backend`` this process's device backend for the block (tests: a FakeBackend)."""
    _installed.append(backend)
    try:
        yield backend
    finally:
        _installed.remove(backend)


def active_backend() -> DeviceBackend | None:
    """The backend in use: the innermost ``use_backend``, else CuPy with a device, else None."""
    if _installed:
        return _installed[-1]
    if not _probed:
        _probed.append(_probe_cupy())
    return _probed[0]


def _probe_cupy() -> DeviceBackend | None:
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception:  # not installed, or a broken CUDA install: no GPUs for us
        return None
    backend = CupyBackend(cupy)
    try:
        if backend.device_count() < 1:
            return None
    except Exception:  # CUDA driver missing or no device visible
        return None
    return backend
