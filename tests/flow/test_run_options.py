"""Every run option of ``apply``, given a bad value, is refused before anything runs, by a
``ConfigError`` whose ``field`` names it, on every path: into a dst, ``dst=None``,
``reduce_deferred`` and a ``chunkgraph run`` spec file (exit 2 naming the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError, cli, volume
from chunkgraph.execute import LocalExecutor
from chunkgraph.flow import apply, reduce_deferred
from chunkgraph.flow.plan._options import DeviceChoice, RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")

# (option, a bad value): each is refused with field == option.
BAD: list[tuple[str, Any]] = [
    ("executor", 42),
    ("executor", "warp-drive"),
    ("workers", 0),
    ("workers", True),
    ("retries", -1),
    ("retries", "2"),
    ("timeout", -1.0),
    ("timeout", "soon"),
    ("resume", "yes"),
    ("lock_wait", "x"),
    ("lock_wait", -1),
    ("probe", "no"),
    ("progress", 0.5),
    ("dry_run", "no"),
    ("subscribers", [42]),
    ("subscribers", print),
    ("memory_limit", -5),
    ("memory_limit", "4G"),
    ("intermediates", 12),
    ("device", "tpu"),
    ("gpu_fallback", "maybe"),
]
# What reduce_deferred takes of them.
REDUCE_OPTIONS = {"executor", "workers", "retries", "timeout", "lock_wait", "progress"}
REDUCE_OPTIONS |= {"subscribers"}


def double(x: np.ndarray) -> np.ndarray:
    return x * 2


@pytest.fixture
def src(tmp_path: Path) -> Any:
    vol = volume.create(tmp_path / "src.zarr", (16, 16), (8, 8), "float32")
    vol.write(vol.bounds, np.arange(256, dtype="float32").reshape(16, 16))
    return vol


@pytest.mark.parametrize("path", ["dst", "values"])
@pytest.mark.parametrize(("option", "bad"), BAD)
def test_apply_refuses_a_bad_run_option_naming_it(
    src: Any, tmp_path: Path, path: str, option: str, bad: Any
) -> None:
    dst = volume.create(tmp_path / "dst.zarr", (16, 16), (8, 8), "float32")
    target = dst if path == "dst" else None
    with pytest.raises(ConfigError) as info:
        apply(double, src, target, chunk_sizes=[(8, 8)], **{option: bad})
    assert info.value.field == option, info.value
    assert not (tmp_path / ".dst.zarr.chunkgraph").exists()  # refused before anything ran


@pytest.mark.parametrize(("option", "bad"), [b for b in BAD if b[0] in REDUCE_OPTIONS])
def test_reduce_deferred_refuses_a_bad_run_option_naming_it(
    src: Any, tmp_path: Path, option: str, bad: Any
) -> None:
    dst = volume.create(tmp_path / "dst.zarr", (16, 16), (8, 8), "float32")
    report = apply(
        double, src, dst, chunk_sizes=[(8, 8)], blend_pads=2, blend_modes="defer", bbox=None
    )
    with pytest.raises(ConfigError) as info:
        reduce_deferred(report, dst, **{option: bad})
    assert info.value.field == option, info.value
    assert report.intermediates is not None and Path(report.intermediates).is_dir()


# Refused with a dst, once accepted silently without one.
WITHOUT_DST = [
    ("skip_intermediates", "maybe"),
    ("blend_modes", "nonsense"),
    ("memory_limit", -5),
    ("max_reduction_chunk_size", "huge"),
    ("max_reduction_chunk_size", 0),
    ("lock_wait", "x"),
    ("intermediates", 12),
]


@pytest.mark.parametrize(("option", "bad"), WITHOUT_DST)
def test_a_flow_without_dst_checks_what_a_flow_with_one_does(
    src: Any, option: str, bad: Any
) -> None:
    """Once accepted silently with dst=None; each names the parameter in its message."""
    with pytest.raises(ConfigError, match=option):
        apply(double, src, None, chunk_sizes=[(8, 8)], **{option: bad})


def test_retries_given_beside_an_executor_is_refused_not_dropped(src: Any, tmp_path: Path) -> None:
    """An Executor carries its own retries: an explicit one beside it (even apply's own
    default, 2) is an error, never silently replaced."""
    dst = volume.create(tmp_path / "dst.zarr", (16, 16), (8, 8), "float32")
    executor = LocalExecutor("threads", 2)
    with pytest.raises(ConfigError, match="given beside executor") as info:
        apply(double, src, dst, chunk_sizes=[(8, 8)], executor=executor, retries=2)
    assert info.value.field == "retries"
    report = apply(double, src, dst, chunk_sizes=[(8, 8)], executor=executor)
    assert report.tasks_per_level == (4,)


def test_device_and_fallback_are_one_explicit_state() -> None:
    assert RunOptions.of().device is DeviceChoice.CPU
    assert RunOptions.of(device="gpu").device is DeviceChoice.GPU
    choice = RunOptions.of(device="gpu", gpu_fallback=True).device
    assert choice is DeviceChoice.GPU_OR_CPU and choice.device == "gpu" and choice.gpu_fallback
    assert RunOptions.of(retries=None).retries is None  # not given: the executor decides


# A spec file's run options: (the YAML line, the field the error names).
SPEC_BAD = [
    ("retries: -1", "retries"),
    ("retries: lots", "retries"),
    ("timeout: 0", "timeout"),
    ("probe: sometimes", "probe"),
    ("lock_wait: -3", "lock_wait"),
    ("intermediates: 12", "intermediates"),
    ("device: tpu", "device"),
    ("gpu_fallback: maybe", "gpu_fallback"),
    ("run: {workers: 0}", "run.workers"),
    ("run: {executor: warp-drive}", "run.executor"),
]


@pytest.mark.parametrize(("line", "field"), SPEC_BAD)
def test_a_spec_file_with_a_bad_run_option_exits_2_naming_it(
    src: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, field: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "input: src.zarr\noutput: {path: out.zarr, dtype: float32, chunks: [8, 8]}\n"
        f"function: numpy:negative\nchunk_sizes: [8]\n{line}\n"
    )
    code = cli.main(["run", "--quiet", str(spec)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert field in err and "nothing was run" in err
    assert not (tmp_path / "out.zarr").exists()
