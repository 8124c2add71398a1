"""The dask-image case of ``volume_flow.py`` (l4), run by the interpreter of its own
environment.

``dask_image.ndmeasure.label`` of ``src > THRESHOLD`` over ``dask.array.from_zarr``
(the source's 64^3 chunks as blocks), written with ``to_zarr``; dask's threaded
scheduler on the machine's cores, as the dask cases of ``volume_flow.py``. Only numpy,
scipy, zarr, dask and dask-image are imported (chunkgraph is not installed there).
Prints one JSON line in the form of ``volume_flow.run_case``: wall, peak RSS, baseline
RSS (the interpreter with those imported), ``amp`` NaN (not instrumented), the number
of components dask-image counted and ``hwm``, this process's own peak RSS (VmHWM).

    peer-label/bin/python benchmarks/_dask_image_case.py SRC.zarr DST.zarr THRESHOLD CONNECTIVITY
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from _memory import peak_rss_bytes


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    src_path, dst_path = sys.argv[1], sys.argv[2]
    threshold, connectivity = float(sys.argv[3]), int(sys.argv[4])
    import dask
    import dask.array as da
    import zarr
    from dask_image import ndmeasure
    from scipy import ndimage

    baseline = rss()
    t0 = time.perf_counter()
    src = da.from_zarr(zarr.open_array(src_path, mode="r"))
    structure = ndimage.generate_binary_structure(src.ndim, connectivity)
    labels, count = ndmeasure.label(src > threshold, structure=structure)
    with dask.config.set(scheduler="threads", num_workers=len(os.sched_getaffinity(0))):
        stored = labels.to_zarr(dst_path, overwrite=True, compute=False)
        _, components = dask.compute(stored, count)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            dict(
                wall=wall,
                peak=peak,
                baseline=baseline,
                amp=float("nan"),
                components=int(components),
                hwm=peak_rss_bytes(),
            )
        )
    )


if __name__ == "__main__":
    main()
