"""The apply flow reads the field's formats and writes into them: inputs from precomputed,
OME-Zarr, N5 and Zarr v2, dst a Zarr v3 array or a sharded precomputed scale (whose tasks
then each write whole shards)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume

pytest.importorskip("tensorstore")

SHAPE = (64, 64, 16)


def _inputs(tmp_path: Path, data: np.ndarray) -> list[volume.Volume]:
    made = [
        volume.create(f"precomputed://{tmp_path}/pc", SHAPE, (16, 16, 8), "uint16",
                      write_chunks=(32, 32, 16)),
        volume.create(f"n5://{tmp_path}/a.n5", SHAPE, (16, 16, 16), "uint16"),
        volume.create(f"zarr2://{tmp_path}/b.zarr", SHAPE, (32, 16, 16), "uint16"),
        *volume.create_multiscale(tmp_path / "ome.zarr", [(SHAPE, (16, 32, 8), (1, 1, 1))],
                                  "uint16"),
    ]  # fmt: skip
    for v in made:
        v.write(v.bounds, data)
    return [
        volume.open(f"precomputed://{tmp_path}/pc"),
        volume.open(f"n5://{tmp_path}/a.n5"),
        volume.open(f"{tmp_path}/b.zarr"),
        volume.open(tmp_path / "ome.zarr", scale=0),
    ]


def test_apply_reads_each_format_into_zarr3(tmp_path: Path) -> None:
    data = np.random.default_rng(3).integers(0, 1000, SHAPE).astype("uint16")
    for i, src in enumerate(_inputs(tmp_path, data)):
        dst = volume.create(tmp_path / f"out{i}.zarr", SHAPE, (32, 32, 16), "uint16")
        volume.apply(lambda s: s + 1, src, dst, crop_pads=[(2, 2, 0)], probe=False)
        np.testing.assert_array_equal(dst.read(dst.bounds), data + 1, err_msg=src.backend)


def test_apply_writes_a_sharded_precomputed_scale_by_whole_shards(tmp_path: Path) -> None:
    data = np.random.default_rng(4).integers(0, 1000, SHAPE).astype("uint16")
    src = volume.create(tmp_path / "src.zarr", SHAPE, (16, 16, 16), "uint16", resolution=(4, 4, 40))
    src.write(src.bounds, data)
    dst = volume.create(f"precomputed://{tmp_path}/dst", SHAPE, (16, 16, 8), "uint16",
                        write_chunks=(32, 32, 16), resolution=(4, 4, 40))  # fmt: skip
    report = volume.apply(lambda s: s * 2, src, dst, blend_pads=[(4, 4, 0)], probe=False)
    assert report is not None
    again = volume.open(f"precomputed://{tmp_path}/dst")
    np.testing.assert_array_equal(again.read(again.bounds), data * 2)


def test_apply_from_precomputed_on_s3_into_a_sharded_scale_there(tmp_path: Path) -> None:
    from chunkgraph.testing import s3_server

    data = np.random.default_rng(5).integers(0, 1000, SHAPE).astype("uint16")
    with s3_server(("flow-formats",)):
        src = volume.create("precomputed://s3://flow-formats/src", SHAPE, (16, 16, 8), "uint16")
        src.write(src.bounds, data)
        dst = volume.create("precomputed://s3://flow-formats/dst", SHAPE, (16, 16, 8), "uint16",
                            write_chunks=(32, 32, 16))  # fmt: skip
        assert not dst.location.conditional_writes
        volume.apply(lambda s: s + 1, src, dst, blend_pads=[(4, 4, 0)], probe=False,
                     intermediates=tmp_path)  # fmt: skip
        out = volume.open("precomputed://s3://flow-formats/dst")
        np.testing.assert_array_equal(out.read(out.bounds), data + 1)


def test_an_unaligned_bbox_into_a_store_without_conditional_writes_is_refused_up_front(
    tmp_path: Path,
) -> None:
    from chunkgraph import ConfigError
    from chunkgraph.geometry import Box
    from chunkgraph.testing import s3_server

    called: list[object] = []
    with s3_server(("flow-edges",)):
        src = volume.create(tmp_path / "src.zarr", SHAPE, (16, 16, 8), "uint16")
        dst = volume.create("precomputed://s3://flow-edges/dst", SHAPE, (16, 16, 8), "uint16")
        assert not dst.location.conditional_writes
        with pytest.raises(ConfigError, match="without conditional writes") as refused:
            volume.apply(
                lambda s: called.append(s) or s, src, dst, probe=False,
                bbox=Box((8, 8, 0), (40, 40, 16)), intermediates=tmp_path / "state",
            )  # fmt: skip
        assert refused.value.field == "bbox"
        assert "Box(start=(0, 0, 0), stop=(48, 48, 16))" in str(refused.value)
        assert "resume" not in str(refused.value)
        assert not called and not (tmp_path / "state").exists()


def test_a_transfer_into_a_precomputed_volume_on_s3_past_its_chunk_grid_runs(
    tmp_path: Path,
) -> None:
    """The flow's box is expanded past dst's edge (an extent no multiple of the chunks):
    every storage chunk is still written whole, so nothing is refused."""
    from chunkgraph import transfer
    from chunkgraph.testing import s3_server

    shape = (40, 36, 12)
    src = volume.create(tmp_path / "src.zarr", shape, (16, 16, 8), "uint16")
    src.write(src.bounds, np.arange(np.prod(shape), dtype="uint16").reshape(shape))
    with s3_server(("flow-grid",)):
        report = transfer(src, "precomputed://s3://flow-grid/pc")
        assert not report.dst_bounds.contains(report.bbox)  # type: ignore[union-attr]
        out = volume.open("precomputed://s3://flow-grid/pc")
        np.testing.assert_array_equal(out.read(out.bounds), src.read(src.bounds))
