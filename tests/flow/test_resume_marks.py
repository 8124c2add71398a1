"""transfer and downsample resume only what they started: each writes its mark (the
source and the settings) into what it makes, and ``resume=True`` refuses a volume without
it, another source's, or one started with other settings, writing nothing to it; their
refusals speak Python's words when called from Python."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, downsample, transfer, volume


def _volume(
    path: Path,
    value: int | None = None,
    shape: tuple[int, ...] = (32, 32, 16),
    chunks: tuple[int, ...] = (16, 16, 16),
    resolution: int = 1,
) -> volume.Volume:
    made = volume.create(path, shape, chunks, "uint8", resolution=(resolution,) * 3)
    data = np.random.default_rng(3).integers(0, 200, shape).astype("uint8")
    made.write(made.bounds, data if value is None else np.full(shape, value, "uint8"))
    return volume.open(path)


def _all(path: Path, value: int) -> bool:
    found = volume.open(path)
    return bool((found.read(found.bounds) == value).all())


def test_a_transfer_resumed_into_a_volume_it_did_not_make_is_refused(tmp_path: Path) -> None:
    """Another tool's volume of the same shape, chunks and dtype, and another source's
    transfer, are refused by name and left as they were."""
    src = _volume(tmp_path / "src.zarr")
    _volume(tmp_path / "theirs.zarr", 7)
    with pytest.raises(ConfigError, match="was not made by transfer") as info:
        transfer(src, tmp_path / "theirs.zarr", resume=True)
    text = str(info.value)
    assert info.value.field == "dst" and "theirs.zarr" in text and "resume=True" in text
    assert "--resume" not in text and "command line" not in text
    assert _all(tmp_path / "theirs.zarr", 7)
    other = _volume(tmp_path / "other.zarr", 5)
    transfer(other, tmp_path / "copy.zarr")
    with pytest.raises(ConfigError, match=r"made by a transfer of another source \(.*other.zarr\)"):
        transfer(src, tmp_path / "copy.zarr", resume=True)
    assert _all(tmp_path / "copy.zarr", 5)


def test_a_transfer_resumed_with_other_settings_is_refused_naming_both(tmp_path: Path) -> None:
    src = _volume(tmp_path / "src.zarr")
    transfer(src, tmp_path / "dst.zarr", chunks=(8, 8, 16))
    with pytest.raises(ConfigError, match="dtype uint8, and this one has dtype uint16") as info:
        transfer(src, tmp_path / "dst.zarr", chunks=(8, 8, 16), dtype="uint16", resume=True)
    assert info.value.field == "dtype"
    with pytest.raises(ConfigError, match="chunks 8x8x16, and this one has chunks 16x16x16"):
        transfer(src, tmp_path / "dst.zarr", resume=True)
    # The same transfer, however spelled: it continues (here: nothing left to do).
    again = transfer(src, tmp_path / "dst.zarr", chunks=[8, 8, 16], dtype="u1", resume=True)
    assert again.top_tasks_skipped > 0 and again.tasks_per_level[0] == 0


def test_a_downsample_into_levels_it_did_not_make_is_refused(tmp_path: Path) -> None:
    """A volume where a level goes, not made by this downsample: refused without resume
    (it would be written over), and with resume (it is not this downsample's)."""
    src = _volume(tmp_path / "src.zarr")
    # What level 1 would be, but for its contents and its mark.
    _volume(tmp_path / "src_s1.zarr", 9, (16, 16, 8), (16, 16, 8), resolution=2)
    with pytest.raises(ConfigError, match="already exists") as info:
        downsample(src)
    assert info.value.field == "dst" and "src_s1.zarr" in str(info.value)
    with pytest.raises(ConfigError, match="was not made by downsample") as info:
        downsample(src, resume=True)
    assert "--resume" not in str(info.value) and "resume=True" in str(info.value)
    assert _all(tmp_path / "src_s1.zarr", 9)
    assert not (tmp_path / "src_s2.zarr").exists()


def test_a_downsample_resumed_with_another_method_or_source_is_refused(tmp_path: Path) -> None:
    src = _volume(tmp_path / "src.zarr")
    first = downsample(src, levels=2, method="max")
    before = volume.open(first.paths[1]).read(volume.open(first.paths[1]).bounds)
    with pytest.raises(ConfigError, match="method 'max', and this one has method 'mean'"):
        downsample(src, levels=2, method="mean", resume=True)
    other = _volume(tmp_path / "other.zarr", 4)
    template = str(tmp_path / "other_s{level}.zarr")
    with pytest.raises(ConfigError, match=r"made by a downsample of another source \(.*src.zarr"):
        downsample(other, levels=2, method="max", dst=str(tmp_path / "src_s{level}.zarr"),
                   resume=True)  # fmt: skip
    level = volume.open(first.paths[1])
    assert np.array_equal(level.read(level.bounds), before)
    # Its own levels, resumed with the same settings: continued (here: nothing left to do).
    again = downsample(src, levels=2, method="max", resume=True)
    assert again.paths == first.paths
    assert all(p.top_tasks_skipped > 0 and p.tasks_per_level[0] == 0 for p in again.passes)
    assert downsample(other, levels=1, dst=template).paths == (str(tmp_path / "other_s1.zarr"),)


def test_memory_and_cast_refusals_speak_python_from_python(tmp_path: Path) -> None:
    src = _volume(tmp_path / "src.zarr")
    with pytest.raises(ConfigError) as info:
        transfer(src, tmp_path / "dst.zarr", memory_limit=1000)
    text = str(info.value)
    assert "memory_limit" in text and "chunks=" in text, text
    assert "--" not in text and "command line" not in text, text
    with pytest.raises(ConfigError) as info:
        downsample(src, memory_limit=1000)
    text = str(info.value)
    assert "memory_limit" in text and "--" not in text and "command line" not in text, text
    with pytest.raises(ConfigError, match="cast must be one of") as info:
        transfer(src, tmp_path / "dst.zarr", dtype="uint16", cast="nearest")
    assert "--cast" not in str(info.value)
