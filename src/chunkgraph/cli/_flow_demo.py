"""The demo job: a Gaussian-like smoothing of a generated volume through ``apply``.

``run_demo`` writes a 256 MiB float32 Zarr v3 volume of smooth structure plus
noise, then smooths it with a two-level flow: top-level chunks blended over a
quadratic ramp (8 checkerboard layers, one reduction per destination region),
bottom-level chunks cropped by the filter's radius so that every voxel sees
its full neighbourhood. The filter is a separable binomial kernel
(``[1, 4, 6, 4, 1] / 16`` per axis, a close cousin of a Gaussian with
sigma = 1), applied to the valid region only, so its output is already
cropped::

    generated src (256, 512, 512) ──apply──> dst, smoothed
        top chunk (256, 512, 64) + blend 8            -> 8 top-level tasks, sweeping x
        bottom chunk (68, 66, 40) + crop 2 + blend 4  (fn reads 80 x 78 x 52)

The source is read through a chunk cache of a quarter of its size: the
top-level tasks are slabs that follow each other along x, so the halo chunks
one task shares with the next are still cached when it starts.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph import volume
from chunkgraph.flow import apply
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.execute import Subscriber
    from chunkgraph.flow import ApplyReport

DEMO_SHAPE = (256, 512, 512)  # 256 MiB of float32
DEMO_CHUNKS = (64, 64, 64)
# A top-level task is a full-height slab one storage chunk thick along x, so the
# tasks sweep x and each reads a chunk of halo its neighbour has cached; below,
# 64 chunks tile the slab plus its blend pads, (256 + 16, 512 + 16, 64 + 16).
TOP_CHUNK = (256, 512, 64)
BOTTOM_CHUNK = (68, 66, 40)
_KERNEL = np.array([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0
RADIUS = len(_KERNEL) // 2


def binomial_smooth(src: np.ndarray) -> np.ndarray:
    """Separable 5-tap binomial filter over the valid region (each axis shrinks by 4).

    >>> binomial_smooth(np.ones((6, 5, 5), np.float32)).shape
    (2, 1, 1)
    """
    out = src.astype(np.float32)
    for axis in range(out.ndim):
        n = out.shape[axis] - 2 * RADIUS
        acc = np.zeros((*out.shape[:axis], n, *out.shape[axis + 1 :]), dtype=np.float32)
        for k, w in enumerate(_KERNEL):
            index = [slice(None)] * out.ndim
            index[axis] = slice(k, k + n)
            acc += np.float32(w) * out[tuple(index)]
        out = acc
    return out


# The demo's input and output, in its working directory.
DEMO_VOLUMES = ("demo-src.zarr", "demo-dst.zarr")


def make_source(path: Path, shape: tuple[int, ...] = DEMO_SHAPE) -> None:
    """Write a volume of smooth blobs plus noise, one z-slab of chunks at a time."""
    src = volume.create(str(path), shape, DEMO_CHUNKS, "float32", exist_ok=True)
    rng = np.random.default_rng(7)
    y = np.arange(shape[1], dtype=np.float32)[:, None]
    x = np.arange(shape[2], dtype=np.float32)[None, :]
    for z0 in range(0, shape[0], DEMO_CHUNKS[0]):
        z1 = min(shape[0], z0 + DEMO_CHUNKS[0])
        z = np.arange(z0, z1, dtype=np.float32)[:, None, None]
        blobs = np.sin(z / 9.0) * np.cos(y / 13.0) * np.sin(x / 17.0)
        noise = rng.standard_normal((z1 - z0, shape[1], shape[2]), dtype=np.float32)
        src.write(Box((z0, 0, 0), (z1, shape[1], shape[2])), 100.0 * blobs + 10.0 * noise)


def run_demo(
    workdir: Path,
    progress: bool = True,
    subscribers: Sequence[Subscriber] = (),
    shape: tuple[int, ...] = DEMO_SHAPE,
) -> ApplyReport:
    """Generate the source under ``workdir``, smooth it, and return the ``ApplyReport``.

    ``shape`` must be (256, 512, n × 64): the top chunk spans y and z.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src_path, dst_path = (workdir / name for name in DEMO_VOLUMES)
    if src_path.exists() and volume.open(str(src_path)).shape != tuple(shape):
        shutil.rmtree(src_path)  # the demo's own data, from a run of another size
        shutil.rmtree(dst_path, ignore_errors=True)
    if not src_path.exists():
        make_source(src_path, shape)
    # A quarter of the volume, and at least two top-level slabs: a slab's halo is its
    # neighbour's storage chunks, still cached when the neighbour runs.
    slab = shape[0] * shape[1] * TOP_CHUNK[2] * 4
    src = volume.open(str(src_path), cache_bytes=max(int(np.prod(shape)), 2 * slab))
    dst = volume.create(str(dst_path), shape, DEMO_CHUNKS, "float32", exist_ok=True)
    return apply(
        binomial_smooth,
        src,
        dst,
        chunk_sizes=[TOP_CHUNK, BOTTOM_CHUNK],
        crop_pads=[0, RADIUS],
        blend_pads=[8, 4],
        blend_modes="quadratic",
        progress=progress,
        subscribers=subscribers,
    )


def check_demo(workdir: Path, shape: tuple[int, ...] = DEMO_SHAPE) -> float:
    """Largest |flow result - the filter on the whole neighbourhood| over interior windows.

    Away from the edge (where the flow sees fill values) every voxel is a blend
    of chunk results that each equal the filter applied to the whole array, so
    this is rounding noise (~1e-5 here), or a bug. Windows straddling chunk and
    blend seams at three places are checked, each against the filter of its own
    padded neighbourhood, so the check needs no whole-volume copy.
    """
    workdir = Path(workdir)
    src = volume.open(str(workdir / "demo-src.zarr"))
    dst = volume.open(str(workdir / "demo-dst.zarr"))
    worst = 0.0
    for fraction in (0.25, 0.5, 0.75):
        start = [int(n * fraction) - 24 for n in shape]
        window = Box(start, [a + 48 for a in start])
        expected = binomial_smooth(src.read(window.padded(RADIUS)))
        worst = max(worst, float(np.abs(dst.read(window) - expected).max()))
    return worst
