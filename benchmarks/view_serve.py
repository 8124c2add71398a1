"""Serving chunks to Neuroglancer: ``chunkgraph view`` beside a static file server.

A viewer of a volume on this disk has two ways to get its chunks: ``chunkgraph view``
(each chunk read through ``Volume`` and its chunk cache, sent raw by Neuroglancer's own
server), or a static file server in front of the
files (``python -m http.server``; the browser then decodes Zarr itself). This script
writes one (256, 256, 256) uint8 Zarr v3 volume in 64^3 chunks (zstd, as chunkgraph
writes by default), starts both servers on loopback, and fetches every chunk (64 of
them) over HTTP from each, as a browser does: with 1 and with 4 requests in flight
(more than 5 overflow http.server's listen backlog of 5: a dropped connection waits 1 s).
``view, first`` is the first pass after opening (every chunk read from the files),
``view, cached`` the passes after it (chunks from the chunk cache). Each row keeps the
best of the repeats; each chunk from ``view`` is checked against the volume.

    .venv/bin/python benchmarks/view_serve.py            # 5 repeats
    .venv/bin/python benchmarks/view_serve.py --repeat 2

Results are printed and written to ``bench-out/view_serve.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from chunkgraph import volume
from chunkgraph.viewer import view

SHAPE = (256, 256, 256)
CHUNK = (64, 64, 64)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as reply:
        body: bytes = reply.read()
    return body


def _fetch_all(urls: list[str], in_flight: int) -> tuple[float, int]:
    """Seconds to fetch every URL with ``in_flight`` requests at a time; bytes fetched."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        bodies = list(pool.map(_get, urls))
    return time.perf_counter() - t0, sum(len(b) for b in bodies)


def _grid() -> list[tuple[int, int, int]]:
    n = [s // c for s, c in zip(SHAPE, CHUNK, strict=True)]
    return [(i, j, k) for i in range(n[0]) for j in range(n[1]) for k in range(n[2])]


def _view_urls(base: str, key: str) -> list[str]:
    urls = []
    for index in _grid():
        start = [i * c for i, c in zip(index, CHUNK, strict=True)]
        stop = [s + c for s, c in zip(start, CHUNK, strict=True)]
        where = f"{','.join(map(str, start))}/{','.join(map(str, stop))}"
        urls.append(f"{base}/neuroglancer/raw/{key}/1,1,1/{where}")
    return urls


def _check(url: str, data: np.ndarray) -> None:
    start = [int(s) for s in url.rsplit("/", 2)[1].split(",")]
    box = tuple(slice(s, s + c) for s, c in zip(start, CHUNK, strict=True))
    if _get(url) != data[box].tobytes("F"):  # raw: the first axis fastest
        raise SystemExit(f"{url}: served chunk differs from the volume")


def _static_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    line = server.stdout.readline().decode()  # "Serving HTTP on 127.0.0.1 port N ..."
    port = int(line.split(" port ")[1].split()[0])
    return server, f"http://127.0.0.1:{port}"


def _row(name: str, seconds: float, nbytes: int, chunks: int) -> dict[str, object]:
    return {
        "server": name,
        "ms_per_chunk": 1e3 * seconds / chunks,
        "chunks_per_s": chunks / seconds,
        "MB_per_s_served": nbytes / seconds / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    # smooth-ish 8-bit data: compresses as microscopy does, unlike uniform noise
    data = np.repeat(rng.integers(0, 256, (256, 256, 32), dtype=np.uint8), 8, axis=2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="view-serve-") as tmp:
        path = Path(tmp) / "raw.zarr"
        v = volume.create(path, SHAPE, CHUNK, "uint8")
        v.write(v.bounds, data)
        files = [f"c/{i}/{j}/{k}" for i, j, k in _grid()]
        static, static_base = _static_server(Path(tmp))
        try:
            static_urls = [f"{static_base}/raw.zarr/{f}" for f in files]
            for in_flight in (1, 4):
                best = (float("inf"), 0)
                for _ in range(args.repeat):
                    best = min(best, _fetch_all(static_urls, in_flight))
                rows.append(_row(f"http.server, {in_flight} in flight", *best, len(files)))
                for label, warm in (("first", False), ("cached", True)):
                    best = (float("inf"), 0)
                    for _ in range(args.repeat):
                        with view(str(path)) as shown:
                            base = shown.url.split("/v/", 1)[0]
                            key = str(shown.viewer.state.layers[0].source[0].url)
                            urls = _view_urls(base, key.removeprefix("python://volume/"))
                            if warm:
                                _fetch_all(urls, in_flight)
                            best = min(best, _fetch_all(urls, in_flight))
                            _check(urls[5], data)
                    rows.append(_row(f"view, {label}, {in_flight} in flight", *best, len(urls)))
        finally:
            static.kill()
            static.wait()
    lines = [
        f"{SHAPE} uint8, {CHUNK} chunks ({len(_grid())}), best of {args.repeat}",
        "",
        "| server | ms per chunk | chunks/s | MB/s served |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['server']} | {r['ms_per_chunk']:.2f} | {r['chunks_per_s']:.0f} "
            f"| {r['MB_per_s_served']:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    out = Path("bench-out")
    out.mkdir(exist_ok=True)
    (out / "view_serve.md").write_text(text + "\n")
    (out / "view_serve.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
