"""``RunOptions`` as one value: ``run=`` reaches the flow from ``apply``, ``reduce_deferred``,
``downsample`` and ``transfer``; a bad value is refused when it is made, a keyword beside
``run=`` that says otherwise is refused naming both, and an option a caller has no use
for is refused rather than ignored."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chunkgraph
from chunkgraph import ConfigError, downsample, transfer, volume
from chunkgraph.execute import EventKind, LocalExecutor
from chunkgraph.flow import DeviceChoice, RunOptions, apply, reduce_deferred

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")


@pytest.fixture
def src(tmp_path: Path) -> Any:
    vol = volume.create(tmp_path / "src.zarr", (16, 16), (8, 8), "uint16")
    vol.write(vol.bounds, np.arange(256, dtype="uint16").reshape(16, 16))
    return volume.open(tmp_path / "src.zarr")


def _dst(tmp_path: Path, name: str = "dst.zarr") -> Any:
    return volume.create(tmp_path / name, (16, 16), (8, 8), "uint16")


class FailsOnce:
    """fn failing the first try of every chunk: it succeeds only where tasks are retried."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, ...]] = set()
        self.lock = threading.Lock()

    def __call__(self, x: np.ndarray, box: Any) -> np.ndarray:
        with self.lock:
            first = box.start not in self.seen
            self.seen.add(box.start)
        if first:
            raise OSError(f"transient failure at {box}")
        return x + 1


def test_run_options_are_public_names() -> None:
    assert chunkgraph.RunOptions is RunOptions is chunkgraph.flow.RunOptions
    assert "RunOptions" in chunkgraph.__all__ and "RunOptions" in chunkgraph.flow.__all__


def test_apply_honours_retries_workers_and_dry_run_given_as_one_value(
    src: Any, tmp_path: Path
) -> None:
    dst = _dst(tmp_path)
    with pytest.raises(ExceptionGroup):  # no retries: the first failures end the flow
        apply(FailsOnce(), src, dst, chunk_sizes=[(8, 8)], run=RunOptions(retries=0, probe=False))
    events: list[Any] = []
    run = RunOptions(retries=1, workers=1, probe=False, subscribers=(events.append,))
    report = apply(FailsOnce(), src, dst, chunk_sizes=[(8, 8)], run=run)
    assert report.tasks_per_level == (4,)
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)
    assert sum(e.kind is EventKind.RETRIED for e in events) == 4
    assert len({e.worker for e in events if e.kind is EventKind.STARTED}) == 1
    other = _dst(tmp_path, "other.zarr")
    planned = apply(np.negative, src, other, chunk_sizes=[(8, 8)], run=RunOptions(dry_run=True))
    assert planned.dry_run and not other.read(other.bounds).any()


def test_a_keyword_beside_run_must_agree_with_it(src: Any, tmp_path: Path) -> None:
    dst = _dst(tmp_path)
    with pytest.raises(ConfigError, match=r"workers=3 is given beside run=") as info:
        apply(np.negative, src, dst, chunk_sizes=[(8, 8)], run=RunOptions(workers=2), workers=3)
    assert info.value.field == "workers"
    with pytest.raises(ConfigError, match="resume=True is given beside run=") as info:
        apply(np.negative, src, dst, chunk_sizes=[(8, 8)], run=RunOptions(), resume=True)
    assert info.value.field == "resume"
    # A keyword that agrees, or is left at its default, takes run's value.
    report = apply(np.negative, src, dst, chunk_sizes=[(8, 8)], workers=2, dry_run=True,
                   run=RunOptions(workers=2, dry_run=True))  # fmt: skip
    assert report.dry_run
    # A fallback asked for beside run's GPU is not lost in a CPU choice equal to the default.
    with pytest.raises(ConfigError, match="gpu_fallback=True is given beside run=") as info:
        apply(np.negative, src, dst, chunk_sizes=[(8, 8)], gpu_fallback=True,
              run=RunOptions.of(device="gpu"))  # fmt: skip
    assert info.value.field == "gpu_fallback"
    with pytest.raises(ConfigError, match="run must be a RunOptions") as info:
        apply(np.negative, src, dst, chunk_sizes=[(8, 8)], run={"workers": 2})  # type: ignore[arg-type]
    assert info.value.field == "run"
    assert not (tmp_path / ".dst.zarr.chunkgraph").exists()  # refused before anything ran


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"retries": -1}, "retries"),
        ({"dry_run": "no"}, "dry_run"),
        ({"lock_wait": -1}, "lock_wait"),
        ({"device": "gpu"}, "device"),
        ({"executor": "processes", "device": DeviceChoice.GPU}, "device"),
        ({"executor": LocalExecutor("threads", 2), "retries": 2}, "retries"),
        ({"executor": LocalExecutor("threads", 2), "workers": 2}, "workers"),
        ({"executor": "thread"}, "executor"),
    ],
)
def test_a_bad_value_is_refused_when_it_is_made_or_run(
    src: Any, tmp_path: Path, fields: dict[str, Any], field: str
) -> None:
    """Made directly, as ``RunOptions.of`` makes it, or by ``dataclasses.replace``; a bad
    combination no single field shows (retries beside an Executor) when the flow starts."""
    dst = _dst(tmp_path)
    with pytest.raises(ConfigError) as info:
        apply(np.negative, src, dst, chunk_sizes=[(8, 8)], run=RunOptions(**fields))
    assert info.value.field == field, info.value
    with pytest.raises(ConfigError) as info:  # where the value is made, not later
        RunOptions(**fields)
    assert info.value.field == field, info.value


