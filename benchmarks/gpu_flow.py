"""Benchmark: the apply flow with a heavy per-chunk function on the CPU and on a GPU.

One float32 Zarr v3 volume ((size, 512, 512), 64^3 chunks; ``--size`` in MiB, default
256), one flow, two devices, side by side in one run:

* cpu: ``apply(gaussian, src, dst, device="cpu")``, ``scipy.ndimage.gaussian_filter``
* gpu: ``apply(gaussian, src, dst, device="gpu")``, ``cupyx.scipy.ndimage.gaussian_filter``

Both use sigma 4 (reach 16 voxels, ``truncate=4``): two levels, top chunks of
64 x 256 x 256 voxels, bottom chunks of 64 x 128 x 128 cropped by 16, direct
writes. The table shows wall seconds of each and the speed-up, from runs that
leave the device alone (two top tasks in flight, each on its own stream, so one's
copies overlap the other's kernels). One more GPU run times every copy between
host and device (``to_device``/``to_host``, after waiting for the work queued
before it, so a copy does not absorb kernels' time; summed over the tasks in
flight): its copy seconds over its own wall are the transfer share. Those waits
take the overlap away, so that run is slower and shown on its own row. While
the first GPU run runs, the GPU's utilisation is sampled every 100 ms (pynvml, else
``nvidia-smi -lms 100``) and drawn to ``<out>/gpu_flow_utilisation.png``. The two
results are compared in the interior (float32, so they differ in the last bits).

    python benchmarks/gpu_flow.py [--size 256] [--repeat 3] [--workdir bench-out/gpu_flow]
    python benchmarks/gpu_flow.py --cpu-only --size 64    # the CPU half, without a GPU

Without a GPU (no CuPy, or no device visible) it says so and what it would measure,
and exits 0; ``--cpu-only`` still times the CPU flow.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.gpu import CupyBackend, DeviceBackend, active_backend, use_backend
from chunkgraph.parallel import usable_cores
from volume_flow import CHUNK, cache_bytes, make_source

SIGMA = 4.0
TRUNCATE = 4.0
REACH = int(TRUNCATE * SIGMA + 0.5)  # 16: the filter's radius, cropped at the bottom
TOP = (CHUNK, 4 * CHUNK, 4 * CHUNK)
BOTTOM = (CHUNK, 2 * CHUNK, 2 * CHUNK)
SAMPLE_SECONDS = 0.1  # utilisation sampling period


def cpu_gaussian(src: np.ndarray) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    out: np.ndarray = gaussian_filter(src, sigma=SIGMA, truncate=TRUNCATE)
    return out


def gpu_gaussian(src: Any) -> Any:
    from cupyx.scipy.ndimage import gaussian_filter  # type: ignore[import-not-found]

    return gaussian_filter(src, sigma=SIGMA, truncate=TRUNCATE)


# --- transfer timing ------------------------------------------------------------------------


class TimedBackend:
    """A backend that times each host <-> device copy, after waiting for the device.

    CuPy queues kernels asynchronously and ``asnumpy`` waits for them: timed as is, a
    download would count the kernels' time as transfer. So the device is synchronised
    first (untimed), then the copy is timed to its end.
    """

    def __init__(self, inner: DeviceBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.bytes = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _sync(self) -> None:
        xp: ModuleType = self.inner.xp()
        if hasattr(xp, "cuda"):
            xp.cuda.get_current_stream().synchronize()

    def _timed(self, copy: Callable[[], Any], nbytes: int) -> Any:
        self._sync()
        t0 = time.perf_counter()
        out = copy()
        self._sync()
        with self._lock:
            self.seconds += time.perf_counter() - t0
            self.bytes += nbytes
        return out

    def to_device(self, array: np.ndarray, index: int) -> Any:
        return self._timed(lambda: self.inner.to_device(array, index), int(array.nbytes))

    def to_host(self, array: Any) -> np.ndarray:
        out: np.ndarray = self._timed(lambda: self.inner.to_host(array), int(array.nbytes))
        return out


# --- utilisation sampling -------------------------------------------------------------------


@dataclass
class Samples:
    """GPU utilisation (%) at seconds since the sampling started."""

    source: str = ""
    seconds: list[float] = field(default_factory=list)
    percent: list[float] = field(default_factory=list)


@contextlib.contextmanager
def sample_utilisation(index: int = 0) -> Iterator[Samples]:
    """Sample device ``index``'s utilisation every 100 ms while the block runs."""
    samples = Samples()
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        pynvml = None
    if pynvml is not None:
        with _nvml_samples(pynvml, index, samples):
            yield samples
    elif shutil.which("nvidia-smi"):
        with _smi_samples(index, samples):
            yield samples
    else:
        samples.source = "none (neither pynvml nor nvidia-smi found)"
        yield samples


