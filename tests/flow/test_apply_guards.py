"""Guards of apply: out-of-range outputs saturate; an unknown executor fails before any write."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, volume
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume


@pytest.mark.parametrize("blend", [0, 2], ids=["copy", "blended"])
@pytest.mark.parametrize(
    ("fn", "expected", "rule"),
    [
        (lambda x: x.astype("int32") * 2, 255, "unsafe"),  # 400 would wrap to 144
        (lambda x: x.astype("int16") - 300, 0, "unsafe"),  # -100 would wrap to 156
        (lambda x: x.astype("uint16") * 2, 255, "same_kind"),
        (lambda x: x.astype("float64") * 10.0, 255, "unsafe"),
    ],
    ids=["int-over", "int-under", "uint-over", "float-over"],
)
def test_out_of_range_outputs_are_refused_or_saturate_and_are_counted(
    fn: object, expected: int, rule: str, blend: int
) -> None:
    """By default a cast that can saturate is refused before anything is written; allowed
    (cast=), out-of-range values saturate rather than wrap, and the run counts them."""
    from chunkgraph.flow import SaturationWarning

    src = volume.create("sat-src", (16, 16), (8, 8), "uint8", backend="memory")
    src.write(src.bounds, np.full((16, 16), 200, np.uint8))
    dst = volume.create("sat-dst", (16, 16), (8, 8), "uint8", backend="memory")
    kw = dict(chunk_sizes=[8], blend_pads=blend, executor="sync")
    try:
        with pytest.raises(ConfigError, match=f"cast='safe' .*uint8.*cast='{rule}'"):
            volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
        assert not dst.read(dst.bounds).any()
        with pytest.warns(SaturationWarning, match="256 voxel"):
            report = volume.apply(fn, src, dst, cast=rule, **kw)  # type: ignore[arg-type]
        assert np.all(dst.read(Box.from_shape((16, 16))) == expected)
        assert report.saturated_voxels == 256
        assert "saturated: 256 voxels" in report.summary()
    finally:
        volume.remove("sat-src")
        volume.remove("sat-dst")


def test_an_unknown_executor_is_refused_before_anything_is_written(tmp_path: object) -> None:
    root = Path(str(tmp_path))
    src = volume.create(str(root / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(root / "d.zarr"), (16, 16), (8, 8), "uint8")
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(ConfigError, match="executor must be one of"):
        volume.apply(lambda x: x, src, dst, chunk_sizes=[8], blend_pads=2, executor="gpu")  # type: ignore[arg-type]
    assert sorted(p.name for p in root.iterdir()) == before


@pytest.mark.parametrize(
    ("chunks", "blends", "crops"),
    [([16], 3, 0), ([16, 11], [3, 1], [0, 1])],
    ids=["one-level-blend", "two-level-blend-crop"],
)
def test_identity_keeps_negative_zero(chunks: list[int], blends: object, crops: object) -> None:
    """-0.0 and +0.0 differ in their bits; an identity flow must keep both."""
    data = np.random.default_rng(3).standard_normal((32, 32)).astype("float32")
    data[5, 5] = data[16, 16] = data[0, 31] = -0.0
    data[6, 6] = 0.0
    src = volume.create("nz-src", (32, 32), (8, 8), "float32", backend="memory")
    src.write(src.bounds, data)
    dst = volume.create("nz-dst", (32, 32), (8, 8), "float32", backend="memory")
    try:
        volume.apply(
            lambda x: x,
            src,
            dst,
            chunk_sizes=chunks,
            blend_pads=blends,
            crop_pads=crops,
            executor="sync",
        )
        out = dst.read(Box.from_shape((32, 32)))
        assert out.tobytes() == data.tobytes()
    finally:
        volume.remove("nz-src")
        volume.remove("nz-dst")


def _opened_twice(root: Path, how: str) -> tuple[Volume, Volume]:
    """One stored array as input and as dst, through two different handles."""
    made = volume.create(str(root / "a.zarr"), (32, 32), (8, 8), "float32")
    made.write(made.bounds, np.arange(32 * 32, dtype="float32").reshape(32, 32))
    if how == "symlink":
        (root / "link.zarr").symlink_to(root / "a.zarr")
        return volume.open(str(root / "a.zarr")), volume.open(str(root / "link.zarr"), mode="r+")
    if how == "relative":
        rel = os.path.relpath(root / "x" / ".." / "a.zarr")
        return volume.open(rel), volume.open(str(root / "a.zarr"), mode="r+")
    pytest.importorskip("tensorstore")
    return (
        volume.open(str(root / "a.zarr"), backend="zarr"),
        volume.open(str(root / "a.zarr"), mode="r+", backend="tensorstore"),
    )


@pytest.mark.parametrize("how", ["symlink", "relative", "zarr-and-tensorstore"])
def test_dst_that_is_the_input_under_another_name_is_refused_with_pads(
    tmp_path: Path, how: str
) -> None:
    (tmp_path / "x").mkdir()
    src, dst = _opened_twice(tmp_path, how)
    before = dst.read(dst.bounds).copy()
    with pytest.raises(ConfigError, match=r"same stored array as input 'src'.*blend pad"):
        volume.apply(lambda x: x + 1, src, dst, chunk_sizes=[16], blend_pads=2)
    assert np.array_equal(dst.read(dst.bounds), before)


def test_in_place_without_pads_is_allowed_and_exact(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    src, dst = _opened_twice(tmp_path, "symlink")
    before = dst.read(dst.bounds).copy()
    volume.apply(lambda x: x * 2 + 1, src, dst, chunk_sizes=[(16, 16), (8, 8)])
    assert np.array_equal(dst.read(dst.bounds), before * 2 + 1)
    with pytest.raises(ConfigError, match="skip_intermediates=True writes while"):
        volume.apply(lambda x: x, src, dst, chunk_sizes=[16], skip_intermediates=True)


def _double_unless_last(marker: Path, x: np.ndarray, box: Box, factor: int = 2) -> np.ndarray:
    """x * factor; fails on the last top chunk while ``marker`` does not exist."""
    if box.start == (24, 24) and not marker.exists():
        raise ValueError("interrupted")
    return x * factor


def test_an_interrupted_in_place_flow_is_never_started_over(tmp_path: Path) -> None:
    """In place, an interrupted run has rewritten part of dst: a run that starts over (the
    same flow without resume, or another flow) would read those chunks as its input and
    apply fn twice there. Only the resume may go on; it is exact."""
    import functools

    (tmp_path / "x").mkdir()
    src, dst = _opened_twice(tmp_path, "symlink")
    before = dst.read(dst.bounds).copy()
    marker = tmp_path / "fixed"
    fn = functools.partial(_double_unless_last, marker)
    kw: dict[str, object] = dict(chunk_sizes=[(8, 8), (4, 4)], executor="sync", retries=0,
                                 probe=False)  # fmt: skip
    with pytest.raises(ExceptionGroup):
        volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
    assert not np.array_equal(dst.read(dst.bounds), before)  # part of dst is rewritten
    marker.touch()
    with pytest.raises(ConfigError, match=r"earlier run of this flow .* resume=True"):
        volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"unfinished flow .*`chunkgraph clean"):
        volume.apply(fn, src, dst, fn_kwargs={"factor": 3}, **kw)  # type: ignore[arg-type]
    # Other intermediates do not hide it: dst itself says where its state is.
    with pytest.raises(ConfigError, match=r"unfinished flow .*intermediates="):
        volume.apply(fn, src, dst, intermediates=tmp_path / "elsewhere", **kw)  # type: ignore[arg-type]
    volume.apply(fn, src, dst, resume=True, **kw)  # type: ignore[arg-type]
    assert np.array_equal(dst.read(dst.bounds), before * 2)
    assert not (tmp_path / "a.zarr" / ".chunkgraph-in-place.json").exists()


@pytest.mark.parametrize("flag", ["dry_run", "resume", "progress", "probe"])
def test_boolean_options_must_be_bools(tmp_path: Path, flag: str) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError, match=f"{flag} must be True or False, got 'no'"):
        volume.apply(lambda x: x, src, dst, chunk_sizes=[8], **{flag: "no"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.zarr"]


def test_intermediates_that_is_a_file_is_refused(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "uint8")
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match=r"intermediates=.*notes.txt' is a file"):
        volume.apply(lambda x: x, src, dst, chunk_sizes=[8], intermediates=tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_a_users_empty_intermediates_directory_is_kept(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "uint8")
    (tmp_path / "scratch").mkdir()
    with pytest.raises(ExceptionGroup):
        volume.apply(lambda x: 1 / 0, src, dst, chunk_sizes=[8], intermediates=tmp_path / "scratch")
    assert (tmp_path / "scratch").is_dir()
    report = volume.apply(
        lambda x: x, src, dst, chunk_sizes=[8], blend_pads=2, intermediates=tmp_path / "scratch"
    )
    assert [p.name for p in (tmp_path / "scratch").iterdir()] == [f"{report.flow_id}.done"]


def test_an_fn_that_cannot_be_pickled_is_refused_before_temporaries(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "uint8")
    lock = threading.Lock()

    def locked(x: np.ndarray) -> np.ndarray:
        with lock:
            return x

    with pytest.raises(ConfigError, match=r"'locked' .* cannot be pickled: TypeError"):
        volume.apply(locked, src, dst, chunk_sizes=[8], blend_pads=2, executor="processes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.zarr"]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("probe", [True, False])
def test_nan_or_inf_into_an_integer_dst_is_refused_naming_the_chunk(
    bad: float, probe: bool
) -> None:
    src = volume.create("nan-src", (16, 16), (8, 8), "float32", backend="memory")
    dst = volume.create("nan-dst", (16, 16), (8, 8), "uint8", backend="memory")
    data = np.ones((16, 16), "float32")
    data[12, 3] = bad
    src.write(src.bounds, data)
    try:
        with pytest.raises(ExceptionGroup) as info:
            volume.apply(lambda x: x * 2, src, dst, chunk_sizes=[8], blend_pads=1, probe=probe,
                         cast="unsafe")  # fmt: skip
        cause = info.value.exceptions[0].__cause__
        assert isinstance(cause, volume.FlowOutputError)
        assert "NaN or infinite" in str(cause) and "(12, 3)" in str(cause)
        assert "chunk Box(start=(8, 0), stop=(16, 8))" in str(cause)
    finally:
        volume.remove("nan-src")
        volume.remove("nan-dst")


def test_the_probe_catches_a_channel_mismatch_before_temporaries(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (3, 16, 16), (3, 8, 8), "uint8", spatial_ndim=2)
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(lambda x: x, src, dst, chunk_sizes=[8], blend_pads=2)
    (error,) = info.value.exceptions
    assert error.task.startswith("apply-probe") and "probe=False skips it" in str(error)
    assert "no channel axis, dst has channel shape (3,)" in str(error.__cause__)
    assert "return shape (3, 12, 12)" in str(error.__cause__)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.zarr"]


def test_fn_with_a_box_parameter_learns_where_it_is() -> None:
    """Globally unique labels: each chunk numbers its voxels from its box's position."""
    src = volume.create("box-src", (16, 24), (8, 8), "uint8", backend="memory", offset=(100, 0))
    dst = volume.create("box-dst", (16, 24), (8, 8), "uint32", backend="memory", offset=(100, 0))
    seen: list[Box] = []

    def label(x: np.ndarray, box: Box) -> np.ndarray:
        seen.append(box)
        rows, cols = np.indices(box.shape)
        return ((rows + box.start[0]) * 1000 + cols + box.start[1]).astype(np.uint32)

    try:
        volume.apply(label, src, dst, chunk_sizes=[8], crop_pads=2, probe=False)
        rows, cols = np.indices((16, 24))
        np.testing.assert_array_equal(dst.read(dst.bounds), (rows + 100) * 1000 + cols)
        assert Box((98, -2), (110, 10)) in seen and len(seen) == 6
    finally:
        volume.remove("box-src")
        volume.remove("box-dst")


