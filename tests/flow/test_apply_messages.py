"""What a refused or failed flow says, and that it wrote nothing on the way.

Each case checks the message (what is wrong, where, what would be valid) and
that dst holds nothing new and nothing was created beside it, or, for a run
that failed after starting, that the state kept for a resume is named.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import ConfigError, FlowOutputError, TaskError
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume


def _pair(
    tmp_path: Path, dst_shape: tuple[int, ...] = (32, 32), **dst: Any
) -> tuple[Volume, Volume]:
    src = volume.create(str(tmp_path / "s.zarr"), (32, 32), (8, 8), "float32")
    src.write(src.bounds, np.arange(32 * 32, dtype="float32").reshape(32, 32))
    chunks = (*dst_shape[:-2], 8, 8)
    return src, volume.create(str(tmp_path / "d.zarr"), dst_shape, chunks, "float32", **dst)


def _untouched(tmp_path: Path, dst: Volume) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.zarr"]
    assert not volume.open(dst.path).read(dst.bounds).any()


def fail_at(src: np.ndarray, box: Box, start: tuple[int, ...]) -> np.ndarray:
    if box.start == start:
        raise ValueError("no data here")
    return src


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_failing_fn_is_one_group_deep_naming_its_chunk_and_level(
    tmp_path: Path, executor: str
) -> None:
    """Three levels (16 -> 8 -> 4): fn fails on one bottom chunk of the first top task."""
    src, dst = _pair(tmp_path)
    fn = functools.partial(fail_at, start=(8, 8))
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(fn, src, dst, chunk_sizes=[16, 8, 4], executor=executor, workers=1, retries=0)
    (error,) = info.value.exceptions  # one level: TaskErrors, no group inside
    assert isinstance(error, TaskError) and isinstance(error.__cause__, ValueError)
    assert "ValueError: no data here (in the apply flow's fn on chunk " in str(error)
    assert "Box(start=(8, 8), stop=(12, 12)) at level 2, the bottom" in str(error)
    # The failed run keeps its state for resume=True, and says where and how to remove it.
    (note,) = info.value.__notes__
    flows = tmp_path / ".d.zarr.chunkgraph"
    (flow_dir,) = [p for p in flows.iterdir() if p.is_dir()]
    assert f"under {flow_dir}" in note and f"chunkgraph clean {dst.path} {flow_dir.name}" in note
    assert not dst.read(dst.bounds).any()  # nothing reached dst


@pytest.mark.parametrize(
    ("dst_shape", "fn", "says"),
    [
        ((3, 32, 32), lambda x: x[None], "its channel axis 0 has 1 channel(s), dst has 3"),
        ((3, 32, 32), lambda x: x, "it has no channel axis, dst has channel shape (3,)"),
        ((3, 32, 32), lambda x: np.stack([x] * 3, -1), "it puts the channels last"),
        ((32, 32), lambda x: np.stack([x] * 2), "channel axes (2,) before the 2 spatial axes"),
    ],
)
@pytest.mark.parametrize("probe", [True, False])
def test_a_channel_mismatch_is_named_as_such(
    tmp_path: Path, dst_shape: tuple[int, ...], fn: Any, says: str, probe: bool
) -> None:
    src, dst = _pair(tmp_path, dst_shape, spatial_ndim=2)
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(fn, src, dst, chunk_sizes=[8], crop_pads=2, probe=probe, retries=0)
    cause = info.value.exceptions[0].__cause__
    assert isinstance(cause, FlowOutputError)
    valid = f"return shape {(*dst_shape[:-2], 12, 12)} (the input's) or "
    assert "its channels do not match dst's" in str(cause) and says in str(cause)
    assert valid in str(cause)
    if probe:
        _untouched(tmp_path, dst)
    else:
        assert not dst.read(dst.bounds).any()


def test_intermediates_under_a_file_is_refused(tmp_path: Path) -> None:
    src, dst = _pair(tmp_path)
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match=r"intermediates='.*notes.txt/run' is under '.*notes"):
        volume.apply(
            lambda x: x,
            src,
            dst,
            chunk_sizes=[8],
            blend_pads=2,
            intermediates=tmp_path / "notes.txt" / "run",
        )
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    (tmp_path / "notes.txt").unlink()
    _untouched(tmp_path, dst)


@pytest.mark.parametrize("sizes", [{"chunk_sizes": [8]}, {}])
@pytest.mark.parametrize("bbox", [Box((40, 0), (48, 8)), Box((-16, -16), (-8, 32))])
def test_a_bbox_entirely_outside_dst_is_refused(tmp_path: Path, sizes: Any, bbox: Box) -> None:
    src, dst = _pair(tmp_path)
    with pytest.raises(ConfigError, match=r"lies entirely outside dst bounds .* \(axis 0: "):
        volume.apply(lambda x: x, src, dst, crop_pads=2, bbox=bbox, **sizes)
    _untouched(tmp_path, dst)


@pytest.mark.parametrize("sizes", [{"chunk_sizes": [8]}, {}])
def test_a_bbox_that_meets_no_input_is_refused(tmp_path: Path, sizes: Any) -> None:
    """dst at offset 0 beside an input at (1000, 2000): fn would see fill values only."""
    src = volume.create(str(tmp_path / "s.zarr"), (32, 32), (8, 8), "float32", offset=(1000, 2000))
    src.write(src.bounds, np.ones((32, 32), dtype="float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (32, 32), (8, 8), "float32")
    message = (
        r"bbox Box\(start=\(0, 0\), stop=\(32, 32\)\) \(in dst voxels\) meets no input: "
        r"the inputs' bounds are 'src' Box\(start=\(1000, 2000\), stop=\(1032, 2032\)\)"
    )
    with pytest.raises(ConfigError, match=message):
        volume.apply(lambda x: x, src, dst, **sizes)
    _untouched(tmp_path, dst)


@pytest.mark.parametrize("backend", ["zarr", "tensorstore"])
@pytest.mark.parametrize("dtype", ["U4", "S3", object, [("a", "i4")], "m8[s]"])
def test_a_dtype_no_volume_can_hold_is_refused_at_create(
    tmp_path: Path, backend: str, dtype: Any
) -> None:
    path = tmp_path / "v.zarr"
    with pytest.raises(ConfigError, match=r"cannot be stored in a volume .* valid: bool, int8"):
        volume.create(str(path), (8, 8), (8, 8), dtype, backend=backend)  # type: ignore[arg-type]
    assert not path.exists()


def test_complex_volumes_need_zarr(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="complex volumes need backend='zarr'"):
        volume.create(str(tmp_path / "t.zarr"), (8,), (8,), "complex64", backend="tensorstore")
    made = volume.create(str(tmp_path / "z.zarr"), (8,), (8,), "complex64")
    made.write(made.bounds, np.full(8, 1 + 2j, "complex64"))
    assert volume.open(made.path).read(made.bounds)[3] == 1 + 2j


def interrupt_counted(src: np.ndarray, counter: str) -> np.ndarray:
    with open(counter, "a") as calls:
        calls.write(f"{src.flat[0]}\n")  # which chunk: a retry would name one twice
    raise KeyboardInterrupt


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_ctrl_c_inside_fn_is_not_retried(tmp_path: Path, executor: str) -> None:
    src, dst = _pair(tmp_path)
    counter = tmp_path / "calls"
    fn = functools.partial(interrupt_counted, counter=str(counter))
    with pytest.raises(KeyboardInterrupt) as info:
        volume.apply(
            fn, src, dst, chunk_sizes=[16, 8], probe=False, executor=executor, workers=1, retries=2
        )
    # Sub-chunks of one top task may start side by side, so more than one may have been
    # called; none may have been called again.
    calls = counter.read_text().split()
    assert calls and len(calls) == len(set(calls)), calls
    assert "keeps its temporaries" in info.value.__notes__[0]
