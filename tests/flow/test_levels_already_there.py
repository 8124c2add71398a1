"""A downsample into an OME-Zarr image or a precomputed volume that already has a level
where one goes, and a transfer resumed into a precomputed volume with scales it would not
write: refused by name, the image left as it was; with ``resume`` a downsample reuses the
level (the image keeps no mark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, downsample, transfer, volume

LEVELS = [
    volume.Level((32, 32, 16), (16, 16, 16), (1, 1, 1)),
    volume.Level((16, 16, 8), (16, 16, 8), (2, 2, 2)),
]


def _image(root: str) -> str:
    """A two-level image whose level 1 holds 99 (another tool's pyramid)."""
    base, top = volume.create_multiscale(root, LEVELS, "uint8")
    base.write(base.bounds, np.arange(32 * 32 * 16).reshape(32, 32, 16).astype("uint8"))
    top.write(top.bounds, np.full(top.shape, 99, "uint8"))
    return root


def _level_1(root: str) -> np.ndarray:
    level = volume.open(root, scale=1)
    return level.read(level.bounds)


@pytest.mark.parametrize("kind", ["ome-zarr", "precomputed"])
def test_a_downsample_into_an_image_refuses_a_level_already_there(
    tmp_path: Path, kind: str
) -> None:
    root = _image(
        str(tmp_path / "img.zarr") if kind == "ome-zarr" else f"precomputed://{tmp_path}/pc"
    )
    with pytest.raises(ConfigError, match="level 1 is already in the image") as info:
        downsample(volume.open(root))
    text = str(info.value)
    assert "resume=True" in text and "format='zarr3'" in text and info.value.field == "dst"
    with pytest.raises(ConfigError, match="level 1 is already in the image"):
        downsample(volume.open(root), dry_run=True)
    assert (_level_1(root) == 99).all()
    with pytest.raises(ConfigError, match="level 1 is already"):  # level 2 is new: not made
        downsample(volume.open(root), levels=2)
    assert len(_scales(root)) == 2
    # With resume: today's rule, the level reused (its shape and offset are this one's).
    downsample(volume.open(root), resume=True)
    assert not (_level_1(root) == 99).any()
    assert len(_scales(root)) == 2


def _scales(root: str) -> list[volume.Volume]:
    found = []
    while True:
        try:
            found.append(volume.open(root, scale=len(found)))
        except ConfigError:
            return found


def test_a_transfer_resumed_into_a_precomputed_volume_with_more_scales_is_refused(
    tmp_path: Path,
) -> None:
    src = volume.create(tmp_path / "m.zarr", (32, 32, 16), (16, 16, 16), "uint8")
    src.write(src.bounds, np.full(src.shape, 5, "uint8"))
    pc = _image(f"precomputed://{tmp_path}/pc")
    before = volume.open(pc).read(src.bounds)
    with pytest.raises(ConfigError, match="with 2 scales") as info:
        transfer(src, pc, resume=True)
    assert f"dst {str(tmp_path / 'pc')!r} is a precomputed" in str(info.value)
    assert "scale 1" in str(info.value) and info.value.field == "dst"
    assert np.array_equal(volume.open(pc).read(src.bounds), before)
    assert (_level_1(pc) == 99).all()
    # A precomputed dst the transfer made (one scale) still resumes.
    ours = f"precomputed://{tmp_path}/ours"
    transfer(src, ours)
    again = transfer(src, ours, resume=True)
    assert again.tasks_per_level[0] == 0
