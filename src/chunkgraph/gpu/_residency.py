"""Device residency: where a run's arrays live while tasks on GPUs and CPUs pass them on.

The local executor runs each GPU context with one worker thread bound to its
device (``DeviceBackend.using``). This module decides, for each call, where the
call's array arguments must be, and moves only what is not there yet:

    a GPU task on d   host arrays        -> to_device(d)          (upload)
                      arrays on GPU d    -> passed as they are     (no round trip)
                      arrays on GPU e    -> to_host, to_device(d)  (via host)
    any other task    device arrays      -> to_host                (download)
    the run's caller  device results     -> to_host                (download)

"Where it runs" is the context of the worker that runs it, not where it was
planned: a GPU task stolen by another GPU's worker (the scheduler's steals;
a CPU worker never can take one) gets its inputs on the thief's device and
runs bound to it. A "GPU task" asks for ``{"gpu": ...}``; a task whose resources name neither
kind may be planned on a GPU context too, and gets host arrays there.
Arrays are found at any depth the graph finds TaskRefs at (its container
rule, ``chunkgraph.graph.replace_leaves``: lists, tuples, dicts' values and
their subclasses, nested as deep as they go: ``f(x, [a, {"k": [c]}])``), for
every move: uploads for GPU tasks, downloads for other tasks, for spills and
for the caller's results. Walking them costs what the graph's own walk to put
results in place costs; a container holding nothing to move is passed on
as it is (not rebuilt) to tasks off the GPU and to the caller. A
result is never moved in the scheduler's table for a consumer: each consumer
gets its own copy where it runs, so a result read by a GPU task and a CPU task
stays on its device for the first and is downloaded for the second.

Device memory is a budget. The scheduler admits each task's ``Cost.memory``
against its context's budget (a GPU context's budget is its device memory).
The results a GPU keeps for later consumers are counted here, in bytes
(``nbytes``), per device:

    resident[d]  {task: bytes} of the results held on device d, oldest first
    limit[d]     budget[d] - the largest Cost.memory planned on d: room left for
                 results while any one task runs (inf: no budget)

When keeping a new result would take the resident bytes over ``limit[d]``,
the oldest results still held are moved to host (*spilled*: their entry in
the scheduler's results becomes the host copy) until it fits; the new result
itself stays. Released results are dropped from ``resident`` lazily: a
release is the scheduler's business, so before anything is spilled the
entries whose result is gone are forgotten first, and only a device still
over its limit spills.

Stream order (see ``_backend``: each bound thread issues work on its own
stream, uploads on a copy stream). A GPU task's call records an event when it
returns (``ready[t]``). Whoever reads that result from another thread or
device first waits for it on the host: a task off the GPU, a GPU task on
another device (through the host), a spill, and the caller (``finish`` waits
for every event). The same worker reading its own results waits for nothing:
its stream orders them. The arrays uploaded for a call are *parked* with its
event until the event is done, since their memory belongs to the copy
stream's pool, which could otherwise hand it to the next upload while a
kernel still reads it.

At the end of a run every device's pool is trimmed (``trim_pool``), so a
long-lived process does not hoard device memory between runs.

Who calls what: ``bound``/``resolver`` are per worker (its context) and run
outside the executor's lock; ``kept`` runs under it (it reads and writes the
scheduler's results); ``to_host`` and ``finish`` run in the calling thread
after the workers have left. Counters are guarded by their own lock.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Callable, Container, Sequence
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.gpu._backend import DeviceBackend
from chunkgraph.graph import collect_leaves, has_leaf, replace_leaves

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
Resolve = Callable[[int, list[Any]], Call]

_GPU_NAME = re.compile(r"gpu(\d+)$")


def device_indices(names: Sequence[str], kinds: Sequence[str], count: int) -> list[int]:
    """The device each context drives (-1: a CPU context).

    A GPU context named ``gpuN`` drives device N; any other GPU context the
    next device by its position among the GPU contexts. ConfigError when a
    device is not there.

    >>> device_indices(["numa0", "gpu1", "gpu0"], ["cpu", "gpu", "gpu"], 2)
    [-1, 1, 0]
    """
    out, position = [], 0
    for name, kind in zip(names, kinds, strict=True):
        if kind != "gpu":
            out.append(-1)
            continue
        match = _GPU_NAME.match(name)
        index = int(match.group(1)) if match else position
        position += 1
        if index >= count:
            raise ConfigError(
                f"the plan runs tasks on GPU context {name!r} (device {index}), but this "
                f"process sees {count} device(s) (0..{count - 1}); plan on "
                "chunkgraph.local_contexts(), or name GPU contexts gpu0..gpu"
                f"{max(count - 1, 0)}"
            )
        out.append(index)
    return out


class Residency:
    """Where one run's arrays live (see the module doc).

    ``devices[c]``: the device of context c (-1: CPU); ``limits[c]``: bytes of
    results context c's device may keep (inf: no limit); ``results``: the
    scheduler's results table (spilled entries are replaced in it); ``gpu_tasks``:
    the tasks that ask for a GPU (only they get device arrays; None: every task);
    ``deps``: the graph's ``dependencies()`` (what a task reads, to wait for it);
    ``targets``: the tasks whose results the caller gets (``finish`` copies them to host).
    """

    def __init__(
        self,
        backend: DeviceBackend,
        devices: list[int],
        limits: list[float],
        results: list[Any],
        gpu_tasks: Container[int] | None = None,
        deps: tuple[np.ndarray, np.ndarray] | None = None,
        targets: Sequence[int] = (),
    ) -> None:
        self.backend = backend
        self.gpu_tasks = gpu_tasks
        self.deps = deps
        # ready[t]: (event, thread, device) of GPU task t's call (see "Stream order")
        self.ready: dict[int, tuple[Any, int, int]] = {}
        self.parked: dict[int, list[tuple[Any, list[Any]]]] = {}  # device -> (event, uploads)
        self._try: dict[int, object] = {}  # t -> its latest try's token (see _recorded)
        self.targets = targets  # what the caller gets: copied to host by finish()
        self._uploads = threading.local()  # the calling thread's uploads for its next call
        self.devices = devices
        self.results = results
        self.limit = {d: limits[c] for c, d in enumerate(devices) if d >= 0}
        self.resident: dict[int, dict[int, int]] = {d: {} for d in self.limit}
        self.held = dict.fromkeys(self.limit, 0)
        self.uploads = 0
        self.downloads = 0
        self.bytes_moved = 0
        self.spills = 0
        self._lock = threading.Lock()

    # -- per worker, outside the lock ----------------------------------------------------

    def bound(self, context: int) -> contextlib.AbstractContextManager[Any]:
        """Bind the calling thread to ``context``'s device for the block (CPU: nothing)."""
        device = self.devices[context]
        return self.backend.using(device) if device >= 0 else contextlib.nullcontext()

    def resolver(self, context: int, resolve: Resolve) -> Resolve:
        """``resolve`` with the arguments moved to where ``context`` runs them."""
        device = self.devices[context]
        to_host = self._leaf_to_host
        to_device = to_host if device < 0 else self._leaf_to_device(device)
        gpu_tasks = self.gpu_tasks

        def moved(t: int, results: list[Any]) -> Call:
            fn, args, kwargs = resolve(t, results)
            on_gpu = device >= 0 and (gpu_tasks is None or t in gpu_tasks)
            self._wait_inputs(t, device if on_gpu else -1)
            if not on_gpu:
                return fn, self._host_args(args), {k: self.to_host(v) for k, v in kwargs.items()}
            self._uploads.arrays = []
            call = (
                self._recorded(fn, t, device),
                tuple(replace_leaves(a, to_device) for a in args),
                {k: replace_leaves(v, to_device) for k, v in kwargs.items()},
            )
            return call

        return moved

    def _wait_inputs(self, t: int, device: int) -> None:
        """Wait on the host for the GPU results ``t`` reads that another thread or
        device made (``device``: where ``t`` runs; -1: off the GPU)."""
        if self.deps is None or not self.ready:
            return
        indptr, indices = self.deps
        me = threading.get_ident()
        for d in indices[indptr[t] : indptr[t + 1]]:
            made = self.ready.get(int(d))
            if made is not None and (made[1] != me or made[2] != device):
                self.backend.synchronize(made[0])

    def _recorded(self, fn: Callable[..., Any], t: int, device: int) -> Callable[..., Any]:
        """``fn`` that, when it returns or raises, records its stream's event as ``t``'s
        and parks the arrays uploaded for it until that event is done. Only the latest
        try of ``t`` records: a try abandoned past its time limit may return after its
        retry did, and its event says nothing about the retry's result."""
        uploads: list[Any] = self._uploads.arrays
        token = self._try[t] = object()

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                event = self.backend.record()
                if self._try.get(t) is token:
                    self.ready[t] = (event, threading.get_ident(), device)
                self._park(device, event, uploads)

        return call

    def _park(self, device: int, event: Any, uploads: list[Any]) -> None:
        with self._lock:
            parked = self.parked.setdefault(device, [])
            while parked and self.backend.event_done(parked[0][0]):
                parked.pop(0)  # its kernels are done: the pool may reuse those blocks
            if uploads:
                parked.append((event, uploads))

    def _leaf_to_device(self, device: int) -> Callable[[Any], Any]:
        backend = self.backend

        def leaf(x: Any) -> Any:
            if backend.is_device_array(x):
                if backend.device_of(x) == device:
                    return x
                x = self._download(x)  # another GPU's: through the host
            if isinstance(x, np.ndarray) and not x.dtype.hasobject:
                self._count(uploads=1, nbytes=x.nbytes)
                out = backend.to_device(x, device)
                self._uploads.arrays.append(out)
                return out
            return x

        return leaf

    def _host_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if not has_leaf(args, self.backend.is_device_array):
            return args
        return tuple(self.to_host(a) for a in args)

    def _leaf_to_host(self, x: Any) -> Any:
        return self._download(x) if self.backend.is_device_array(x) else x

    def _download(self, x: Any) -> np.ndarray:
        self._count(downloads=1, nbytes=int(x.nbytes))
        return self.backend.to_host(x)

    def _count(self, uploads: int = 0, downloads: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.uploads += uploads
            self.downloads += downloads
            self.bytes_moved += nbytes

    # -- under the executor's lock -------------------------------------------------------

    def device_bytes(self, value: Any) -> tuple[int, int]:
        """``(device, bytes)`` of the device arrays in ``value`` (at any depth); (-1, 0): none."""
        backend = self.backend
        if backend.is_device_array(value):
            return backend.device_of(value), int(value.nbytes)
        found: list[Any] = []
        if not isinstance(value, list | tuple | dict) or not collect_leaves(
            value, backend.is_device_array, found
        ):
            return -1, 0
        return backend.device_of(found[-1]), sum(int(x.nbytes) for x in found)

    def kept(self, t: int, device: int, nbytes: int) -> None:
        """``t``'s result, ``nbytes`` on ``device``, is now held for its consumers:
        count it, and spill the oldest results held there if the device is over its limit."""
        if device not in self.resident or self.results[t] is None:
            return  # a device this run does not drive, or released already
        resident = self.resident[device]
        resident[t] = nbytes
        self.held[device] += nbytes
        if self.held[device] <= self.limit[device]:
            return
        for old in [old for old in resident if self.results[old] is None]:
            self.held[device] -= resident.pop(old)  # released since: stale bytes
        for old in list(resident):
            if self.held[device] <= self.limit[device]:
                break
            if old == t:
                continue  # the new result stays; older ones make room for it
            self.held[device] -= resident.pop(old)
            made = self.ready.get(old)
            if made is not None:  # the spilling thread may not be bound to made's stream
                self.backend.synchronize(made[0])
            self.results[old] = self.to_host(self.results[old])
            self.spills += 1

    # -- the calling thread, after the workers ------------------------------------------

    def to_host(self, value: Any) -> Any:
        """``value`` as the run's caller (or a task off the GPU) gets it: device arrays,
        at any depth, copied to host; ``value`` itself when it holds none."""
        if not has_leaf(value, self.backend.is_device_array):
            return value
        return replace_leaves(value, self._leaf_to_host)

    def finish(self) -> None:
        """Wait for every GPU call's work, copy the caller's results (``targets``) to
        host (counted, so the run's summary has them), release the parked uploads, and
        give every device's cached, unused pool memory back."""
        for event, _, _ in list(self.ready.values()):  # an abandoned call may still add
            self.backend.synchronize(event)
        for t in self.targets:
            self.results[t] = self.to_host(self.results[t])
        self.ready.clear()
        self.parked.clear()
        for device in self.limit:
            self.backend.trim_pool(device)

    def summary(self) -> str:
        """One line for the run's events: transfers and spills."""
        return (
            f"gpu: {self.uploads} upload(s), {self.downloads} download(s), "
            f"{self.bytes_moved:,} bytes moved, {self.spills} spill(s)"
        )


def residency_limits(
    devices: list[int], budgets: list[float], context: list[int], memory: list[int]
) -> list[float]:
    """Per context, the bytes of results its device may keep: its budget less the
    largest ``Cost.memory`` planned on it (inf for CPU contexts and no budget)."""
    largest = dict.fromkeys(range(len(devices)), 0)
    for c, m in zip(context, memory, strict=True):
        if c >= 0 and devices[c] >= 0 and m > largest[c]:
            largest[c] = m
    return [
        max(0.0, budgets[c] - largest[c]) if d >= 0 and math.isfinite(budgets[c]) else math.inf
        for c, d in enumerate(devices)
    ]
