"""Benchmark: a Gaussian flow s3 -> s3 at a cloud region's latency, beside its peers.

An S3 server (moto, in a process of its own) on loopback sits behind a proxy
(another process) that holds every request ``--latency-ms`` (default 20) before
passing it on, as a request to a bucket in the same cloud region costs. The
source is a float32 Zarr v3 volume in 64^3 chunks (``--size`` MiB, default 256).
Side by side in one run, each case in its own process (clean peak RSS):

1. raw concurrent chunk copy: every chunk object fetched and stored as bytes,
   ``--inflight`` requests at a time (default 64). The floor at that latency.
2. chunkgraph: ``apply(gaussian, src, dst, crop_pads=8)`` s3 -> s3, automatic sizes.
3. dask ``map_overlap`` (depth 8) from ``from_zarr`` to ``to_zarr`` on the same
   store (zarr-python over the same obstore client), dask's threaded scheduler.

The proxy counts requests by key: "GETs per input chunk" is how many times each
source chunk was fetched (1.0 = each once). Peak RSS is shown whole and above
the case's own baseline (its imports, measured in its process before it starts).

    python benchmarks/object_store.py [--size 256] [--latency-ms 20] [--quick]
                                      [--memory-limit-mib 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from _memory import peak_rss_bytes

CHUNK = 64
HALO = 8
SIGMA = 2.0
BUCKET = "bench"

CASES = {
    "copy": "(1) raw concurrent chunk copy",
    "chunkgraph": "(2) chunkgraph gaussian, automatic sizes",
    "dask": "(3) dask map_overlap gaussian",
}


def gaussian(src: np.ndarray) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    out: np.ndarray = gaussian_filter(src, sigma=SIGMA)
    return out


def shape_of(mib: int) -> tuple[int, int, int]:
    """A (z, 512, 512) float32 shape of ``mib`` MiB, z a multiple of the chunk."""
    z = max(CHUNK, mib * 2**20 // (512 * 512 * 4) // CHUNK * CHUNK)
    return (z, 512, 512)


# --- the cases (each runs in its own process) ------------------------------------------------


def case_copy(shape: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    import obstore

    from chunkgraph.volume._object_store import object_store

    src = object_store(f"s3://{BUCKET}/src.zarr")
    dst = object_store(f"s3://{BUCKET}/copy.zarr")
    keys = [m["path"] for m in obstore.list(src).collect()]
    gate = asyncio.Semaphore(args.inflight)

    async def one(key: str) -> None:
        async with gate:
            got = await obstore.get_async(src, key)
            await obstore.put_async(dst, key, await got.bytes_async())

    async def everything() -> None:
        await asyncio.gather(*(one(k) for k in keys))

    asyncio.run(everything())
    return {}


def case_chunkgraph(shape: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    from chunkgraph import volume

    src = volume.open(f"s3://{BUCKET}/src.zarr")
    dst = volume.create(f"s3://{BUCKET}/cg.zarr", shape, (CHUNK,) * 3, "float32", exist_ok=True)
    report = volume.apply(
        gaussian,
        src,
        dst,
        crop_pads=HALO,
        memory_limit=args.memory_limit_mib * 2**20,
        progress=False,
    )
    plan = report.plan
    return {
        "plan": " over ".join("x".join(map(str, c)) for c in plan.chunk_sizes) if plan else "",
        "amp": report.read_amplification,
    }


def case_dask(shape: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    import dask
    import dask.array as da
    import zarr
    from zarr.storage import ObjectStore

    from chunkgraph.parallel import usable_cores
    from chunkgraph.volume._object_store import object_store

    src = zarr.open_array(store=ObjectStore(object_store(f"s3://{BUCKET}/src.zarr")), mode="r")
    out = zarr.create_array(
        store=ObjectStore(object_store(f"s3://{BUCKET}/dask.zarr")),
        shape=shape,
        chunks=(CHUNK,) * 3,
        dtype="float32",
        overwrite=True,
    )
    x = da.from_zarr(src)  # type: ignore[no-untyped-call]
    y = x.map_overlap(gaussian, depth=HALO, boundary="none", dtype=np.float32)
    with dask.config.set(scheduler="threads", num_workers=usable_cores()):
        y.to_zarr(out)
    return {}


def run_case(name: str, shape: tuple[int, ...], args: argparse.Namespace) -> None:
    """Child process: run one case, print one JSON line."""
    import psutil
    import scipy.ndimage  # noqa: F401  (imported before the baseline, like every case)

    import chunkgraph  # noqa: F401

    if name == "dask":
        import dask.array  # noqa: F401  (its own imports are part of its baseline)
    baseline = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    extra = globals()[f"case_{name}"](shape, args)
    wall = time.perf_counter() - t0
    peak = peak_rss_bytes()
    print(json.dumps(dict(wall=wall, peak=peak, baseline=baseline, **extra)), flush=True)
    if name == "copy":
        # obstore's runtime, used straight from asyncio here, can abort the interpreter's
        # teardown (SIGABRT) after the case is done; the figures are out already.
        os._exit(0)


# --- the driver --------------------------------------------------------------------------------


@contextmanager
def servers(latency_ms: float, stats: Path) -> Iterator[tuple[str, str]]:
    """``(server endpoint, proxied endpoint)``: moto and the latency proxy, each a process."""
    up = subprocess.Popen(
        [sys.executable, "-m", "chunkgraph.testing", "s3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server = _announced(up)
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chunkgraph.testing",
                "proxy",
                "--upstream",
                server,
                "--latency-ms",
                str(latency_ms),
                "--stats",
                str(stats),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            yield server, _announced(proxy)
        finally:
            proxy.terminate()  # it writes its request counts as it exits
            proxy.wait(timeout=30)
    finally:
        up.terminate()
        up.wait(timeout=30)


def _announced(proc: subprocess.Popen[str]) -> str:
    """The endpoint a server process prints as its first line once it listens."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http://"):
        raise RuntimeError(f"the server did not start: {line!r}")
    return line