@contextlib.contextmanager
def _nvml_samples(pynvml: Any, index: int, samples: Samples) -> Iterator[None]:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    samples.source = "pynvml"
    stop = threading.Event()
    t0 = time.perf_counter()

    def loop() -> None:
        while not stop.wait(SAMPLE_SECONDS):
            rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
            samples.seconds.append(time.perf_counter() - t0)
            samples.percent.append(float(rates.gpu))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        pynvml.nvmlShutdown()


@contextlib.contextmanager
def _smi_samples(index: int, samples: Samples) -> Iterator[None]:
    samples.source = "nvidia-smi"
    cmd = [
        "nvidia-smi",
        f"--id={index}",
        "--query-gpu=timestamp,utilization.gpu",
        "--format=csv,noheader,nounits",
        f"-lms={int(SAMPLE_SECONDS * 1000)}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield
    finally:
        proc.terminate()
        text, _ = proc.communicate(timeout=10)
        first: datetime | None = None
        for line in text.splitlines():
            stamp, _, value = line.partition(",")
            with contextlib.suppress(ValueError):  # a line cut by terminate()
                when = datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f")
                percent = float(value)
                first = first or when
                samples.seconds.append((when - first).total_seconds())
                samples.percent.append(percent)


def plot_utilisation(samples: Samples, wall: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3), dpi=120)
    try:
        ax.plot(samples.seconds, samples.percent, lw=1)
        ax.fill_between(samples.seconds, samples.percent, alpha=0.3)
        mean = statistics.fmean(samples.percent) if samples.percent else 0.0
        ax.axhline(mean, color="k", ls="--", lw=0.8, label=f"mean {mean:.0f}%")
        ax.set_xlim(0, max(wall, samples.seconds[-1] if samples.seconds else wall))
        ax.set_ylim(0, 100)
        ax.set_xlabel("seconds since the GPU flow started")
        ax.set_ylabel("GPU utilisation %")
        ax.set_title(f"gpu_flow: GPU utilisation ({samples.source}, every 100 ms)")
        ax.legend(loc="lower right")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


# --- the runs ------------------------------------------------------------------------------


@dataclass
class Run:
    wall: float
    transfer_seconds: float = 0.0
    transfer_bytes: int = 0
    samples: Samples | None = None


def run_flow(workdir: Path, shape: tuple[int, ...], device: str, timed: bool = False) -> Run:
    """One flow on ``device``; ``timed``: time every copy (see the module doc)."""
    # The cache of volume_flow's tuned cases: a quarter of the volume (halos read once).
    src = volume.open(str(workdir / "src.zarr"), cache_bytes=cache_bytes(shape))
    dst_path = workdir / f"{device}.zarr"
    shutil.rmtree(dst_path, ignore_errors=True)
    dst = volume.create(str(dst_path), shape, (CHUNK,) * 3, "float32")
    fn = gpu_gaussian if device == "gpu" else cpu_gaussian
    kwargs: dict[str, Any] = dict(
        chunk_sizes=[TOP, BOTTOM],
        crop_pads=[0, REACH],
        skip_intermediates=True,
        intermediates=workdir / "tmp",
        device=device,
    )
    if device == "cpu":
        t0 = time.perf_counter()
        volume.apply(fn, src, dst, **kwargs)
        return Run(time.perf_counter() - t0)
    backend = active_backend()
    assert backend is not None
    if timed:
        copies = TimedBackend(backend)
        with use_backend(copies):
            t0 = time.perf_counter()
            volume.apply(fn, src, dst, **kwargs)
            wall = time.perf_counter() - t0
        return Run(wall, copies.seconds, copies.bytes)
    with sample_utilisation() as samples:
        t0 = time.perf_counter()
        volume.apply(fn, src, dst, **kwargs)
        wall = time.perf_counter() - t0
    return Run(wall, samples=samples)


def warm_up() -> None:
    """Compile and load the GPU filter's kernels, so that the timed run does not."""
    backend = active_backend()
    assert backend is not None
    xp = backend.xp()
    gpu_gaussian(xp.ones((8 + 2 * REACH,) * 3, dtype=xp.float32))
    xp.cuda.get_current_stream().synchronize()


def interior_difference(workdir: Path, shape: tuple[int, ...]) -> float:
    inner = Box((REACH,) * 3, tuple(s - REACH for s in shape))
    cpu = volume.open(str(workdir / "cpu.zarr")).read(inner)
    gpu = volume.open(str(workdir / "gpu.zarr")).read(inner)
    return float(np.abs(cpu.astype(np.float64) - gpu).max())


