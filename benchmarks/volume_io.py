"""Volume I/O throughput against direct zarr-python and TensorStore calls, side by side.

One (256, 512, 512) float32 array (256 MiB), chunks 64^3, stored twice: with
the default compressor (zstd) and uncompressed. For each storage library the
same on-disk array is read and written through a ``Volume`` and through the
library's own API, alternating the two in every repeat and keeping each one's
best time (the machine may be shared; the best run is the least disturbed).

Two access patterns:

* ``whole``  one call for the whole array (the peak-throughput case);
* ``chunks`` one call per 64^3 storage chunk (256 calls; shows per-call overhead,
             which is what a chunked workflow pays).

MB/s columns are best-of-repeats and overhead % compares those best times,
``best time(Volume) / best time(direct) - 1`` (target: within 5%); the peers
alternate call by call, so load from other processes hits both alike. The
JSON output also keeps the median of the per-repeat paired ratios. A last
line gives Volume's fixed per-call cost in microseconds, measured on the memory
backend against the bare numpy slicing it wraps; the "fixed cost" column is
that cost times the number of calls, as a share of the direct time, i.e. the
overhead Volume's own code adds, free of the machine's timing noise.

Per-chunk rows (``--per-chunk`` runs only these): uint8 arrays of 8x64x64
(32 KiB) and 64x64x64 (256 KiB) chunks, zstd + crc32c (``volume.create``'s
defaults), values 0..63 (zstd keeps about 3/4 of the bytes); 64 whole chunks
read and then written one call each through ``Volume`` on the default backend,
through zarr-python's own ``Array`` (the path every call took before the
direct whole-chunk path) and through TensorStore's ``zarr3`` driver, on the
same array, the three interleaved box by box. Columns: best-of-repeats ms per
chunk, and Volume's time as a multiple of TensorStore's (target: <= 1.2x).
``--s3`` adds the same rows for 16 chunks on moto's S3 server on loopback,
directly and through a proxy adding 20 ms per request.

    .venv/bin/python benchmarks/volume_io.py            # full size, 5 repeats
    .venv/bin/python benchmarks/volume_io.py --quick    # (64, 256, 256), 3 repeats
    .venv/bin/python benchmarks/volume_io.py --per-chunk --repeats 15
    .venv/bin/python benchmarks/volume_io.py --per-chunk --s3   # + moto's S3, 0 and 20 ms

Results are printed and written to ``bench-out/volume_io.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts
import zarr
from zarr.storage import ObjectStore

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.testing import latency_proxy, s3_server
from chunkgraph.volume._object_store import StoreOptions, object_store
from chunkgraph.volume._ts_view import kvstore_spec

CHUNK = (64, 64, 64)
MB = 1e6


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_pair(
    direct: Callable[[Box], Any],
    through_volume: Callable[[Box], Any],
    boxes: list[Box],
    repeats: int,
) -> tuple[float, float, float]:
    """(best direct time, best Volume time, median of paired time ratios) over ``boxes``.

    The two peers run back to back on every box, alternating which goes first,
    so both see the same machine load even when it changes from one millisecond
    to the next; each repeat's ratio of the summed times is one paired sample.
    """
    for b in boxes:  # warm-up: imports, thread pools, page cache
        direct(b)
        through_volume(b)
    t_direct, t_volume, ratios = [], [], []
    for r in range(repeats):
        td = tv = 0.0
        for i, b in enumerate(boxes):
            if (i + r) % 2:
                tv += timed(lambda: through_volume(b))  # noqa: B023 (called at once)
                td += timed(lambda: direct(b))  # noqa: B023
            else:
                td += timed(lambda: direct(b))  # noqa: B023
                tv += timed(lambda: through_volume(b))  # noqa: B023
        t_direct.append(td)
        t_volume.append(tv)
        ratios.append(tv / td)
    return min(t_direct), min(t_volume), statistics.median(ratios)


def per_call_overhead_us(calls: int = 20000) -> tuple[float, float]:
    """Microseconds per call of Volume.read / Volume.write on a 1-voxel box (memory backend)
    beyond the numpy slicing they wrap: the fixed cost a chunked workflow pays per call."""
    v = volume.create("volume-io-overhead", (64, 64, 64), CHUNK, "float32", backend="memory")
    raw = np.zeros((64, 64, 64), "float32")
    box, one = Box((1, 2, 3), (2, 3, 4)), np.ones((1, 1, 1), "float32")
    # aligned_writes would refuse a 1-voxel write: writes go to a twin volume without the check.
    u = volume.create(
        "volume-io-overhead-u",
        (64, 64, 64),
        CHUNK,
        "float32",
        backend="memory",
        aligned_writes=False,
    )
    try:
        read = min(timed(lambda: [v.read(box) for _ in range(calls)]) for _ in range(3))
        write = min(timed(lambda: [u.write(box, one) for _ in range(calls)]) for _ in range(3))
        base_r = min(
            timed(lambda: [raw[1:2, 2:3, 3:4].copy() for _ in range(calls)]) for _ in range(3)
        )
        base_w = min(
            timed(lambda: [raw.__setitem__((slice(1, 2),) * 3, one) for _ in range(calls)])
            for _ in range(3)
        )
    finally:
        volume.remove(v.path)
        volume.remove(u.path)
    return (read - base_r) / calls * 1e6, (write - base_w) / calls * 1e6


def peers(path: str) -> dict[str, tuple[Any, volume.Volume]]:
    """For each library: (direct handle, Volume) on the same on-disk array."""
    z = zarr.open_array(path, mode="r+")
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    return {
        "zarr": (z, volume.open(path, "r+", backend="zarr")),
        "tensorstore": (t, volume.open(path, "r+", backend="tensorstore")),
    }


Op = tuple[Callable[[Box], Any], Callable[[Box], Any], list[Box]]


def ops_for(
    lib: str, handle: Any, vol: volume.Volume, data: np.ndarray, boxes: list[Box]
) -> dict[tuple[str, str], Op]:
    """(pattern, op) -> (direct call, Volume call, boxes): the same I/O for each box."""
    if lib == "zarr":
        direct_read: Callable[[Box], Any] = lambda b: handle[b.slices()]  # noqa: E731
        direct_write: Callable[[Box], Any] = lambda b: handle.__setitem__(  # noqa: E731
            b.slices(), data[b.slices()]
        )
    else:
        direct_read = lambda b: handle[b.slices()].read().result()  # noqa: E731
        direct_write = lambda b: handle[b.slices()].write(data[b.slices()]).result()  # noqa: E731
    volume_write = lambda b: vol.write(b, data[b.slices()])  # noqa: E731
    whole = [vol.bounds]
    return {
        ("whole", "read"): (direct_read, vol.read, whole),
        ("whole", "write"): (direct_write, volume_write, whole),
        ("chunks", "read"): (direct_read, vol.read, boxes),
        ("chunks", "write"): (direct_write, volume_write, boxes),
    }


def run(
    shape: tuple[int, int, int], repeats: int, workdir: Path, per_call_us: dict[str, float]
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    # Bytes of 0..255 stored as float32: compressible by zstd, like much real imaging data.
    data = rng.integers(0, 256, size=shape, dtype=np.uint8).astype(np.float32)
    nbytes = data.nbytes
    boxes = Box.from_shape(shape).split(CHUNK, mode="shrink")
    rows = []
    for compressor in ("default", None):
        path = str(workdir / f"bench-{compressor}")
        v = volume.create(path, shape, CHUNK, "float32", compressor=compressor)
        v.write(v.bounds, data)
        for lib, (handle, vol) in peers(path).items():
            for (pattern, op), (direct, through, todo) in ops_for(
                lib, handle, vol, data, boxes
            ).items():
                t_direct, t_volume, ratio = measure_pair(direct, through, todo, repeats)
                rows.append(
                    {
                        "pattern": pattern,
                        "op": op,
                        "compressor": compressor or "none",
                        "library": lib,
                        "direct_MBps": nbytes / t_direct / MB,
                        "volume_MBps": nbytes / t_volume / MB,
                        "overhead_pct": (t_volume / t_direct - 1) * 100,
                        "median_paired_overhead_pct": (ratio - 1) * 100,
                        # What Volume's own Python costs at this call count, as a share of
                        # the direct time: the overhead without the machine's noise.
                        "fixed_cost_pct": len(todo) * per_call_us[op] * 1e-6 / t_direct * 100,
                    }
                )
                print(format_row(rows[-1]), file=sys.stderr, flush=True)
        check = volume.open(path).read(Box.from_shape(shape))
        if not np.array_equal(check, data):
            raise SystemExit(f"data read back from {path} differs from what was written")
        volume.remove(path)
    return rows


# -- per-chunk rows -----------------------------------------------------------------------------

CHUNK_CASES = ((8, 64, 64), (64, 64, 64))
CHUNKS_PER_ROW = 64
S3_CHUNKS_PER_ROW = 16


def measure_peers(
    calls: dict[str, Callable[[Box], Any]], boxes: list[Box], repeats: int
) -> dict[str, float]:
    """Best total time over ``boxes`` of each peer; the peers take turns going first."""
    names = list(calls)
    for b in boxes[:4]:  # warm-up: imports, thread pools, page cache
        for name in names:
            calls[name](b)
    best = dict.fromkeys(names, float("inf"))
    for r in range(repeats):
        total = dict.fromkeys(names, 0.0)
        for i, b in enumerate(boxes):
            k = (i + r) % len(names)
            for name in names[k:] + names[:k]:
                total[name] += timed(lambda: calls[name](b))  # noqa: B023 (called at once)
        best = {name: min(best[name], total[name]) for name in names}
    return best


def per_chunk(repeats: int, workdir: Path, s3: bool) -> list[dict[str, Any]]:
    """Whole-chunk reads and writes one call at a time: Volume, zarr-python, TensorStore."""
    rows = []
    for chunk in CHUNK_CASES:
        path = str(workdir / f"per-chunk-{chunk[0]}")
        rows += chunk_rows("disk", path, chunk, repeats, CHUNKS_PER_ROW)
    if not s3:
        return rows
    with s3_server(buckets=("bench",)) as server:
        for latency in (0.0, 0.02):
            where = f"s3 +{latency * 1e3:.0f} ms" if latency else "s3"
            with latency_proxy(server.endpoint, latency=latency) if latency else nullcontext():
                for chunk in CHUNK_CASES:
                    url = f"s3://bench/{where.replace(' ', '')}-{chunk[0]}.zarr"
                    rows += chunk_rows(where, url, chunk, repeats, S3_CHUNKS_PER_ROW)
    return rows


def chunk_rows(
    where: str, path: str, chunk: tuple[int, ...], repeats: int, n_chunks: int
) -> list[dict[str, Any]]:
    """The read and the write row of one new uint8 array of ``chunk``s at ``path``."""
    shape = tuple(c * 4 for c in chunk)
    data = np.random.default_rng(0).integers(0, 64, size=shape, dtype=np.uint8)
    v = volume.create(path, shape, chunk, "uint8")
    v.write(v.bounds, data)
    if volume.is_object_url(path):
        z = zarr.open_array(ObjectStore(object_store(path, StoreOptions())), mode="r+")
        kvstore = kvstore_spec(path, StoreOptions())
    else:
        z = zarr.open_array(path, mode="r+")
        kvstore = {"driver": "file", "path": path}
    t = ts.open({"driver": "zarr3", "kvstore": kvstore}).result()
    boxes = v.bounds.split(v.chunks, mode="shrink")[:n_chunks]
    reads = {
        "volume": v.read,
        "zarr": lambda b: z[b.slices()],
        "tensorstore": lambda b: t[b.slices()].read().result(),
    }
    writes = {
        "volume": lambda b: v.write(b, data[b.slices()]),
        "zarr": lambda b: z.__setitem__(b.slices(), data[b.slices()]),
        "tensorstore": lambda b: t[b.slices()].write(data[b.slices()]).result(),
    }
    rows = []
    for op, calls in (("read", reads), ("write", writes)):
        best = measure_peers(calls, boxes, repeats)
        ms = {name: best[name] / len(boxes) * 1e3 for name in best}
        rows.append(
            {
                "where": where,
                "chunk": "x".join(map(str, chunk)),
                "KiB": int(np.prod(chunk)) // 1024,
                "op": op,
                **{f"{name}_ms": value for name, value in ms.items()},
                "volume_vs_tensorstore": ms["volume"] / ms["tensorstore"],
                "zarr_vs_tensorstore": ms["zarr"] / ms["tensorstore"],
            }
        )
        print(format_chunk_row(rows[-1]), file=sys.stderr, flush=True)
    if not np.array_equal(volume.open(path).read(v.bounds), data):
        raise SystemExit(f"data read back from {path} differs from what was written")
    volume.remove(path)
    return rows


CHUNK_HEADER = (
    "| store | chunk (uint8) | op | Volume ms | zarr-python ms | TensorStore ms | Volume / TS "
    "| zarr-python / TS |\n|---|---|---|---:|---:|---:|---:|---:|"
)


def format_chunk_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['where']} | {r['chunk']} ({r['KiB']} KiB) | {r['op']} | {r['volume_ms']:.3f} | "
        f"{r['zarr_ms']:.3f} | {r['tensorstore_ms']:.3f} | {r['volume_vs_tensorstore']:.2f}x "
        f"| {r['zarr_vs_tensorstore']:.2f}x |"
    )


HEADER = (
    "| pattern | op | compressor | library | direct MB/s | Volume MB/s | overhead | fixed cost |"
)


def format_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['pattern']} | {r['op']} | {r['compressor']} | {r['library']} | "
        f"{r['direct_MBps']:.0f} | {r['volume_MBps']:.0f} | {r['overhead_pct']:+.1f}% "
        f"| {r['fixed_cost_pct']:.2f}% |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small array, 3 repeats")
    parser.add_argument("--per-chunk", action="store_true", help="only the per-chunk rows")
    parser.add_argument(
        "--s3", action="store_true", help="per-chunk rows on moto's S3 too (0 and 20 ms)"
    )
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args(argv)
    shape = (64, 256, 256) if args.quick else (256, 512, 512)
    repeats = args.repeats or (3 if args.quick else 5)
    workdir = Path(tempfile.mkdtemp(prefix="chunkgraph-volume-io-"))
    rows: list[dict[str, Any]] = []
    read_us = write_us = 0.0
    try:
        t0 = time.perf_counter()
        chunk_rows = per_chunk(repeats, workdir, args.s3)
        if not args.per_chunk:
            read_us, write_us = per_call_overhead_us()
            rows = run(shape, repeats, workdir, {"read": read_us, "write": write_us})
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    chunk_table = "\n".join([CHUNK_HEADER, *(format_chunk_row(r) for r in chunk_rows)])
    report = [
        f"per-chunk: {CHUNKS_PER_ROW} whole chunks one call each, best of {repeats}; "
        f"{elapsed:.0f} s",
        "",
        chunk_table,
    ]
    if rows:
        table = "\n".join(
            [HEADER, "|---|---|---|---|---:|---:|---:|---:|", *(format_row(r) for r in rows)]
        )
        worst = max(r["overhead_pct"] for r in rows)
        summary = (
            f"array {shape} float32, chunks {CHUNK}, best of {repeats}; "
            f"worst Volume overhead {worst:+.1f}%\n"
            f"Volume per-call cost beyond numpy slicing: read {read_us:.1f} us, "
            f"write {write_us:.1f} us"
        )
        report += ["", summary, "", table]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "volume_io.md").write_text("\n".join(report) + "\n")
    record: dict[str, Any] = {"shape": shape, "chunks": CHUNK, "repeats": repeats}
    record.update(rows=rows, per_chunk=chunk_rows)
    record["per_call_us"] = {"read": read_us, "write": write_us}
    (args.out / "volume_io.json").write_text(json.dumps(record, indent=1))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
