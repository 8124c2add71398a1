"""downsample: every level exact against a whole-array numpy reference, one pass over the
source, resume after SIGKILL, and the errors a wrong argument gets."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.flow._done import done_under

from chunkgraph import ConfigError, downsample, volume
from chunkgraph.cli._cmd_downsample import FORMAT_NAMES as CLI_FORMATS
from chunkgraph.cli._cmd_downsample import METHODS as CLI_METHODS
from chunkgraph.geometry import Box
from chunkgraph.jobs._block_reduce import METHODS, block_reduce
from chunkgraph.jobs._pyramid import OUTPUT_FORMATS

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


def reference(a: np.ndarray, factor: tuple[int, ...], method: str) -> np.ndarray:
    """One level, block by block in plain Python: the definition the flow must meet."""
    out_shape = tuple(-(-n // f) for n, f in zip(a.shape, factor, strict=True))
    out = np.zeros(out_shape, a.dtype)
    for index in itertools.product(*(range(n) for n in out_shape)):
        block = a[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factor, strict=True))]
        values = np.sort(block.ravel())
        if method == "mean":
            mean = values.astype(np.float64).mean()
            out[index] = np.rint(mean) if a.dtype.kind in "iu" else mean
        elif method == "median":
            out[index] = values[(len(values) - 1) // 2]
        elif method == "mode":
            labels, counts = np.unique(values, return_counts=True)
            out[index] = labels[np.argmax(counts)]  # unique sorts: the smallest of a tie
        elif method == "max":
            out[index] = values[-1]
        elif method == "min":
            out[index] = values[0]
        else:
            out[index] = block[(0,) * a.ndim]
    return out


def _source(root: Path, data: np.ndarray, chunks: tuple[int, ...], name: str = "src.zarr") -> Any:
    src = volume.create(str(root / name), data.shape, chunks, data.dtype, checksum=False)
    src.write(src.bounds, data)
    return volume.open(str(root / name))


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=4, deadline=None)
@given(
    shape=st.tuples(*(st.integers(5, 19),) * 3),
    factor=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(2, 3)),
    seed=st.integers(0, 2**16),
)
def test_every_level_matches_numpy(
    tmp_path_factory: pytest.TempPathFactory,
    method: str,
    shape: tuple[int, int, int],
    factor: tuple[int, int, int],
    seed: int,
) -> None:
    root = tmp_path_factory.mktemp("ds")
    # Few distinct values, so that modes and medians have ties to break.
    data = np.random.default_rng(seed).integers(0, 4, shape).astype(np.uint16) * 1000
    src = _source(root, data, (8, 8, 4))
    report = downsample(src, factor=factor, levels=2, method=method, dst=str(root / "s{level}"))
    expected = data
    for path in report.paths:
        expected = reference(expected, factor, method)
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_mode_on_labels_keeps_large_ids_and_breaks_ties_to_the_smallest(
    tmp_path: Path, dtype: str
) -> None:
    big = np.iinfo(dtype).max - 5
    data = np.random.default_rng(1).choice(np.array([3, big, big - 1], dtype), (18, 14, 7))
    data[:2, :2, :2] = np.array([big, big, 7, 7, 9, 9, 1, 2], dtype).reshape(2, 2, 2)
    src = _source(tmp_path, data, (8, 8, 8))
    report = downsample(src, factor=2, levels=3, method="mode")
    expected = data
    for path in report.paths:
        expected = reference(expected, (2, 2, 2), "mode")
        level = volume.open(path)
        assert level.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(level.read(level.bounds), expected)
    first = volume.open(report.paths[0]).read(volume.open(report.paths[0]).bounds)
    assert first[0, 0, 0] == 7  # 7 and 9 twice each, big twice: the smallest wins


def test_levels_sit_beside_the_source_with_scaled_resolution_and_offset(tmp_path: Path) -> None:
    src = volume.create(
        str(tmp_path / "em.zarr"), (40, 40, 12), (16, 16, 4), "uint8",
        offset=(8, 8, 4), resolution=(4, 4, 40),
    )  # fmt: skip
    report = downsample(src, factor=(2, 2, 1), levels=2)
    assert report.paths == (str(tmp_path / "em_s1.zarr"), str(tmp_path / "em_s2.zarr"))
    second = volume.open(report.paths[1])
    assert second.resolution == (16, 16, 40)
    assert second.offset == (2, 2, 4)
    assert second.shape == (10, 10, 12)


def test_one_pass_writes_several_levels_reading_each_source_chunk_once(tmp_path: Path) -> None:
    data = np.random.default_rng(2).integers(0, 255, (256, 256, 128)).astype(np.uint8)
    src = _source(tmp_path, data, (32, 32, 32))
    src.reset_stats()
    report = downsample(src, factor=2, levels=3, method="mean", workers=2)
    assert src.stats.chunks_read == (256 // 32) ** 2 * (128 // 32)
    # Levels 1 and 2 from one read of the source (top chunk 64^3 of level 1: 4 tasks for
    # 2 workers); level 3 would need one 128^3 task, fewer than the workers.
    assert report.levels_per_pass == (2, 1)
    assert all(p.read_amplification <= 1.0 for p in report.passes)
    expected = data
    for path in report.paths:
        x, y, z = (n // 2 for n in expected.shape)  # whole blocks: the mean, vectorised
        blocks = expected.reshape(x, 2, y, 2, z, 2).astype(np.float64)
        expected = np.rint(blocks.mean(axis=(1, 3, 5))).astype(np.uint8)
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


def test_fused_levels_are_exact_at_edges_the_factor_does_not_divide(tmp_path: Path) -> None:
    data = np.random.default_rng(6).integers(0, 3, (70, 50, 13)).astype(np.uint32)
    src = _source(tmp_path, data, (8, 8, 8))
    report = downsample(src, factor=(2, 2, 1), levels=3, method="mode", workers=1)
    assert report.levels_per_pass[0] >= 2
    expected = data
    for path in report.paths:
        expected = reference(expected, (2, 2, 1), "mode")
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"factor": (2, 0, 2)}, "factor", "positive integers"),
        ({"factor": (2, 2)}, "factor", "one per spatial axis"),
        ({"factor": 1.5}, "factor", "positive int"),
        ({"factor": 1}, "factor", "at least one axis"),
        ({"levels": 0}, "levels", ">= 1"),
        ({"method": "average"}, "method", "mean, median, mode, max, min, stride"),
        ({"dst": "no-placeholder.zarr"}, "dst", "{level}"),
    ],
)
def test_bad_arguments_name_the_field_and_what_is_valid(
    tmp_path: Path, kwargs: dict[str, Any], field: str, words: str
) -> None:
    src = volume.create(str(tmp_path / "v.zarr"), (8, 8, 8), (4, 4, 4), "uint8")
    with pytest.raises(ConfigError, match=words.replace("{", r"\{").replace("}", r"\}")) as info:
        downsample(src, **kwargs)
    assert info.value.field == field
    assert not (tmp_path / "v_s1.zarr").exists()


def test_mode_on_float_data_is_refused(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "f.zarr"), (8, 8), (4, 4), "float32")
    with pytest.raises(ConfigError, match="integer labels") as info:
        downsample(src, method="mode")
    assert info.value.field == "method"


def test_the_command_line_lists_the_same_methods_and_formats() -> None:
    assert CLI_METHODS == METHODS
    assert CLI_FORMATS == OUTPUT_FORMATS


def _markers(root: Path) -> int:
    return done_under(root, ".*.chunkgraph/*")


def test_resume_after_sigkill_finishes_every_level_exactly(tmp_path: Path) -> None:
    data = np.random.default_rng(4).integers(0, 255, (256, 256, 128)).astype(np.uint8)
    _source(tmp_path, data, (32, 32, 32), "big.zarr")
    command = [
        sys.executable, "-m", "chunkgraph", "downsample", str(tmp_path / "big.zarr"),
        "--levels", "2", "--method", "median", "--workers", "1", "--memory-limit", "24MiB",
        "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    killed = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _markers(tmp_path) < 1 and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.005)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, "the run ended before the kill"
    assert _markers(tmp_path) >= 1  # some work was done and marked

    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "done before" in resumed.stdout
    expected = data
    for k in (1, 2):
        expected = reference(expected, (2, 2, 2), "median") if k == 2 else _median2(expected)
        level = volume.open(str(tmp_path / f"big_s{k}.zarr"))
        np.testing.assert_array_equal(level.read(level.bounds), expected)


def _median2(a: np.ndarray) -> np.ndarray:
    """The lower median of 2x2x2 blocks, vectorised (the plain reference is slow here)."""
    x, y, z = (n // 2 for n in a.shape)
    blocks = a.reshape(x, 2, y, 2, z, 2).transpose(0, 2, 4, 1, 3, 5).reshape(x, y, z, 8)
    return np.sort(blocks, axis=-1)[..., 3]


@pytest.mark.parametrize("fmt", ["ome-zarr", "precomputed"])
def test_a_multiscale_source_gets_its_new_levels_in_its_own_metadata(
    tmp_path: Path, fmt: str
) -> None:
    data = np.random.default_rng(5).integers(0, 9, (40, 24, 10)).astype(np.uint32)
    root = str(tmp_path / "img.zarr") if fmt == "ome-zarr" else f"precomputed://{tmp_path}/pc"
    (base,) = volume.create_multiscale(
        root, [volume.Level(data.shape, (16, 16, 8), (4, 4, 40))], "uint32"
    )
    base.write(base.bounds, data)
    command = [
        sys.executable, "-m", "chunkgraph", "downsample", root, "--scale", "0",
        "--factor", "2,2,1", "--levels", "2", "--method", "mode", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = data
    for k in (1, 2):
        expected = reference(expected, (2, 2, 1), "mode")
        level = volume.open(root, scale=k)  # listed in the image's own metadata
        assert level.resolution == (4 * 2**k, 4 * 2**k, 40)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


def test_format_other_than_the_sources_is_refused(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "v.zarr"), (8, 8, 8), (4, 4, 4), "uint8")
    with pytest.raises(ConfigError, match="zarr3") as info:
        downsample(src, format="precomputed")
    assert info.value.field == "format"
    with pytest.raises(ConfigError, match="zarr3, zarr, ome-zarr, precomputed") as info:
        downsample(src, format="tiff")
    assert info.value.field == "format"


@pytest.mark.parametrize("name", ["zarr", "zarr3"])
def test_format_takes_the_format_tables_name_for_zarr_v3_and_its_prefix(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``zarr`` is Zarr v3's name in the table of formats (``Volume.backend``), ``zarr3``
    its path prefix: both write Zarr v3 levels beside the source, in Python and on the
    command line; a name that is neither is a usage error naming the valid ones."""
    from chunkgraph import cli

    src = volume.create(str(tmp_path / "v.zarr"), (8, 8, 8), (4, 4, 4), "uint8")
    report = downsample(src, format=name)
    assert report.paths == (str(tmp_path / "v_s1.zarr"),)
    assert volume.open(report.paths[0]).backend == "zarr"
    volume.remove(report.paths[0])
    assert cli.main(["downsample", str(tmp_path / "v.zarr"), "--format", name, "--quiet"]) == 0
    assert volume.open(str(tmp_path / "v_s1.zarr")).shape == (4, 4, 4)
    with pytest.raises(SystemExit) as exited:
        cli.main(["downsample", str(tmp_path / "v.zarr"), "--format", "zarr4"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "'zarr4'" in err and all(f in err for f in ("zarr", "zarr3", "ome-zarr", "precomputed"))


def test_zarr_levels_of_a_precomputed_layer_go_beside_the_layer(tmp_path: Path) -> None:
    """``format='zarr'`` on a precomputed scale: the Zarr v3 level is named beside the
    layer (``pc_s1``), not inside it (``pc/1_1_1_s1``), where its info lists no such
    scale."""
    src = volume.create(f"precomputed://{tmp_path / 'pc'}", (8, 8, 8), (4, 4, 4), "uint8")
    src.write(src.bounds, np.ones((8, 8, 8), "uint8"))
    report = downsample(volume.open(f"precomputed://{tmp_path / 'pc'}"), format="zarr")
    assert report.paths == (str(tmp_path / "pc_s1"),)
    assert volume.open(report.paths[0]).shape == (4, 4, 4)
    assert sorted(p.name for p in (tmp_path / "pc").iterdir()) == ["1_1_1", "info"]


def test_levels_made_again_at_the_same_paths_are_written_afresh(tmp_path: Path) -> None:
    for seed, shape in ((7, (64, 64, 32)), (8, (48, 40, 24))):
        for old in tmp_path.glob("*"):
            shutil.rmtree(old)
        data = np.random.default_rng(seed).integers(0, 5, shape).astype(np.uint16)
        src = _source(tmp_path, data, (8, 8, 8))
        report = downsample(src, levels=3, method="max", workers=1)
        assert report.levels_per_pass[0] >= 2  # the levels above the first come from fn
        expected = data
        for path in report.paths:
            expected = reference(expected, (2, 2, 2), "max")
            level = volume.open(path)
            np.testing.assert_array_equal(level.read(level.bounds), expected)


def test_a_mean_of_64_bit_integers_does_not_overflow() -> None:
    """Sums of int64 or uint64 blocks overflow any numpy integer: they are exact anyway."""
    for dtype, big in (("int64", 2**62), ("uint64", 2**63), ("int64", -(2**62))):
        data = np.full((4, 4), big, dtype=dtype)
        data[0, 0] -= 1  # block mean big - 1/4: rounds to big
        assert block_reduce(data, (2, 2), "mean").tolist() == [[big, big], [big, big]]


def test_labels_are_downsampled_by_mode_unless_told_otherwise() -> None:
    """A mean of label ids makes ids that exist nowhere: 32- and 64-bit integers take mode."""
    from chunkgraph import volume

    labels = volume.create("ds-labels", (4, 4), (4, 4), "uint32", backend="memory")
    labels.write(labels.bounds, np.array([[1, 1, 7, 7], [1, 9, 7, 7]] * 2, dtype="uint32"))
    report = downsample(labels, factor=2, dst="ds-labels-{level}")
    assert report.method == "mode"
    out = volume.open("ds-labels-1", backend="memory").read(Box((0, 0), (2, 2)))
    assert set(out.ravel().tolist()) <= {1, 7, 9}
    for path in ("ds-labels", *report.paths):
        volume.remove(path)


def test_a_finished_downsample_and_transfer_leave_no_state_inside_a_precomputed_volume(
    tmp_path: Path,
) -> None:
    """A precomputed scale's folder is inside the volume: its flows keep their state in a
    folder beside the volume, one subfolder per scale."""
    from chunkgraph import transfer
    from chunkgraph.flow.state._layout import default_root, dst_of_default_root

    src = volume.create(f"precomputed://{tmp_path}/pc", (32, 32, 16), (16, 16, 8), "uint8",
                        resolution=(4, 4, 40))  # fmt: skip
    src.write(src.bounds, np.ones((32, 32, 16), "uint8"))
    downsample(src, levels=2)
    plain = volume.create(tmp_path / "s.zarr", (32, 32, 16), (16, 16, 8), "uint8")
    transfer(plain, f"precomputed://{tmp_path}/pc2")
    for root in ("pc", "pc2"):
        assert not [p.name for p in (tmp_path / root).iterdir() if p.name.startswith(".")]
    beside = tmp_path / ".pc.chunkgraph" / "8_8_80"
    assert default_root(tmp_path / "pc" / "8_8_80") == beside
    assert [p.suffix for p in beside.iterdir()] == [".done"]
    assert dst_of_default_root(beside) == tmp_path / "pc" / "8_8_80"


def test_a_file_named_info_beside_a_zarr_dst_does_not_move_its_state(tmp_path: Path) -> None:
    from chunkgraph.flow.state._layout import default_root, dst_of_default_root

    (tmp_path / "info").write_text("notes")
    assert default_root(tmp_path / "out.zarr") == tmp_path / ".out.zarr.chunkgraph"
    assert dst_of_default_root(tmp_path / ".out.zarr.chunkgraph") == tmp_path / "out.zarr"


def test_a_dry_run_says_the_reads_it_predicts(tmp_path: Path) -> None:
    """A dry run reads nothing: its pass lines give the predicted read (what the real run
    then reads), not a count of 0 bytes."""
    src = volume.create(tmp_path / "src.zarr", (64, 64, 64), (32, 32, 32), "uint16")
    src.write(src.bounds, np.arange(64**3, dtype="uint16").reshape(64, 64, 64))
    planned = downsample(src, levels=1, dst=str(tmp_path / "p{level}.zarr"), dry_run=True)
    done = downsample(src, levels=1, dst=str(tmp_path / "d{level}.zarr"))
    line = planned.summary().splitlines()[1]
    assert "read 0.0 MiB" not in line and "amplification 0.00" not in line, line
    said = done.summary().splitlines()[1].partition(", read ")[2]  # "0.5 MiB (amplification 1.00)"
    assert line.endswith(f"would read {said.replace('(', '(predicted ')}"), (line, said)
