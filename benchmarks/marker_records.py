"""Benchmark: a flow's done markers in a bucket, one object per task or one record per batch.

``--keys`` top-level tasks (default 10^5) are marked done in an S3 bucket (moto's
server, in this process, on loopback) two ways, each under a flow of its own:

* ``plain``    one empty object per key (``MarkerStore.mark_done``): put straight into
               moto's store (``--keys`` PUTs through HTTP take minutes here); the PUT
               cost is measured on ``--sample`` markers written through the client, 16
               at a time, and scaled
* ``records``  one gzip record of ``--per-record`` keys per batch
               (``MarkerStore.mark_done_many``), written through the client

then read back as a resume reads them (``MarkerStore.done_keys``) and as
``chunkgraph status`` reads them (``read_flows``: counts, modification times, sizes),
with no added latency and behind a proxy that holds each request ``--latency-ms``
(default 20, a bucket in the same cloud region). The proxy counts the requests; "rounds"
is requests one after another in ``done_keys`` (a listing's pages follow each other; the
two listings, then the records' GETs, go 16 at a time, ``_store.at_once``): what a real
bucket's latency multiplies. ``status`` lists a flow's objects once more (their latest
modification, ``_status._modified``). moto lists
a page in time growing with the objects under the prefix, so its plain listing times are
far above a real bucket's (rounds x latency there).

    python benchmarks/marker_records.py [--keys 100000] [--per-record 1000]
                                        [--latency-ms 20] [--sample 2000]
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._layout import MARKERS_NAME
from chunkgraph.flow.state._markers import TOP, MarkerStore
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import read_flows
from chunkgraph.testing import latency_proxy, s3_server

BUCKET = "marker-records"
# _store._AT_ONCE: requests the state code sends side by side.
AT_ONCE = 16


def _seed(prefix: str, keys: list[str]) -> None:
    """Plain markers straight into moto's store (what ``len(keys)`` PUTs leave)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key in keys:
        backend.put_object(BUCKET, f"{prefix}/{MARKERS_NAME}/{TOP}/{key}", b"")


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--per-record", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--sample", type=int, default=2000)
    args = parser.parse_args()
    n, per = args.keys, args.per_record
    keys = [f"{i // 10_000}_{i // 100 % 100}_{i % 100}" for i in range(n)]
    records = math.ceil(n / per)
    with s3_server((BUCKET,)):
        plain = FlowDir(StateRoot.of(f"s3://{BUCKET}/plain"), "a1a1")
        batched = FlowDir(StateRoot.of(f"s3://{BUCKET}/records"), "b2b2")
        for flow in (plain, batched):
            flow.write_info(top_tasks=n, reductions=0, deferred=False)
        sample = MarkerStore(StateRoot.of(f"s3://{BUCKET}/sample/f00d"))
        with ThreadPoolExecutor(AT_ONCE) as pool:
            put_s, _ = _timed(
                lambda: list(pool.map(lambda k: sample.mark_done(TOP, k), keys[: args.sample]))
            )
        _seed(f"plain/{plain.flow_id}", keys)
        markers = batched.markers()
        write_s, _ = _timed(
            lambda: [
                markers.mark_done_many(TOP, keys[i : i + per], f"batch-{i // per}")
                for i in range(0, n, per)
            ]
        )
        print(f"{n:,} keys; records of {per:,} keys ({records:,} records)\n")
        print(
            f"write: plain {n:,} PUTs, {put_s / args.sample * n:.1f} s at {AT_ONCE} at a time "
            f"(from {args.sample:,}); records {records:,} PUTs, {write_s:.2f} s one after another\n"
        )
        # The two listings (plain markers, records) go side by side; then the records' GETs.
        rounds = {"plain": math.ceil(n / 1000), "records": 1 + math.ceil(records / AT_ONCE)}
        print(
            f"{'latency':>8} {'layout':>8} {'objects':>9} {'requests':>9} {'rounds':>7} "
            f"{'done_keys s':>12} {'status s':>9}"
        )
        for latency in (0.0, args.latency_ms / 1000):
            for name, flow in (("plain", plain), ("records", batched)):
                with latency_proxy(_endpoint(), latency=latency) as proxy:
                    store = flow.markers()
                    read_s, done = _timed(functools.partial(store.done_keys, TOP))
                    assert done == set(keys), name
                    requests = proxy.requests
                    status_s, states = _timed(functools.partial(read_flows, flow.root, sizes=False))
                    assert [s.top_done for s in states] == [n], name
                objects = n if name == "plain" else records
                print(
                    f"{latency * 1000:>6.0f}ms {name:>8} {objects:>9,} {requests:>9,} "
                    f"{rounds[name]:>7,} {read_s:>12.2f} {status_s:>9.2f}"
                )


def _endpoint() -> str:
    import os

    return os.environ["AWS_ENDPOINT_URL"]


if __name__ == "__main__":
    main()
