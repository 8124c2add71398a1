"""Processing contexts (where tasks run) and the links between them.

A ``Context`` is a set of interchangeable workers that share memory: a NUMA
node's cores, one GPU, a Dask worker. The planner assigns each task to one
context and one of its ``slots``; ``speed`` scales a task's single-number
cost, ``memory`` is the budget that live data on the context must stay under.

A ``Link`` says what moving data between two contexts costs:
``latency + bytes / bandwidth`` seconds. Within one context it is free. Two
contexts on one ``host`` share memory (NUMA nodes, a GPU's host side) and
default to ``SHARED_MEMORY``; contexts on different hosts need a link given
to ``plan(links=...)`` or default to ``NETWORK``.

``local_contexts()`` describes this machine: one CPU context per NUMA node
(its cores and memory, from ``/sys/devices/system/node``; one for the whole
machine where that is absent), and one GPU context per GPU this process may
use (``gpu0``, ``gpu1``, ... as the process numbers them; ``chunkgraph.gpu._detect``):
from the active device backend (CuPy, or a fake in tests), else from
``nvidia-smi`` with ``CUDA_VISIBLE_DEVICES`` applied; none without either.
The CPU part is read once per process; the GPU part once per backend (or per
value of ``CUDA_VISIBLE_DEVICES``), so installing a backend is seen at once.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from chunkgraph._errors import ConfigError
from chunkgraph._numa import numa_nodes
from chunkgraph._util import usable_cores
from chunkgraph.gpu._backend import active_backend
from chunkgraph.gpu._detect import nvidia_smi_gpus

if TYPE_CHECKING:
    from chunkgraph.gpu import DeviceBackend

ContextKind = Literal["cpu", "gpu"]
CONTEXT_KINDS: tuple[ContextKind, ...] = ("cpu", "gpu")


@dataclass(frozen=True)
class Context:
    """Where tasks run: ``slots`` workers of one ``kind`` sharing ``memory`` bytes.

    Attributes:
        name: A unique, non-empty name (``"numa0"``, ``"gpu0"``).
        kind: ``"cpu"`` or ``"gpu"``: which tasks it can run (their resources).
        slots: How many tasks it runs at once (its workers, >= 1).
        speed: Relative speed (> 0): a task's ``Cost.seconds`` divided by it.
        memory: Its byte budget, shared by the tasks running there; ``math.inf``: none.
        host: The machine it is on; contexts of one host share memory (cheap links).

    >>> Context("numa0", slots=8, memory=64 << 30)
    Context(name='numa0', kind='cpu', slots=8, speed=1.0, memory=68719476736, host='local')
    """

    name: str
    kind: ContextKind = "cpu"
    slots: int = 1
    speed: float = 1.0
    memory: float = math.inf
    host: str = "local"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"Context.name must be a non-empty string, got {self.name!r}")
        if self.kind not in CONTEXT_KINDS:
            raise ConfigError(
                f"Context {self.name!r}: kind must be one of {CONTEXT_KINDS}, got {self.kind!r}"
            )
        if not isinstance(self.slots, int) or isinstance(self.slots, bool) or self.slots < 1:
            raise ConfigError(
                f"Context {self.name!r}: slots must be an int >= 1 (its workers), "
                f"got {self.slots!r}"
            )
        if (
            not isinstance(self.speed, int | float)
            or isinstance(self.speed, bool)
            or not (0 < self.speed < math.inf)
        ):
            raise ConfigError(
                f"Context {self.name!r}: speed must be a positive finite number "
                f"(1.0 = the speed costs are given for), got {self.speed!r}"
            )
        if (
            not isinstance(self.memory, int | float)
            or isinstance(self.memory, bool)
            or not self.memory > 0
        ):
            raise ConfigError(
                f"Context {self.name!r}: memory must be a positive number of bytes "
                f"(or math.inf: no budget), got {self.memory!r}"
            )
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"Context {self.name!r}: host must be a non-empty string")


@dataclass(frozen=True)
class Link:
    """The cost of moving data between two contexts: ``latency + nbytes / bandwidth``.

    Attributes:
        bandwidth: Bytes per second (> 0; ``math.inf``: free).
        latency: Seconds per transfer (>= 0).

    >>> Link(bandwidth=1e9, latency=1e-3).seconds(1_000_000)
    0.002
    """

    bandwidth: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        if (
            not isinstance(self.bandwidth, int | float)
            or isinstance(self.bandwidth, bool)
            or not self.bandwidth > 0
        ):
            raise ConfigError(
                f"Link.bandwidth must be a positive number (bytes per second; math.inf: "
                f"free), got {self.bandwidth!r}"
            )
        if (
            not isinstance(self.latency, int | float)
            or not math.isfinite(self.latency)
            or self.latency < 0
        ):
            raise ConfigError(
                f"Link.latency must be a finite number >= 0 (seconds), got {self.latency!r}"
            )

    def seconds(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link: latency plus size over bandwidth.

        Args:
            nbytes: Bytes moved.
        """
        return self.latency + nbytes / self.bandwidth


