"""Inputs at another resolution than dst: read over the chunk's physical box at their own.

Geometry of the downsampling case (first two axes; the third is at dst's resolution)::

    src  (4 nm)  |a b|c d|e f|...     64 voxels
    dst  (8 nm)  | A | B | C |...     32 voxels, A = mean(a, b)

A dst chunk [8, 16) reads src over [16, 32); a crop pad of 2 dst voxels is 4 src voxels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, volume
from chunkgraph.geometry import Box


def pool(x: np.ndarray) -> np.ndarray:
    """2x2x1 mean pooling: what the flow must reproduce chunk by chunk."""
    a, b, c = x.shape
    return x.reshape(a // 2, 2, b // 2, 2, c).mean(axis=(1, 3))


def repeat(x: np.ndarray) -> np.ndarray:
    """2x2x1 nearest-neighbour upsampling."""
    return np.repeat(np.repeat(x, 2, axis=0), 2, axis=1)


def _pair(
    tmp_path: Path, src_res: tuple[int, ...], dst_res: tuple[int, ...]
) -> tuple[volume.Volume, volume.Volume, np.ndarray]:
    shape = tuple(64 * 4 // r if i < 2 else 16 for i, r in enumerate(src_res))
    data = np.random.default_rng(3).standard_normal(shape).astype("float32")
    src = volume.create(str(tmp_path / "src.zarr"), shape, (16, 16, 8), "float32",
                        resolution=src_res)  # fmt: skip
    src.write(src.bounds, data)
    dst_shape = tuple(64 * 4 // r if i < 2 else 16 for i, r in enumerate(dst_res))
    dst = volume.create(str(tmp_path / "dst.zarr"), dst_shape, (8, 8, 8), "float32",
                        resolution=dst_res)  # fmt: skip
    return src, dst, data


def test_downsampling_across_resolutions_equals_the_whole_array(tmp_path: Path) -> None:
    src, dst, data = _pair(tmp_path, (4, 4, 40), (8, 8, 40))
    seen: list[tuple[int, ...]] = []

    def down(x: np.ndarray) -> np.ndarray:
        seen.append(x.shape)
        return pool(x)

    report = volume.apply(down, src, dst, chunk_sizes=[(16, 16, 16), (8, 8, 8)],
                          crop_pads=[0, 2], executor="threads", workers=2)  # fmt: skip
    np.testing.assert_array_equal(dst.read(dst.bounds), pool(data).astype("float32"))
    assert set(seen) == {(24, 24, 12)}  # (8 + 2 * 2) dst voxels, twice as many src voxels
    assert report.read_amplification == pytest.approx(1.0, abs=0.6)


def test_upsampling_across_resolutions_equals_the_whole_array(tmp_path: Path) -> None:
    src, dst, data = _pair(tmp_path, (8, 8, 40), (4, 4, 40))
    volume.apply(repeat, src, dst, chunk_sizes=[(32, 32, 16), (16, 16, 8)], crop_pads=[0, 2],
                 executor="threads", workers=2)  # fmt: skip
    np.testing.assert_array_equal(dst.read(dst.bounds), repeat(data))


def test_automatic_sizes_keep_input_boxes_whole(tmp_path: Path) -> None:
    src, dst, data = _pair(tmp_path, (8, 8, 40), (4, 4, 40))
    dst = volume.create(str(tmp_path / "odd.zarr"), (64, 64, 16), (3, 3, 8), "float32",
                        resolution=(4, 4, 40), aligned_writes=False)  # fmt: skip
    report = volume.apply(repeat, src, dst, crop_pads=2, executor="threads", workers=2)
    assert report.plan is not None
    for level in report.plan.chunk_sizes:
        assert level[0] % 2 == 0 and level[1] % 2 == 0, report.plan.chunk_sizes
    np.testing.assert_array_equal(dst.read(dst.bounds), repeat(data))


def test_automatic_sizes_round_an_odd_extent_up_to_the_resolution_multiple(
    tmp_path: Path,
) -> None:
    coarse = volume.create(str(tmp_path / "coarse.zarr"), (32, 32, 8), (8, 8, 8), "float32",
                           resolution=(8, 8, 40))  # fmt: skip
    coarse.write(coarse.bounds, np.random.default_rng(1).random((32, 32, 8), "float32"))
    odd = volume.create(str(tmp_path / "f3.zarr"), (63, 63, 8), (16, 16, 8), "float32",
                        resolution=(4, 4, 40))  # fmt: skip
    report = volume.apply(repeat, coarse, odd, crop_pads=2)  # 63 is 31.5 coarse voxels
    assert report.plan is not None and report.plan.expand_bbox
    assert report.bbox == Box((0, 0, 0), (64, 64, 8))  # past the edge: writes are clipped
    assert report.plan.arguments()["expand_bbox"] is True
    assert all(c % 2 == 0 for level in report.plan.chunk_sizes for c in level[:2])
    np.testing.assert_array_equal(
        odd.read(odd.bounds), repeat(coarse.read(coarse.bounds))[:63, :63]
    )


@pytest.mark.parametrize(
    "src_res, kwargs, words",
    [
        # Upsampling: src voxels are 2 dst voxels wide; an odd pad is half a src voxel.
        ((8, 8, 40), {"chunk_sizes": [(32, 32, 16), (16, 16, 8)], "crop_pads": [0, 3]},
         "level 1's crop pad 3 is 1.5 voxels of input 'src' on axis 0 .*multiple of 2"),
        ((8, 8, 40), {"chunk_sizes": (16, 16, 16), "blend_pads": (2, 1, 0)},
         "level 0's blend pad 1 is 0.5 voxels of input 'src' on axis 1"),
        # 6 nm dst over 4 nm src: 1.5 src voxels per dst voxel.
        ((4, 4, 40), {"chunk_sizes": [(18, 18, 16), (9, 9, 8)]},
         "level 0's chunk 9 .*1.5 input voxels per dst voxel.*multiple of 2|"
         "level 1's chunk 9 is 13.5 voxels"),
    ],
)  # fmt: skip
def test_inputs_that_cannot_be_read_whole_are_refused_before_any_write(
    tmp_path: Path, src_res: tuple[int, ...], kwargs: dict[str, object], words: str
) -> None:
    src, dst, _ = _pair(tmp_path, src_res, (4, 4, 40))
    if src_res == (4, 4, 40):
        dst = volume.create(str(tmp_path / "six.zarr"), (36, 36, 16), (9, 9, 8), "float32",
                            resolution=(6, 6, 40))  # fmt: skip
    with pytest.raises(ConfigError, match=words):
        volume.apply(lambda x: x, src, dst, executor="threads", **kwargs)  # type: ignore[arg-type]
    assert not dst.read(dst.bounds).any()
    assert not (tmp_path / f".{Path(dst.path).name}.chunkgraph").exists()


def test_a_dst_left_at_the_default_resolution_is_named_as_the_likely_cause(
    tmp_path: Path,
) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), (32, 32, 32), (16, 16, 16), "float32",
                        resolution=(40, 4, 4))  # fmt: skip
    dst = volume.create(str(tmp_path / "dst.zarr"), src.shape, src.chunks, "float32")
    with pytest.raises(ConfigError) as info:
        volume.apply(lambda x: x, src, dst, chunk_sizes=(16, 16, 16))
    text = str(info.value)
    assert "use a multiple of 40" in text
    assert "dst is at resolution (1, 1, 1), the default" in text
    assert "input 'src' is at (40, 4, 4)" in text and "resolution=src.resolution" in text
    fine = volume.create(str(tmp_path / "fine.zarr"), (32, 32, 32), (16, 16, 16), "float32",
                         resolution=(20, 2, 2))  # fmt: skip
    with pytest.raises(ConfigError) as info:  # dst chose a resolution: no such guess
        volume.apply(lambda x: x, src, fine, chunk_sizes=(3, 16, 16),
                     bbox=Box((0,) * 3, (3, 32, 32)))  # fmt: skip
    assert "use a multiple of 2" in str(info.value) and "the default" not in str(info.value)


def test_divisibility_suggestions_keep_to_the_resolution_multiple(tmp_path: Path) -> None:
    src, dst, _ = _pair(tmp_path, (8, 8, 40), (4, 4, 40))  # src twice as coarse on axes 0, 1
    with pytest.raises(ConfigError) as info:
        volume.apply(repeat, src, dst, chunk_sizes=[(20, 16, 16), (8, 8, 8)])
    text = str(info.value)
    # the divisors of 20 nearest 8 are 5 and 10; 5 is 2.5 input voxels, refused next
    assert "Nearest valid level-1 sizes on axis 0: 4 or 10" in text and "5 or 10" not in text
    with pytest.raises(ConfigError) as info:
        volume.apply(repeat, src, dst, chunk_sizes=(24, 16, 16))
    text = str(info.value)  # 64 % 24: its divisors nearest 24 that are even
    assert "use a top chunk of 16 or 32 on axis 0" in text


def test_a_physical_bbox_off_a_fractional_grid_suggests_what_a_box_can_hold(
    tmp_path: Path,
) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32",
                        resolution=(0.3, 1))  # fmt: skip
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32",
                        resolution=(0.3, 1))  # fmt: skip
    with pytest.raises(ConfigError) as info:
        volume.apply(lambda x: x, src, dst, chunk_sizes=(4, 8), bbox=Box((0, 0), (1, 8)),
                     bbox_units="physical")  # fmt: skip
    text = str(info.value)
    assert "[0, 1.2) is not integral" in text and "[0, 4), with bbox_units='voxels'" in text
    assert "[0.0, 1.2" not in text


def test_a_bbox_start_off_the_input_grid_is_refused(tmp_path: Path) -> None:
    src, dst, _ = _pair(tmp_path, (8, 8, 40), (4, 4, 40))
    with pytest.raises(ConfigError, match="the bbox start 1 for input 'src' on axis 0"):
        volume.apply(repeat, src, dst, chunk_sizes=(16, 16, 16),
                     bbox=Box((1, 0, 0), (33, 32, 16)))  # fmt: skip


def test_physical_bbox(tmp_path: Path) -> None:
    src, dst, data = _pair(tmp_path, (4, 4, 40), (8, 8, 40))
    physical = Box((64, 0, 0), (192, 128, 640))  # nm: dst voxels [8, 24) x [0, 16) x [0, 16)
    report = volume.apply(pool, src, dst, chunk_sizes=(8, 8, 8), bbox=physical,
                          bbox_units="physical", executor="threads")  # fmt: skip
    assert report.bbox == Box((8, 0, 0), (24, 16, 16))
    expected = np.zeros((32, 32, 16), "float32")
    expected[8:24, 0:16] = pool(data)[8:24, 0:16]
    np.testing.assert_array_equal(dst.read(dst.bounds), expected)
    with pytest.raises(ConfigError, match=r"axis 2: \[0, 620\) / 40 = \[0, 15.5\).*\[0, 640\)"):
        volume.apply(pool, src, dst, chunk_sizes=(8, 8, 8), bbox=Box((0, 0, 0), (64, 64, 620)),
                     bbox_units="physical")  # fmt: skip
    with pytest.raises(ConfigError, match=r"bbox_units must be 'voxels'.* got 'nm'"):
        volume.apply(pool, src, dst, chunk_sizes=(8, 8, 8), bbox=physical, bbox_units="nm")


def test_the_flow_id_changes_with_resolution(tmp_path: Path) -> None:
    ids = set()
    for res in ((4, 4, 40), (8, 8, 80)):
        # Same paths, shapes and ratio: only the voxel size differs.
        src = volume.create(str(tmp_path / "s.zarr"), (16, 16, 8), (8, 8, 8), "uint8",
                            resolution=res)  # fmt: skip
        dst = volume.create(str(tmp_path / "d.zarr"), (16, 16, 8), (8, 8, 8), "uint8",
                            resolution=res)  # fmt: skip
        ids.add(volume.apply(lambda x: x, src, dst, chunk_sizes=(8, 8, 8), dry_run=True).flow_id)
        volume.remove(src.path)
        volume.remove(dst.path)
    assert len(ids) == 2


@pytest.mark.parametrize("probe", [True, False])
def test_a_shape_at_the_input_s_resolution_names_the_resolution_ratio(
    tmp_path: Path, probe: bool
) -> None:
    """dst at (3, 3, 3) over an input at (1, 1, 1), an fn that keeps its input's shape: the
    shape error names both resolutions, their ratio and the shapes, returned and expected."""
    src = volume.create(str(tmp_path / "src.zarr"), (48, 48, 48), (16, 16, 16), "float32")
    dst = volume.create(str(tmp_path / "dst.zarr"), (16, 16, 16), (8, 8, 8), "float32",
                        resolution=(3, 3, 3))  # fmt: skip
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(lambda x: x, src, dst, chunk_sizes=[(8, 8, 8)], crop_pads=2, probe=probe,
                     executor="sync", retries=0)  # fmt: skip
    cause = info.value.exceptions[0].__cause__
    assert isinstance(cause, volume.FlowOutputError)
    text = str(cause)
    assert "fn returned shape (36, 36, 36)" in text and "expected (12, 12, 12)" in text
    assert "Likely cause: the resolutions" in text
    assert "dst is at resolution (3, 3, 3) and input 'src' at (1, 1, 1)" in text
    assert "dst resolution / input resolution = (3, 3, 3)" in text
    assert "fn returned the shape of its input 'src'" in text and "pool by (3, 3, 3)" in text
    assert "create it with resolution=(1, 1, 1)" in text


def test_an_input_coarser_than_dst_asks_fn_to_upsample(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), (16, 16), (8, 8), "float32",
                        resolution=(8, 8))  # fmt: skip
    dst = volume.create(str(tmp_path / "dst.zarr"), (32, 32), (8, 8), "float32",
                        resolution=(4, 4))  # fmt: skip
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(lambda x: x, src, dst, chunk_sizes=[(8, 8)])
    text = str(info.value.exceptions[0].__cause__)
    assert "dst resolution / input resolution = (0.5, 0.5)" in text
    assert "upsample by (2, 2)" in text and "create it with resolution=(8, 8)" in text


def test_a_shape_error_with_every_input_at_dst_s_resolution_says_nothing_of_them(
    tmp_path: Path,
) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "dst.zarr"), (16, 16), (8, 8), "float32")
    with pytest.raises(ExceptionGroup) as info:
        volume.apply(lambda x: x[:4], src, dst, chunk_sizes=[(8, 8)])
    text = str(info.value.exceptions[0].__cause__)
    assert "fn returned shape (4, 8)" in text and "resolution" not in text
