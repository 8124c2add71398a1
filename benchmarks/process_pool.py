"""Process pool overhead: chunkgraph's ProcessPool beside concurrent.futures and multiprocessing.

Prints three tables, every row measured in the same run on the same machine:

1. pool start: construct a 2-worker pool and get the first result back
   (forkserver vs spawn start methods);
2. tiny tasks: microseconds per no-op task, submit-all-then-wait;
3. numpy round trips: one task that returns ``-array`` for arrays of several
   sizes, with arrays through shared memory vs pickled through the pipe.

Usage: python benchmarks/process_pool.py [--tasks 20000] [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import operator
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from chunkgraph.execute import ProcessPool


def _best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def _per_task_us(submit: Callable[[Any, tuple[Any, ...]], Any], n: int) -> float:
    start = time.perf_counter()
    futures = [submit(operator.add, (i, 1)) for i in range(n)]
    for f in futures:
        # multiprocessing's AsyncResult has get(); futures have result().
        f.get() if hasattr(f, "get") else f.result()
    return (time.perf_counter() - start) / n * 1e6


def _latency_us(submit: Callable[[Any, tuple[Any, ...]], Any], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        f = submit(operator.add, (i, 1))
        f.get() if hasattr(f, "get") else f.result()
    return (time.perf_counter() - start) / n * 1e6


def _start_s(make: Callable[[], Any], close: Callable[[Any], None]) -> float:
    start = time.perf_counter()
    pool = make()
    first = pool.submit(operator.add, 1, 1) if isinstance(pool, ProcessPoolExecutor) else None
    if first is None:
        first = pool.submit(operator.add, (1, 1), {})
    first.result()
    elapsed = time.perf_counter() - start
    close(pool)
    return elapsed


def table_start(workers: int) -> None:
    print(f"\n## pool start ({workers} workers, until the first result; best of 3)\n")
    print("| pool | start method | seconds |")
    print("|---|---|---:|")
    for method in ("forkserver", "spawn"):
        s = _best(
            lambda m=method: _start_s(
                lambda: ProcessPool(workers, start_method=m), lambda p: p.shutdown()
            ),
            3,
        )
        print(f"| chunkgraph ProcessPool | {method} | {s:.3f} |")
        ctx = multiprocessing.get_context(method)
        s = _best(
            lambda c=ctx: _start_s(
                lambda: ProcessPoolExecutor(workers, mp_context=c), lambda p: p.shutdown()
            ),
            3,
        )
        print(f"| concurrent.futures.ProcessPoolExecutor | {method} | {s:.3f} |")


def table_tiny(workers: int, n: int) -> None:
    print(f"\n## tiny tasks ({n} x operator.add, {workers} workers; median of 3)\n")
    print("throughput: submit all, then wait; latency: submit one, wait for it, repeat\n")
    print("| pool | throughput µs per task | latency µs per task |")
    print("|---|---:|---:|")
    lat: dict[str, list[float]] = {}
    rows: dict[str, list[float]] = {
        "chunkgraph ProcessPool": [],
        "ProcessPoolExecutor": [],
        "multiprocessing.Pool.apply_async": [],
    }
    ctx = multiprocessing.get_context("forkserver")
    with (
        ProcessPool(workers) as ours,
        ProcessPoolExecutor(workers, mp_context=ctx) as theirs,
        ctx.Pool(workers) as mp_pool,
    ):
        # Warm all workers first.
        _per_task_us(lambda fn, a: ours.submit(fn, a, {}), 200)
        _per_task_us(lambda fn, a: theirs.submit(fn, *a), 200)
        _per_task_us(lambda fn, a: mp_pool.apply_async(fn, a), 200)
        for _ in range(3):  # interleaved, so machine load hits all alike
            rows["chunkgraph ProcessPool"].append(
                _per_task_us(lambda fn, a: ours.submit(fn, a, {}), n)
            )
            rows["ProcessPoolExecutor"].append(_per_task_us(lambda fn, a: theirs.submit(fn, *a), n))
            rows["multiprocessing.Pool.apply_async"].append(
                _per_task_us(lambda fn, a: mp_pool.apply_async(fn, a), n)
            )
            m = n // 10
            lat.setdefault("chunkgraph ProcessPool", []).append(
                _latency_us(lambda fn, a: ours.submit(fn, a, {}), m)
            )
            lat.setdefault("ProcessPoolExecutor", []).append(
                _latency_us(lambda fn, a: theirs.submit(fn, *a), m)
            )
            lat.setdefault("multiprocessing.Pool.apply_async", []).append(
                _latency_us(lambda fn, a: mp_pool.apply_async(fn, a), m)
            )
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} | {statistics.median(lat[name]):.1f} |")


def _round_trip_ms(
    submit: Callable[[np.ndarray[Any, Any]], Any], array: np.ndarray[Any, Any], repeat: int
) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = submit(array).result()
        times.append(time.perf_counter() - start)
        assert result.shape == array.shape
        del result
    return statistics.median(times) * 1e3


def table_arrays(workers: int) -> None:
    print("\n## numpy round trip (one task returning -array; median ms)\n")
    print("| array bytes | shared memory | pickled through pipe | ProcessPoolExecutor |")
    print("|---:|---:|---:|---:|")
    ctx = multiprocessing.get_context("forkserver")
    with (
        ProcessPool(workers) as shm,
        ProcessPool(workers, shm_min_bytes=1 << 62) as piped,
        ProcessPoolExecutor(workers, mp_context=ctx) as theirs,
    ):
        for nbytes in (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 128 << 20):
            array = np.ones(nbytes // 8)
            repeat = 30 if nbytes <= 1 << 20 else 5
            _round_trip_ms(lambda a: shm.submit(np.negative, (a,), {}), array, 2)
            a = _round_trip_ms(lambda a: shm.submit(np.negative, (a,), {}), array, repeat)
            b = _round_trip_ms(lambda a: piped.submit(np.negative, (a,), {}), array, repeat)
            c = _round_trip_ms(lambda a: theirs.submit(np.negative, a), array, repeat)
            print(f"| {nbytes:,} | {a:.3f} | {b:.3f} | {c:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    table_start(args.workers)
    table_tiny(args.workers, args.tasks)
    table_arrays(args.workers)


if __name__ == "__main__":
    main()
