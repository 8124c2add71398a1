"""The connected-components cases of ``volume_flow.py``: (l) ``chunkgraph.label`` beside
(l4) dask-image's ``ndmeasure.label``, on the same volume in the same run.

The volume (``src_l.zarr``, made once per workdir): Gaussian-smoothed noise (sigma 2)
scaled to unit standard deviation, float32, 64^3 chunks; the foreground is ``> 0.5``
(half a sigma), connectivity 1: about 750 blobs at the default size, the large ones
crossing chunk faces, edges and corners. Its shape is ``label_shape`` of the run's.

(l) ``label(src, dst, threshold=0.5)``: everything automatic (chunks, executor, cores).
Its "read amp" is all bytes read over the volume's: the source is read once per pass, so
2.0 by design (see ``docs/label.md``); each pass's own is printed beside it.

(l4) dask-image is not a dependency: ``python3.11 -m venv peer-label &&
peer-label/bin/pip install dask-image zarr scipy``, then ``--label-peer-python
peer-label/bin/python`` (``_dask_image_case.py``); without it the case runs if this
interpreter imports dask_image, else it is listed as not run.

Exactness: (l) must equal ``scipy.ndimage.label`` of the whole foreground, ids and all;
(l4)'s ids must be a bijection of scipy's (dask-image numbers by block).

Memory: both cases report their own peak RSS (VmHWM, ``peak_rss``) beside ``ru_maxrss``,
and the target rows compare VmHWM above baseline: ``ru_maxrss`` of a case starts from the
driver's own peak (see ``peak_rss``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from _memory import peak_rss_bytes
from chunkgraph import label, volume
from chunkgraph.geometry import Box

LABEL_CASES = {
    "cg_label": "(l) chunkgraph label, crop_pads=0 + a reduction",
    "dask_image_label": "(l4) dask-image ndmeasure.label",
}
LABEL_PEER = "dask_image_label"
LABEL_SOURCE = "src_l.zarr"
LABEL_SIGMA = 2.0
LABEL_THRESHOLD = 0.5
LABEL_CONNECTIVITY = 1
_CHUNK = 64


def label_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The label cases' volume: a quarter as deep, half as high as the run's (32 MiB by
    default), as the median's: dask-image took 297 s on (128, 512, 512) here, its time
    growing faster than its blocks."""
    return (max(_CHUNK, shape[0] // 4), max(_CHUNK, shape[1] // 2), shape[2])


def make_label_source(path: Path, shape: tuple[int, ...]) -> None:
    """Smoothed noise at unit standard deviation, unless a volume of that shape is there;
    made in a process of its own: a child started later would count this one's peak RSS
    as its own (``peak_rss``)."""
    if path.exists():
        if volume.open(str(path)).shape == shape:
            return
        shutil.rmtree(path)
    size = ",".join(map(str, shape))
    subprocess.run([sys.executable, __file__, "--make-source", str(path), size], check=True)


def _make_source(path: Path, shape: tuple[int, ...]) -> None:
    """The noise whole, smoothed slab by slab with a halo of 4 sigma (so the slabs join
    smoothly)."""
    src = volume.create(str(path), shape, (_CHUNK,) * 3, "float32")
    noise = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    halo = int(4 * LABEL_SIGMA)
    scale = None
    for z in range(0, shape[0], _CHUNK):
        lo, hi = max(0, z - halo), min(shape[0], z + _CHUNK + halo)
        slab = ndimage.gaussian_filter(noise[lo:hi], LABEL_SIGMA)[z - lo : z - lo + _CHUNK]
        scale = scale or float(slab.std())
        src.write(Box((z, 0, 0), (z + slab.shape[0], *shape[1:])), slab / scale)


def case_cg_label(src_path: str, dst_path: str, shape: tuple[int, ...]) -> Any:
    shutil.rmtree(f"{Path(dst_path).parent}/.{Path(dst_path).name}.chunkgraph", True)
    report = label(src_path, dst_path, threshold=LABEL_THRESHOLD, connectivity=LABEL_CONNECTIVITY)
    find, relabel = report.passes
    volume_bytes = float(np.prod(shape) * 4)
    return report.bytes_read / volume_bytes, {
        "components": report.components,
        "find_s": find.wall_seconds,
        "relabel_s": relabel.wall_seconds,
        "find_amp": find.bytes_read / volume_bytes,
        "relabel_amp": relabel.read_amplification,
        "chunk": "x".join(map(str, report.chunk)),
        "hwm": peak_rss_bytes(),
    }


def label_missing(peer_python: str | None) -> str | None:
    """Why (l4) cannot run (None: it can)."""
    python = peer_python or sys.executable
    done = subprocess.run([python, "-c", "import dask_image, zarr, scipy"], capture_output=True)
    if done.returncode:
        return f"dask_image, zarr or scipy not importable by {python}; give --label-peer-python"
    return None


def label_peer_command(peer_python: str | None, workdir: Path) -> list[str]:
    dst = workdir / f"{LABEL_PEER}.zarr"
    shutil.rmtree(dst, ignore_errors=True)
    script = Path(__file__).with_name("_dask_image_case.py")
    return [
        peer_python or sys.executable,
        str(script),
        str(workdir / LABEL_SOURCE),
        str(dst),
        str(LABEL_THRESHOLD),
        str(LABEL_CONNECTIVITY),
    ]


def _bijection(a: np.ndarray, b: np.ndarray) -> bool:
    """The same partition: background in the same voxels, and each id of ``a`` paired
    with exactly one of ``b`` and back."""
    if not np.array_equal(a == 0, b == 0):
        return False
    fg = a != 0
    pairs = np.unique(np.stack([a[fg].astype(np.int64), b[fg].astype(np.int64)]), axis=1)
    return pairs.shape[1] == len(np.unique(pairs[0])) == len(np.unique(pairs[1]))


def label_exactness(workdir: Path, ran: dict[str, Any]) -> str:
    """(l) against scipy on the whole array (equal ids), and (l4) (a bijection)."""
    import zarr

    src = volume.open(str(workdir / LABEL_SOURCE))
    structure = ndimage.generate_binary_structure(3, LABEL_CONNECTIVITY)
    expected, count = ndimage.label(src.read(src.bounds) > LABEL_THRESHOLD, structure=structure)
    lines = [f"scipy.ndimage.label of the whole array: {count} components"]
    ours = volume.open(str(workdir / "cg_label.zarr"))
    mine = ours.read(ours.bounds)
    lines.append(
        f"(l) ids equal scipy's: {np.array_equal(mine, expected)}; "
        f"a bijection of scipy's: {_bijection(mine, expected)}"
    )
    if LABEL_PEER in ran:
        theirs = zarr.open_array(str(workdir / f"{LABEL_PEER}.zarr"), mode="r")[...]
        lines.append(
            f"(l4) {ran[LABEL_PEER].get('components')} components; a bijection of scipy's: "
            f"{_bijection(theirs, expected)}; of (l)'s: {_bijection(theirs, mine)}"
        )
    return "\n".join(lines)


def label_targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, float, str, bool]]:
    """(l) against (l4): the rows of the target table (none when (l4) did not run)."""
    if "cg_label" not in results or LABEL_PEER not in results:
        return []
    mine, theirs = results["cg_label"], results[LABEL_PEER]
    above = [float(r["hwm"] - r["baseline"]) for r in (mine, theirs)]
    time_ratio = mine["wall"] / theirs["wall"]
    return [
        ("(l) time / (l4)", time_ratio, "<= 0.5", time_ratio <= 0.5),
        ("(l) memory above baseline / (l4)'s", above[0] / above[1], "<= 1.0",
         above[0] <= above[1]),
        ("(l) reads / volume, both passes", mine["amp"], "<= 1.05", mine["amp"] <= 1.05),
        ("(l) read amplification of each pass", max(mine["find_amp"], mine["relabel_amp"]),
         "<= 1.05", max(mine["find_amp"], mine["relabel_amp"]) <= 1.05),
    ]  # fmt: skip


