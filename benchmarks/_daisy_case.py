"""The daisy case of ``volume_flow.py``, run by the interpreter of daisy's own environment.

Hand-tuned daisy: write blocks of 128^3 on a Zarr v3 volume (64^3 storage chunks, so
every block writes whole chunks), each read with the filter's context around it,
``max_workers`` = the machine's cores, daisy's worker processes. Only numpy, scipy,
zarr and daisy are imported (chunkgraph is not installed there). Prints one JSON line
in the form of ``volume_flow.run_case``: wall, peak RSS (this process's peak plus the
largest worker's: daisy's workers are processes of their own), baseline RSS, and
``amp`` NaN (not instrumented).

    peers/bin/python benchmarks/_daisy_case.py SRC.zarr DST.zarr FILTER CONTEXT
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from _memory import peak_rss_bytes

BLOCK = 128


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    src_path, dst_path, name, context = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import daisy
    import zarr
    from scipy import ndimage

    filters = {
        "gaussian": lambda a: ndimage.gaussian_filter(a, sigma=2.0),
        "median": lambda a: ndimage.median_filter(a, size=5),
    }
    fn = filters[name]
    src = zarr.open_array(src_path, mode="r")
    shape = tuple(src.shape)
    dst = zarr.open_array(
        dst_path, mode="w", shape=shape, chunks=tuple(src.chunks), dtype=src.dtype
    )

    def process(block: daisy.Block) -> None:
        r, w = block.read_roi, block.write_roi
        lo = [max(0, o) for o in r.offset]
        hi = [min(s, o + n) for o, n, s in zip(r.offset, r.shape, shape, strict=True)]
        out = fn(src[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))])
        keep = tuple(slice(o - a, o - a + n) for o, n, a in zip(w.offset, w.shape, lo, strict=True))
        dst[tuple(slice(o, o + n) for o, n in zip(w.offset, w.shape, strict=True))] = out[keep]

    baseline = rss()
    task = daisy.Task(
        "volume_flow",
        total_roi=daisy.Roi((-context,) * 3, tuple(s + 2 * context for s in shape)),
        read_roi=daisy.Roi((-context,) * 3, (BLOCK + 2 * context,) * 3),
        write_roi=daisy.Roi((0,) * 3, (BLOCK,) * 3),
        process_function=process,
        max_workers=len(os.sched_getaffinity(0)),
        fit="shrink",  # blocks at the far edge shrink (a --quick volume is 64 deep)
    )
    t0 = time.perf_counter()
    done = daisy.run_blockwise([task], multiprocessing=True, progress=False)
    wall = time.perf_counter() - t0
    if not done:
        raise SystemExit("daisy reported failed blocks")
    # Its own peak and its largest worker's (a worker's ru_maxrss: what it had when it
    # was forked from this process counts too, an overestimate of daisy's memory).
    peak = peak_rss_bytes() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps(dict(wall=wall, peak=peak, baseline=baseline, amp=float("nan"))))


if __name__ == "__main__":
    main()
