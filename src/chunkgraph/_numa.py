"""The NUMA nodes of this machine, as the CPUs of each that this process may use.

Read once here for both users: the planner's ``local_contexts`` (one context
per node) and the parallel layer's ``Topology`` (one controller per node).

Each ``/sys/devices/system/node/node<N>/cpulist`` is intersected with this
process's affinity; nodes left without a CPU are dropped. A read or parse
error anywhere gives no nodes at all (a partial read would misplace CPUs), and
callers then treat the machine as one node of every usable CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

NODE_ROOT = Path("/sys/devices/system/node")


def allowed_cpus() -> set[int]:
    """The CPU ids this process may run on (every CPU where affinity is unknown)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def parse_cpulist(text: str) -> set[int]:
    """The kernel's CPU list format.

    >>> sorted(parse_cpulist("0-3,8,10-11\\n"))
    [0, 1, 2, 3, 8, 10, 11]
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes(root: Path = NODE_ROOT) -> list[tuple[Path, frozenset[int]]]:
    """``(node folder, usable CPUs)`` per node that has any, in node order; [] if unreadable."""
    allowed = allowed_cpus()
    nodes: list[tuple[Path, frozenset[int]]] = []
    try:
        for node in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            cpus = frozenset(parse_cpulist((node / "cpulist").read_text()) & allowed)
            if cpus:
                nodes.append((node, cpus))
    except (OSError, ValueError):
        return []
    return nodes