def label_line(results: dict[str, dict[str, Any]]) -> str:
    """Where (l)'s time went, pass by pass."""
    r = results.get("cg_label")
    if r is None:
        return ""
    between = r["wall"] - r["find_s"] - r["relabel_s"]
    return (
        f"(l) chunks {r['chunk']}, {r['components']:.0f} components; find {r['find_s']:.2f} s "
        f"(reads {r['find_amp']:.2f}), merge and dst {between:.2f} s, "
        f"relabel {r['relabel_s']:.2f} s (reads {r['relabel_amp']:.2f})"
    )


def main() -> None:
    """Only (l) and (l4), as ``volume_flow.py`` runs them (each in its own process)."""
    import argparse
    import json

    import volume_flow

    parser = argparse.ArgumentParser(description="volume_flow.py's label cases alone")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=int, help="as volume_flow.py's --size")
    parser.add_argument("--workdir", default="bench-out/volume_flow")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--label-peer-python")
    parser.add_argument("--make-source", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_source:
        _make_source(Path(args.make_source[0]), tuple(map(int, args.make_source[1].split(","))))
        return
    shape = volume_flow.QUICK_SHAPE if args.quick else volume_flow.FULL_SHAPE
    shape = (args.size, 512, 512) if args.size else shape
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    make_label_source(workdir / LABEL_SOURCE, label_shape(shape))
    missing = label_missing(args.label_peer_python)
    names = [n for n in LABEL_CASES if not (n == LABEL_PEER and missing)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            if name == LABEL_PEER:
                cmd = label_peer_command(args.label_peer_python, workdir)
            else:
                cmd = [sys.executable, volume_flow.__file__, "--case", name]
                cmd += ["--workdir", str(workdir), *(["--quick"] if args.quick else [])]
                cmd += ["--size", str(args.size)] if args.size else []
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"case {name} failed:\n{out.stderr}")
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = {name: volume_flow._median(r) for name, r in runs.items()}
    print(f"label volume {label_shape(shape)} float32; median of {args.repeat} run(s)")
    if missing:
        print(f"{LABEL_CASES[LABEL_PEER]}: not run ({missing})")
    for name, r in results.items():
        print(
            f"{LABEL_CASES[name]}: wall {r['wall']:.2f} s, peak RSS (VmHWM) "
            f"{r['hwm'] / 2**20:.0f} MiB, above baseline {(r['hwm'] - r['baseline']) / 2**20:.0f} "
            f"MiB (ru_maxrss {r['peak'] / 2**20:.0f} MiB)"
        )
    print(label_line(results))
    print(label_exactness(workdir, results))
    for row, value, target, ok in label_targets(results):
        print(f"| {row} | {value:.2f} | {target} | {'met' if ok else 'MISSED'} |")


if __name__ == "__main__":
    main()