def make_source(shape: tuple[int, ...]) -> None:
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    src = volume.create(f"s3://{BUCKET}/src.zarr", shape, (CHUNK,) * 3, "float32")
    rng = np.random.default_rng(0)
    for z in range(0, shape[0], CHUNK):
        slab = rng.standard_normal((CHUNK, *shape[1:]), dtype=np.float32)
        src.write(Box((z, 0, 0), (z + CHUNK, *shape[1:])), slab)


def gets_per_chunk(stats: Path, prefix: str, n_chunks: int) -> tuple[float, int]:
    """(mean, max) GETs of the source's chunk objects during one case."""
    counts: Counter[str] = Counter(json.loads(stats.read_text())["GET"])
    per_chunk = [n for key, n in counts.items() if key.startswith(f"/{BUCKET}/{prefix}/c/")]
    return sum(per_chunk) / n_chunks, max(per_chunk, default=0)


def table(results: dict[str, dict[str, Any]]) -> str:
    base = results["copy"]["wall"]
    lines = [
        "| case | wall s | x copy | peak RSS MiB | above baseline MiB | GETs per input chunk |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in CASES.items():
        r = results[name]
        lines.append(
            f"| {label} | {r['wall']:.2f} | {r['wall'] / base:.2f} | {r['peak'] / 2**20:.0f} | "
            f"{(r['peak'] - r['baseline']) / 2**20:.0f} | {r['gets_mean']:.2f} "
            f"(max {r['gets_max']}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256, help="source MiB (default 256)")
    parser.add_argument("--quick", action="store_true", help="64 MiB")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--inflight", type=int, default=64, help="case (1)'s requests at a time")
    parser.add_argument(
        "--memory-limit-mib", type=int, default=2048, help="chunkgraph's memory_limit"
    )
    parser.add_argument("--workdir", default="bench-out/object_store")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = shape_of(64 if args.quick else args.size)
    if args.case:
        run_case(args.case, shape, args)
        return
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    n_chunks = int(np.prod([s // CHUNK for s in shape]))
    results: dict[str, dict[str, Any]] = {}
    for name in CASES:
        stats = workdir / f"{name}-requests.json"
        with servers(args.latency_ms, stats) as (server, proxied):
            env = {**os.environ, "AWS_ENDPOINT_URL": server}
            env.update(_test_credentials())
            # The source is written straight to the server: only the case pays the latency.
            _make_source_in(env, shape)
            env["AWS_ENDPOINT_URL"] = proxied
            cmd = [sys.executable, __file__, "--case", name, "--size", str(args.size)]
            cmd += [
                "--inflight",
                str(args.inflight),
                "--memory-limit-mib",
                str(args.memory_limit_mib),
            ]
            if args.quick:
                cmd.append("--quick")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                tail = out.stdout[-2000:] + out.stderr[-4000:]
                sys.exit(f"case {name} failed ({out.returncode}):\n{tail}")
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        mean, most = gets_per_chunk(stats, "src.zarr", n_chunks)
        results[name].update(gets_mean=mean, gets_max=most)
        print(f"  {CASES[name]}: {results[name]['wall']:.2f} s", flush=True)
    mib = np.prod(shape) * 4 / 2**20
    print(
        f"\n{mib:.0f} MiB float32 {shape} in {CHUNK}^3 chunks, s3 -> s3 through a proxy "
        f"adding {args.latency_ms:g} ms per request; {os.cpu_count()} cores\n"
    )
    print(table(results))
    cg, dk, cp = results["chunkgraph"], results["dask"], results["copy"]
    print(
        f"\nchunkgraph / dask: {cg['wall'] / dk['wall']:.2f}x (target <= 0.5x); "
        f"chunkgraph / copy: {cg['wall'] / cp['wall']:.2f}x (target <= 1.5x); "
        f"plan {cg.get('plan')}, read amplification {cg.get('amp', float('nan')):.2f}"
    )


def _test_credentials() -> dict[str, str]:
    from chunkgraph.testing import TEST_ENV

    return dict(TEST_ENV)


def _make_source_in(env: dict[str, str], shape: tuple[int, ...]) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import object_store as b; "
        "b._create_bucket(); b.make_source(tuple(map(int, sys.argv[2:])))"
    )
    here = str(Path(__file__).resolve().parent)
    subprocess.run([sys.executable, "-c", code, here, *map(str, shape)], env=env, check=True)


def _create_bucket() -> None:
    import boto3

    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=BUCKET)


if __name__ == "__main__":
    main()