def test_dry_run_shows_temporary_bytes_and_where_they_go(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (32, 32), (8, 8), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (32, 32), (8, 8), "uint8")
    report = volume.apply(lambda x: x, src, dst, chunk_sizes=[16], blend_pads=2, dry_run=True)
    assert report.estimate is not None and report.estimate.temporary_bytes > 0
    text = report.summary()
    assert "to dst (+" in text and " temporary)" in text
    assert f"temporaries under {tmp_path / '.d.zarr.chunkgraph' / report.flow_id}" in text


def test_a_hung_fn_times_out_the_retry_completes_and_the_late_call_writes_nothing(
    tmp_path: Path,
) -> None:
    """One chunk's first call hangs (a stuck network read, say) until the run has
    returned; its retry does not."""
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    src.write(src.bounds, np.ones((16, 16), "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    release = threading.Event()
    hung: list[threading.Thread] = []

    def hangs_once(x: np.ndarray, box: Box) -> np.ndarray:
        if box.start == (4, 4) and not hung:
            hung.append(threading.current_thread())
            release.wait(60)  # past the timeout: the thread is abandoned, then wakes up
        return x + 1

    try:
        report = volume.apply(
            hangs_once,
            src,
            dst,
            chunk_sizes=[(16, 16), (8, 8)],
            blend_pads=[4, 0],
            timeout=2.0,
            retries=1,
            probe=False,
            intermediates=tmp_path / "t",
        )
    finally:
        release.set()
    assert report.tasks_per_level == (1, 9)
    assert np.array_equal(dst.read(dst.bounds), np.full((16, 16), 2, "float32"))
    kept = sorted(p.name for p in (tmp_path / "t").iterdir())
    # The late call returns now; its abandoned thread ends once its task has (not) written.
    hung[0].join(60)
    assert not hung[0].is_alive()
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == kept == [f"{report.flow_id}.done"]
    with pytest.raises(ConfigError, match="timeout must be a positive number"):
        volume.apply(hangs_once, src, dst, chunk_sizes=[8], timeout=0)
    with pytest.raises(ConfigError, match="timeout=5 cannot be enforced with executor='sync'"):
        volume.apply(hangs_once, src, dst, chunk_sizes=[8], timeout=5, executor="sync")


def test_apply_takes_an_executor_object(tmp_path: Path) -> None:
    from chunkgraph.execute import LocalExecutor

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "uint8")
    src.write(src.bounds, np.full((16, 16), 3, "uint8"))
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "uint8")
    volume.apply(
        lambda x: x * 2, src, dst, chunk_sizes=[8], blend_pads=2, executor=LocalExecutor("sync")
    )
    assert np.all(dst.read(dst.bounds) == 6)
    with pytest.raises(ConfigError, match="given beside executor="):
        volume.apply(
            lambda x: x, src, dst, chunk_sizes=[8], workers=3, executor=LocalExecutor("sync")
        )


