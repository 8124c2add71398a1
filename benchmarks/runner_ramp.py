"""PartitionRunner vs static thread pools on a CPU-bound and an I/O-bound workload.

Two workloads, each "run f(i) for every partition i", and three engines in one
run, side by side:

* static cores:   ``concurrent.futures.ThreadPoolExecutor(cores)``, what one
                  writes for CPU-bound work;
* static 4xcores: ``ThreadPoolExecutor(4 * cores)``, what one writes for
                  I/O-bound work;
* runner:         ``chunkgraph.parallel.PartitionRunner()`` with its defaults,
                  told nothing about the workload: it activates workers from
                  the measured CPU and I/O signals;
* adaptive executor: the partitions as independent tasks of a graph run by
                  ``LocalExecutor("adaptive")``, the same policy inside the
                  task executor.

Workloads (sizes in the argument defaults; ``--quick`` shrinks them):

* ``cpu``: per partition, FFT round trips (``rfft``/``irfft`` of 2^16 doubles,
  numpy releases the GIL) for about 0.2 s of one core; no I/O.
* ``io``: per partition, a file of a few MiB written in small pieces, each
  followed by ``os.fsync`` (a journaling writer's pattern: the time goes to
  waiting on the device, not to the CPU), its cached pages dropped
  (``posix_fadvise(DONTNEED)``) so the read-back really reads the device,
  read back, checked and deleted; under a temporary folder (``--dir``).

Each measurement is repeated ``--repeat`` times (the engines' order rotated
each round so load changes hit all alike) after an untimed warm-up; the table
gives medians. For the runner it also gives the time from the start of the
run to the check that activated its last worker ("ramp") and the active
workers at the end. Targets: cpu, runner within 5% of the static ``cores``
pool; io, runner within 10% of the better static pool. The runner's
activation timeline of the last I/O run is drawn with ``runner.plot``.

    python benchmarks/runner_ramp.py              # 2-3 minutes on 2 cores
    python benchmarks/runner_ramp.py --quick      # smaller workloads, 1 round
    python benchmarks/runner_ramp.py --repeat 5 --plot bench-out/ramp.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from chunkgraph.execute import LocalExecutor
from chunkgraph.graph import Graph
from chunkgraph.parallel import PartitionRunner, usable_cores

ENGINES = ("static cores", "static 4xcores", "runner", "adaptive executor")
ADAPTIVE = ("runner", "adaptive executor")
CPU_TARGET = 1.05  # runner / static cores
IO_TARGET = 1.10  # runner / better static pool


@dataclass
class RunnerRun:
    """One runner run: its total time, ramp and final activation."""

    seconds: float
    ramp_s: float
    final_active: int
    steps: int


@dataclass
class Row:
    workload: str
    partitions: int
    times: dict[str, list[float]] = field(default_factory=dict)
    runner_runs: list[RunnerRun] = field(default_factory=list)

    def median(self, engine: str) -> float:
        return statistics.median(self.times[engine])

    @property
    def best_static(self) -> tuple[str, float]:
        return min(
            ((e, self.median(e)) for e in ENGINES if e not in ADAPTIVE), key=lambda item: item[1]
        )

    @property
    def target(self) -> tuple[str, float, float]:
        """(what, limit ratio, actual ratio) for this workload."""
        runner = self.median("runner")
        if self.workload == "cpu":
            return "<= 1.05x static cores", CPU_TARGET, runner / self.median("static cores")
        return "<= 1.10x best static", IO_TARGET, runner / self.best_static[1]


# --- workloads -------------------------------------------------------------


def cpu_workload(reps: int) -> Callable[[int], float]:
    signal = np.random.default_rng(0).random(1 << 16)

    def partition(i: int) -> float:
        total = 0.0
        x = signal
        for _ in range(reps):
            x = np.fft.irfft(np.fft.rfft(x), n=x.size)
            total += float(x[i % x.size])
        return total

    return partition


def io_workload(folder: Path, size_mib: int, piece_kib: int) -> Callable[[int], int]:
    piece = np.random.default_rng(1).bytes(piece_kib << 10)
    pieces = max(1, (size_mib << 10) // piece_kib)
    expected = pieces * len(piece)

    def partition(i: int) -> int:
        path = folder / f"part-{i:05d}.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(pieces):
                os.write(fd, piece)
                os.fsync(fd)
            if hasattr(os, "posix_fadvise"):  # drop the cached pages: the read hits the device
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        read = 0
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                read += len(chunk)
        path.unlink()
        if read != expected:
            raise RuntimeError(f"partition {i}: read back {read} bytes, wrote {expected}")
        return read

    return partition


# --- engines ---------------------------------------------------------------


def run_static(workers: int, order: list[int], f: Callable[[int], object]) -> float:
    begin = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(f, order):
            pass
    return time.perf_counter() - begin


def run_runner(order: list[int], f: Callable[[int], object]) -> tuple[float, PartitionRunner]:
    runner = PartitionRunner()
    begin = time.perf_counter()
    runner.run(order, f)
    return time.perf_counter() - begin, runner


def run_adaptive_executor(order: list[int], f: Callable[[int], object]) -> float:
    graph = Graph()
    ids = [graph.add(f, i).id for i in order]
    begin = time.perf_counter()
    LocalExecutor("adaptive").run(graph, ids)
    return time.perf_counter() - begin


def ramp_of(runner: PartitionRunner, seconds: float) -> RunnerRun:
    timeline = runner.timeline
    final = sum(timeline[-1].active)
    reached = next(e for e in timeline if sum(e.active) == final)
    steps = sum(1 for e in timeline[1:] if any(e.added))
    return RunnerRun(seconds, reached.time - timeline[0].time, final, steps)


def measure(
    name: str, f: Callable[[int], object], partitions: int, cores: int, repeat: int
) -> tuple[Row, PartitionRunner]:
    order = list(range(partitions))
    for i in range(min(cores, partitions)):  # warm-up: FFT plans, file system metadata
        f(i)
    row = Row(name, partitions, {e: [] for e in ENGINES})
    last: PartitionRunner | None = None
    for r in range(repeat):
        shift = r % len(ENGINES)
        for engine in ENGINES[shift:] + ENGINES[:shift]:
            if engine == "runner":
                seconds, last = run_runner(order, f)
                row.runner_runs.append(ramp_of(last, seconds))
            elif engine == "adaptive executor":
                seconds = run_adaptive_executor(order, f)
            else:
                workers = cores if engine == "static cores" else 4 * cores
                seconds = run_static(workers, order, f)
            row.times[engine].append(seconds)
            print(f"  {name} round {r + 1}/{repeat}: {engine:<17} {seconds:6.2f} s", flush=True)
    assert last is not None
    return row, last


# --- report ----------------------------------------------------------------


def spread(values: list[float] | list[int], fmt: str) -> str:
    """The median, and the range when the rounds differ."""
    mid = format(statistics.median(values), fmt)
    low, high = format(min(values), fmt), format(max(values), fmt)
    return mid if low == high else f"{mid} ({low}–{high})"


def table(rows: list[Row], cores: int, cap: int) -> str:
    lines = [
        f"| workload | partitions | static {cores} | static {4 * cores} | runner "
        "| runner / best static | runner ramp | final active | target | met "
        "| adaptive executor / best static |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        what, limit, ratio = r.target
        best_engine, best_s = r.best_static
        best_workers = cores if best_engine == "static cores" else 4 * cores
        ramp = spread([run.ramp_s for run in r.runner_runs], ".2f")
        active = spread([run.final_active for run in r.runner_runs], "d")
        lines.append(
            f"| {r.workload} | {r.partitions} | {r.median('static cores'):.2f} s "
            f"| {r.median('static 4xcores'):.2f} s | {r.median('runner'):.2f} s "
            f"| {r.median('runner') / best_s:.3f} (vs {best_workers}) | {ramp} s "
            f"| {active} of {cap} | {what} (is {ratio:.3f}) "
            f"| {'met' if ratio <= limit else 'MISSED'} "
            f"| {r.median('adaptive executor') / best_s:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads, 1 round")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3; quick 1)")
    parser.add_argument("--workloads", default="cpu,io", help="comma-separated: cpu, io")
    parser.add_argument("--cpu-partitions", type=int, default=None, help="default 96 (quick 16)")
    parser.add_argument(
        "--cpu-reps", type=int, default=150, help="FFT round trips per partition (~0.2 s)"
    )
    parser.add_argument("--io-partitions", type=int, default=None, help="default 600 (quick 60)")
    parser.add_argument("--io-mib", type=int, default=4, help="MiB written per I/O partition")
    parser.add_argument(
        "--io-piece-kib", type=int, default=64, help="KiB written between two fsyncs"
    )
    parser.add_argument("--dir", default=None, help="folder for the I/O files (default: temp)")
    parser.add_argument("--plot", default="bench-out/runner_ramp.png", help="I/O ramp PNG")
    parser.add_argument("--out", default="bench-out", help="folder for the table and raw JSON")
    args = parser.parse_args()
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    cpu_n = args.cpu_partitions or (16 if args.quick else 96)
    io_n = args.io_partitions or (60 if args.quick else 600)
    workloads = args.workloads.split(",")
    unknown = set(workloads) - {"cpu", "io"}
    if unknown or repeat < 1:
        parser.error(f"unknown workloads {sorted(unknown)}" if unknown else "--repeat must be >= 1")
    cores = usable_cores()
    probe = PartitionRunner()
    rows: list[Row] = []
    io_runner: PartitionRunner | None = None
    load_before = os.getloadavg()
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="runner_ramp-", dir=args.dir) as scratch:
        for name in workloads:
            if name == "cpu":
                f: Callable[[int], object] = cpu_workload(args.cpu_reps)
                t0 = time.perf_counter()
                f(0)
                print(f"cpu: {cpu_n} partitions of {time.perf_counter() - t0:.2f} s (one core)")
                row, _ = measure("cpu", f, cpu_n, cores, repeat)
            else:
                f = io_workload(Path(scratch), args.io_mib, args.io_piece_kib)
                print(
                    f"io: {io_n} partitions of {args.io_mib} MiB, fsync every "
                    f"{args.io_piece_kib} KiB, under {scratch}"
                )
                row, io_runner = measure("io", f, io_n, cores, repeat)
            rows.append(row)
    wall = time.perf_counter() - begin
    load_after = os.getloadavg()
    header = (
        f"runner_ramp: {cores} cores, {probe!r}, "
        f"{platform.processor() or platform.machine()}, numpy {np.__version__}, "
        f"{repeat} round(s), medians (range over rounds), {wall:.0f} s in all, "
        f"load average {load_before[0]:.2f} before / {load_after[0]:.2f} after"
    )
    notes = (
        "ramp: seconds from the start of the run to the check that activated its last worker; "
        f"final active: workers active at the end, of the runner's {sum(probe.caps)}."
    )
    text = header + "\n\n" + table(rows, cores, sum(probe.caps)) + "\n\n" + notes
    print()
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runner_ramp.md").write_text(text + "\n")
    (out / "runner_ramp.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    if io_runner is not None and args.plot:
        plot = Path(args.plot)
        plot.parent.mkdir(parents=True, exist_ok=True)
        print(f"I/O activation timeline (last round): {io_runner.plot(plot)}")


if __name__ == "__main__":
    main()
