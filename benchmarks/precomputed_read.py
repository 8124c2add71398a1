"""Reading precomputed volumes as CloudVolume writes them, beside CloudVolume's own reader.

CloudVolume writes chunk files gzipped by default (``compress=True``: ``.gz`` files
on a local disk), which TensorStore's precomputed driver never looks for;
chunkgraph gunzips them itself and lets TensorStore decode the bytes. This script
writes one (256, 256, 256) volume in 64^3 chunks with CloudVolume in each variant
below, then reads it back through ``chunkgraph.volume`` and through CloudVolume,
alternating the two in every repeat and keeping each one's best time:

* ``raw``      uint16 image, ``compress=True`` (the default) and ``compress=False``;
* ``cseg``     uint32 labels in compressed_segmentation, gzip and plain.

Two access patterns: ``whole`` (one read of the volume) and ``chunks`` (one read per
64^3 chunk, 64 reads). Every read is checked against the written array (exact).

    .venv/bin/python benchmarks/precomputed_read.py            # 5 repeats
    .venv/bin/python benchmarks/precomputed_read.py --repeat 2

Results are printed and written to ``bench-out/precomputed_read.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from cloudvolume import CloudVolume

from chunkgraph import volume
from chunkgraph.geometry import Box

SHAPE = (256, 256, 256)
CHUNK = (64, 64, 64)
VARIANTS = [  # name, dtype, encoding, layer type, gzip
    ("raw, gzip (default)", "uint16", "raw", "image", True),
    ("raw, plain", "uint16", "raw", "image", False),
    ("cseg, gzip (default)", "uint32", "compressed_segmentation", "segmentation", True),
    ("cseg, plain", "uint32", "compressed_segmentation", "segmentation", False),
]


def _data(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "uint32":  # labels: blocks of one id, as a segmentation has
        ids = rng.integers(1, 2**20, size=(16, 16, 16), dtype=np.uint32)
        return np.kron(ids, np.ones((16, 16, 16), dtype=np.uint32))
    # an 8-bit signal in 16 bits: gzip keeps about half, as it does of EM images
    return rng.integers(0, 256, size=SHAPE, dtype=np.uint16)


def _write(root: Path, dtype: str, encoding: str, layer: str, gzip: bool) -> np.ndarray:
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type=layer,
        data_type=dtype,
        encoding=encoding,
        resolution=[8, 8, 8],
        voxel_offset=[0, 0, 0],
        chunk_size=list(CHUNK),
        volume_size=list(SHAPE),
    )
    cv = CloudVolume(f"file://{root}", info=info, compress=gzip, progress=False)
    cv.commit_info()
    data = _data(dtype)
    cv[:, :, :] = data
    return data


def _best(fn: Callable[[], Any], best: float) -> float:
    t0 = time.perf_counter()
    fn()
    return min(best, time.perf_counter() - t0)


def measure(root: Path, data: np.ndarray, repeat: int) -> dict[str, float]:
    ours = volume.open(f"precomputed://{root}")
    theirs = CloudVolume(f"file://{root}", progress=False, fill_missing=False)
    boxes = Box.from_shape(SHAPE).split(CHUNK)
    assert np.array_equal(ours.read(ours.bounds), data), "chunkgraph read differs"
    assert np.array_equal(np.asarray(theirs[:, :, :])[..., 0], data), "CloudVolume differs"

    def ours_chunks() -> None:
        for box in boxes:
            ours.read(box)

    def theirs_chunks() -> None:
        for box in boxes:
            theirs[tuple(slice(a, b) for a, b in zip(box.start, box.stop, strict=True))]

    best = dict.fromkeys(("ours_whole", "theirs_whole", "ours_chunks", "theirs_chunks"), 1e9)
    for _ in range(repeat):
        best["ours_whole"] = _best(lambda: ours.read(ours.bounds), best["ours_whole"])
        best["theirs_whole"] = _best(lambda: theirs[:, :, :], best["theirs_whole"])
        best["ours_chunks"] = _best(ours_chunks, best["ours_chunks"])
        best["theirs_chunks"] = _best(theirs_chunks, best["theirs_chunks"])
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="precomputed-writers-"))
    try:
        for i, (name, dtype, encoding, layer, gzip) in enumerate(VARIANTS):
            root = scratch / f"v{i}"
            data = _write(root, dtype, encoding, layer, gzip)
            best = measure(root, data, args.repeat)
            rows.append({"variant": name, "mib": data.nbytes / 2**20, **best})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [
        f"CloudVolume-written precomputed, {SHAPE} in {CHUNK} chunks, best of {args.repeat}, "
        "ms (ratio: chunkgraph / CloudVolume)",
        "",
        "| variant | MiB | chunkgraph whole | CloudVolume whole | chunkgraph 64 chunks "
        "| CloudVolume 64 chunks |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        whole = r["ours_whole"] / r["theirs_whole"]
        chunks = r["ours_chunks"] / r["theirs_chunks"]
        lines.append(
            f"| {r['variant']} | {r['mib']:.0f} | {r['ours_whole'] * 1e3:.0f} ({whole:.2f}x) "
            f"| {r['theirs_whole'] * 1e3:.0f} | {r['ours_chunks'] * 1e3:.0f} ({chunks:.2f}x) "
            f"| {r['theirs_chunks'] * 1e3:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "precomputed_read.md").write_text(text + "\n")
    (out / "precomputed_read.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
