"""The task-graph half of ``chunkgraph demo``.

Statistics of a random array computed block by block: one task generates a
block and summarises it (count, sum, sum of squares, min, max), a fan-in tree
combines the summaries, and the answer is checked against numpy on the whole
array. The graph is wide at the leaves and narrows to one sink, the shape of
most real reductions::

    block-0  block-1 ... block-15   block-16 ...      (leaves: generate + summarise)
        \\      |        /              |
          combine-0  ...           combine-1 ...       (fan-in FAN_IN)
                 \\                /
                     combine-root
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from chunkgraph.execute import run
from chunkgraph.graph import Graph, TaskRef

FAN_IN = 16  # wide enough to keep the tree shallow, narrow enough to keep merges cheap
BLOCK_LEN = 8_192  # float64 values per block: 64 KiB, under glibc's 128 KiB mmap threshold (larger
# blocks get fresh pages from the kernel on every call, and two threads then fight over page faults)

Summary = tuple[int, float, float, float, float]  # count, sum, sum of squares, min, max


def _block(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(BLOCK_LEN)


def summarise_block(seed: int) -> Summary:
    values = _block(seed)
    return (
        values.size,
        float(values.sum()),
        float(np.dot(values, values)),
        float(values.min()),
        float(values.max()),
    )


def combine(*parts: Summary) -> Summary:
    return (
        sum(p[0] for p in parts),
        sum(p[1] for p in parts),
        sum(p[2] for p in parts),
        min(p[3] for p in parts),
        max(p[4] for p in parts),
    )


def build_statistics_graph(blocks: int) -> tuple[Graph, TaskRef]:
    """Leaves summarise blocks; combines merge FAN_IN at a time up to one root."""
    graph = Graph()
    level = [graph.add(summarise_block, seed, name=f"block-{seed}") for seed in range(blocks)]
    depth = 0
    while len(level) > 1:
        level = [
            graph.add(combine, *level[i : i + FAN_IN], name=f"combine-{depth}-{i // FAN_IN}")
            for i in range(0, len(level), FAN_IN)
        ]
        depth += 1
    return graph, level[0]


@dataclass(frozen=True)
class GraphDemoSummary:
    tasks: int
    seconds: float
    sync_seconds: float  # the same graph run one task at a time in the caller
    mean: float
    std: float
    expected_mean: float
    expected_std: float

    @property
    def matches(self) -> bool:
        return bool(
            np.isclose(self.mean, self.expected_mean) and np.isclose(self.std, self.expected_std)
        )

    def lines(self) -> list[str]:
        verdict = "matches numpy" if self.matches else "DOES NOT match numpy"
        return [
            f"{self.tasks} tasks in {self.seconds:.2f} s on threads "
            f"({1e6 * self.seconds / self.tasks:.0f} µs per task, numpy work included); "
            f"{self.sync_seconds:.2f} s one at a time: {self.sync_seconds / self.seconds:.2f}x",
            f"mean {self.mean:+.6f}, std {self.std:.6f}: {verdict} "
            f"(mean {self.expected_mean:+.6f}, std {self.expected_std:.6f})",
        ]


def run_graph_demo(blocks: int = 4096, progress: bool = True) -> GraphDemoSummary:
    graph, root = build_statistics_graph(blocks)
    started = time.perf_counter()
    count, total, squares, _, _ = run(graph, targets=root, progress=progress)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    run(graph, targets=root, executor="sync")
    sync_seconds = time.perf_counter() - started
    mean = total / count
    whole = np.concatenate([_block(seed) for seed in range(blocks)])
    return GraphDemoSummary(
        tasks=len(graph),
        seconds=seconds,
        sync_seconds=sync_seconds,
        mean=mean,
        std=float(np.sqrt(squares / count - mean * mean)),
        expected_mean=float(whole.mean()),
        expected_std=float(whole.std()),
    )
