"""A flow's fixed cost per top task: one-chunk identity flows beside plain chunk copies.

One uint8 Zarr v3 array of 512 chunks of 8 x 64 x 64 (32 KiB; ``volume.create``'s
defaults: zstd + crc32c; values 0..63), copied chunk by chunk into a new array
four ways, the four interleaved in every repeat, best time of each kept:

* ``tensorstore``  TensorStore's ``zarr3`` driver, one chunk read then written at a time
* ``volume loop``  chunkgraph's ``Volume.read`` then ``Volume.write``, one chunk at a
                   time, no flow (the I/O floor of the flows below)
* ``flow w=1``     ``apply(identity, src, dst, chunk_sizes=[chunk],
                   skip_intermediates=True, workers=1)``: 512 one-chunk top tasks
* ``flow w=2``     the same with ``workers=2``

The flow's fixed cost per top task = (flow - volume loop) / tasks: what a top task costs
beyond its own read and write (the graph, the executor, markers, state, the report), in
wall time and in CPU time of the process (all its threads; on a shared machine the CPU
figure is the steadier one: a busy disk stretches wall times, not CPU times).
Each flow writes a new dst (its state beside it), so no run resumes another; every
output is compared with the source.

    python benchmarks/flow_overhead.py                # 5 repeats
    python benchmarks/flow_overhead.py --quick        # 2 repeats
    python benchmarks/flow_overhead.py --profile out  # + a py-spy profile of flow w=1
    python benchmarks/flow_overhead.py --before ../old/src  # another checkout beside this
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorstore as ts

from chunkgraph import volume
from chunkgraph.geometry import Box

CHUNK = (8, 64, 64)
SHAPE = (64, 512, 512)  # 8 x 8 x 8 = 512 chunks


def identity(src: np.ndarray) -> np.ndarray:
    return src


def make_source(path: str) -> np.ndarray:
    data = np.random.default_rng(0).integers(0, 64, size=SHAPE, dtype=np.uint8)
    src = volume.create(path, SHAPE, CHUNK, "uint8")
    src.write(src.bounds, data)
    return data


def copy_tensorstore(src: str, dst: str) -> None:
    volume.create(dst, SHAPE, CHUNK, "uint8")  # the same metadata and codecs
    t_src = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": src}}).result()
    t_dst = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": dst}}).result()
    for box in Box.from_shape(SHAPE).split(CHUNK):
        index = box.slices()
        t_dst[index].write(t_src[index].read().result()).result()


def copy_volume_loop(src: str, dst: str) -> None:
    s, d = volume.open(src), volume.create(dst, SHAPE, CHUNK, "uint8")
    for box in s.bounds.split(CHUNK):
        d.write(box, s.read(box))


def flow(workers: int) -> Callable[[str, str], None]:
    def copy(src: str, dst: str) -> None:
        s, d = volume.open(src), volume.create(dst, SHAPE, CHUNK, "uint8")
        report = volume.apply(
            identity, s, d, chunk_sizes=[CHUNK], skip_intermediates=True, workers=workers
        )
        if report.tasks_per_level != (512,):
            raise SystemExit(f"expected 512 top tasks, the flow ran {report.tasks_per_level}")

    return copy


WAYS: dict[str, Callable[[str, str], None]] = {
    "tensorstore": copy_tensorstore,
    "volume loop": copy_volume_loop,
    "flow w=1": flow(1),
    "flow w=2": flow(2),
}


def measure(
    work: Path, data: np.ndarray, repeats: int, tag: str = ""
) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall seconds and best CPU seconds (this process, all its threads) of each way."""
    src = str(work / "src.zarr")
    best = dict.fromkeys(WAYS, float("inf"))
    cpu = dict.fromkeys(WAYS, float("inf"))
    for r in range(repeats):
        for name, way in WAYS.items():
            dst = work / f"dst-{name.replace(' ', '_').replace('=', '')}-{r}{tag}.zarr"
            t0, c0 = time.perf_counter(), time.process_time()
            way(src, str(dst))
            best[name] = min(best[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
            if not np.array_equal(volume.open(str(dst)).read(Box.from_shape(SHAPE)), data):
                raise SystemExit(f"{name}: the copy differs from the source")
            shutil.rmtree(dst)
            shutil.rmtree(work / f".{dst.name}.chunkgraph", ignore_errors=True)
    return best, cpu


def table(best: dict[str, float], cpu: dict[str, float], tasks: int) -> str:
    ts_time, loop, loop_cpu = best["tensorstore"], best["volume loop"], cpu["volume loop"]
    lines = [
        "| way | wall s | ms per chunk | x tensorstore | fixed ms per top task "
        "| CPU s | fixed CPU ms per top task |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, seconds in best.items():
        flow = name.startswith("flow")
        fixed = f"{(seconds - loop) / tasks * 1e3:.3f}" if flow else ""
        fixed_cpu = f"{(cpu[name] - loop_cpu) / tasks * 1e3:.3f}" if flow else ""
        lines.append(
            f"| {name} | {seconds:.3f} | {seconds / tasks * 1e3:.3f} | "
            f"{seconds / ts_time:.2f}x | {fixed} | {cpu[name]:.3f} | {fixed_cpu} |"
        )
    return "\n".join(lines)


def profile(work: Path, out: str) -> None:
    """A py-spy profile (all threads, idle excluded) of one ``flow w=1`` run in a child."""
    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import flow_overhead as f; "
        f"f.flow(1)({str(work / 'src.zarr')!r}, {str(work / 'prof.zarr')!r})"
    )
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cmd = [spy, "record", "--threads", "-r", "500", "-f", "raw", "-o", out, "--"]
    subprocess.run([*cmd, sys.executable, "-c", code], check=True)
    print(f"py-spy profile (collapsed stacks) of flow w=1: {out}")


def one_repeat(work: Path) -> None:
    """``--one``: one repeat of every way on ``work``'s source, as JSON on the last line."""
    data = volume.open(str(work / "src.zarr")).read(Box.from_shape(SHAPE))
    best, cpu = measure(work, data, 1, tag=str(os.getpid()))
    print(json.dumps({name: [best[name], cpu[name]] for name in best}))


def compare(work: Path, before: str, repeats: int) -> dict[str, tuple[dict, dict]]:
    """Every way under ``before`` (another checkout's ``src``) and under this checkout,
    each repeat one child process per checkout, in turn, which goes first alternating:
    load hits both alike."""
    own = str(Path(__file__).resolve().parents[1] / "src")
    found: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    pair = [("before", before), ("after", own)]
    for r in range(repeats):
        for label, src in pair if r % 2 == 0 else pair[::-1]:
            env = {**os.environ, "PYTHONPATH": src}
            cmd = [sys.executable, __file__, "--one", str(work)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            best, cpu = found.setdefault(label, ({}, {}))
            for name, (wall, used) in got.items():
                best[name] = min(best.get(name, float("inf")), wall)
                cpu[name] = min(cpu.get(name, float("inf")), used)
    return found


def summary(best: dict[str, float], tasks: int) -> str:
    loop, one = best["volume loop"], best["flow w=1"]
    return (
        f"flow w=1 / tensorstore {one / best['tensorstore']:.2f}x (target <= 1.5x); "
        f"fixed cost per top task {(one - loop) / tasks * 1e3:.3f} ms (target <= 0.3 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", metavar="FILE", help="also write a py-spy profile there")
    parser.add_argument(
        "--before",
        metavar="SRC",
        help="another checkout's src/ folder: its figures beside this checkout's, the two "
        "run in turn, one child process per repeat each",
    )
    parser.add_argument("--one", metavar="WORK", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_repeat(Path(args.one))
        return
    repeats = 2 if args.quick else args.repeats
    tasks = int(np.prod([s // c for s, c in zip(SHAPE, CHUNK, strict=True)]))
    with tempfile.TemporaryDirectory(prefix="flow_overhead-") as tmp:
        work = Path(tmp)
        data = make_source(str(work / "src.zarr"))
        print(
            f"{tasks} chunks of {'x'.join(map(str, CHUNK))} uint8, {os.cpu_count()} cores, "
            f"best of {repeats}"
        )
        if args.before:
            found = compare(work, args.before, repeats)
            for label in ("before", "after"):
                best, cpu = found[label]
                print(f"\n{label} ({args.before if label == 'before' else 'this checkout'}):\n")
                print(table(best, cpu, tasks))
                print(f"\n{summary(best, tasks)}")
        else:
            best, cpu = measure(work, data, repeats)
            print()
            print(table(best, cpu, tasks))
            print(f"\n{summary(best, tasks)}")
        if args.profile:
            profile(work, args.profile)


if __name__ == "__main__":
    main()
