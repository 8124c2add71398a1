"""Adaptive parallel loops vs sequential vs the best hand-tuned fixed piece count.

For each operation and size, in one run and side by side:

* sequential: the numpy call on the whole array, in this thread;
* adaptive:   chunkgraph.parallel (measured grain, splitters, work stealing);
* fixed k:    the array cut into k equal pieces run on a ThreadPoolExecutor
              with one thread per core (what one writes by hand), k swept over
              1, 2, 4, ..., 64; the fastest k is the "swept optimum"
              (k = 1 is the sequential call itself).

Operations: ``exp_sqrt`` (out = sqrt(exp(x)), compute-bound), ``sum``
(memory-bound reduction), ``sort`` (for fixed k: the same quantile-partition
sort with a static tree of k leaves). Each timing is the best of several
rounds, the variants timed round-robin within a round, after one untimed
warm-up call each (which, for adaptive, measures the grain). Prints a
markdown table and writes it, with the raw numbers, under ``bench-out/``.

    python benchmarks/parallel_loops.py            # n = 10^3 .. 10^8
    python benchmarks/parallel_loops.py --quick    # n = 10^3 .. 10^6
    python benchmarks/parallel_loops.py --runs 3   # best of 3 sweeps (noisy machines)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np

from chunkgraph.parallel import get_pool, parallel_for, parallel_reduce, parallel_sort

FIXED_COUNTS = (1, 2, 4, 8, 16, 32, 64)
# Rounds (each variant once per round): at least MIN_REPEATS, more while the
# time spent stays under REPEAT_BUDGET_S per variant; best-of filters noise.
MIN_REPEATS = 3
MAX_REPEATS = 15
REPEAT_BUDGET_S = 0.3

Op = Callable[[], object]


@dataclass
class Row:
    op: str
    n: int
    sequential_s: float
    adaptive_s: float
    best_fixed_s: float
    best_k: int
    fixed_s: dict[int, float]


def race(variants: dict[str, Op]) -> dict[str, float]:
    """Best time of each variant, timed round-robin so load changes hit all alike."""
    for fn in variants.values():
        fn()  # warm-up: page faults, grain measurement
    best = dict.fromkeys(variants, math.inf)
    rounds, spent = 0, 0.0
    while rounds < MIN_REPEATS or (
        spent < REPEAT_BUDGET_S * len(variants) and rounds < MAX_REPEATS
    ):
        names = list(variants)
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            begin = time.perf_counter()
            variants[name]()
            elapsed = time.perf_counter() - begin
            best[name] = min(best[name], elapsed)
            spent += elapsed
        rounds += 1
    return best


def static_pieces(n: int, k: int) -> list[tuple[int, int]]:
    bounds = [n * i // k for i in range(k + 1)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def fixed_for(
    pool: ThreadPoolExecutor, n: int, k: int, body: Callable[[int, int], object]
) -> list[object]:
    if k == 1:
        return [body(0, n)]
    return list(pool.map(lambda piece: body(*piece), static_pieces(n, k)))


def fixed_sort(pool: ThreadPoolExecutor, x: np.ndarray, k: int) -> np.ndarray:
    """Quantile-partition sort with a static tree of k leaves (k a power of two)."""
    out = x.copy()
    segments = [(0, len(out))]
    while len(segments) < k:
        halves = [(a, (a + b) // 2, b) for a, b in segments]
        list(pool.map(lambda s: out[s[0] : s[2]].partition(s[1] - s[0]), halves))
        segments = [p for a, m, b in halves for p in ((a, m), (m, b))]
    list(pool.map(lambda s: out[s[0] : s[1]].sort(), segments))
    return out


def measure(op: str, n: int, executor: ThreadPoolExecutor, rng: np.random.Generator) -> Row:
    x = rng.random(n)
    out = np.empty_like(x)

    def exp_sqrt(a: int, b: int) -> None:
        np.exp(x[a:b], out=out[a:b])
        np.sqrt(out[a:b], out=out[a:b])

    def partial_sum(a: int, b: int) -> float:
        return float(x[a:b].sum())

    def add(p: float, q: float) -> float:
        return p + q

    def fixed_sum(k: int) -> float:
        return sum(fixed_for(executor, n, k, partial_sum))  # type: ignore[arg-type]

    counts = [k for k in FIXED_COUNTS if 1 < k <= n]
    variants: dict[str, Op]
    if op == "exp_sqrt":
        variants = {
            "sequential": lambda: exp_sqrt(0, n),
            "adaptive": lambda: parallel_for(n, exp_sqrt),
        }
        variants |= {f"k={k}": partial(fixed_for, executor, n, k, exp_sqrt) for k in counts}
    elif op == "sum":
        variants = {
            "sequential": lambda: partial_sum(0, n),
            "adaptive": lambda: parallel_reduce(n, partial_sum, add, 0.0),
        }
        variants |= {f"k={k}": partial(fixed_sum, k) for k in counts}
    else:
        variants = {"sequential": lambda: np.sort(x), "adaptive": lambda: parallel_sort(x)}
        variants |= {f"k={k}": partial(fixed_sort, executor, x, k) for k in counts if k <= 16}
    best = race(variants)
    fixed_s = {1: best["sequential"]} | {k: best[f"k={k}"] for k in counts if f"k={k}" in best}
    best_k = min(fixed_s, key=lambda k: fixed_s[k])
    return Row(op, n, best["sequential"], best["adaptive"], fixed_s[best_k], best_k, fixed_s)


def best_of(a: Row, b: Row) -> Row:
    """Per variant, the better of two sweeps' times for the same (op, n)."""
    fixed_s = {k: min(a.fixed_s[k], b.fixed_s[k]) for k in a.fixed_s}
    best_k = min(fixed_s, key=lambda k: fixed_s[k])
    seq = min(a.sequential_s, b.sequential_s)
    return Row(a.op, a.n, seq, min(a.adaptive_s, b.adaptive_s), fixed_s[best_k], best_k, fixed_s)


