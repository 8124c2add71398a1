"""Benchmark: the subchunkable apply flow against its peers, side by side in one run.

Cases on one float32 Zarr v3 volume ((256, 512, 512), 64^3 chunks; ``--size 1024`` for
(1024, 512, 512), 1 GiB; ``--quick``: (64, 128, 1024)), each run in its own subprocess so
that peak RSS is clean:

1. raw chunk-by-chunk copy (the I/O floor), a thread pool over storage chunks
2. chunkgraph identity flow, crop 8 at the bottom of two levels (bottom chunk 128x128x64)
3. chunkgraph Gaussian filter (scipy.ndimage.gaussian_filter, sigma 2), same flow
4. the same filter with dask.array ``map_overlap`` (depth 8) written to Zarr
5. one task per 64^3 chunk reading its own 8-voxel halo (no cache)
a. what a new user writes: ``apply(gaussian, src, dst, crop_pads=8)``, automatic sizes,
   no cache given; (ap) the same on ``executor="processes"`` (a stream of top tasks per
   worker process, each with its own cache), its reads beside its plan's prediction
b. a new user's hand-picked sizes: two levels of 64x256x256 over 64^3, crop 8 at the
   bottom, no cache (apply warns and keeps a cache of its own)
c. (a) on the volume 4x as deep (for the memory slope), beside (4) on that volume
   (``--size 1024``: (a) at 1 GiB, (c) at 4 GiB; the target table names the sizes, and
   the lines below it give each one's memory beside dask's and the plan's memory bound)
f. the compute floor: the whole array filtered in memory on all cores (slabs with a halo,
   one per core; reading and writing not timed); (mf) the same for the median
a'. (a) reading through an LRU cache of one top task's whole read (the cache rule before
   reader counts: the caller's cache, so apply adds none), for memory before and after
m. a second workload with other costs: ``scipy.ndimage.median_filter`` size 5 (no
   flops, a selection per voxel over 125 values: memory traffic), ``apply(median, src,
   dst, crop_pads=2)``, beside (m4) dask ``map_overlap(depth=2)``, on a volume an eighth
   the size (a quarter as deep, half as high: 64 MiB by default)
l. connected components, a workload with a reduction: ``label(src, dst, threshold=0.5)``
   on smoothed noise (``_label_cases.py``), beside (l4) dask-image ``ndmeasure.label``
   (``--label-peer-python``, ``_dask_image_case.py``); exactness against scipy's
d. daisy with hand-tuned 128^3 write blocks (context 8), worker processes on all cores;
   daisy is not a dependency: ``python3.11 -m venv peers && peers/bin/pip install daisy
   zarr scipy``, then ``--peer-python peers/bin/python`` (``_daisy_case.py``); without
   it the case runs if this interpreter imports daisy, else it is listed as not run

The tuned chunkgraph cases (2), (3) read through a chunk cache of a quarter of the volume:
reuse must come from the order of the top-level tasks, not from caching everything.
Read amplification = decoded bytes of whole storage chunks fetched / volume bytes
(dask's is not instrumented: ``from_zarr`` makes one read task per storage chunk).
Beside (3) and (a), where their time went (``ApplyReport.breakdown``: compute,
redundant compute in the crop margins, decode, waits, encode, other CPU, idle, as
shares of cores x the tasks' wall) and their peak RSS as the flow sampled it.
Then (3), (4) and (5) are compared in the interior (8 voxels from the volume edge,
where each treats the outside differently), and a dry run of a
100,000 x 100,000 x 10,000 bbox is timed.

    python benchmarks/volume_flow.py [--quick | --size MIB] [--repeat 3]
                                     [--workdir bench-out/volume_flow]
                                     [--peer-python OTHER_ENV/bin/python]
                                     [--label-peer-python DASK_IMAGE_ENV/bin/python]
                                     [--mmap-threshold 131072] [--arena-max 1]
                                     [--keep-outputs]

What each case wrote is removed once compared (at ``--size 1024`` the outputs are
some 15 GiB); the sources stay in the workdir for the next run at that size.
``--keep-outputs`` keeps the outputs too, to look at them.

Memory. Peak RSS is shown whole and above the case's own baseline (the interpreter with
numpy, scipy, zarr, chunkgraph and, for (4), dask imported, measured in the case's process
before it starts). A chunkgraph case cannot go below baseline + its chunk cache, printed
as the floor. ``apply`` leaves glibc's allocator as the process has it (see
``flow._apply``: its settings are the whole process's); ``--arena-max`` and
``--mmap-threshold`` (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_ for every case, peers
included) show what they do for a whole process. Peak RSS is each case's own high-water
mark (VmHWM, ``_memory``), not ``ru_maxrss``, which starts from the driver's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from _label_cases import (
    LABEL_CASES,
    LABEL_PEER,
    LABEL_SOURCE,
    case_cg_label,  # noqa: F401  (run_case finds each case by name)
    label_exactness,
    label_line,
    label_missing,
    label_peer_command,
    label_shape,
    label_targets,
    make_label_source,
)
from _memory import peak_rss_bytes
from chunkgraph import volume
from chunkgraph.flow import Breakdown
from chunkgraph.flow.plan._auto_sizes import WARN_AMPLIFICATION
from chunkgraph.geometry import Box
from chunkgraph.parallel import usable_cores

CHUNK = 64
HALO = 8
SIGMA = 2.0
FULL_SHAPE = (256, 512, 512)
QUICK_SHAPE = (64, 128, 1024)
HUGE_BBOX = (100_000, 100_000, 10_000)
MEDIAN_SIZE = 5
MEDIAN_PAD = MEDIAN_SIZE // 2
BOTTOM = (2 * CHUNK, 2 * CHUNK, CHUNK)  # the chunkgraph cases' bottom-level chunk
USER_TOP = (64, 256, 256)  # case (b)'s top chunk, over 64^3

CASES = {
    "copy": "(1) raw chunk copy",
    "floor": "(f) whole-array gaussian, compute only",
    "cg_identity": "(2) chunkgraph identity, crop 8",
    "cg_gaussian": "(3) chunkgraph gaussian, crop 8, tuned",
    "dask_gaussian": "(4) dask map_overlap gaussian",
    "per_chunk_gaussian": "(5) per-chunk tasks with halo",
    "cg_auto": "(a) chunkgraph gaussian, crop_pads=8 only",
    "cg_auto_processes": "(ap) = (a) on worker processes",
    "cg_user_two_level": "(b) 64x256x256 over 64^3, no cache",
    "cg_auto_4x": "(c) = (a) at 4x the volume",
    "dask_gaussian_4x": "(4) at 4x the volume",
    "cg_auto_lru": "(a') = (a), LRU cache of a task's read",
    "daisy_gaussian": "(d) daisy gaussian, 128^3 blocks",
    "cg_median": "(m) chunkgraph median 5, crop_pads=2 only",
    "dask_median": "(m4) dask map_overlap median 5",
    "floor_median": "(mf) whole-array median 5, compute only",
}
CASES.update(LABEL_CASES)
# Cases run by another interpreter (``--peer-python``): the filter and its context.
PEER_CASES = {"daisy_gaussian": ("gaussian", HALO)}
# The cases that run on the 4x volume (``src4.zarr``).
FOUR_X = ("cg_auto_4x", "dask_gaussian_4x")
# The median cases run on a volume an eighth of the size (``src_m.zarr``): scipy's
# median_filter of size 5 takes about 3 s per million voxels on a core here.
MEDIAN = ("cg_median", "dask_median", "floor_median")


def median_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The median cases' volume: a quarter as deep, half as high."""
    return (max(CHUNK, shape[0] // 4), max(CHUNK, shape[1] // 2), shape[2])


def gaussian(src: np.ndarray) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    out: np.ndarray = gaussian_filter(src, sigma=SIGMA)
    return out


def identity(src: np.ndarray) -> np.ndarray:
    return src


def median(src: np.ndarray) -> np.ndarray:
    from scipy.ndimage import median_filter

    out: np.ndarray = median_filter(src, size=MEDIAN_SIZE)
    return out


# --- the cases (each runs in its own process) ------------------------------------------------


def case_copy(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    src = volume.open(src_path)
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)
    boxes = Box.from_shape(shape).split((CHUNK,) * 3)
    with ThreadPoolExecutor(usable_cores()) as pool:
        list(pool.map(lambda b: dst.write(b, src.read(b)), boxes))
    return src.stats.bytes_read / (np.prod(shape) * 4)


def cache_bytes(shape: tuple[int, ...]) -> int:
    """The chunkgraph cases' chunk cache: a quarter of the float32 volume."""
    return int(np.prod(shape)) * 4 // 4


def _breakdown(report: Any) -> dict[str, Any]:
    """The report's breakdown as JSON, for the driver to print beside the wall."""
    return {} if report.breakdown is None else {"breakdown": report.breakdown.as_json()}


def _flow(fn: Callable[..., Any], src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    src = volume.open(src_path, cache_bytes=cache_bytes(shape))
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)
    top = (shape[0], shape[1], CHUNK)
    # Top-level tasks: full (z, y) slabs one storage chunk thick, following each other
    # along x, so the halo chunks two neighbours share fit the quarter-volume cache.
    # Bottom chunks: 2 x 2 x 1 storage chunks, cropped by the filter's reach (8).
    report = volume.apply(
        fn,
        src,
        dst,
        chunk_sizes=[top, tuple(min(b, t) for b, t in zip(BOTTOM, top, strict=True))],
        crop_pads=[0, HALO],
        skip_intermediates=True,
    )
    return report.read_amplification, _breakdown(report)


def case_cg_identity(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    return _flow(identity, src_path, dst_path, shape)


def case_cg_gaussian(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    return _flow(gaussian, src_path, dst_path, shape)


def case_dask_gaussian(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    return _dask(gaussian, HALO, src_path, dst_path)


def case_dask_median(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    return _dask(median, MEDIAN_PAD, src_path, dst_path)


def _dask(fn: Callable[..., Any], depth: int, src_path: str, dst_path: str) -> float:
    import dask
    import dask.array as da

    x = da.from_zarr(src_path)  # type: ignore[no-untyped-call]
    y = x.map_overlap(fn, depth=depth, boundary="none", dtype=np.float32)
    with dask.config.set(scheduler="threads", num_workers=usable_cores()):
        y.to_zarr(dst_path, overwrite=True)
    return float("nan")


def case_floor(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    """Only the filter: the array is in memory, each core filters one slab with its halo."""
    return _floor(gaussian, HALO, src_path, shape)


def case_floor_median(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    """The median's floor, as (f) is the Gaussian's: what no plan can go below."""
    return _floor(median, MEDIAN_PAD, src_path, shape)


def _floor(fn: Callable[..., Any], halo: int, src_path: str, shape: tuple[int, ...]) -> float:
    data = volume.open(src_path).read(Box.from_shape(shape))
    cores = usable_cores()
    edges = np.linspace(0, shape[0], cores + 1).astype(int)
    out = np.empty_like(data)

    def slab(i: int) -> None:
        lo, hi = int(edges[i]), int(edges[i + 1])
        a, b = max(0, lo - halo), min(shape[0], hi + halo)
        out[lo:hi] = fn(data[a:b])[lo - a : lo - a + hi - lo]

    global _FLOOR_T0
    _FLOOR_T0 = time.perf_counter()  # the read above is not part of the floor
    with ThreadPoolExecutor(cores) as pool:
        list(pool.map(slab, range(cores)))
    return float("nan")


_FLOOR_T0: float | None = None


def _auto(
    src_path: str,
    dst_path: str,
    shape: tuple[int, ...],
    fn: Callable[..., Any] = gaussian,
    pad: int = HALO,
    cache: int = 0,
    executor: str = "threads",
) -> tuple[float, dict[str, Any]]:
    src = volume.open(src_path, cache_bytes=cache)
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)
    report = volume.apply(fn, src, dst, crop_pads=pad, executor=executor)
    plan = report.plan
    assert plan is not None
    return report.read_amplification, {
        "predicted": plan.read_amplification,
        "streams": plan.streams,
        "plan": " over ".join("x".join(map(str, c)) for c in plan.chunk_sizes),
        "cache_mib": plan.cache_bytes / 2**20,
        "memory": plan.memory_words(),
        **_breakdown(report),
    }


def case_cg_auto(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    return _auto(src_path, dst_path, shape)


def case_cg_auto_processes(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    """(a) on ``executor="processes"``: one contiguous stream of top tasks per worker
    process, each through its own cache (the halo read again at each stream boundary)."""
    return _auto(src_path, dst_path, shape, executor="processes")


def case_cg_auto_4x(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    return _auto(src_path, dst_path, shape)


def case_cg_median(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    return _auto(src_path, dst_path, shape, median, MEDIAN_PAD)


def case_cg_auto_lru(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    """(a) through the cache rule before reader counts: an LRU of one top task's whole
    read (its padded top chunk snapped to storage chunks), times the slack of 1.25 the
    planner gave it. A cache of the caller's: apply adds none and keeps the same sizes."""
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)
    plan = volume.apply(gaussian, volume.open(src_path), dst, crop_pads=HALO, dry_run=True).plan
    assert plan is not None
    top, sweep = plan.chunk_sizes[0], plan.sweep_axis
    # Along the sweep an inner task reads [start - 8, stop + 8): ceil((t + 16) / 64) + 1 chunks.
    layers = -(-(top[sweep] + 2 * HALO) // CHUNK) + 1
    read = [t if a != sweep else layers * CHUNK for a, t in enumerate(top)]
    return _auto(src_path, dst_path, shape, cache=int(np.prod(read) * 4 * 1.25))


def case_dask_gaussian_4x(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    return case_dask_gaussian(src_path, dst_path, shape)


def case_cg_user_two_level(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    import warnings

    from chunkgraph.flow import ReadAmplificationWarning

    src = volume.open(src_path)
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = volume.apply(
            gaussian,
            src,
            dst,
            # (clipped to the --quick volume's 128 on axis 1)
            chunk_sizes=[tuple(min(t, n) for t, n in zip(USER_TOP, shape, strict=True)), (64,) * 3],
            crop_pads=[0, HALO],
        )
    warned = [w for w in caught if issubclass(w.category, ReadAmplificationWarning)]
    plan = report.plan
    assert plan is not None
    return report.read_amplification, {
        "predicted": plan.read_amplification,
        "warned": bool(warned),
        "warning": str(warned[0].message) if warned else "",
        "cache_mib": plan.cache_bytes / 2**20,
    }


def case_per_chunk_gaussian(src_path: str, dst_path: str, shape: tuple[int, ...]) -> float:
    src = volume.open(src_path)
    dst = volume.create(dst_path, shape, (CHUNK,) * 3, "float32", exist_ok=True)

    def one(box: Box) -> None:
        padded = box.padded(HALO)
        dst.write(box, gaussian(src.read(padded))[box.slices(relative_to=padded)])

    with ThreadPoolExecutor(usable_cores()) as pool:
        list(pool.map(one, Box.from_shape(shape).split((CHUNK,) * 3)))
    return src.stats.bytes_read / (np.prod(shape) * 4)


def run_case(name: str, workdir: Path, shape: tuple[int, ...]) -> None:
    """Child process: run one case, print one JSON line."""
    import psutil
    import scipy.ndimage  # noqa: F401  (imported before the baseline, like every case)

    if name.startswith("dask"):
        import dask.array  # noqa: F401  (its own imports are part of its baseline too)

    dst = workdir / f"{name}.zarr"
    shutil.rmtree(dst, ignore_errors=True)
    source = "src4.zarr" if name in FOUR_X else "src_m.zarr" if name in MEDIAN else "src.zarr"
    if name in FOUR_X:
        shape = (4 * shape[0], *shape[1:])
    if name in MEDIAN:
        shape = median_shape(shape)
    if name in LABEL_CASES:
        source, shape = LABEL_SOURCE, label_shape(shape)
    baseline = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    result = globals()[f"case_{name}"](str(workdir / source), str(dst), shape)
    wall = time.perf_counter() - (_FLOOR_T0 if name.startswith("floor") and _FLOOR_T0 else t0)
    peak = peak_rss_bytes()
    amp, extra = result if isinstance(result, tuple) else (result, {})
    print(json.dumps(dict(wall=wall, peak=peak, baseline=baseline, amp=amp, **extra)))


# --- the driver --------------------------------------------------------------------------------


def peer_missing(peer_python: str | None) -> str | None:
    """Why daisy's case cannot run (None: it can): asked of ``--peer-python``, else of
    this interpreter."""
    python = peer_python or sys.executable
    done = subprocess.run([python, "-c", "import daisy, zarr, scipy"], capture_output=True)
    if done.returncode:
        return f"daisy, zarr or scipy not importable by {python}; give --peer-python"
    return None


def peer_command(name: str, peer_python: str | None, workdir: Path) -> list[str]:
    """The command of a case another interpreter runs (``_daisy_case.py``)."""
    fn, context = PEER_CASES[name]
    dst = workdir / f"{name}.zarr"
    shutil.rmtree(dst, ignore_errors=True)
    script = Path(__file__).with_name("_daisy_case.py")
    python = peer_python or sys.executable
    return [python, str(script), str(workdir / "src.zarr"), str(dst), fn, str(context)]


def make_source(path: Path, shape: tuple[int, ...]) -> None:
    if path.exists():
        existing = volume.open(str(path))
        if existing.shape == shape:
            return
        shutil.rmtree(path)
    src = volume.create(str(path), shape, (CHUNK,) * 3, "float32")
    rng = np.random.default_rng(0)
    for z in range(0, shape[0], CHUNK):
        slab = rng.standard_normal((CHUNK, *shape[1:]), dtype=np.float32)
        src.write(Box((z, 0, 0), (z + CHUNK, *shape[1:])), slab)


def table(results: dict[str, dict[str, float]]) -> str:
    """The markdown table of the cases."""
    base = results["copy"]["wall"]
    lines = [
        "| case | wall s | x copy | peak RSS MiB | above baseline MiB | read amp |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in CASES.items():
        if name not in results:
            continue
        r = results[name]
        amp = "n/a" if r["amp"] != r["amp"] else f"{r['amp']:.2f}"
        lines.append(
            f"| {label} | {r['wall']:.2f} | {r['wall'] / base:.2f} | {r['peak'] / 2**20:.0f} | "
            f"{(r['peak'] - r['baseline']) / 2**20:.0f} | {amp} |"
        )
    return "\n".join(lines)


def predicted_reads(results: dict[str, dict[str, Any]], names: tuple[str, ...]) -> str:
    """The read amplification each case measured beside what its plan predicted (on worker
    processes, with the halo each boundary between their streams costs)."""
    lines = [""]
    for name in names:
        r = results.get(name)
        if r is not None and "predicted" in r:
            lines.append(
                f"{CASES[name]}: read amp {r['amp']:.3f} measured, {r['predicted']:.3f} "
                f"predicted ({r.get('streams', 1):.0f} stream(s))"
            )
    return "\n".join(lines)


def size_words(shape: tuple[int, ...]) -> dict[str, str]:
    """The volumes' sizes as the target table names them: (a)'s and (c)'s (4x as deep)."""

    def words(n: float) -> str:
        return f"{n / 1024:g} GiB" if n >= 1024 else f"{n:g} MiB"

    mib = float(np.prod(shape)) * 4 / 2**20
    return {"a": words(mib), "c": words(4 * mib)}


def memory_rows(results: dict[str, dict[str, Any]], shape: tuple[int, ...]) -> str:
    """(a)'s and (c)'s memory beside dask's at each size, and the plans' memory bounds."""
    sizes = size_words(shape)
    lines = [""]
    for name, dask, size in (
        ("cg_auto", "dask_gaussian", "a"),
        ("cg_auto_4x", "dask_gaussian_4x", "c"),
    ):
        r, d = results[name], results[dask]
        mine, theirs = r["peak"] - r["baseline"], d["peak"] - d["baseline"]
        lines.append(
            f"({size}) at {sizes[size]}: {mine / 2**20:.0f} MiB above baseline, dask "
            f"{theirs / 2**20:.0f} MiB ({mine / theirs:.2f}x); {r.get('memory', '')}"
        )
    return "\n".join(lines)


def auto_targets(results: dict[str, dict[str, Any]], shape: tuple[int, ...] = FULL_SHAPE) -> str:
    """The new-user cases against the flow's targets, met or missed, with the figures;
    (a) and (c) named with their volume's size."""
    size = size_words(shape)
    at_a, at_c = f" at {size['a']}", f" at {size['c']}"
    a, b, c = results["cg_auto"], results["cg_user_two_level"], results["cg_auto_4x"]
    d, d4, f = results["dask_gaussian"], results["dask_gaussian_4x"], results["floor"]
    lru, m, m4 = results["cg_auto_lru"], results["cg_median"], results["dask_median"]
    mf = results["floor_median"]

    def above(r: dict[str, Any]) -> float:
        return float(r["peak"] - r["baseline"])

    def check(ok: bool) -> str:
        return "met" if ok else "MISSED"

    rows: list[tuple[str, float, str, bool]] = [
        (f"(a){at_a} time / (4)", a["wall"] / d["wall"], "<= 0.5", a["wall"] / d["wall"] <= 0.5),
        (f"(a){at_a} time / floor (f)", a["wall"] / f["wall"], "<= 1.3",
         a["wall"] / f["wall"] <= 1.3),
        (f"(a){at_a} memory above baseline / (4)'s", above(a) / above(d), "<= 1.0",
         above(a) <= above(d)),
        ("(a) memory above baseline / (a')'s", above(a) / above(lru), "< 1.0 (less)",
         above(a) < above(lru)),
        (f"(a){at_a} read amplification", a["amp"], "<= 1.05", a["amp"] <= 1.05),
        (f"(c){at_c} read amplification", c["amp"], "<= 1.05", c["amp"] <= 1.05),
        (f"(c){at_c} / (a){at_a} memory above baseline", above(c) / above(a), "<= 1.1 (flat)",
         above(c) / above(a) <= 1.1),
        (f"(c){at_c} / (4{at_c}) memory above baseline", above(c) / above(d4), "<= 0.5",
         above(c) / above(d4) <= 0.5),
        (f"(c){at_c} time / (4{at_c})", c["wall"] / d4["wall"], "<= 0.5",
         c["wall"] / d4["wall"] <= 0.5),
        ("(m) time / (m4)", m["wall"] / m4["wall"], "<= 0.5", m["wall"] / m4["wall"] <= 0.5),
        ("(m) time / floor (mf)", m["wall"] / mf["wall"], "<= 1.3", m["wall"] / mf["wall"] <= 1.3),
        ("(m) memory above baseline / (m4)'s", above(m) / above(m4), "<= 1.0",
         above(m) <= above(m4)),
        ("(m) read amplification", m["amp"], "<= 1.05", m["amp"] <= 1.05),
        ("(b) read amplification", b["amp"], "<= 1.5", b["amp"] <= 1.5),
    ]  # fmt: skip
    rows += label_targets(results)
    if "daisy_gaussian" in results:
        speedup = results["daisy_gaussian"]["wall"] / a["wall"]
        rows.append(("(d) time / (a): (a) faster than daisy by", speedup, ">= 1.3", speedup >= 1.3))
    lines = ["", "| target | figure | target | |", "|---|---:|---|---|"]
    for label, value, target, ok in rows:
        lines.append(f"| {label} | {value:.2f} | {target} | {check(ok)} |")
    # A compute-bound fn: dask near the floor leaves no half of its time to take.
    lines.append(
        f"| (m4) time / floor (mf), for the row above it | {m4['wall'] / mf['wall']:.2f} | "
        "0.5x dask needs this >= 2 (a flow at the floor) | "
        f"{'possible' if m4['wall'] / mf['wall'] >= 2 else 'impossible'} |"
    )
    # A warning is for an amplification apply's own cache does not absorb (see _auto_sizes).
    should = b["predicted"] > WARN_AMPLIFICATION
    lines.append(
        f"| (b) warned | {b['warned']} | only when the predicted amplification "
        f"({b['predicted']:.2f}) is above {WARN_AMPLIFICATION} | "
        f"{check(b['warned'] == should)} |"
    )
    lines.append(
        f"\n(a) plan {a['plan']}, cache {a['cache_mib']:.0f} MiB, predicted read "
        f"amplification {a['predicted']:.2f}; (c) plan {c['plan']}, cache "
        f"{c['cache_mib']:.0f} MiB; (m) plan {m['plan']}, cache {m['cache_mib']:.0f} MiB"
    )
    if b["warning"]:
        lines.append(f"(b) warning: {b['warning']}")
    return "\n".join(lines)


def interior_agreement(workdir: Path, shape: tuple[int, ...], a: str, b: str) -> float:
    """Max |a - b| over the interior, slab by slab."""
    va, vb = volume.open(str(workdir / f"{a}.zarr")), volume.open(str(workdir / f"{b}.zarr"))
    worst = 0.0
    for z in range(HALO, shape[0] - HALO, CHUNK):
        box = Box(
            (z, HALO, HALO), (min(z + CHUNK, shape[0] - HALO), *(s - HALO for s in shape[1:]))
        )
        worst = max(worst, float(np.abs(va.read(box) - vb.read(box)).max()))
    return worst


def breakdowns(results: dict[str, dict[str, Any]], names: tuple[str, ...]) -> str:
    """Where the time of each named chunkgraph case went, beside its wall."""
    lines = [""]
    for name in names:
        data = results[name].get("breakdown")
        if not isinstance(data, dict):
            continue
        b = Breakdown.from_json(data)
        lines.append(f"{CASES[name]}: wall {results[name]['wall']:.2f} s; {b.line()}")
        lines.append(f"    {b.memory_line()}")
    return "\n".join(lines)


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the figures; other fields (texts, flags, breakdowns) from the first run."""
    return {
        key: float(np.median([r[key] for r in runs]))
        if isinstance(value, int | float) and not isinstance(value, bool)
        else value
        for key, value in runs[0].items()
    }


def dry_run(workdir: Path) -> tuple[Any, float]:
    big_src = volume.create(
        str(workdir / "huge-src.zarr"), HUGE_BBOX, (128,) * 3, "float32", exist_ok=True
    )
    big_dst = volume.create(
        str(workdir / "huge-dst.zarr"), HUGE_BBOX, (128,) * 3, "float32", exist_ok=True
    )
    t0 = time.perf_counter()
    report = volume.apply(
        gaussian,
        big_src,
        big_dst,
        chunk_sizes=[(500, 500, 500), (128, 128, 128)],
        crop_pads=[0, HALO],
        blend_pads=[6, 0],
        dry_run=True,
    )
    return report, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"use a {QUICK_SHAPE} volume")
    parser.add_argument(
        "--size",
        type=int,
        help="volume size in MiB (a multiple of 64): (size, 512, 512) float32; default "
        f"{FULL_SHAPE}, 256 MiB; (c) runs on 4x that",
    )
    parser.add_argument("--workdir", default="bench-out/volume_flow")
    parser.add_argument(
        "--mmap-threshold",
        type=int,
        help="set MALLOC_MMAP_THRESHOLD_ (bytes) for every case: glibc then returns large "
        "freed buffers to the OS instead of keeping them in a fragmented heap",
    )
    parser.add_argument(
        "--arena-max",
        type=int,
        help="set MALLOC_ARENA_MAX for every case: fewer per-thread heaps that each keep "
        "their own freed memory",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (medians shown)")
    parser.add_argument(
        "--peer-python",
        help="the interpreter of an environment with daisy, zarr and scipy, for case (d)",
    )
    parser.add_argument(
        "--label-peer-python",
        help="the interpreter of an environment with dask-image, zarr and scipy, for case (l4)",
    )
    parser.add_argument(
        "--keep-outputs",
        action="store_true",
        help="keep what each case wrote (removed once compared otherwise; sources stay)",
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    if args.size:
        if args.size % CHUNK:
            parser.error(f"--size must be a multiple of {CHUNK} MiB, got {args.size}")
        shape = (args.size, 512, 512)
    workdir = Path(args.workdir)
    if args.case:
        run_case(args.case, workdir, shape)
        return
    workdir.mkdir(parents=True, exist_ok=True)
    make_source(workdir / "src.zarr", shape)
    make_source(workdir / "src4.zarr", (4 * shape[0], *shape[1:]))
    make_source(workdir / "src_m.zarr", median_shape(shape))
    make_label_source(workdir / LABEL_SOURCE, label_shape(shape))
    mib = np.prod(shape) * 4 / 2**20
    env = os.environ.copy()
    if args.mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    if args.arena_max is not None:
        env["MALLOC_ARENA_MAX"] = str(args.arena_max)
    malloc = env.get("MALLOC_MMAP_THRESHOLD_", "glibc default")
    arenas = env.get("MALLOC_ARENA_MAX", "glibc default")
    print(
        f"volume {shape} float32 ({mib:.0f} MiB), chunks {CHUNK}^3, {usable_cores()} cores, "
        f"MALLOC_MMAP_THRESHOLD_={malloc}, MALLOC_ARENA_MAX={arenas}"
    )
    not_run = {n: why for n in PEER_CASES if (why := peer_missing(args.peer_python))}
    if why := label_missing(args.label_peer_python):
        not_run[LABEL_PEER] = why
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CASES if name not in not_run}
    for _ in range(args.repeat):
        # Round-robin, so that load from elsewhere on the machine hits every case alike.
        for name in runs:
            if name in PEER_CASES:
                cmd = peer_command(name, args.peer_python, workdir)
            elif name == LABEL_PEER:
                cmd = label_peer_command(args.label_peer_python, workdir)
            else:
                cmd = [sys.executable, __file__, "--case", name, "--workdir", str(workdir)]
                cmd += ["--quick"] if args.quick else []
                cmd += ["--size", str(args.size)] if args.size else []
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode:
                raise SystemExit(f"case {name} failed:\n{out.stderr}")
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = {name: _median(r) for name, r in runs.items()}
    for name, why in not_run.items():
        print(f"{CASES[name]}: not run ({why})")
    print(f"median of {args.repeat} run(s) per case\n")
    print(table(results))
    print(predicted_reads(results, ("cg_auto", "cg_auto_processes", "cg_median")))
    print(breakdowns(results, ("cg_gaussian", "cg_auto", "cg_auto_lru", "cg_median")))
    g, d = results["cg_gaussian"], results["dask_gaussian"]
    cache = cache_bytes(shape)
    floor = g["baseline"] + cache
    print(
        f"\n(2)/(1) time {results['cg_identity']['wall'] / results['copy']['wall']:.2f}; "
        f"(3)/(4) time {g['wall'] / d['wall']:.2f}, peak RSS {g['peak'] / d['peak']:.2f} "
        f"(above baseline {(g['peak'] - g['baseline']) / (d['peak'] - d['baseline']):.2f})"
    )
    print(
        f"floor of (3): baseline {g['baseline'] / 2**20:.0f} MiB + cache {cache / 2**20:.0f} MiB "
        f"= {floor / 2**20:.0f} MiB = {floor / d['peak']:.2f}x the peak RSS of (4)"
    )
    others = ("dask_gaussian", "per_chunk_gaussian", "cg_auto", "cg_user_two_level")
    for other in (*others, "cg_auto_lru", "daisy_gaussian"):
        if other in results:
            diff = interior_agreement(workdir, shape, "cg_gaussian", other)
            print(f"interior max |(3) - {CASES[other].split()[0]}| = {diff:.3g}")
    diff = interior_agreement(workdir, median_shape(shape), "cg_median", "dask_median")
    print(f"interior max |(m) - (m4)| = {diff:.3g}")
    print(label_line(results))
    print(label_exactness(workdir, results))
    print(auto_targets(results, shape))
    print(memory_rows(results, shape))
    report, seconds = dry_run(workdir)
    est = report.estimate
    print(
        f"dry run over {HUGE_BBOX}: {seconds:.3f} s; tasks per level {report.tasks_per_level}, "
        f"reductions {report.reductions}, {est.bytes_to_read / 2**40:.1f} TiB to read, "
        f"{est.bytes_to_write / 2**40:.1f} TiB to write, "
        f"{est.top_task_memory_bytes / 2**30:.2f} GiB per top-level task"
    )
    if not args.keep_outputs:
        remove_outputs(workdir)


SOURCES = ("src.zarr", "src4.zarr", "src_m.zarr", LABEL_SOURCE)


def remove_outputs(workdir: Path) -> None:
    """Remove what the cases wrote, keeping the sources for the next run at this size:
    the outputs of a large run fill a disk quickly."""
    freed = 0
    for path in workdir.iterdir():
        if path.name in SOURCES or not path.name.endswith(".zarr"):
            continue
        freed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path, ignore_errors=True)
    print(f"removed the cases' outputs ({freed / 2**30:.1f} GiB); the sources stay in {workdir}")


if __name__ == "__main__":
    main()
