"""Where a flow's levels below the top compute: ``apply(..., device="cpu" | "gpu")``.

Policy. With ``device="gpu"`` a top-level task reads its inputs on the host
once (as on the CPU), uploads each of them once, and from there everything
below the top stays on the device: ``fn`` gets device arrays (CuPy; a
``FakeDeviceArray`` under ``FakeBackend``), and the accumulators that blend
and assemble the levels below are device arrays too. Only the top level's
output comes back (cast to the layer's dtype first, so the smaller array
crosses), once per top-level task, to be written::

    storage ──read (host)──> superchunk ──upload, once per input──> device
                                                                      │ fn, blend, assemble
    layer / dst <──write── host <──download, once per top task── top output (cast)

A direct flow (``skip_intermediates``) has no top-level assembly: each bottom
output is downloaded and written as it comes. Reductions of the top level read
the layers from storage and stay on the host.

State. ``FlowDevice`` wraps the process's ``DeviceBackend`` and counts what
crossed (uploads, downloads and their bytes; the probe's included), under a
lock because the top-level tasks of a flow run on several threads. It lives
only in the process that runs the flow: ``device="gpu"`` needs an in-process
executor (``check_executor``, before any GPU is looked for), since a backend is
per process.

Which device. Top-level task ``index`` computes on device ``sum(index) % n``
of the ``n`` this process sees (``CUDA_VISIBLE_DEVICES`` picks them) and binds
its thread there for the task (``FlowDevice.bound``): neighbours on the top
grid alternate, so every GPU gets an even share and each has
``DEVICE_TASKS_IN_FLIGHT`` tasks in flight. The tasks declare no
``{"gpu": 1}`` resource: that would give each GPU one executor worker, one task
at a time, and a GPU flow wants one task computing while another reads and
writes. ``FlowDevice.fit`` sizes that count from the devices' free memory (one
task's footprint is what the host estimate counts: its padded superchunk and
accumulators), and refuses a flow whose one task does not fit before anything
runs; ``trim`` empties the memory pools after the flow.

Streams. A bound thread issues its task's uploads (on its copy stream), kernels
and download on its own stream (``gpu._backend``), so the two tasks on a device
overlap one's copies with the other's kernels. The download waits for the
stream, and ``bound`` waits for it again on the way out, also when ``fn``
raised: the uploads are let go only after every kernel that reads them.

Identity. The device is not part of the flow id: it changes where the flow
computes, not what. Float results on a GPU may differ from the CPU's in the
last bits (fused multiply-adds, other library kernels), so a resumed flow that
ran partly on each has chunks from both: each is a valid result.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import format_bytes
from chunkgraph.flow.plan import DEVICE_TASKS_IN_FLIGHT
from chunkgraph.gpu import active_backend

if TYPE_CHECKING:
    from chunkgraph.gpu import DeviceBackend


class FlowDevice:
    """The device a flow's lower levels run on, and a count of what crossed to it."""

    def __init__(self, backend: DeviceBackend) -> None:
        self.backend = backend
        self.uploads = 0
        self.downloads = 0
        self.bytes_uploaded = 0
        self.bytes_downloaded = 0
        self.per_device = DEVICE_TASKS_IN_FLIGHT  # see fit()
        self._lock = threading.Lock()

    def xp(self) -> ModuleType:
        """The array module of device arrays (``cupy``; numpy under the fake)."""
        return self.backend.xp()

    def fit(self, task_bytes: int) -> None:
        """Size ``per_device`` (top tasks whose data a GPU holds at once, at most
        ``DEVICE_TASKS_IN_FLIGHT``) from the devices' free memory and one top task's
        footprint (its superchunk and accumulators: what the host estimate counts).
        ``ConfigError`` before anything runs when one task does not fit on a device."""
        if task_bytes <= 0:
            return
        free = min(self.backend.device_memory(i)[0] for i in range(self.count))
        fits = int(free // task_bytes)
        if fits < 1:
            raise ConfigError(
                f"device='gpu': one top-level task needs about {format_bytes(task_bytes)} on "
                f"the GPU (its padded superchunk and accumulators) but a device has "
                f"{format_bytes(free)} free; give smaller top-level chunk_sizes (the "
                "first entry), free the GPU, or use device='cpu'",
                field="device",
            )
        self.per_device = min(fits, DEVICE_TASKS_IN_FLIGHT)

    def trim(self) -> None:
        """Hand the memory pools' cached blocks back, so a long-lived process running
        flows one after another does not hoard device memory."""
        for index in range(self.count):
            self.backend.trim_pool(index)

    @property
    def count(self) -> int:
        """How many devices the flow spreads over."""
        return max(self.backend.device_count(), 1)

    @contextlib.contextmanager
    def bound(self, task: tuple[int, ...] = ()) -> Iterator[int]:
        """Bind the calling thread, for the block, to top-level task ``task``'s device
        (``sum(task) % count``: neighbours alternate) and to its own stream there, so
        two tasks in flight on one device overlap one's copies with the other's kernels;
        wait for the stream at the end."""
        index = sum(task) % self.count
        with self.backend.using(index):
            try:
                yield index
            finally:
                # Its work done before its uploads are let go (their blocks belong to the
                # copy stream's pool; see gpu._backend), also when fn raised.
                self.backend.synchronize(self.backend.record())

    def upload(self, array: np.ndarray, index: int) -> Any:
        """``array`` copied to device ``index``; a read-only host array stays read-only there
        where the device array has that flag (CuPy arrays have none)."""
        out = self.backend.to_device(array, index)
        if isinstance(out, np.ndarray) and not array.flags.writeable:
            out.flags.writeable = False
        with self._lock:
            self.uploads += 1
            self.bytes_uploaded += int(array.nbytes)
        return out

    def download(self, array: Any) -> np.ndarray:
        """A host copy of device ``array``."""
        out = self.backend.to_host(array)
        with self._lock:
            self.downloads += 1
            self.bytes_downloaded += int(out.nbytes)
        return out

    def on_device(self, result: Any, index: int) -> Any:
        """``fn``'s result as a device array: kept when it is one, uploaded when ``fn``
        returned a host array (accepted; it costs a transfer)."""
        if self.backend.is_device_array(result):
            return result
        return self.upload(np.asarray(result), index)

    def full(self, shape: tuple[int, ...], fill: Any, dtype: np.dtype, like: Any) -> Any:
        """A device array of ``shape`` filled with ``fill`` (None: uninitialised), on the
        device that holds ``like`` and of its array type."""
        xp = self.xp()
        if fill is None:
            return xp.empty_like(like, dtype=dtype, shape=shape, order="C")
        return xp.full_like(like, fill, dtype=dtype, shape=shape, order="C")


def resolve_device(
    device: str, gpu_fallback: bool, dry_run: bool = False
) -> tuple[FlowDevice | None, bool]:
    """The device of ``apply(device=..., gpu_fallback=...)``: None for the CPU, and whether
    the CPU stands in for a GPU that was asked for but not found.

    A backend with no device (``FakeBackend(0)``, CuPy seeing none) is no GPU. A dry run
    answers without one: ``(None, False)`` for ``device="gpu"``, and the caller reports
    the device as "gpu" with ``NO_GPU_HERE`` (``_flow_run.DeviceUse.missing``). The
    values were checked by ``RunOptions`` (``_options.DeviceChoice``).

    >>> resolve_device("cpu", False)
    (None, False)
    """
    if device == "cpu":
        return None, False

    backend = active_backend()
    if backend is not None and backend.device_count() > 0:
        return FlowDevice(backend), False
    if gpu_fallback:
        return None, True
    if dry_run:
        return None, False  # DeviceUse.missing: the report says the run would need one
    raise ConfigError(
        "device='gpu' but no GPU was found: CuPy is not installed or sees no device "
        "(check CUDA_VISIBLE_DEVICES and nvidia-smi); install chunkgraph[gpu] on a machine "
        "with an NVIDIA GPU, pass gpu_fallback=True to run on the CPU when there is none, "
        "or use device='cpu'",
        field="device",
    )
