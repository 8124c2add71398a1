"""Benchmark: reads and writes of a sharded Zarr v3 array, Volume beside TensorStore's zarr3.

One (256, 256, 256) uint8 array (zstd + crc32c, chunkgraph's default codecs) in
shards of 128^3 (8 of them), each holding 64 inner chunks of 32^3 (32 KiB), on a
disk and on moto's S3 server behind a proxy (0 and 20 ms per request). For each
store, the same reads through ``Volume.read`` and through TensorStore's ``zarr3``
driver on the same array, one call per shard:

* ``shard``  every shard whole;
* ``inner``  one inner chunk of each shard;
* ``2^3``    a 2 x 2 x 2 block of inner chunks of each shard (one corner: contiguous
             in the index's Morton order for part of it only);

and the write of every shard whole; zarr-python's own ``Array`` on the same array
beside them (the path a Volume took before). On S3 the proxy counts the GET
requests each case made, per shard.

    python benchmarks/sharded_io.py [--repeats 3]

Printed as a table, and written to ``bench-out/sharded_io.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts
import zarr
from zarr.storage import ObjectStore

from _timing import best
from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.testing import latency_proxy, s3_server
from chunkgraph.volume._object_store import StoreOptions, object_store
from chunkgraph.volume._ts_view import kvstore_spec

SHAPE = (256, 256, 256)
SHARD = (128, 128, 128)
INNER = (32, 32, 32)


def boxes(kind: str) -> list[Box]:
    shards = Box((0, 0, 0), SHAPE).split(SHARD)
    if kind == "shard":
        return shards
    n = 1 if kind == "inner" else 2
    return [
        Box(b.start, tuple(s + n * c for s, c in zip(b.start, INNER, strict=True))) for b in shards
    ]


def rows_for(where: str, path: str, repeats: int, proxy: Any) -> list[str]:
    data = np.random.default_rng(0).integers(0, 32, size=SHAPE, dtype=np.uint8)
    v = volume.create(path, SHAPE, INNER, "uint8", shards=SHARD)
    v.write(v.bounds, data)
    kv = (
        kvstore_spec(path, StoreOptions())
        if volume.is_object_url(path)
        else {"driver": "file", "path": path}
    )
    t = ts.open({"driver": "zarr3", "kvstore": kv}).result()
    z = zarr.open_array(
        ObjectStore(object_store(path)) if volume.is_object_url(path) else path, mode="r+"
    )
    out = []
    for kind in ("shard", "inner", "2^3"):
        bs = boxes(kind)
        peers: dict[str, Callable[[Box], Any]] = {
            "volume": v.read,
            "zarr": lambda b: z[b.slices()],
            "tensorstore": lambda b: t[b.slices()].read().result(),
        }
        ms, gets = {}, {}
        for name, read in peers.items():
            for b in bs:  # each right once, and the values checked
                assert np.array_equal(read(b), data[b.slices()])
            before = proxy.by_method.get("GET", 0) if proxy else 0
            ms[name] = best(lambda read=read, bs=bs: [read(b) for b in bs], repeats) / len(bs) * 1e3
            after = proxy.by_method.get("GET", 0) if proxy else 0
            gets[name] = (after - before) / repeats / len(bs) if proxy else None
        out.append(_row(where, f"read {kind}", ms, gets))
    ms = {
        "volume": best(lambda: [v.write(b, data[b.slices()]) for b in boxes("shard")], repeats),
        "zarr": best(
            lambda: [z.__setitem__(b.slices(), data[b.slices()]) for b in boxes("shard")], repeats
        ),
        "tensorstore": best(
            lambda: [t[b.slices()].write(data[b.slices()]).result() for b in boxes("shard")],
            repeats,
        ),
    }
    ms = {k: s / len(boxes("shard")) * 1e3 for k, s in ms.items()}
    out.append(_row(where, "write shard", ms, dict.fromkeys(ms)))
    return out


def _row(where: str, op: str, ms: dict[str, float], gets: dict[str, Any]) -> str:
    def g(x: Any) -> str:
        return "" if x is None else f"{x:.2f}"

    ts_ms = ms["tensorstore"]
    return (
        f"| {where} | {op} | {ms['volume']:.2f} ({ms['volume'] / ts_ms:.2f}x) "
        f"| {ms['zarr']:.2f} ({ms['zarr'] / ts_ms:.2f}x) | {ts_ms:.2f} "
        f"| {g(gets['volume'])} | {g(gets['zarr'])} | {g(gets['tensorstore'])} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += rows_for("disk", f"{tmp}/a.zarr", args.repeats, None)
    with s3_server(buckets=("bench",)) as server:
        for latency in (0.0, 0.02):
            where = f"s3 +{latency * 1e3:.0f} ms"
            with latency_proxy(server.endpoint, latency=latency) as proxy:
                url = f"s3://bench/{latency * 1e3:.0f}ms.zarr"
                rows += rows_for(where, url, args.repeats, proxy)
    text = "\n".join(
        [
            f"{SHAPE} uint8, shards {SHARD}, inner chunks {INNER}, zstd + crc32c; "
            f"ms per shard, best of {args.repeats}",
            "",
            "| store | op | Volume ms (/ TS) | zarr-python ms (/ TS) | TensorStore ms "
            "| Volume GETs | zarr-python GETs | TS GETs |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    print(text)
    out = Path("bench-out")
    out.mkdir(exist_ok=True)
    (out / "sharded_io.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