def test_a_probe_call_that_hangs_fails_after_the_timeout(tmp_path: Path) -> None:
    release = threading.Event()
    returned: list[float] = []

    def hang(x: np.ndarray) -> np.ndarray:
        release.wait(60)  # a hung call; released at the end so the thread ends
        returned.append(time.monotonic())
        return x

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    try:
        with pytest.raises(ExceptionGroup) as caught:
            volume.apply(hang, src, dst, chunk_sizes=[8], timeout=0.5, retries=1)
        assert not returned  # apply gave up on the calls; it did not wait for them
    finally:
        release.set()
    text = str(caught.value.exceptions[0])
    assert "probe" in text and "timeout=0.5 s" in text and "2 attempt(s)" in text
    assert not (tmp_path / ".d.zarr.chunkgraph").exists() or not any(
        (tmp_path / ".d.zarr.chunkgraph").glob("*/layers")
    )


def test_an_fn_writing_into_its_input_is_told_to_copy_it(tmp_path: Path) -> None:
    def in_place(x: np.ndarray) -> np.ndarray:
        x += 1
        return x

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    with pytest.raises(ExceptionGroup) as caught:
        volume.apply(in_place, src, dst, chunk_sizes=[8])
    cause = caught.value.exceptions[0].__cause__
    assert cause is not None and "x = x.copy()" in "\n".join(getattr(cause, "__notes__", []))