def table(cpu: list[Run], gpu: list[Run], timed: Run | None) -> str:
    c = statistics.median(r.wall for r in cpu)
    lines = [
        "| device | wall s | speed-up | host<->device s | transfer share | GiB moved |",
        "|---|---:|---:|---:|---:|---:|",
        f"| cpu ({usable_cores()} cores) | {c:.2f} | 1.00 | | | |",
    ]
    if gpu and timed is not None:
        g = statistics.median(r.wall for r in gpu)
        t, moved = timed.transfer_seconds, timed.transfer_bytes / 2**30
        lines.append(f"| gpu | {g:.2f} | {c / g:.2f} | | | |")
        lines.append(
            f"| gpu, copies timed | {timed.wall:.2f} | {c / timed.wall:.2f} | {t:.2f} | "
            f"{t / timed.wall:.0%} | {moved:.2f} |"
        )
    else:
        lines.append("| gpu | n/a (--cpu-only) | | | | |")
    return "\n".join(lines)


def gpu_description(backend: DeviceBackend) -> str:
    if isinstance(backend, CupyBackend):
        import cupy  # type: ignore[import-not-found]

        props = cupy.cuda.runtime.getDeviceProperties(backend.current_device())
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"{name}, CuPy {cupy.__version__}"
    return backend.name


def no_gpu_message() -> str:
    return (
        "gpu_flow: no GPU was found (CuPy is not installed or sees no device), so nothing "
        "was measured.\nOn a machine with an NVIDIA GPU and `pip install chunkgraph[gpu]` it "
        "times the apply flow with a 3-D Gaussian (sigma 4) per chunk on the CPU (scipy) and "
        "on the GPU (cupyx), prints wall seconds, the speed-up and the share of the GPU run "
        "spent copying between host and device, and draws the GPU's utilisation over the "
        "run.\nRun with --cpu-only to time the CPU flow alone."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        type=int,
        default=256,
        help="volume size in MiB, a multiple of 64: (size, 512, 512) float32 (default 256)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per device (medians shown)")
    parser.add_argument("--workdir", default="bench-out/gpu_flow")
    parser.add_argument("--out", default="bench-out", help="folder for the table and the PNG")
    parser.add_argument("--cpu-only", action="store_true", help="time the CPU flow only")
    args = parser.parse_args()
    if args.size < CHUNK or args.size % CHUNK:
        parser.error(f"--size must be a positive multiple of {CHUNK} MiB, got {args.size}")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    backend = active_backend()
    if backend is None and not args.cpu_only:
        print(no_gpu_message())
        return
    shape = (args.size, 512, 512)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    make_source(workdir / "src.zarr", shape)
    where = "no GPU (--cpu-only)" if args.cpu_only else gpu_description(backend)
    print(
        f"gpu_flow: volume {shape} float32 ({args.size} MiB), chunks {CHUNK}^3, gaussian "
        f"sigma {SIGMA:g} (crop {REACH}), top {TOP}, bottom {BOTTOM}; {usable_cores()} cores, "
        f"{where}"
    )
    if not args.cpu_only:
        warm_up()
    cpu: list[Run] = []
    gpu: list[Run] = []
    for r in range(args.repeat):
        # Alternating, so that load from elsewhere on the machine hits both alike.
        cpu.append(run_flow(workdir, shape, "cpu"))
        print(f"  round {r + 1}/{args.repeat}: cpu {cpu[-1].wall:.2f} s", flush=True)
        if not args.cpu_only:
            gpu.append(run_flow(workdir, shape, "gpu"))
            print(f"  round {r + 1}/{args.repeat}: gpu {gpu[-1].wall:.2f} s", flush=True)
    timed = None if args.cpu_only else run_flow(workdir, shape, "gpu", timed=True)
    if timed is not None:
        print(f"  gpu, copies timed: {timed.wall:.2f} s", flush=True)
    text = table(cpu, gpu, timed)
    print(f"\nmedian of {args.repeat} run(s) per device\n\n{text}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_flow.md").write_text(text + "\n")
    if gpu:
        print(f"\ninterior max |cpu - gpu| = {interior_difference(workdir, shape):.3g}")
        last = gpu[0]
        if last.samples is not None and last.samples.percent:
            png = plot_utilisation(last.samples, last.wall, out / "gpu_flow_utilisation.png")
            mean = statistics.fmean(last.samples.percent)
            print(f"GPU utilisation (first run, {last.samples.source}): mean {mean:.0f}%; {png}")
        else:
            source = last.samples.source if last.samples else "none"
            print(f"GPU utilisation: no samples ({source})")


if __name__ == "__main__":
    main()