def verdict(row: Row, cores: int) -> str:
    checks = []
    checks.append(("<=1.10x optimum", row.adaptive_s <= 1.10 * row.best_fixed_s))
    if row.sequential_s < 1e-3:  # small: splitting cannot pay, must not cost
        checks.append(("<=1.05x seq", row.adaptive_s <= 1.05 * row.sequential_s))
    if row.op == "exp_sqrt" and row.n >= 10**7 and cores >= 2:
        checks.append((">=1.7x seq", row.sequential_s / row.adaptive_s >= 1.7))
    return ", ".join(f"{name} {'ok' if good else 'MISSED'}" for name, good in checks)


def fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def table(rows: list[Row], cores: int) -> str:
    lines = [
        "| op | n | sequential | adaptive | best fixed (k) | speedup vs seq "
        "| adaptive / optimum | targets |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.op} | 10^{round(math.log10(r.n))} | {fmt_s(r.sequential_s)} "
            f"| {fmt_s(r.adaptive_s)} | {fmt_s(r.best_fixed_s)} ({r.best_k}) "
            f"| {r.sequential_s / r.adaptive_s:.2f}x | {r.adaptive_s / r.best_fixed_s:.2f} "
            f"| {verdict(r, cores)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 10^6 only")
    parser.add_argument("--max-exp", type=int, default=None, help="largest n = 10^max_exp")
    parser.add_argument("--ops", default="exp_sqrt,sum,sort", help="comma-separated operations")
    parser.add_argument("--out", default="bench-out", help="folder for the table and raw JSON")
    parser.add_argument(
        "--runs", type=int, default=1, help="repeat the sweep, keep each variant's best time"
    )
    args = parser.parse_args()
    top = args.max_exp if args.max_exp is not None else (6 if args.quick else 8)
    pool = get_pool()
    cores = pool.workers
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    load_before = os.getloadavg()
    with ThreadPoolExecutor(max_workers=cores) as executor:
        for run in range(args.runs):
            sweep = [
                measure(op, 10**e, executor, rng)
                for op in args.ops.split(",")
                for e in range(3, top + 1)
            ]
            rows = sweep if run == 0 else [best_of(a, b) for a, b in zip(rows, sweep, strict=True)]
    load_after = os.getloadavg()
    header = (
        f"parallel_loops: {cores} workers, {platform.processor() or platform.machine()}, "
        f"numpy {np.__version__}, dispatch {pool.dispatch_overhead() * 1e6:.1f} µs, "
        f"hand-off latency {pool.handoff_latency() * 1e6:.1f} µs, "
        f"load average {load_before[0]:.2f} before / {load_after[0]:.2f} after"
    )
    text = header + "\n\n" + table(rows, cores)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parallel_loops.md").write_text(text + "\n")
    (out / "parallel_loops.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
