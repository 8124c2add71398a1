"""``apply(..., device="gpu")``: fn gets device arrays, the levels below the top stay there.

These tests run on a ``FakeBackend`` because no GPU runs here: its device arrays
are a numpy subclass, so results must equal the CPU flow's bit for bit, and
every host <-> device copy is counted. The one real-GPU test at the end is
skipped unless CuPy sees a device.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError
from chunkgraph.flow import SaturationWarning
from chunkgraph.geometry import Box
from chunkgraph.gpu import (
    CupyBackend,
    FakeBackend,
    FakeDeviceArray,
    _backend,
    active_backend,
    use_backend,
)
from chunkgraph.parallel import usable_cores
from chunkgraph.volume import apply

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")


class RecordingBackend(FakeBackend):
    """A fake that also remembers the type of every array it copied back to the host."""

    def __init__(self) -> None:
        super().__init__(count=2)
        self.downloaded: list[type] = []

    def to_host(self, array: Any) -> np.ndarray:
        self.downloaded.append(type(array))
        return super().to_host(array)


class TypesSeen:
    """An fn that scales its input (on whatever array type it gets) and records that type;
    a uint8 input's values go past uint8's range at both ends (they saturate)."""

    def __init__(self) -> None:
        self.types: set[type] = set()
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, src: np.ndarray) -> np.ndarray:
        with self._lock:
            self.types.add(type(src))
            self.calls += 1
        out: np.ndarray = src.astype(np.float64) * 1.25 - 20.0
        return out


CASES: dict[str, dict[str, Any]] = {
    "two levels, crop": dict(chunk_sizes=[(20, 18), (10, 9)], crop_pads=[(0, 0), (2, 3)]),
    "two levels, crop+blend linear": dict(
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 2)],
        blend_modes="linear",
    ),
    "two levels, quadratic": dict(
        chunk_sizes=[(20, 18), (13, 12)], blend_pads=[(3, 3), (2, 3)], blend_modes="quadratic"
    ),
    "two levels, max": dict(
        chunk_sizes=[(20, 18), (8, 11)], blend_pads=[(2, 2), (1, 2)], blend_modes="max"
    ),
    "three levels": dict(
        chunk_sizes=[(20, 18), (13, 12), (17, 8)],
        crop_pads=[(1, 1), (1, 1), (0, 0)],
        blend_pads=[(2, 2), (1, 1), (0, 2)],
        blend_modes=["linear", "quadratic", "bump"],
    ),
    "direct writes": dict(
        chunk_sizes=[(8, 16), (8, 8)],
        crop_pads=[(0, 0), (3, 3)],
        skip_intermediates=True,
        bbox=Box((0, 0), (40, 32)),
    ),
}


def _run(files: Any, data: np.ndarray, fn: Any, **kwargs: Any) -> tuple[np.ndarray, Any]:
    src = files.source(data, (8, 8))
    dst = files.empty(data.shape, (8, 8), data.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)
        report = apply(fn, src, dst, intermediates=files.root / "tmp", cast="unsafe", **kwargs)
    return dst.read(Box.from_shape(data.shape)), report


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_flow_equals_cpu_flow_bit_for_bit(files: Any, case: str, dtype: str) -> None:
    data = files.random((40, 36), dtype)
    cpu_fn, gpu_fn = TypesSeen(), TypesSeen()
    cpu, cpu_report = _run(files, data, cpu_fn, **CASES[case])
    with use_backend(FakeBackend()):
        gpu, gpu_report = _run(files, data, gpu_fn, device="gpu", **CASES[case])
    np.testing.assert_array_equal(gpu, cpu)
    assert gpu.tobytes() == cpu.tobytes()  # -0.0 and NaN bits too
    assert cpu_fn.types == {np.ndarray}
    assert gpu_fn.types == {FakeDeviceArray}
    assert (cpu_report.device, gpu_report.device) == ("cpu", "gpu")
    # Saturated voxels are counted on the device as on the host.
    assert gpu_report.saturated_voxels == cpu_report.saturated_voxels
    assert (cpu_report.saturated_voxels > 0) == (dtype == "uint8")


def test_uploads_once_per_top_task_and_input_downloads_once_per_output(files: Any) -> None:
    """Two inputs, 2 x 2 top tasks of 4 x 4 bottom chunks each: 8 uploads, 4 downloads."""
    a = files.random((40, 40), "float32", 1)
    b = files.random((40, 40), "float32", 2)
    src_a, src_b = files.source(a, (8, 8)), files.source(b, (8, 8))
    dst = files.empty((40, 40), (8, 8), "float32")
    seen: list[type] = []

    def add(first: np.ndarray, second: np.ndarray) -> np.ndarray:
        seen.append(type(first))
        return first + second

    backend = RecordingBackend()
    with use_backend(backend):
        report = apply(
            add,
            {"first": src_a, "second": src_b},
            dst,
            chunk_sizes=[(20, 20), (6, 6)],
            crop_pads=[(2, 2), (1, 1)],
            blend_pads=[(0, 0), (1, 1)],
            blend_modes="linear",
            intermediates=files.root / "tmp",
            probe=False,
            device="gpu",
        )
    assert report.tasks_per_level == (4, 64)
    assert set(seen) == {FakeDeviceArray} and len(seen) == 64
    assert backend.uploads == 4 * 2  # not once per bottom call (64)
    assert backend.downloads == 4
    # What came back was a device array: the accumulators below the top live on the device.
    assert backend.downloaded == [FakeDeviceArray] * 4
    assert report.device_copies == (8, 4)
    # Each task uploads each input over its chunk padded by every pad (2 + 1 + 1): 28^2
    # float32; it downloads its output, the 20^2 chunk (no top blend), in the layer dtype.
    assert report.bytes_to_device == 4 * 2 * 28 * 28 * 4
    assert report.bytes_from_device == 4 * 20 * 20 * 4
    np.testing.assert_allclose(dst.read(Box.from_shape((40, 40))), a + b, rtol=1e-6)
    assert "device: gpu" in report.summary() and "8 uploads" in report.summary()


def test_probe_uploads_its_inputs_too(files: Any) -> None:
    data = files.random((40, 36), "float32")
    backend = FakeBackend()
    with use_backend(backend):
        _, report = _run(files, data, TypesSeen(), device="gpu", **CASES["two levels, quadratic"])
    tops = report.tasks_per_level[0]
    assert backend.uploads == tops + 1 and report.device_copies == (tops + 1, tops)


def test_direct_flow_downloads_each_bottom_output(files: Any) -> None:
    data = files.random((40, 36), "uint8")
    backend = FakeBackend()
    with use_backend(backend):
        _, report = _run(
            files, data, TypesSeen(), device="gpu", probe=False, **CASES["direct writes"]
        )
    assert report.tasks_per_level == (10, 20)
    assert backend.uploads == 10 and backend.downloads == 20


def test_fn_returning_host_arrays_is_accepted(files: Any) -> None:
    data = files.random((40, 36), "float32")

    def on_host(src: np.ndarray) -> np.ndarray:
        return np.asarray(src).view(np.ndarray) * 3.0

    case = CASES["two levels, crop+blend linear"]
    cpu, _ = _run(files, data, on_host, **case)
    backend = FakeBackend()
    with use_backend(backend):
        gpu, report = _run(files, data, on_host, device="gpu", probe=False, **case)
    assert gpu.tobytes() == cpu.tobytes()
    bottom_calls = report.tasks_per_level[-1]
    assert backend.uploads == report.tasks_per_level[0] + bottom_calls  # each result uploaded


def test_gpu_without_a_backend_is_refused_before_anything_is_written(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backend, "_probed", [None])  # as on a machine without CuPy or GPU
    assert active_backend() is None
    data = files.random((40, 36), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    fn = TypesSeen()
    with pytest.raises(ConfigError, match=r"no GPU was found.*chunkgraph\[gpu\].*gpu_fallback"):
        apply(fn, src, dst, chunk_sizes=[(20, 18)], device="gpu", intermediates=files.root / "t")
    assert fn.calls == 0 and not (files.root / "t").exists()
    assert not dst.read(Box.from_shape((40, 36))).any()


def test_gpu_fallback_runs_on_the_cpu_and_says_so(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backend, "_probed", [None])
    data = files.random((40, 36), "float32")
    fn = TypesSeen()
    out, report = _run(
        files, data, fn, device="gpu", gpu_fallback=True, **CASES["two levels, quadratic"]
    )
    cpu, _ = _run(files, data, TypesSeen(), **CASES["two levels, quadratic"])
    assert out.tobytes() == cpu.tobytes()
    assert fn.types == {np.ndarray}
    assert report.device == "cpu" and report.gpu_fallback
    assert "gpu_fallback: no GPU was found" in report.summary()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(device="cuda"), r"device must be one of 'cpu', 'gpu', got 'cuda'"),
        (dict(device=None), r"device must be one of 'cpu', 'gpu', got None"),
        (dict(device="gpu", gpu_fallback="yes"), r"gpu_fallback must be True or False"),
        (
            dict(device="gpu", executor="processes"),
            r"device='gpu' runs in this process's threads, but executor='processes'.*'threads'",
        ),
    ],
)
def test_bad_device_options_are_config_errors(
    files: Any, kwargs: dict[str, Any], message: str
) -> None:
    data = files.random((40, 36), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    with use_backend(FakeBackend()), pytest.raises(ConfigError, match=message):
        apply(double, src, dst, chunk_sizes=[(20, 18)], **kwargs)


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("executor", ["processes", "tcp://127.0.0.1:9"])
def test_gpu_with_an_executor_elsewhere_is_refused_whether_or_not_a_gpu_is_here(
    files: Any, executor: str, fallback: bool
) -> None:
    """The GPU found (or not) here says nothing of other processes' or a cluster's: the
    executor is refused first, with and without gpu_fallback, and nothing connects."""
    src = files.source(files.random((16, 16), "float32"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "float32")
    for backend in (FakeBackend(0), FakeBackend(1)):
        with use_backend(backend), pytest.raises(ConfigError, match=r"runs in this process"):
            apply(double, src, dst, chunk_sizes=[8], device="gpu", executor=executor,
                  gpu_fallback=fallback)  # fmt: skip


def test_gpu_without_dst_is_refused(files: Any) -> None:
    src = files.source(files.random((40, 36), "float32"), (8, 8))
    with use_backend(FakeBackend()), pytest.raises(ConfigError, match="device='gpu' needs a dst"):
        apply(TypesSeen(), src, None, chunk_sizes=[(20, 18)], device="gpu")


def test_dry_run_names_the_device(files: Any) -> None:
    data = files.random((40, 36), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    with use_backend(FakeBackend()) as backend:
        report = apply(TypesSeen(), src, dst, chunk_sizes=[(20, 18)], device="gpu", dry_run=True)
    assert report.device == "gpu" and "  device: gpu" in report.summary().splitlines()
    assert backend.uploads == 0  # type: ignore[attr-defined]


def test_a_dry_run_answers_without_a_gpu_and_says_so(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backend, "_probed", [None])  # as on a machine without CuPy or GPU
    src = files.source(files.random((40, 36), "float32"), (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    report = apply(TypesSeen(), src, dst, chunk_sizes=[(20, 18)], device="gpu", dry_run=True)
    assert report.dry_run and report.device == "gpu" and report.gpu_missing
    assert "  device: gpu (no GPU here: the run needs one" in report.summary()
    with pytest.raises(ConfigError, match="device='gpu' needs a dst"):
        apply(TypesSeen(), src, None, chunk_sizes=[(20, 18)], device="gpu", dry_run=True)


def test_a_backend_with_no_device_is_no_gpu(files: Any) -> None:
    src = files.source(files.random((40, 36), "float32"), (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    with use_backend(FakeBackend(0)):
        with pytest.raises(ConfigError, match=r"device='gpu' but no GPU was found"):
            apply(TypesSeen(), src, dst, chunk_sizes=[(20, 18)], device="gpu")
        report = apply(double, src, dst, chunk_sizes=[(20, 18)], device="gpu", gpu_fallback=True)
    assert report.device == "cpu" and report.gpu_fallback


def test_the_device_is_not_part_of_the_flow_id(files: Any) -> None:
    """It changes where the flow computes, not what: a resumed flow may switch devices."""
    src = files.source(files.random((40, 36), "float32"), (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    case = CASES["two levels, quadratic"]
    cpu = apply(double, src, dst, dry_run=True, **case)
    with use_backend(FakeBackend()):
        gpu = apply(double, src, dst, dry_run=True, device="gpu", **case)
    assert gpu.flow_id == cpu.flow_id


def double(src: np.ndarray) -> np.ndarray:
    return src * 2


def test_top_tasks_are_spread_over_every_device(files: Any) -> None:
    """Top task (i, j) computes on device (i + j) % n, bound there: fn's arrays are on it."""
    data = files.random((40, 36), "float32")
    seen: list[tuple[int, int, tuple[int, ...]]] = []
    backend = FakeBackend(count=2)

    def where(src: np.ndarray, box: Box) -> np.ndarray:
        seen.append((int(src.fake_device), backend.current_device(), box.start))  # type: ignore[attr-defined]
        return src

    dst = files.empty((40, 36), (8, 8), "float32")
    with use_backend(backend):
        apply(
            where,
            files.source(data, (8, 8)),
            dst,
            chunk_sizes=[(20, 18), (10, 9)],
            device="gpu",
            probe=False,
            intermediates=files.root / "tmp",
        )
    np.testing.assert_array_equal(dst.read(dst.bounds), data)
    assert {held for held, _, _ in seen} == {0, 1}
    for held, bound, start in seen:
        top = (start[0] // 20, start[1] // 18)
        assert held == bound == sum(top) % 2, (held, bound, start)


@pytest.mark.skipif(
    not isinstance(active_backend(), CupyBackend), reason="needs CuPy and an NVIDIA GPU"
)
def test_gaussian_on_a_real_gpu_matches_scipy(files: Any) -> None:
    from cupyx.scipy import ndimage as cu_ndimage  # type: ignore[import-not-found]
    from scipy import ndimage

    data = files.random((48, 48, 48), "float32")
    case = dict(chunk_sizes=[(24, 24, 24), (12, 12, 12)], crop_pads=[(0, 0, 0), (8, 8, 8)])

    def on_gpu(src: Any) -> Any:
        return cu_ndimage.gaussian_filter(src, sigma=2.0)

    def on_cpu(src: np.ndarray) -> np.ndarray:
        out: np.ndarray = ndimage.gaussian_filter(src, sigma=2.0)
        return out

    cpu, _ = _run(files, data, on_cpu, **case)
    gpu, report = _run(files, data, on_gpu, device="gpu", **case)
    assert report.device == "gpu"
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("tasks_on_device", [1, 2, 3])
def test_two_top_tasks_share_the_device(files: Any, tasks_on_device: int) -> None:
    """Lower levels run in their task's thread, so two tasks are admitted at once (one
    can read and write while the other computes), not the CPU rule's one per pool;
    one when the device holds only one task's data."""
    data = files.random((40, 36), "float32")
    running, most = [0], [0]
    lock = threading.Lock()

    def slow(src: np.ndarray) -> np.ndarray:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return src

    src, dst = files.source(data, (8, 8)), files.empty((40, 36), (8, 8), "float32")
    kw: dict[str, Any] = dict(chunk_sizes=[(20, 18), (10, 9)], device="gpu", workers=4,
                              probe=False, intermediates=files.root / "tmp")  # fmt: skip
    with use_backend(FakeBackend()):
        task_bytes = apply(slow, src, dst, **kw, dry_run=True).estimate.top_task_memory_bytes
    backend = FakeBackend(memory=int(task_bytes * (tasks_on_device + 0.5)))
    with use_backend(backend):
        report = apply(slow, src, dst, **kw)
    assert report.tasks_per_level == (4, 16)
    # 4 bottom chunks per task: the CPU rule admits ceil(cores / 4) tasks, a GPU flow
    # up to 2 per device (as many as its memory holds) or that.
    per_device = min(tasks_on_device, 2)
    assert most[0] == min(4, max(per_device, -(-usable_cores() // 4)))
    assert backend.trims == 1  # the pool is trimmed after the flow


def test_top_tasks_in_flight_on_one_device_each_have_their_own_stream(files: Any) -> None:
    """Each top task's thread issues its uploads, kernels and download on its own stream
    (so two tasks on one device overlap); no read crosses streams unwaited, which the
    fake would raise (``FakeStreamOrderError``); each task waits for its stream at the end."""
    data = files.random((40, 36), "float32")
    streams: dict[int, set[int]] = {}
    lock = threading.Lock()

    def seen(src: Any) -> Any:
        with lock:
            streams.setdefault(threading.get_ident(), set()).add(id(src.fake_stream))
        time.sleep(0.02)
        return src * 2

    backend = FakeBackend()
    with use_backend(backend):
        out, report = _run(files, data, seen, chunk_sizes=[(20, 18), (10, 9)], device="gpu",
                           workers=4, probe=False)  # fmt: skip
    np.testing.assert_array_equal(out, data * 2)
    assert all(len(ids) == 1 for ids in streams.values())  # one stream per thread
    assert len({i for ids in streams.values() for i in ids}) == len(streams)  # not shared
    assert backend.waits >= report.tasks_per_level[0]  # each top task waited at its end


def test_a_top_task_too_big_for_the_device_is_refused_before_anything_is_written(
    files: Any,
) -> None:
    data = files.random((40, 36), "float32")
    src, dst = files.source(data, (8, 8)), files.empty((40, 36), (8, 8), "float32")
    too_big = r"4.9 KiB on the GPU.*4.0 KiB free"
    with use_backend(FakeBackend(memory=4096)), pytest.raises(ConfigError, match=too_big):
        apply(double, src, dst, chunk_sizes=[(20, 18), (10, 9)], device="gpu",
              intermediates=files.root / "tmp")  # fmt: skip
    assert not dst.read(dst.bounds).any()
    assert not (files.root / "tmp").exists()


def double_unless_told_to_fail(src: np.ndarray, box: Box) -> np.ndarray:
    # The switch is outside fn (an environment variable), so both runs are one flow id.
    if os.environ.get("CHUNKGRAPH_TEST_FAIL") and box.start[0] >= 18:
        raise RuntimeError("simulated failure in the second row of top chunks")
    return src * 2


@pytest.mark.parametrize(("first", "then"), [("cpu", "gpu"), ("gpu", "cpu")])
def test_a_flow_resumes_on_the_other_device(
    files: Any, monkeypatch: pytest.MonkeyPatch, first: str, then: str
) -> None:
    """The flow id ignores the device: a flow that failed on one finishes on the other."""
    data = files.random((40, 36), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")
    case: dict[str, Any] = dict(
        chunk_sizes=[(20, 18), (10, 9)], intermediates=files.root / "tmp", probe=False
    )
    backend = FakeBackend()
    with use_backend(backend):
        monkeypatch.setenv("CHUNKGRAPH_TEST_FAIL", "1")
        with pytest.raises(ExceptionGroup):
            apply(double_unless_told_to_fail, src, dst, retries=0, device=first, **case)
        monkeypatch.delenv("CHUNKGRAPH_TEST_FAIL")
        uploads = backend.uploads
        report = apply(double_unless_told_to_fail, src, dst, resume=True, device=then, **case)
    assert report.top_tasks_skipped == 2 and report.tasks_per_level[0] == 2
    assert backend.uploads - uploads == (2 if then == "gpu" else 0)
    np.testing.assert_array_equal(dst.read(Box.from_shape((40, 36))), data * 2)


def test_a_gpu_flow_keeps_two_tasks_per_device_in_flight_however_few_the_cores(
    files: Any,
) -> None:
    """Without workers=, the executor has a thread for each device's tasks in flight
    (they wait on the device, not a core), and the plan says how many."""
    data = files.random((128, 32, 32), "float32")  # 8 top tasks of 4 bottom chunks
    running: dict[int, int] = {}
    most: dict[int, int] = {}
    lock = threading.Lock()
    backend = FakeBackend(count=2)

    def slow(src: Any) -> Any:
        device = backend.bound_device()
        assert device is not None
        with lock:
            running[device] = running.get(device, 0) + 1
            most[device] = max(most.get(device, 0), running[device])
        time.sleep(0.03)
        with lock:
            running[device] -= 1
        return src

    src, dst = files.source(data, (16, 16, 16)), files.empty(data.shape, (16, 16, 16), "float32")
    kw: dict[str, Any] = dict(chunk_sizes=[(16, 32, 32), (16, 16, 16)], device="gpu",
                              probe=False, intermediates=files.root / "tmp")  # fmt: skip
    with use_backend(backend):
        dry = apply(slow, src, dst, **kw, dry_run=True)
        report = apply(slow, src, dst, **kw)
    assert report.tasks_per_level == (8, 32)
    assert set(most) == {0, 1} and min(most.values()) >= 2
    in_flight = max(4, -(-usable_cores() // 4))  # the CPU rule: enough to cover the cores
    assert dry.plan is not None and dry.plan.superchunks_in_flight == in_flight
