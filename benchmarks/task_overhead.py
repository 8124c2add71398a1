"""Per-task overhead of running no-op task graphs, chunkgraph next to its peers, in one run.

Shapes (about N tasks each, default N = 100,000):

* ``fan-in``  N independent no-op tasks under a fan-in-32 tree of sums
* ``chain``   a linear chain of N increments
* ``stencil`` a 2-D 5-point stencil over 10 steps (an (N/10)-cell square grid)

Engines, all with the same number of workers:

* chunkgraph ``run(executor="threads")`` and ``run(executor="processes")``
  (processes on N / 10 tasks by default: a task costs a pipe round trip)
* dask's threaded scheduler, ``dask.threaded.get`` on the same graph as a dict
* the floor: a bare ``ThreadPoolExecutor``, submit-and-wait level by level

Microseconds per task = best wall time over ``--repeat`` runs / tasks (graph
construction excluded, scheduling and ordering included). Then a 1,000,000-task
independent graph: build time, run time and peak RSS, in a fresh subprocess so
that the RSS is that graph's alone.

    python benchmarks/task_overhead.py            # full
    python benchmarks/task_overhead.py --quick    # 10,000 tasks, one repeat
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from _memory import peak_rss_bytes

FAN_IN = 32
STENCIL_STEPS = 10


def noop() -> int:
    return 1


def add(*xs: int) -> int:
    return sum(xs)


def inc(x: int) -> int:
    return x + 1


def stencil(*xs: int) -> int:
    return (sum(xs) + 1) % 1_000_003


@dataclass
class Shape:
    """A graph as plain lists: task i runs ``fns[i](*results of deps[i])``."""

    name: str
    fns: list[Callable[..., int]]
    deps: list[list[int]]

    def __len__(self) -> int:
        return len(self.fns)

    def reference(self) -> int:
        """The last task's value, computed sequentially: every engine must match it."""
        values: list[int] = []
        for fn, ds in zip(self.fns, self.deps, strict=True):
            values.append(fn(*[values[d] for d in ds]))
        return values[-1]


def fan_in(n: int) -> Shape:
    fns: list[Callable[..., int]] = [noop] * n
    deps: list[list[int]] = [[] for _ in range(n)]
    level = list(range(n))
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), FAN_IN):
            nxt.append(len(fns))
            fns.append(add)
            deps.append(level[i : i + FAN_IN])
        level = nxt
    return Shape("fan-in", fns, deps)


def chain(n: int) -> Shape:
    deps = [[]] + [[i - 1] for i in range(1, n)]
    return Shape("chain", [noop] + [inc] * (n - 1), deps)


def stencil_grid(n: int) -> Shape:
    side = max(2, round((n / STENCIL_STEPS) ** 0.5))
    fns: list[Callable[..., int]] = []
    deps: list[list[int]] = []
    for step in range(STENCIL_STEPS):
        base, prev = step * side * side, (step - 1) * side * side
        for r in range(side):
            for c in range(side):
                fns.append(stencil)
                if step == 0:
                    deps.append([])
                    continue
                near = [(r, c), (r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)]
                deps.append(
                    [prev + y * side + x for y, x in near if 0 <= y < side and 0 <= x < side]
                )
        assert len(fns) == base + side * side
    return Shape("stencil", fns, deps)


# ------------------------------------------------------------------- engines
def run_chunkgraph(shape: Shape, executor: str, workers: int) -> tuple[float, Any]:
    from chunkgraph.execute import run
    from chunkgraph.graph import Graph, TaskRef

    g = Graph()
    refs: list[TaskRef] = []
    for fn, ds in zip(shape.fns, shape.deps, strict=True):
        refs.append(g.add(fn, *[refs[d] for d in ds]))
    start = time.perf_counter()
    value = run(g, refs[-1], executor=executor, workers=workers)  # type: ignore[arg-type]
    return time.perf_counter() - start, value


def run_dask(shape: Shape, workers: int) -> tuple[float, Any]:
    import dask.threaded

    dsk: dict[str, Any] = {}
    for i, (fn, ds) in enumerate(zip(shape.fns, shape.deps, strict=True)):
        dsk[f"t{i}"] = (fn, *[f"t{d}" for d in ds])
    start = time.perf_counter()
    value = dask.threaded.get(dsk, f"t{len(shape) - 1}", num_workers=workers)
    return time.perf_counter() - start, value