def test_reduce_deferred_takes_run_and_refuses_what_it_has_no_use_for(
    src: Any, tmp_path: Path
) -> None:
    dst = _dst(tmp_path)
    report = apply(np.negative, src, dst, chunk_sizes=[(8, 8)], blend_pads=2,
                   blend_modes="defer", bbox=None)  # fmt: skip
    for unused in (RunOptions(dry_run=True), RunOptions(device=DeviceChoice.GPU_OR_CPU)):
        with pytest.raises(ConfigError, match="reduce_deferred takes no") as info:
            reduce_deferred(report, dst, run=unused)
        assert info.value.field in ("dry_run", "device")
    with pytest.raises(ConfigError, match="workers=3 is given beside run="):
        reduce_deferred(report, dst, workers=3, run=RunOptions(workers=2))
    events: list[Any] = []
    done = reduce_deferred(report, dst, run=RunOptions(workers=1, subscribers=(events.append,)))
    assert done.reductions > 0 and any(e.kind is EventKind.FINISHED for e in events)
    assert len({e.worker for e in events if e.kind is EventKind.STARTED}) == 1
    assert dst.read(dst.bounds).any()


def test_downsample_passes_run_on_to_each_flow(src: Any, tmp_path: Path) -> None:
    events: list[Any] = []
    run = RunOptions(memory_limit=2**30, workers=1, subscribers=(events.append,))
    report = downsample(src, levels=2, dst=str(tmp_path / "s{level}.zarr"), run=run)
    assert [p.plan.memory_limit for p in report.passes if p.plan] == [2**30] * len(report.passes)
    assert any(e.kind is EventKind.FINISHED for e in events)
    assert len({e.worker for e in events if e.kind is EventKind.STARTED}) == 1
    planned = downsample(src, dst=str(tmp_path / "d{level}.zarr"), run=RunOptions(dry_run=True))
    assert planned.dry_run and not (tmp_path / "d1.zarr").exists()


def test_transfer_passes_run_on_to_its_flow(src: Any, tmp_path: Path) -> None:
    events: list[Any] = []
    run = RunOptions(memory_limit=2**30, subscribers=(events.append,))
    report = transfer(src, tmp_path / "copy.zarr", chunks=(4, 4), run=run)
    assert report.plan is not None and report.plan.memory_limit == 2**30
    assert any(e.kind is EventKind.FINISHED for e in events)
    copy = volume.open(tmp_path / "copy.zarr")
    np.testing.assert_array_equal(copy.read(copy.bounds), src.read(src.bounds))
    planned = transfer(src, tmp_path / "plan.zarr", run=RunOptions(dry_run=True))
    assert planned.dry_run and not (tmp_path / "plan.zarr").exists()


def test_downsample_and_transfer_run_on_processes_as_on_threads(src: Any, tmp_path: Path) -> None:
    """The plan over stand-ins in memory runs here; the job itself on the processes asked
    for (its top tasks' events name the worker process that ran them), with the same
    result."""
    events: list[Any] = []
    on = {
        kind: RunOptions(executor=kind, workers=2, subscribers=(events.append,))
        for kind in ("threads", "processes")
    }
    for kind, run in on.items():
        events.clear()
        downsample(src, levels=2, dst=str(tmp_path / f"{kind}{{level}}.zarr"), run=run)
        transfer(src, tmp_path / f"{kind}-copy.zarr", chunks=(4, 4), run=run)
        workers = {e.worker for e in events if e.kind is EventKind.STARTED}
        on_processes = all(w.startswith("process ") for w in workers)
        assert on_processes is (kind == "processes"), workers
    for name in ("{}1.zarr", "{}2.zarr", "{}-copy.zarr"):
        threads, processes = (volume.open(tmp_path / name.format(k)) for k in on)
        np.testing.assert_array_equal(
            processes.read(processes.bounds), threads.read(threads.bounds)
        )
    planned = downsample(src, dst=str(tmp_path / "p{level}.zarr"), dry_run=True,
                         executor="processes")  # fmt: skip
    assert planned.dry_run and not (tmp_path / "p1.zarr").exists()
    planned = transfer(src, tmp_path / "plan.zarr", dry_run=True, executor="processes")
    assert planned.dry_run and not (tmp_path / "plan.zarr").exists()


@pytest.mark.parametrize("job", ["downsample", "transfer"])
@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"run": RunOptions(intermediates="elsewhere")}, "intermediates", "takes no"),
        ({"run": RunOptions(device=DeviceChoice.GPU_OR_CPU)}, "device", "takes no"),
        ({"run": RunOptions(workers=2), "workers": 3}, "workers", "given beside run="),
        (
            {"run": RunOptions(executor=LocalExecutor("threads", 2)), "workers": 3},
            "workers",
            "beside",
        ),
    ],
)
def test_a_job_refuses_bad_combinations_before_writing(
    src: Any, tmp_path: Path, job: str, kwargs: dict[str, Any], field: str, message: str
) -> None:
    out = tmp_path / "out.zarr"
    with pytest.raises(ConfigError, match=message) as info:
        if job == "downsample":
            downsample(src, dst=str(tmp_path / "out{level}.zarr"), **kwargs)
        else:
            transfer(src, out, **kwargs)
    assert info.value.field == field, info.value
    assert not out.exists() and not (tmp_path / "out1.zarr").exists()
    assert not (tmp_path / ".out.zarr.chunkgraph").exists()
