"""The machine's NUMA nodes, as the CPUs of each that this process may use.

Detection reads ``/sys/devices/system/node/node<N>/cpulist`` and keeps, per
node, only the CPUs in this process's affinity (``os.sched_getaffinity(0)``);
nodes left without a CPU are dropped. Fewer than two usable nodes, a machine
without that folder (UMA, macOS, containers that hide it) or any read error
gives one node holding every usable CPU: a single-node topology, on which
workers are never pinned.

>>> Topology.of([0, 1], [2, 3]).is_numa
True
>>> Topology.of(range(4)).sizes
(4,)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chunkgraph._errors import ConfigError
from chunkgraph._numa import NODE_ROOT, allowed_cpus, numa_nodes


@dataclass(frozen=True)
class Topology:
    """NUMA nodes, each a non-empty frozenset of CPU ids, in node order.

    Attributes:
        nodes: One frozenset of CPU ids (ints >= 0) per node; no CPU in two nodes.
    """

    nodes: tuple[frozenset[int], ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ConfigError("a Topology needs at least one node; got none")
        for index, cpus in enumerate(self.nodes):
            if not cpus:
                raise ConfigError(f"node {index} of the topology has no CPUs; give each node >= 1")
            bad = sorted(c for c in cpus if isinstance(c, bool) or not isinstance(c, int) or c < 0)
            if bad:
                raise ConfigError(f"node {index} has invalid CPU ids {bad}; CPU ids are ints >= 0")
        seen: set[int] = set()
        for index, cpus in enumerate(self.nodes):
            shared = sorted(seen & cpus)
            if shared:
                raise ConfigError(
                    f"node {index} shares CPUs {shared} with an earlier node; "
                    "each CPU belongs to one node"
                )
            seen |= cpus

    @classmethod
    def of(cls, *nodes: Iterable[int]) -> Topology:
        """A topology from one iterable of CPU ids per node: ``Topology.of([0], [1])``.

        Args:
            *nodes: One iterable of CPU ids (ints >= 0) per node; no CPU in two nodes.
        """
        return cls(tuple(frozenset(node) for node in nodes))

    @classmethod
    def detect(cls, root: Path = NODE_ROOT) -> Topology:
        """This machine's usable NUMA nodes (one node when there is no NUMA information).

        Args:
            root: The sysfs folder listing the NUMA nodes (``/sys/devices/system/node``).
        """
        nodes = [cpus for _, cpus in numa_nodes(root)]
        if len(nodes) > 1:
            return cls(tuple(nodes))
        return cls((frozenset(allowed_cpus()) or frozenset({0}),))

    @property
    def is_numa(self) -> bool:
        """More than one node: workers are pinned to their node's CPUs."""
        return len(self.nodes) > 1

    @property
    def sizes(self) -> tuple[int, ...]:
        """The number of CPUs of each node."""
        return tuple(len(cpus) for cpus in self.nodes)

    def __repr__(self) -> str:
        return "Topology.of(" + ", ".join(str(sorted(n)) for n in self.nodes) + ")"
