"""Benchmark: pyramids and rechunking, chunkgraph beside its peers in one run.

Cases, each in its own subprocess (peak RSS is the process's own):

1. mean pyramid, 3 levels of factor 2 over a uint8 volume (512 MiB: 1024 x 1024 x 512,
   64^3 chunks; ``--quick``: 64 MiB): ``chunkgraph.downsample``; TensorStore's
   ``downsample`` driver writing each level from the one below (as chunkgraph does);
   igneous (``create_downsampling_tasks`` on a LocalTaskQueue of the machine's cores,
   over a precomputed copy of the source made before the clock starts); tinybrain
   (``downsample_with_averaging`` / ``downsample_segmentation``, all levels in memory)
2. mode pyramid, 3 levels, over a uint32 label volume (128 MiB: 512 x 512 x 128;
   ``--quick``: 32 MiB): the same three
3. rechunk the uint8 volume from 64^3 to 256 x 256 x 32 chunks: ``chunkgraph.transfer``;
   rechunker (``rechunk(...).execute()``); dask ``from_zarr(...).rechunk(...).to_zarr``

Each output is compared with a numpy reference computed from the whole array (mean:
float64 mean rounded half to even; mode: the most frequent value, ties to the
smallest), printed as the fraction of voxels equal. Every case gets the same memory
budget (``--memory-limit``, default 512 MiB): chunkgraph's ``memory_limit``, rechunker's
``max_mem``; the others have no such setting.

    python benchmarks/pyramid_transfer.py [--quick] [--repeat 3] [--memory-limit BYTES]
                                          [--workdir bench-out/pyramid_transfer]
                                          [--only mean|mode|transfer|...]
                                          [--baseline-src OTHER_CHECKOUT/src]
                                          [--peer-python OTHER_ENV/bin/python]

Wall and CPU time (the case process's, every thread's) are the median of ``--repeat``
runs, taken round robin (every case's run ``r`` before any case's run ``r + 1``), peak
RSS the largest. The clock starts after the case has imported its libraries
(``IMPORTS``); the import's time is its own column.

The peers are not test dependencies. igneous-pipeline 4.37 needs DracoPy<2, which the
pinned DracoPy 2.2.0 rules out, so igneous and tinybrain run from an environment of
their own: ``python3.11 -m venv peers && peers/bin/pip install igneous-pipeline
tinybrain``, then ``--peer-python peers/bin/python`` (the precomputed and ``.npy``
copies they read are made by this environment, before the clock). tinybrain reduces
in memory: its rows load the source from ``.npy`` and save each level as ``.npy``.
rechunker 0.5.2 installs but needs zarr-python 2's ``zarr.hierarchy``. A peer that is
not installed, or fails, is listed as not run, with why. The last column is each
chunkgraph row's wall over its target peer's (TensorStore's for pyramids, dask's for
the rechunk). The "ts backend" rows are chunkgraph reading and writing
through its TensorStore backend instead of zarr-python.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _memory import peak_rss_bytes

MiB = 2**20
FACTOR = (2, 2, 2)
LEVELS = 3
RECHUNK_TO = (256, 256, 32)


# --- chunkgraph ----------------------------------------------------------------------


def cg_downsample(
    work: Path, name: str, method: str, memory: int, backend: str = "zarr"
) -> list[Any]:
    from chunkgraph import downsample, volume

    out = str(work / f"cg-{method}-{backend}" / "s{level}.zarr")
    report = downsample(
        volume.open(str(work / name), backend=backend), factor=FACTOR, levels=LEVELS,
        method=method, dst=out, memory_limit=memory,
    )  # fmt: skip
    return [("zarr3", p) for p in report.paths]


def cg_transfer(work: Path, name: str, memory: int, backend: str = "zarr") -> list[Any]:
    from chunkgraph import transfer, volume

    dst = work / f"cg-rechunk-{backend}.zarr"
    src = volume.open(str(work / name), backend=backend)
    transfer(src, dst, chunks=RECHUNK_TO, memory_limit=memory)
    return [("zarr3", str(dst))]


# --- TensorStore ---------------------------------------------------------------------


def ts_downsample(work: Path, name: str, method: str, memory: int) -> list[Any]:
    import tensorstore as ts

    def spec(path: Path) -> dict[str, Any]:
        return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}

    context = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    below = ts.open(spec(work / name), context=context).result()
    paths = []
    for k in range(1, LEVELS + 1):
        view = ts.downsample(below, list(FACTOR), method)
        path = work / f"ts-{method}" / f"s{k}.zarr"
        chunks = [min(64, n) for n in view.shape]
        dst = ts.open(
            {
                **spec(path),
                "metadata": {
                    "shape": list(view.shape),
                    "data_type": view.dtype.name,
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
                    "codecs": [{"name": "bytes"}, {"name": "zstd"}],
                },
            },
            create=True,
            delete_existing=True,
            context=context,
        ).result()
        dst.write(view).result()
        below = ts.open(spec(path), context=context).result()
        paths.append(("zarr3", str(path)))
    return paths


# --- igneous -------------------------------------------------------------------------


def igneous_prepare(work: Path, name: str, layer: str) -> str:
    """A precomputed copy of the source (not timed): igneous reads only precomputed."""
    from cloudvolume import CloudVolume

    from chunkgraph import volume

    src = volume.open(str(work / name))
    path = f"file://{work}/ig-{layer}"
    info = CloudVolume.create_new_info(
        num_channels=1, layer_type=layer, data_type=src.dtype.name, encoding="raw",
        resolution=[1, 1, 1], voxel_offset=[0, 0, 0], chunk_size=[64, 64, 64],
        volume_size=list(src.shape),
    )  # fmt: skip
    vol = CloudVolume(path, info=info, progress=False)
    vol.commit_info()
    vol[:, :, :] = src.read(src.bounds)
    shutil.copy(work / f"ig-{layer}" / "info", work / f"ig-{layer}" / "info.source")
    return path


def igneous_reset(work: Path, layer: str) -> None:
    """The precomputed copy as prepared, before each run's clock: no level from the last."""
    root = work / f"ig-{layer}"
    shutil.copy(root / "info.source", root / "info")
    for level in root.iterdir():
        if level.is_dir() and level.name != "1_1_1":
            shutil.rmtree(level)