def test_a_probe_call_slow_once_is_tried_again(tmp_path: Path) -> None:
    """A first call slow once (a kernel compiling, a cache warming) is retried as the
    flow would retry it; the flow then runs."""
    calls = [0]
    retried = threading.Event()

    def slow_once(x: np.ndarray) -> np.ndarray:
        calls[0] += 1
        if calls[0] == 1:
            retried.wait(60)  # slow until its retry has started: past the timeout
        else:
            retried.set()
        return x + 1

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    volume.apply(slow_once, src, dst, chunk_sizes=[8], timeout=2.0, retries=1)
    assert np.array_equal(dst.read(dst.bounds), np.ones((16, 16), "float32"))


def test_an_in_place_flow_whose_state_was_removed_is_not_started_over(tmp_path: Path) -> None:
    """Interrupted in place, then its state cleaned away: the mark in dst still says dst may
    be half-rewritten, so nothing starts over until it is deleted (dst restored)."""
    import functools

    from chunkgraph import cli

    (tmp_path / "x").mkdir()
    src, dst = _opened_twice(tmp_path, "symlink")
    before = dst.read(dst.bounds).copy()
    fn = functools.partial(_double_unless_last, tmp_path / "fixed")
    kw: dict[str, object] = dict(chunk_sizes=[(8, 8), (4, 4)], executor="sync", retries=0,
                                 probe=False, intermediates=tmp_path / "state")  # fmt: skip
    with pytest.raises(ExceptionGroup):
        volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
    (flow_dir,) = [p for p in (tmp_path / "state").iterdir() if p.is_dir()]
    # The command the refusal suggests, with other intermediates: removes it by id.
    assert cli.main(["clean", "--intermediates", str(tmp_path / "state"), flow_dir.name]) == 0
    assert not flow_dir.exists()
    (tmp_path / "fixed").touch()
    with pytest.raises(ConfigError, match=r"its state under .* is gone"):
        volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
    dst.write(dst.bounds, before)  # restored
    (tmp_path / "a.zarr" / ".chunkgraph-in-place.json").unlink()
    volume.apply(fn, src, dst, **kw)  # type: ignore[arg-type]
    assert np.array_equal(dst.read(dst.bounds), before * 2)
