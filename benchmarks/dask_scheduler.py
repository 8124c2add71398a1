"""dask.array workloads under dask's threaded scheduler and ``chunkgraph.dask_scheduler``.

Side by side in one run, the same collection computed by both:

    workload               chunks                      what it stresses
    sum, small chunks      1000x1000 in 10x10 (10,000) per-task overhead: a tree reduction
    gaussian, small chunks 2000x2000 in 50x50 (1,600)  map_overlap halos, many small tasks
    gaussian, big chunks   4000x4000 in 500x500 (64)   map_overlap (scipy.ndimage), real work
    matmul, small chunks   600x600 in 30x30 (400)      8,000 block products and their sums
    matmul, big chunks     3000x3000 in 500x500 (36)   216 block products (BLAS)

Both schedulers get the machine's cores. Per workload and scheduler: wall time
(the median of ``--repeat`` computes, alternating the schedulers; it includes
dask's graph optimisation, which both pay), the time inside the scheduler
call (which includes dask materialising its graph, done lazily there), and
peak RSS above the RSS before the compute (a psutil sampling thread, every
2 ms). Results must be equal (bitwise: both run the same graph of the same
functions).

Targets: chunkgraph never slower (wall time within 5 % noise or better) and
>= 3x faster where chunks are small. Printed as met/missed.

    python benchmarks/dask_scheduler.py             # 3 repeats, about 3 minutes on 2 cores
    python benchmarks/dask_scheduler.py --repeat 1  # a quick look
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import psutil
import scipy.ndimage

import chunkgraph

# RSS sampling period: short enough to see a peak that lasts a few tasks.
SAMPLE_SECONDS = 0.002
# Wall-time ratio under which "never slower" still counts as met: timing noise
# of a shared 2-core machine between alternating repeats.
NOISE = 1.05
SMALL_CHUNK_TARGET = 3.0


@dataclass(frozen=True)
class Workload:
    name: str
    small_chunks: bool
    make: Callable[[], Any]


def gaussian(block: np.ndarray) -> np.ndarray:
    return scipy.ndimage.gaussian_filter(block, sigma=2, mode="constant")


def rng() -> Any:
    return da.random.default_rng(0)  # a new one each time: every compute sees the same data


def workloads() -> list[Workload]:
    return [
        Workload(
            "sum, 10,000 chunks of 10x10",
            True,
            lambda: (da.ones((1000, 1000), chunks=10) * 2).sum(),
        ),
        Workload(
            "gaussian, 1,600 chunks of 50x50",
            True,
            lambda: (
                rng().random((2000, 2000), chunks=50).map_overlap(gaussian, depth=8, boundary=0)
            ),
        ),
        Workload(
            "gaussian, 64 chunks of 500x500",
            False,
            lambda: (
                rng().random((4000, 4000), chunks=500).map_overlap(gaussian, depth=8, boundary=0)
            ),
        ),
        Workload(
            "matmul, 400 chunks of 30x30",
            True,
            lambda: (lambda a: a @ a.T)(rng().random((600, 600), chunks=30)),
        ),
        Workload(
            "matmul, 36 chunks of 500x500",
            False,
            lambda: (lambda a: a @ a.T)(rng().random((3000, 3000), chunks=500)),
        ),
    ]


class PeakRSS:
    """The highest RSS of this process while the block runs, minus the RSS at its start."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.start = self.process.memory_info().rss
        self.peak = self.start
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def above_start(self) -> int:
        return self.peak - self.start


@dataclass
class Measured:
    wall: float
    inside: float
    rss: int
    value: Any


def measure(collection: Any, scheduler: Callable[..., Any]) -> Measured:
    inside = 0.0

    def timed(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        nonlocal inside
        start = time.perf_counter()
        try:
            return scheduler(dsk, keys, **kwargs)
        finally:
            inside = time.perf_counter() - start

    gc.collect()
    with PeakRSS() as rss:
        start = time.perf_counter()
        value = collection.compute(scheduler=timed)
        wall = time.perf_counter() - start
    return Measured(wall, inside, rss.above_start, value)


SCHEDULERS: dict[str, Callable[..., Any]] = {
    "dask threads": dask.threaded.get,
    "chunkgraph": chunkgraph.dask_scheduler,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"dask {dask.__version__}, chunkgraph {chunkgraph.__version__}, {cores} cores, "
          f"median of {args.repeat}\n")  # fmt: skip
    header = (
        f"{'workload':34} {'scheduler':13} {'wall s':>8} {'in sched s':>10} "
        f"{'peak MiB':>9} {'speed-up':>8}  equal  target"
    )
    print(header)
    print("-" * len(header))
    verdicts = []
    for work in workloads():
        runs: dict[str, list[Measured]] = {name: [] for name in SCHEDULERS}
        for i in range(args.repeat):
            order = list(SCHEDULERS) if i % 2 == 0 else list(SCHEDULERS)[::-1]
            for name in order:
                collection = work.make()  # a fresh collection: no graph cached between runs
                runs[name].append(measure(collection, SCHEDULERS[name]))
        dask_runs, cg_runs = runs["dask threads"], runs["chunkgraph"]
        equal = all(np.array_equal(m.value, dask_runs[0].value) for m in dask_runs + cg_runs)
        wall = {name: statistics.median(m.wall for m in ms) for name, ms in runs.items()}
        speedup = wall["dask threads"] / wall["chunkgraph"]
        need = SMALL_CHUNK_TARGET if work.small_chunks else 1 / NOISE
        met = speedup >= need and equal
        target = f">= {need:.2f}x {'met' if met else 'MISSED'}"
        verdicts.append(met)
        for name, ms in runs.items():
            inside = statistics.median(m.inside for m in ms)
            rss = max(m.rss for m in ms) / 2**20
            shown = f"{speedup:7.2f}x" if name == "chunkgraph" else ""
            print(
                f"{work.name:34} {name:13} {wall[name]:8.3f} {inside:10.3f} {rss:9.1f} "
                f"{shown:>8}  {'yes' if equal else 'NO':5}  {target if shown else ''}"
            )
    print(f"\ntargets met: {sum(verdicts)} of {len(verdicts)}")


if __name__ == "__main__":
    main()