def ig_downsample(work: Path, name: str, method: str, memory: int) -> list[Any]:
    import igneous.task_creation as tc
    from cloudvolume import CloudVolume
    from taskqueue import LocalTaskQueue

    path = (work / f"ig-{'segmentation' if method == 'mode' else 'image'}").as_uri()
    done = 0

    def one_pass(chunk_size: list[int] | None) -> int:
        tasks = tc.create_downsampling_tasks(
            path, mip=done, num_mips=LEVELS - done, factor=FACTOR, compress=None,
            memory_target=memory, chunk_size=chunk_size,
        )  # fmt: skip
        queue = LocalTaskQueue(parallel=os.cpu_count() or 1, progress=False)
        queue.insert(tasks)
        queue.execute(progress=False)
        return len(CloudVolume(path, progress=False).info["scales"]) - 1

    # igneous makes as many levels per pass as its memory target allows: passes from the
    # highest level made, until all are there (what its users do). It makes no level
    # smaller than its chunk: then the next pass's chunks are clipped to the next level.
    while done < LEVELS:
        made = one_pass(None)
        if made <= done:
            shape = CloudVolume(path, mip=done, progress=False).shape[:3]
            made = one_pass(
                [min(64, max(1, int(n) // f)) for n, f in zip(shape, FACTOR, strict=True)]
            )
        if made <= done:
            raise RuntimeError(f"igneous made no level past {done}")
        done = made
    return [("precomputed", f"{path}@{k}") for k in range(1, LEVELS + 1)]


# --- tinybrain -----------------------------------------------------------------------


def tinybrain_prepare(work: Path, name: str) -> None:
    """The source as a ``.npy`` (not timed): tinybrain reduces arrays in memory only."""
    from chunkgraph import volume

    src = volume.open(str(work / name))
    np.save(work / f"{name}.npy", src.read(src.bounds))


def tb_downsample(work: Path, name: str, method: str, memory: int) -> list[Any]:
    """tinybrain's whole-array reductions: the source loaded from ``.npy``, every level
    made in memory in one call, each saved as ``.npy`` (no chunks, no codec). Its mean
    truncates (chunkgraph's and TensorStore's round half to even), so its "equal" is
    the fraction that agree with rounding."""
    import tinybrain

    # tinybrain reads its input in Fortran order (a C-ordered label array gives wrong
    # modes without a word): the conversion is part of its time.
    image = np.asfortranarray(np.load(work / f"{name}.npy"))
    if method == "mean":
        levels = tinybrain.downsample_with_averaging(image, FACTOR, num_mips=LEVELS)
    else:
        levels = tinybrain.downsample_segmentation(image, FACTOR, num_mips=LEVELS)
    out = work / f"tb-{method}"
    out.mkdir(exist_ok=True)
    paths = []
    for k, level in enumerate(levels, start=1):
        np.save(out / f"s{k}.npy", np.asarray(level))
        paths.append(("npy", str(out / f"s{k}.npy")))
    return paths


# --- rechunker and dask ------------------------------------------------------------


def rechunker_transfer(work: Path, name: str, memory: int) -> list[Any]:
    import zarr
    from rechunker import rechunk

    src = zarr.open_array(str(work / name), mode="r")
    plan = rechunk(
        src, RECHUNK_TO, max_mem=memory, target_store=str(work / "rechunker.zarr"),
        temp_store=str(work / "rechunker-tmp.zarr"),
    )  # fmt: skip
    plan.execute()
    return [("zarr3", str(work / "rechunker.zarr"))]


def dask_transfer(work: Path, name: str, memory: int) -> list[Any]:
    import dask
    import dask.array as da

    with dask.config.set(scheduler="threads"):
        src = da.from_zarr(str(work / name))
        src.rechunk(RECHUNK_TO).to_zarr(str(work / "dask.zarr"), overwrite=True)
    return [("zarr3", str(work / "dask.zarr"))]


CASES: dict[str, tuple[str, Any, tuple[Any, ...]]] = {
    # name: (what, function, args after work)
    "chunkgraph mean": ("mean", cg_downsample, ("u8.zarr", "mean")),
    "chunkgraph mean, ts backend": ("mean", cg_downsample, ("u8.zarr", "mean", "tensorstore")),
    "tensorstore mean": ("mean", ts_downsample, ("u8.zarr", "mean")),
    "igneous mean": ("mean", ig_downsample, ("u8.zarr", "mean")),
    "tinybrain mean": ("mean", tb_downsample, ("u8.zarr", "mean")),
    "chunkgraph mode": ("mode", cg_downsample, ("labels.zarr", "mode")),
    "chunkgraph mode, ts backend": ("mode", cg_downsample, ("labels.zarr", "mode", "tensorstore")),
    "tensorstore mode": ("mode", ts_downsample, ("labels.zarr", "mode")),
    "igneous mode": ("mode", ig_downsample, ("labels.zarr", "mode")),
    "tinybrain mode": ("mode", tb_downsample, ("labels.zarr", "mode")),
    "chunkgraph transfer": ("rechunk", cg_transfer, ("u8.zarr",)),
    "chunkgraph transfer, ts backend": ("rechunk", cg_transfer, ("u8.zarr", "tensorstore")),
    "rechunker": ("rechunk", rechunker_transfer, ("u8.zarr",)),
    "dask rechunk+to_zarr": ("rechunk", dask_transfer, ("u8.zarr",)),
}


# What each case imports, before its clock starts: the wall is the job's, not the
# interpreter's loading of a library (chunkgraph's import alone takes ~0.5 s here, more
# than a quick case's job); the import's own time is printed beside it. chunkgraph's
# names load on first use: they are asked for by name, and zarr, its default backend.
IMPORTS: dict[Any, tuple[str, ...]] = {
    cg_downsample: ("chunkgraph:downsample", "chunkgraph:volume", "zarr"),
    cg_transfer: ("chunkgraph:transfer", "chunkgraph:volume", "zarr"),
    ts_downsample: ("tensorstore",),
    ig_downsample: ("igneous.task_creation", "cloudvolume", "taskqueue"),
    tb_downsample: ("tinybrain",),
    rechunker_transfer: ("zarr", "rechunker"),
    dask_transfer: ("dask", "dask.array"),
}


def run_case(name: str, work: Path, memory: int) -> None:
    """In the case's own process: import what it needs, then time it; print wall, import
    time, peak RSS and the outputs as JSON."""
    _, fn, args = CASES[name]
    t_import = time.perf_counter()
    for name_ in IMPORTS[fn]:
        module, _, attribute = name_.partition(":")
        loaded = importlib.import_module(module)
        if attribute:
            getattr(loaded, attribute)
    imported = time.perf_counter() - t_import
    # chunkgraph cases take the backend after the memory budget.
    head, tail = (args[:-1], args[-1:]) if args[-1] == "tensorstore" else (args, ())
    if fn is ig_downsample:
        igneous_reset(work, "segmentation" if args[1] == "mode" else "image")
    if fn is cg_transfer:  # transfer refuses an existing dst: the last run's goes unclocked
        shutil.rmtree(work / f"cg-rechunk-{(*tail, 'zarr')[0]}.zarr", ignore_errors=True)
    if fn is cg_downsample:  # downsample refuses levels already there: the same
        shutil.rmtree(work / f"cg-{head[1]}-{(*tail, 'zarr')[0]}", ignore_errors=True)
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    outputs = fn(work, *head, memory, *tail)
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    peak = peak_rss_bytes()
    print(json.dumps({"wall": wall, "cpu": cpu, "import": imported, "peak": peak,
                      "outputs": outputs}))  # fmt: skip


def _cpu_seconds() -> float:
    """This process's CPU time, every thread's: less shaken than the wall by other
    people's work on a shared machine (a case's workers in other processes are not in it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- references and checks -----------------------------------------------------------


def _reduce(a: np.ndarray, method: str) -> np.ndarray:
    x, y, z = (n // 2 for n in a.shape)
    blocks = a.reshape(x, 2, y, 2, z, 2).transpose(0, 2, 4, 1, 3, 5).reshape(x, y, z, 8)
    if method == "mean":
        return np.rint(blocks.astype(np.float64).mean(axis=-1)).astype(a.dtype)
    rows = np.sort(blocks, axis=-1)
    counts = np.zeros(rows.shape, np.int32)
    for j in range(8):
        counts += rows == rows[..., j : j + 1]
    return np.take_along_axis(rows, counts.argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _read(kind: str, where: str) -> np.ndarray:
    if kind == "npy":
        return np.load(where)
    if kind == "zarr3":
        import zarr

        return np.asarray(zarr.open_array(where, mode="r")[...])
    from cloudvolume import CloudVolume

    path, mip = where.rsplit("@", 1)
    return np.asarray(CloudVolume(path, mip=int(mip), progress=False)[:, :, :])[..., 0]


_EXPECTED: dict[tuple[str, int, int], np.ndarray] = {}


def exactness(what: str, outputs: list[Any], source: np.ndarray) -> float:
    """Fraction of voxels equal to the reference, over every level (or the copy)."""
    if what == "rechunk":
        got = _read(*outputs[0])
        return float((got == source).mean()) if got.shape == source.shape else 0.0
    equal = total = 0
    expected = source
    for level, (kind, where) in enumerate(outputs):
        key = (what, id(source), level)  # each case's every run compares with the same
        if key not in _EXPECTED:
            _EXPECTED[key] = _reduce(expected, what)
        expected = _EXPECTED[key]
        got = _read(kind, where)
        if got.shape == expected.shape:
            equal += int((got == expected).sum())
        total += expected.size
    return equal / total


def make_sources(work: Path, quick: bool) -> dict[str, np.ndarray]:
    from chunkgraph import volume

    image_shape = (512, 512, 256) if quick else (1024, 1024, 512)
    label_shape = (256, 256, 128) if quick else (512, 512, 128)
    rng = np.random.default_rng(0)
    # Smooth intensities (a ramp plus noise: compressible, like an image) and labels in
    # blobs of 4^3 with noise, so that modes are not ties everywhere.
    image = (np.add.outer(np.arange(image_shape[0]) % 200, np.zeros(image_shape[1:], np.uint8))
             + rng.integers(0, 50, image_shape, dtype=np.uint8)).astype(np.uint8)  # fmt: skip
    coarse = rng.integers(1, 2**32 - 1, tuple(n // 4 for n in label_shape), dtype=np.uint32)
    labels = coarse.repeat(4, 0).repeat(4, 1).repeat(4, 2)
    noise = rng.random(label_shape) < 0.2
    labels[noise] = rng.integers(1, 2**32 - 1, int(noise.sum()), dtype=np.uint32)
    for name, data in (("u8.zarr", image), ("labels.zarr", labels)):
        v = volume.create(str(work / name), data.shape, (64, 64, 64), data.dtype, checksum=False)
        v.write(v.bounds, data)
    return {"u8.zarr": image, "labels.zarr": labels}


# Cases that run under ``--peer-python`` when it is given: igneous-pipeline's DracoPy
# pin conflicts with cloud-volume's in chunkgraph's environment, so its peers get one
# of their own.
PEERS = {"igneous": "igneous", "tinybrain": "tinybrain"}


def available(name: str, peer_python: str | None) -> str | None:
    """Why a case cannot run (None: it can); a peer case is asked of its interpreter."""
    first = name.split()[0]
    module = {**PEERS, "rechunker": "rechunker"}.get(first)
    if module is None:
        return None
    if first in PEERS and peer_python:
        done = subprocess.run([peer_python, "-c", f"import {module}"], capture_output=True)
        if done.returncode != 0:
            return f"not importable by {peer_python}"
        return None
    try:
        __import__(module)
    except ImportError as err:
        if module == "igneous":
            return (
                "not installed: igneous-pipeline 4.37 needs DracoPy<2, and constraints.txt "
                "pins DracoPy 2.2.0; give an environment of its own with --peer-python"
            )
        return f"not installed ({err.name})"
    return None


def python_for(name: str, peer_python: str | None) -> str:
    """The interpreter that runs case ``name``."""
    return peer_python if peer_python and name.split()[0] in PEERS else sys.executable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workdir", default="bench-out/pyramid_transfer")
    parser.add_argument("--memory-limit", type=int, default=512 * MiB)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case: the median wall")
    parser.add_argument("--only", help="run only the cases whose name contains this (e.g. 'mode')")
    parser.add_argument(
        "--baseline-src",
        help="a chunkgraph source tree (its src folder): each chunkgraph case runs again "
        "with it, as '(baseline)' rows",
    )
    parser.add_argument(
        "--peer-python",
        help="the python of another environment (with igneous-pipeline and tinybrain) that "
        "runs the igneous and tinybrain cases",
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.workdir).resolve()
    if args.case:
        run_case(args.case, work, args.memory_limit)
        return
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sources = make_sources(work, args.quick)
    rows: dict[str, tuple[Any, ...]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    jobs: list[tuple[str, str, str | None]] = []  # (shown, case, baseline source)
    for name, (what, _, case_args) in CASES.items():
        if args.only and args.only not in name:
            continue
        why = available(name, args.peer_python)
        if why is None and name.split()[0] in PEERS:
            try:
                if name.startswith("igneous"):
                    layer = "segmentation" if what == "mode" else "image"
                    igneous_prepare(work, case_args[0], layer)
                else:
                    tinybrain_prepare(work, case_args[0])
            except Exception as err:  # a peer that fails is reported, not fatal
                why = f"failed to prepare: {type(err).__name__}: {err}"
        if why is not None:
            rows[name] = (name, what, None, None, None, None, None, f"not run: {why}")
            continue
        jobs.append((name, name, None))
        if args.baseline_src and name.startswith("chunkgraph"):
            jobs.append((f"{name} (baseline)", name, args.baseline_src))
    # Round robin: run r of every case before run r + 1 of any, so that a busy spell on
    # a shared machine slows every case alike rather than one.
    for _ in range(args.repeat):
        for shown, name, baseline in jobs:
            if shown not in rows:  # not failed
                _run_into(rows, runs, shown, name, baseline, work, args, sources)
    for shown, name, _ in jobs:
        if shown not in rows:
            rows[shown] = summary(shown, CASES[name][0], runs[shown])
    print_table(sorted(rows.values(), key=_case_order), args)


def _run_into(
    rows: dict[str, tuple[Any, ...]],
    runs: dict[str, list[dict[str, Any]]],
    shown: str,
    name: str,
    baseline: str | None,
    work: Path,
    args: argparse.Namespace,
    sources: dict[str, np.ndarray],
) -> None:
    """One run of a case: its result into ``runs``, or its failure into ``rows``."""
    what, _, case_args = CASES[name]
    python = python_for(name, args.peer_python)
    result = run_once(name, work, args.memory_limit, baseline, python)
    if isinstance(result, str):
        rows[shown] = (shown, what, None, None, None, None, None, result)
        return
    # Checked after each run: the next case may write the same paths.
    result["exact"] = checked(what, result["outputs"], sources[case_args[0]])
    runs.setdefault(shown, []).append(result)


def _case_order(row: tuple[Any, ...]) -> tuple[int, bool]:
    """The table's rows in the cases' own order, each case's baseline after it."""
    shown: str = row[0]
    base = shown.removesuffix(" (baseline)")
    return list(CASES).index(base), shown != base


def run_once(
    name: str, work: Path, memory: int, baseline: str | None, python: str
) -> dict[str, Any] | str:
    """One run of a case in its own process, by ``python`` (chunkgraph from the
    ``baseline`` source tree when given: the same case before a change, in the same run),
    or why it failed."""
    cmd = [python, __file__, "--case", name, "--workdir", str(work),
           "--memory-limit", str(memory)]  # fmt: skip
    env = None if baseline is None else {**os.environ, "PYTHONPATH": baseline}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed: {last[:120]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def checked(what: str, outputs: list[Any], source: np.ndarray) -> float | str:
    """``exactness``, or why the output could not be read back."""
    try:
        return exactness(what, outputs, source)
    except Exception as err:  # an output that cannot be read back is reported
        return f"output unreadable: {type(err).__name__}"


def summary(shown: str, what: str, runs: list[dict[str, Any]]) -> tuple[Any, ...]:
    """A case's row: the median wall and import, the largest peak, the least exact run."""
    wall = float(np.median([r["wall"] for r in runs]))
    cpu = float(np.median([r["cpu"] for r in runs]))
    imported = float(np.median([r["import"] for r in runs]))
    peak = max(r["peak"] for r in runs)
    unreadable = [r["exact"] for r in runs if isinstance(r["exact"], str)]
    exact = None if unreadable else min(r["exact"] for r in runs)
    return (shown, what, wall, cpu, imported, peak, exact, unreadable[0] if unreadable else "")


TARGET_PEER = {
    "mean": "tensorstore mean",
    "mode": "tensorstore mode",
    "rechunk": "dask rechunk+to_zarr",
}


def print_table(rows: list[tuple[Any, ...]], args: argparse.Namespace) -> None:
    print(
        f"memory budget {args.memory_limit / MiB:.0f} MiB; {os.cpu_count()} cores; "
        f"median of {args.repeat} runs; load average at the end {os.getloadavg()[0]:.1f} "
        "(other work on the machine)"
    )
    print(
        "| case | job | wall s | cpu s | import s | peak RSS MiB | equal to reference "
        "| wall vs target peer |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    # Each job's ratio is to the peer its target names: TensorStore's downsample driver
    # for pyramids, dask's rechunk + to_zarr for the rechunk.
    best: dict[str, float] = {}
    for name, what, wall, *_ in rows:
        if wall is not None and name == TARGET_PEER.get(what):
            best[what] = wall
    for name, what, wall, cpu, imported, peak, exact, note in rows:
        if wall is None:
            print(f"| {name} | {what} | - | - | - | - | - | {note} |")
            continue
        ratio = ""
        if name.startswith("chunkgraph") and what in best:
            ratio = f"{wall / best[what]:.2f}x"
        equal = "-" if exact is None else f"{exact:.4f}"
        print(
            f"| {name} | {what} | {wall:.3f} | {cpu:.2f} | {imported:.2f} | {peak / MiB:.0f} "
            f"| {equal} | {ratio}{note} |"
        )


if __name__ == "__main__":
    main()
