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

Streams. A thread bound to a device (``using``) issues its work on its own
stream there, so two threads on one device (a GPU flow's two top-level tasks)
overlap one's copies with the other's kernels, and nothing queues behind the
legacy default stream. Uploads go on a second, per-thread *copy* stream, and
the thread's stream waits for them on the device (not the host): the next
task's inputs cross while the current task's kernels still run. Work is
asynchronous, so whoever reads a result from another stream (a CPU task, the
caller, a spill, another GPU) first waits for the event its producer recorded
(``record``/``synchronize``); and an uploaded array, whose memory belongs to
the copy stream's pool, is kept alive until its consumer's event is done, so
the pool cannot hand its block to the next upload while a kernel still reads
it. ``Residency`` and ``FlowDevice`` keep both rules.

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
        """Bind the calling thread to device ``index``, and to its own stream there,
        for the block."""
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
        """A copy of host ``array`` on device ``index``, made on the calling thread's copy
        stream; the thread's own stream waits for it (on the device)."""
        ...

    def to_host(self, array: Any) -> np.ndarray:
        """A host copy of device ``array``, on the calling thread's stream: the caller has
        waited for the array's producer when that ran on another stream."""
        ...

    def record(self) -> Any:
        """An event marking the work the calling thread has issued on its current stream."""
        ...

    def synchronize(self, event: Any) -> None:
        """Wait on the host until ``event``'s work is done."""
        ...

    def event_done(self, event: Any) -> bool:
        """Whether ``event``'s work is done (without waiting)."""
        ...

    def trim_pool(self, index: int) -> None:
        """Give the memory pool's cached, unused blocks of device ``index`` back."""
        ...


class FakeStreamOrderError(RuntimeError):
    """A ``FakeBackend`` array was read from another stream before anyone waited for
    the event of the work that made it: on a GPU, that read could see unfinished data."""


class FakeStream:
    """A pretend stream: a count of the operations issued on it, and how many of them
    are known done (an event of it was waited for)."""

    def __init__(self, thread: int, device: int) -> None:
        self.thread, self.device = thread, device
        self.issued = 0
        self.done = 0


class FakeEvent:
    """The point ``issued`` on ``stream`` that ``record`` marked."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream, self.point = stream, stream.issued


# The stream the calling thread issues work on (set by FakeBackend.using): an array
# made by numpy operations in that thread belongs to it, as a CuPy kernel's output
# belongs to the stream it ran on.
_fake_current = threading.local()


class FakeDeviceArray(np.ndarray):
    """An array a ``FakeBackend`` device holds; numpy operations on it keep the type
    (and the device), as CuPy operations keep their arrays on the device. It remembers
    the stream and the point on it where it was made (``FakeStream``)."""

    fake_device: int = 0  # not ``device``: numpy arrays have one (the array API's "cpu")
    fake_stream: FakeStream | None = None
    fake_point: int = 0

    def __array_finalize__(self, obj: object) -> None:
        self.fake_device = getattr(obj, "fake_device", 0)
        stream = getattr(_fake_current, "stream", None)
        if stream is not None and stream.device == self.fake_device:
            stream.issued += 1
            self.fake_stream, self.fake_point = stream, stream.issued
        else:
            self.fake_stream = getattr(obj, "fake_stream", None)
            self.fake_point = getattr(obj, "fake_point", 0)


class FakeBackend:
    """``count`` pretend devices of ``memory`` bytes each, for tests without a GPU.

    It models stream order, not time: every array remembers the stream (one per
    thread and device, as ``CupyBackend``'s) and the point on it where it was made,
    and ``to_host`` from another stream (an unbound thread's is the default one)
    raises ``FakeStreamOrderError`` unless an
    event at or past that point was waited for. Events are never done by themselves
    (``event_done`` is False until ``synchronize``): the strictest GPU there is."""

    name = "fake"

    def __init__(self, count: int = 1, memory: int = 1 << 30) -> None:
        self.count = count
        self.memory = memory
        self.uploads = 0  # host -> device copies
        self.downloads = 0  # device -> host copies
        self.bytes_moved = 0
        self.trims = 0
        self.waits = 0  # events waited for on the host
        self._lock = threading.Lock()
        self._local = threading.local()

    def device_count(self) -> int:
        return self.count

    def device_memory(self, index: int) -> tuple[int, int]:
        return self.memory, self.memory

    @contextlib.contextmanager
    def using(self, index: int) -> Iterator[None]:
        before = getattr(self._local, "device", None)
        before_stream = getattr(_fake_current, "stream", None)
        self._local.device = index
        _fake_current.stream = self._stream(index)
        try:
            yield
        finally:
            self._local.device = before
            _fake_current.stream = before_stream

    def _stream(self, index: int) -> FakeStream:
        streams: dict[int, FakeStream] = self._local.__dict__.setdefault("streams", {})
        if index not in streams:
            streams[index] = FakeStream(threading.get_ident(), index)
        return streams[index]

    def record(self) -> FakeEvent:
        return FakeEvent(self._stream(self.current_device()))

    def synchronize(self, event: FakeEvent) -> None:
        with self._lock:
            self.waits += 1
            event.stream.done = max(event.stream.done, event.point)

    def event_done(self, event: FakeEvent) -> bool:
        return event.stream.done >= event.point

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
        # The calling thread's current stream waits for the copy: the array is ordered
        # there (an unbound thread's is the default stream: None).
        stream = getattr(_fake_current, "stream", None)
        if stream is not None and stream.device == index:
            stream.issued += 1
            out.fake_stream, out.fake_point = stream, stream.issued
        else:
            out.fake_stream, out.fake_point = None, 0
        with self._lock:
            self.uploads += 1
            self.bytes_moved += out.nbytes
        return out

    def to_host(self, array: Any) -> np.ndarray:
        made_on = array.fake_stream  # read on the current stream (None: the default one)
        current = getattr(_fake_current, "stream", None)
        if made_on is not None and made_on is not current and made_on.done < array.fake_point:
            raise FakeStreamOrderError(
                f"an array made on device {made_on.device} by thread {made_on.thread} was "
                "read from another stream before its producer's event was waited for"
            )
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
        self._local = threading.local()  # per thread: {device: (stream, copy stream)}

    def _streams(self, index: int) -> tuple[Any, Any]:
        """The calling thread's own stream and copy stream on device ``index`` (made on
        first use; non-blocking: they never wait for the legacy default stream)."""
        streams: dict[int, tuple[Any, Any]] = self._local.__dict__.setdefault("streams", {})
        if index not in streams:
            with self._cp.cuda.Device(index):
                Stream = self._cp.cuda.Stream
                streams[index] = (Stream(non_blocking=True), Stream(non_blocking=True))
        return streams[index]

    def device_count(self) -> int:
        return int(self._cp.cuda.runtime.getDeviceCount())

    def device_memory(self, index: int) -> tuple[int, int]:
        with self._cp.cuda.Device(index):
            free, total = self._cp.cuda.runtime.memGetInfo()
        return int(free), int(total)

    @contextlib.contextmanager
    def using(self, index: int) -> Iterator[None]:
        with self._cp.cuda.Device(index), self._streams(index)[0]:
            yield

    def current_device(self) -> int:
        return int(self._cp.cuda.runtime.getDevice())

    def xp(self) -> ModuleType:
        return self._cp

    def is_device_array(self, obj: object) -> bool:
        return isinstance(obj, self._cp.ndarray)

    def device_of(self, array: Any) -> int:
        return int(array.device.id)

    def to_device(self, array: np.ndarray, index: int) -> Any:
        cuda = self._cp.cuda
        with cuda.Device(index):
            consumer = cuda.get_current_stream()
            copy = self._streams(index)[1]
            with copy:
                out = self._cp.asarray(array)
            consumer.wait_event(copy.record())
        return out

    def to_host(self, array: Any) -> np.ndarray:
        with self._cp.cuda.Device(array.device.id):
            return array.get()  # type: ignore[no-any-return]  # on this thread's stream, waited

    def record(self) -> Any:
        return self._cp.cuda.get_current_stream().record()

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def event_done(self, event: Any) -> bool:
        return bool(event.done)

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