def run_floor(shape: Shape, workers: int) -> tuple[float, Any]:
    """Submit each topological level's tasks to a bare pool and wait for them."""
    depth = [0] * len(shape)
    for i, ds in enumerate(shape.deps):
        depth[i] = 1 + max((depth[d] for d in ds), default=-1)
    levels: list[list[int]] = [[] for _ in range(max(depth) + 1)]
    for i, d in enumerate(depth):
        levels[d].append(i)
    results: list[Any] = [None] * len(shape)
    fns, deps = shape.fns, shape.deps
    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        for level in levels:
            futures = [(i, pool.submit(fns[i], *[results[d] for d in deps[i]])) for i in level]
            wait([f for _, f in futures])
            for i, f in futures:
                results[i] = f.result()
        return time.perf_counter() - start, results[-1]


# ------------------------------------------------------------------- driver
def best_us(fn: Callable[[], tuple[float, Any]], shape: Shape, repeat: int) -> float:
    """Best µs per task over ``repeat`` runs, each checked against the reference value."""
    expected = shape.reference()
    best = float("inf")
    for _ in range(repeat):
        seconds, value = fn()
        if value != expected:
            raise SystemExit(f"{shape.name}: got {value!r}, expected {expected!r}")
        best = min(best, seconds)
    return best / len(shape) * 1e6


def peak_rss_mb() -> float:
    """This process's own peak resident set size, in MiB (``_memory``)."""
    return peak_rss_bytes() / 2**20


def million(n: int, workers: int) -> dict[str, float]:
    """Runs in a fresh interpreter: build and run ``n`` independent no-op tasks."""
    from chunkgraph.execute import run
    from chunkgraph.graph import Graph

    start = time.perf_counter()
    g = Graph()
    refs = [g.add(noop) for _ in range(n)]
    built = time.perf_counter()
    rss_built = peak_rss_mb()
    values = run(g, refs, workers=workers)
    done = time.perf_counter()
    assert sum(values) == n
    return {
        "build_s": built - start,
        "run_s": done - built,
        "rss_after_build_mb": rss_built,
        "peak_rss_mb": peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 tasks, one repeat")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per shape")
    parser.add_argument(
        "--process-tasks", type=int, default=None, help="tasks per shape, processes"
    )
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None, help="default: usable cores")
    parser.add_argument("--million", type=int, default=None, help="size of the big graph")
    parser.add_argument("--_million-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workers = args.workers or len(os.sched_getaffinity(0))
    if args._million_child:
        print(json.dumps(million(args._million_child, workers)))
        return
    n = args.tasks or (10_000 if args.quick else 100_000)
    n_proc = args.process_tasks or max(1000, n // 10)
    repeat = args.repeat or (1 if args.quick else 3)
    big = args.million or (100_000 if args.quick else 1_000_000)

    print(f"# task overhead: {workers} workers, best of {repeat}, µs per task (lower is better)")
    print(
        f"# chunkgraph processes on {n_proc:,} tasks per shape (one run, starting its "
        f"worker pool included), the others on {n:,}; every result checked\n"
    )
    print(
        "| shape | tasks | chunkgraph threads | chunkgraph processes | dask threaded "
        "| ThreadPoolExecutor floor | dask / chunkgraph threads |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for make in (fan_in, chain, stencil_grid):
        shape, small = make(n), make(n_proc)
        cg_threads = best_us(lambda s=shape: run_chunkgraph(s, "threads", workers), shape, repeat)
        cg_procs = best_us(lambda s=small: run_chunkgraph(s, "processes", workers), small, 1)
        dask_us = best_us(lambda s=shape: run_dask(s, workers), shape, repeat)
        floor = best_us(lambda s=shape: run_floor(s, workers), shape, repeat)
        print(
            f"| {shape.name} | {len(shape):,} | {cg_threads:.1f} | {cg_procs:.1f} | {dask_us:.1f} "
            f"| {floor:.1f} | {dask_us / cg_threads:.1f}x |",
            flush=True,
        )

    child = subprocess.run(
        [sys.executable, __file__, f"--_million-child={big}", f"--workers={workers}"],
        capture_output=True,
        text=True,
        check=True,
    )
    m = json.loads(child.stdout)
    print(
        f"\n| {big:,} independent tasks, threads | build s | run s | peak RSS after build MB "
        "| peak RSS after run MB |"
    )
    print("|---|---:|---:|---:|---:|")
    print(
        f"| chunkgraph | {m['build_s']:.2f} | {m['run_s']:.2f} | {m['rss_after_build_mb']:.0f} "
        f"| {m['peak_rss_mb']:.0f} |"
    )


if __name__ == "__main__":
    main()