# Between contexts of one host: a copy through shared memory (or none at all).
SHARED_MEMORY = Link(bandwidth=10e9, latency=1e-6)
# Between hosts when no link is given: a 10 Gb/s network.
NETWORK = Link(bandwidth=1.25e9, latency=1e-4)

Links = Link | Mapping[tuple[str, str], Link] | None


def check_contexts(contexts: Sequence[Context]) -> tuple[Context, ...]:
    """The contexts as a tuple; ConfigError for none, a non-Context or a name used twice."""
    if isinstance(contexts, Context):
        contexts = (contexts,)
    if isinstance(contexts, str) or not isinstance(contexts, Sequence | tuple | list):
        raise ConfigError(
            f"contexts must be a list of Context objects (e.g. [Context('cpu', slots=4)]), "
            f"got {contexts!r}"
        )
    result = tuple(contexts)
    if not result:
        raise ConfigError("plan needs at least one Context, e.g. [Context('cpu', slots=4)]")
    seen: set[str] = set()
    for ctx in result:
        if not isinstance(ctx, Context):
            raise ConfigError(f"contexts must be chunkgraph Context objects, got {ctx!r}")
        if ctx.name in seen:
            raise ConfigError(f"context name {ctx.name!r} is used twice; names must be unique")
        seen.add(ctx.name)
    return result


def check_links(links: Links, contexts: Sequence[Context]) -> None:
    """ConfigError unless ``links`` is None, a Link, or Links by pairs of context names."""
    if links is None or isinstance(links, Link):
        return
    if not isinstance(links, Mapping):
        raise ConfigError(
            f"links must be a Link (for every pair of hosts) or a mapping "
            f"{{('a', 'b'): Link(...)}}, got {links!r}"
        )
    names = {c.name for c in contexts}
    for key, link in links.items():
        if not (isinstance(key, tuple) and len(key) == 2 and set(key) <= names):
            raise ConfigError(
                f"links key {key!r} must be a pair of context names, among {sorted(names)}"
            )
        if not isinstance(link, Link):
            raise ConfigError(f"links[{key!r}] must be a Link(bandwidth, latency), got {link!r}")


@functools.lru_cache(maxsize=1)
def _cpu_contexts() -> tuple[Context, ...]:
    return tuple(_numa_contexts())


def link_between(a: Context, b: Context, links: Links = None) -> Link | None:
    """The link from ``a`` to ``b`` (None: the same context, moving data is free).

    ``links`` is one Link for every pair of different hosts, or a mapping by
    ``(name, name)`` (either order) that overrides the defaults.
    """
    if a.name == b.name:
        return None
    if isinstance(links, Mapping):
        given = links.get((a.name, b.name)) or links.get((b.name, a.name))
        if given is not None:
            return given
    elif isinstance(links, Link) and a.host != b.host:
        return links
    return SHARED_MEMORY if a.host == b.host else NETWORK


def local_contexts(*, gpus: bool = True) -> tuple[Context, ...]:
    """This machine's contexts: one per NUMA node (cores, memory), one per GPU.

    Only the cores and GPUs this process may use are counted. A machine without
    NUMA information is one CPU context named ``"cpu"``. GPUs are ``gpu0``,
    ``gpu1``, ... (kind "gpu", one slot, their device memory as the budget).

    Args:
        gpus: Count the GPUs this process may use; False: CPU contexts only.
    """
    return _cpu_contexts() + (gpu_contexts() if gpus else ())


def _numa_contexts() -> list[Context]:
    nodes = []
    for node, cpus in numa_nodes():
        try:
            memory = _node_memory(node / "meminfo")
        except (OSError, ValueError):
            continue
        nodes.append(Context(node.name.replace("node", "numa"), "cpu", len(cpus), 1.0, memory))
    if len(nodes) > 1:
        return nodes
    return [Context("cpu", "cpu", usable_cores(), 1.0, _total_memory())]


def _node_memory(meminfo: Path) -> float:
    for line in meminfo.read_text().splitlines():
        if "MemTotal:" in line:
            return float(int(line.split()[-2]) * 1024)
    return math.inf


def _total_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def gpu_contexts() -> tuple[Context, ...]:
    """One context per GPU this process may use (see the module doc); () without any."""
    backend = active_backend()
    if backend is not None:
        return _backend_gpu_contexts(cast(Hashable, backend))
    return _smi_gpu_contexts(os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.lru_cache(maxsize=4)
def _backend_gpu_contexts(key: Hashable) -> tuple[Context, ...]:
    backend = cast("DeviceBackend", key)  # cached by the backend object itself
    return tuple(
        Context(f"gpu{i}", "gpu", 1, 1.0, float(backend.device_memory(i)[1]))
        for i in range(backend.device_count())
    )


@functools.lru_cache(maxsize=4)
def _smi_gpu_contexts(visible: str | None) -> tuple[Context, ...]:
    return tuple(
        Context(f"gpu{i}", "gpu", 1, 1.0, memory)
        for i, memory in enumerate(nvidia_smi_gpus(visible))
    )
