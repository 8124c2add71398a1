"""transfer's edges: a copy onto its own source is refused, a resumed transfer's read
amplification is over what it read for, and its messages speak of its own options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, transfer, volume
from chunkgraph.flow import SaturationWarning


def _source(root: Path, dtype: str = "uint8") -> volume.Volume:
    high = np.iinfo(dtype).max // 60  # uint16: values past uint8's
    data = np.random.default_rng(5).integers(0, high, (64, 64, 32)).astype(dtype)
    src = volume.create(str(root / "src.zarr"), data.shape, (16, 16, 32), dtype)
    src.write(src.bounds, data)
    return volume.open(str(root / "src.zarr"))


def test_a_transfer_onto_its_own_source_is_refused(tmp_path: Path) -> None:
    src = _source(tmp_path)
    for dst in (tmp_path / "src.zarr", f"{tmp_path}/./src.zarr/"):
        with pytest.raises(ConfigError, match="is the source") as info:
            transfer(src, dst, chunks=(32, 32, 32))
        assert info.value.field == "dst"
    assert volume.open(str(tmp_path / "src.zarr")).chunks == (16, 16, 32)
    memory = volume.create("tr-self", (8, 8), (4, 4), "uint8", backend="memory")
    try:
        with pytest.raises(ConfigError, match="is the source"):
            transfer(memory, "tr-self", backend="memory")
    finally:
        volume.remove("tr-self")


def test_a_resumed_transfer_reports_amplification_over_what_it_had_left(tmp_path: Path) -> None:
    """The last slab's source chunk is damaged: that task fails after the others finished;
    repaired, the resume reads that slab once, an amplification of 1."""
    src = _source(tmp_path)
    chunk = tmp_path / "src.zarr" / "c" / "0" / "3" / "0"
    good = chunk.read_bytes()
    chunk.write_bytes(b"not a chunk" * 8)
    with pytest.raises(ExceptionGroup):
        transfer(src, tmp_path / "dst.zarr", executor="sync")
    chunk.write_bytes(good)
    report = transfer(src, tmp_path / "dst.zarr", executor="sync", resume=True)
    assert report.top_tasks_skipped > 0 and report.tasks_per_level[0] > 0
    assert report.read_amplification == pytest.approx(1.0)
    dst = volume.open(str(tmp_path / "dst.zarr"))
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds))


def test_cast_messages_name_transfer_s_options(tmp_path: Path) -> None:
    src = _source(tmp_path, "uint16")
    with pytest.raises(ConfigError, match=r"cast='same_kind' \(--cast same_kind") as info:
        transfer(src, tmp_path / "narrow.zarr", dtype="uint8")
    assert "fn" not in str(info.value).split() and "fn's" not in str(info.value)
    with pytest.raises(ConfigError, match="cast must be one of 'safe'") as info:
        transfer(src, tmp_path / "narrow.zarr", dtype="uint8", cast="nearest")
    assert "--cast" not in str(info.value)  # Python's words from Python
    with pytest.warns(SaturationWarning, match="the source's values") as caught:
        report = transfer(src, tmp_path / "narrow.zarr", dtype="uint8", cast="same_kind")
    assert len(caught) == 1 and report.saturated_voxels > 0


def test_an_extent_the_chunks_do_not_divide_is_planned_in_chunks() -> None:
    """1000^3 in chunks of 128 fits no size on the grain but the whole: refused for memory
    before; grown past the edge to 1024, it is planned in regions of whole chunks."""
    src = volume.create("tr-odd", (1000, 1000, 1000), (128, 128, 128), "uint8", backend="memory")
    try:
        report = transfer(src, "tr-odd-out", backend="memory", dry_run=True, workers=4)
    finally:
        volume.remove("tr-odd")
    assert report.plan is not None and report.plan.expand_bbox
    assert report.tasks_per_level[0] >= 4
    assert all(t % 128 == 0 for t in report.plan.chunk_sizes[0])


def test_a_whole_copy_past_the_chunk_grid_reports_amplification_1_and_dst_bytes(
    tmp_path: Path,
) -> None:
    """A volume whose extent is no multiple of its chunks: the flow's box is expanded to
    whole top chunks past dst's edge, but only the voxels inside are read and written."""
    shape, offset = (100, 90, 37), (10, 20, 5)
    src = volume.create(tmp_path / "odd.zarr", shape, (32, 32, 16), "uint8", offset=offset)
    src.write(src.bounds, np.ones(shape, "uint8"))
    report = transfer(src, tmp_path / "copy.zarr")
    assert report.read_amplification == pytest.approx(1.0)
    assert report.plan is not None and report.plan.read_amplification == pytest.approx(1.0)
    assert report.bytes_written == np.prod(shape)
    inside = "Box(start=(10, 20, 5), stop=(110, 110, 42))"
    assert report.bbox.stop != (110, 110, 42) and f"dst's {inside} written" in report.summary()
