"""Volumes on an object store: throughput through obstore, against the same array on disk.

One (256, 256, 256) float32 array (64 MiB) in 64^3 chunks (1 MiB each, 64 of
them), uncompressed, written whole and read whole, through:

* ``disk``            a ``Volume`` on local disk (zarr's LocalStore), the reference;
* ``s3 obstore``      a ``Volume`` on ``s3://`` (zarr's ObjectStore over obstore) against
                      moto's S3 server on loopback, directly and through a proxy adding
                      20 ms per request (a distant region), with zarr's default
                      ``async.concurrency`` (10 requests in flight) and with 64;
* ``s3 zarr direct``  zarr-python's own ``ObjectStore`` with no chunkgraph in between.

zarr over s3fs (``FsspecStore``) is the natural peer; it is left out because
no s3fs release installs against this project's pinned botocore (s3fs's
aiobotocore pins botocore to a narrower range). The server is moto, a Python
process on this machine: its own speed caps every s3 row, so the figures
compare clients under the same server, not against a real bucket.

    .venv/bin/python benchmarks/object_store_io.py           # 3 repeats, best kept
    .venv/bin/python benchmarks/object_store_io.py --quick   # (128, 128, 128), 1 repeat

Printed as a table, and written to ``bench-out/object_store_io.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from _timing import best
from chunkgraph import volume
from chunkgraph.testing import latency_proxy, s3_server
from chunkgraph.volume._object_store import object_store

CHUNK = (64, 64, 64)
MIB = 2**20


@contextmanager
def concurrency(n: int | None) -> Iterator[None]:
    with zarr.config.set({"async.concurrency": n}) if n else nullcontext():
        yield


def run_volume(path: str, data: np.ndarray, repeats: int) -> dict[str, Any]:
    vol = volume.create(path, data.shape, CHUNK, data.dtype, compressor=None, checksum=False)
    write = best(lambda: vol.write(vol.bounds, data), repeats)
    vol.reset_stats()
    read = best(lambda: vol.read(vol.bounds), repeats)
    stats = vol.stats
    assert np.array_equal(vol.read(vol.bounds), data)
    per_chunk = stats.requests_get / stats.chunks_read if stats.chunks_read else 0.0
    volume.remove(path)
    return {
        "write_s": write,
        "read_s": read,
        "gets_per_chunk": per_chunk,
        "peak_in_flight": stats.peak_requests_in_flight,
        "peak_mib_in_flight": stats.peak_bytes_in_flight / MIB,
    }


def run_zarr_direct(url: str, data: np.ndarray, repeats: int) -> dict[str, Any]:
    store = zarr.storage.ObjectStore(object_store(url))
    array = zarr.create_array(
        store=store, shape=data.shape, chunks=CHUNK, dtype=data.dtype, compressors=None
    )

    def write() -> None:
        array[...] = data

    write_s = best(write, repeats)
    read_s = best(lambda: array[...], repeats)
    return {
        "write_s": write_s,
        "read_s": read_s,
        "gets_per_chunk": None,
        "peak_in_flight": None,
        "peak_mib_in_flight": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    shape = (128, 128, 128) if args.quick else (256, 256, 256)
    repeats = 1 if args.quick else 3
    data = np.random.default_rng(0).random(shape, dtype="float32")
    mib = data.nbytes / MIB
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("disk (zarr LocalStore)", run_volume(f"{tmp}/a.zarr", data, repeats)))
    with s3_server(buckets=("bench",)) as s3:
        for n in (None, 64):
            tag = f"concurrency {n or 10}"
            with concurrency(n):
                rows.append((f"s3 obstore, 0 ms, {tag}", run_volume("s3://bench/a", data, repeats)))
                with latency_proxy(s3.endpoint, latency=0.02):
                    rows.append(
                        (f"s3 obstore, +20 ms, {tag}", run_volume("s3://bench/b", data, repeats))
                    )
        rows.append(
            ("s3 zarr direct, 0 ms, concurrency 10", run_zarr_direct("s3://bench/c", data, repeats))
        )
    lines = [
        f"{mib:.0f} MiB float32 in 64^3 chunks, uncompressed; best of {repeats}",
        "",
        "| store | write MiB/s | read MiB/s | GETs per chunk read | peak requests in flight "
        "| peak MiB in flight |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        per = "" if r["gets_per_chunk"] is None else f"{r['gets_per_chunk']:.2f}"
        peak = "" if r["peak_in_flight"] is None else str(r["peak_in_flight"])
        held = "" if r["peak_mib_in_flight"] is None else f"{r['peak_mib_in_flight']:.0f}"
        lines.append(
            f"| {name} | {mib / r['write_s']:.0f} | {mib / r['read_s']:.0f} | {per} | {peak} "
            f"| {held} |"
        )
    text = "\n".join(lines)
    print(text)
    out = Path("bench-out")
    out.mkdir(exist_ok=True)
    (out / "object_store_io.md").write_text(text + "\n")
    (out / "object_store_io.json").write_text(json.dumps(dict(rows), indent=1))


if __name__ == "__main__":
    main()
