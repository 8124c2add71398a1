"""downsample reducing each source chunk as it is decoded: the same bytes as reducing the
region read whole (every method, dtype, factor and edge), TensorStore's downsample driver's
voxels, the same read accounting, and a task that never holds its source region."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from tests.flow.test_downsample import SRC_DIR, _markers

import chunkgraph.jobs._fused_read as fused_read
from chunkgraph import CorruptChunkError, downsample, volume
from chunkgraph.geometry import Box
from chunkgraph.jobs._block_reduce import METHODS, block_reduce
from chunkgraph.jobs._pyramid import downsample_chunk

SHAPE = (37, 29, 19)  # no factor below divides it: partial chunks and blocks at every far edge


def _data(dtype: str, method: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    if kind.kind == "b":
        return rng.integers(0, 2, SHAPE).astype(bool)
    if kind.kind == "f":
        data = rng.normal(0, 1000, SHAPE).astype(dtype)
        data[rng.random(SHAPE) < 0.05] = np.nan  # NaN where a block's sum and sort see it
        data[0, 0, 0] = -0.0
        return data
    info = np.iinfo(kind)
    # Both ends of the range: sums that overflow any narrower type, and ties for the mode.
    values = np.array([info.min, info.min + 1, 3, info.max - 1, info.max], dtype)
    return rng.choice(values, SHAPE)


def _stored(root: Path) -> dict[str, bytes]:
    """Every file of the arrays under ``root``, chunks and metadata, by relative path (the
    flows' state and the levels' mark, both naming the source's path, left out)."""
    return {
        os.path.relpath(os.path.join(d, f), root): _unmarked(Path(d, f))
        for d, _, files in os.walk(root)
        for f in files
        if ".chunkgraph" not in d
    }


def _unmarked(path: Path) -> bytes:
    """A file's bytes; an array's metadata without the mark of the job that made it."""
    if path.name != "zarr.json":
        return path.read_bytes()
    meta = json.loads(path.read_text())
    mark = meta.get("attributes", {}).get("chunkgraph", {}).pop("made_by", None)
    assert mark is None or '"downsample"' in mark
    return json.dumps(meta, sort_keys=True).encode()


def _pyramid(
    root: Path, data: np.ndarray, method: str, factor: Any, *, whole: bool, **create: Any
) -> dict[str, bytes]:
    """Two levels of ``data`` under ``root``, through the fused read or (``whole``) through
    the region read whole and reduced after, as before the fused read existed."""
    src = volume.create(str(root / "src.zarr"), data.shape, (8, 8, 4), data.dtype, **create)
    src.write(src.bounds, data)
    saved = downsample_chunk.read_input  # type: ignore[attr-defined]
    if whole:
        del downsample_chunk.read_input  # type: ignore[attr-defined]
    try:
        report = downsample(
            volume.open(str(root / "src.zarr")), factor=factor, levels=2, method=method,
            dst=str(root / "out" / "s{level}.zarr"), workers=2,
        )  # fmt: skip
    finally:
        downsample_chunk.read_input = saved  # type: ignore[attr-defined]
    assert report.bytes_read > 0
    return _stored(root / "out")


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the fused read served a task's input, and how often it declined."""
    seen = {"fused": 0, "declined": 0}
    real = fused_read.read_reduced

    def counted(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        seen["declined" if got is None else "fused"] += 1
        return got

    monkeypatch.setattr(downsample_chunk, "read_input", counted)
    return seen


CASES = [
    (method, dtype)
    for method in METHODS
    for dtype in ("bool", "uint8", "int16", "uint32", "int64", "uint64", "float32", "float64")
    # mode is for integer labels (downsample refuses it on floats and bools)
    if not (method == "mode" and dtype in ("bool", "float32", "float64"))
]


@pytest.mark.parametrize(("method", "dtype"), CASES)
def test_the_fused_read_writes_the_whole_regions_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, dtype: str
) -> None:
    data = _data(dtype, method)
    seen = _counting(monkeypatch)
    factor = (2, 2, 2) if dtype in ("uint8", "float32", "uint64") else (4, 2, 1)
    fused = _pyramid(tmp_path / "fused", data, method, factor, whole=False)
    assert seen["fused"] > 0 and seen["declined"] == 0
    whole = _pyramid(tmp_path / "whole", data, method, factor, whole=True)
    assert fused.keys() == whole.keys()
    assert fused == whole


@pytest.mark.parametrize("method", ["mean", "mode", "median"])
def test_a_sharded_source_is_reduced_inner_chunk_by_inner_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    data = _data("uint32", method, seed=4)
    seen = _counting(monkeypatch)
    shards = {"shards": (16, 16, 8)}
    fused = _pyramid(tmp_path / "fused", data, method, 2, whole=False, **shards)
    assert seen["fused"] > 0 and seen["declined"] == 0
    assert fused == _pyramid(tmp_path / "whole", data, method, 2, whole=True, **shards)


def test_a_source_in_a_bucket_is_reduced_as_its_chunks_arrive(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data("uint16", "mean", seed=6)
    src = volume.create(f"s3://{bucket}/src.zarr", data.shape, (8, 8, 4), data.dtype)
    src.write(src.bounds, data)
    seen = _counting(monkeypatch)
    levels = {}
    for whole in (False, True):
        if whole:
            monkeypatch.delattr(downsample_chunk, "read_input")
        report = downsample(
            volume.open(f"s3://{bucket}/src.zarr"), factor=(2, 2, 1), levels=2, method="mean",
            dst=str(tmp_path / f"{whole}" / "s{level}.zarr"),
        )  # fmt: skip
        levels[whole] = [volume.open(p).read(volume.open(p).bounds) for p in report.paths]
    assert seen["fused"] > 0 and seen["declined"] == 0
    for fused, whole in zip(levels[False], levels[True], strict=True):
        assert fused.tobytes() == whole.tobytes()


def test_channel_axes_pass_through_the_fused_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = np.stack([_data("float32", "mean", seed=s) for s in (1, 2)])  # (2, *SHAPE)
    seen = _counting(monkeypatch)
    src = volume.create(
        str(tmp_path / "src.zarr"), data.shape, (2, 8, 8, 4), data.dtype, spatial_ndim=3
    )
    src.write(src.bounds, data)
    report = downsample(src, factor=2, levels=1, method="max", dst=str(tmp_path / "s{level}"))
    assert seen["fused"] > 0 and seen["declined"] == 0
    level = volume.open(report.paths[0])
    expected = downsample_chunk(
        data, level.bounds, factor=(2, 2, 2), method="max", src_start=(0, 0, 0), src_stop=SHAPE
    )
    assert level.read(level.bounds).tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("chunks", "cache", "fused"),
    [
        ((6, 6, 6), 0, False),  # blocks of 4 straddle chunks of 6
        ((8, 8, 8), 2**20, False),  # a chunk cache: the region is read through it
        ((8, 8, 8), 0, True),
        ((64, 64, 64), 0, True),  # one chunk across every axis: nothing to straddle
    ],
)
def test_the_fused_read_declines_what_it_cannot_reduce_chunk_by_chunk(
    tmp_path: Path, chunks: tuple[int, ...], cache: int, fused: bool
) -> None:
    data = _data("uint16", "mean", seed=2)
    src = volume.create(str(tmp_path / "s.zarr"), data.shape, chunks, data.dtype)
    src.write(src.bounds, data)
    src = volume.open(str(tmp_path / "s.zarr"), cache_bytes=cache)
    box = Box((0, 0, 0), (40, 32, 20))  # past the far edge, as an expanded bbox reads
    got = fused_read.read_reduced(
        src, box, factor=(4, 4, 4), method="mean", src_start=(0, 0, 0), src_stop=SHAPE
    )
    assert (got is not None) == fused
    if got is not None:
        expected = downsample_chunk(
            src.read(box), Box((0, 0, 0), (10, 8, 5)), factor=(4, 4, 4), method="mean",
            src_start=(0, 0, 0), src_stop=SHAPE,
        )  # fmt: skip
        assert np.array_equal(got.level[:10, :8, :5], expected)


def test_a_damaged_source_chunk_is_named_as_a_whole_read_names_it(tmp_path: Path) -> None:
    data = _data("uint8", "mean", seed=9)
    src = volume.create(str(tmp_path / "s.zarr"), data.shape, (8, 8, 4), data.dtype)
    src.write(src.bounds, data)
    chunk = tmp_path / "s.zarr" / "c" / "1" / "2" / "3"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    src = volume.open(str(tmp_path / "s.zarr"))
    with pytest.raises(CorruptChunkError, match=r"key 'c/1/2/3'"):
        fused_read.read_reduced(
            src, Box((0, 0, 0), SHAPE), factor=(2, 2, 2), method="mean",
            src_start=(0, 0, 0), src_stop=SHAPE,
        )  # fmt: skip


def test_a_precomputed_source_takes_the_whole_region_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorStore serves precomputed: no direct whole-chunk path, so the region is read whole."""
    data = _data("uint8", "mean", seed=5)
    seen = _counting(monkeypatch)
    src = volume.create(f"precomputed://{tmp_path}/p", data.shape, (8, 8, 4), data.dtype)
    src.write(src.bounds, data)
    report = downsample(src, factor=2, levels=1, method="max", format="zarr3",
                        dst=str(tmp_path / "s{level}.zarr"))  # fmt: skip
    assert seen["fused"] == 0 and seen["declined"] > 0
    level = volume.open(report.paths[0])
    expected = np.pad(data, [(0, 1), (0, 1), (0, 1)], constant_values=0)
    expected = expected.reshape(19, 2, 15, 2, 10, 2).max(axis=(1, 3, 5))
    assert np.array_equal(level.read(level.bounds), expected)


@pytest.mark.parametrize("method", ["mean", "mode", "min", "max", "median", "stride"])
def test_the_first_level_is_tensorstores_downsample(tmp_path: Path, method: str) -> None:
    data = np.random.default_rng(7).integers(0, 6, SHAPE).astype(np.uint16) * 1000
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8, 4), data.dtype, checksum=False)
    src.write(src.bounds, data)
    report = downsample(src, factor=(2, 2, 1), levels=1, method=method,
                        dst=str(tmp_path / "s{level}.zarr"))  # fmt: skip
    theirs = ts.open(
        {
            "driver": "downsample",
            "downsample_factors": [2, 2, 1],
            "downsample_method": method,
            "base": {"driver": "zarr3", "kvstore": f"file://{tmp_path / 'src.zarr'}"},
        }
    ).result()
    level = volume.open(report.paths[0])
    assert np.array_equal(level.read(level.bounds), theirs.read().result())


def test_reads_are_counted_as_before_and_the_region_is_never_held(tmp_path: Path) -> None:
    """Two levels in one pass of two tasks, each over a 2 MiB region of the source (128^3):
    read whole, a task holds that region; fused, the level (1/8 of it), the level above,
    and a chunk's piece per read in flight."""
    data = np.random.default_rng(8).integers(0, 255, (128, 128, 256)).astype(np.uint8)
    src = volume.create(str(tmp_path / "src.zarr"), data.shape, (32, 32, 32), data.dtype)
    src.write(src.bounds, data)
    peaks, reads = {}, {}
    for whole in (True, False):
        saved = downsample_chunk.read_input  # type: ignore[attr-defined]
        if whole:
            del downsample_chunk.read_input  # type: ignore[attr-defined]
        tracemalloc.start()
        try:
            report = downsample(
                volume.open(str(tmp_path / "src.zarr")), factor=2, levels=2, method="mean",
                dst=str(tmp_path / f"{whole}" / "s{level}.zarr"), workers=1, executor="sync",
            )  # fmt: skip
            _, peaks[whole] = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            downsample_chunk.read_input = saved  # type: ignore[attr-defined]
        (passed,) = report.passes
        reads[whole] = (passed.bytes_read, passed.read_amplification, passed.tasks_per_level)
    assert reads[True] == reads[False]
    assert reads[False][0] == data.nbytes
    region = 128**3
    assert reads[False][2] == (data.nbytes // region,)
    assert peaks[True] > region > peaks[False], peaks


# A run that reads its regions whole, as before the fused read: killed once it has marked
# a task done.
WHOLE_RUN = """
import sys
from chunkgraph import downsample, volume
from chunkgraph.jobs._pyramid import downsample_chunk
del downsample_chunk.read_input
downsample(volume.open(sys.argv[1]), levels=2, method="mode", workers=1, memory_limit=2**24)
"""


def test_a_run_begun_reading_whole_regions_resumes_with_the_fused_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow is the same one either way (same fn, same keywords: the same flow id), so
    a run resumed by the fused read skips what the whole-region read finished."""
    data = np.random.default_rng(10).integers(0, 3, (256, 256, 128)).astype(np.uint32)
    src = volume.create(str(tmp_path / "big.zarr"), data.shape, (32, 32, 32), data.dtype)
    src.write(src.bounds, data)
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    command = [sys.executable, "-c", WHOLE_RUN, str(tmp_path / "big.zarr")]
    killed = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _markers(tmp_path) < 1 and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.005)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, "the run ended before the kill"
    seen = _counting(monkeypatch)
    report = downsample(volume.open(str(tmp_path / "big.zarr")), levels=2, method="mode",
                        workers=1, memory_limit=2**24, resume=True)  # fmt: skip
    assert report.passes[0].top_tasks_skipped >= 1
    assert seen["fused"] > 0
    expected = data
    for path in report.paths:
        expected = block_reduce(expected, (2, 2, 2), "mode")
        level = volume.open(path)
        assert np.array_equal(level.read(level.bounds), expected)
