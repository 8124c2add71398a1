"""OME-Zarr translations under both conventions the field writes: pixel centres (the
spec's examples, ngff-zarr, ome-zarr-py; chunkgraph's default) and voxel corners (levels
that share one translation or have none: chunkgraph before, older writers). Each reads at
the right place, new levels keep an image's convention, and pyramids go both ways with
ngff-zarr and ome-zarr-py, which are skipped where they are not installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkgraph import ConfigError, downsample, volume

RNG = np.random.default_rng(30)


def _multiscale(root: Path) -> dict[str, Any]:
    """The first multiscale of an OME-Zarr 0.5 (``zarr.json``) or 0.4 (``.zattrs``) image."""
    if (root / "zarr.json").exists():
        attrs = json.loads((root / "zarr.json").read_text())["attributes"]["ome"]
    else:
        attrs = json.loads((root / ".zattrs").read_text())
    return dict(attrs["multiscales"][0])


def _translations(root: Path) -> list[list[float]]:
    out = []
    for dataset in _multiscale(root)["datasets"]:
        moves = [t for t in dataset["coordinateTransformations"] if t["type"] == "translation"]
        out.append(moves[0]["translation"] if moves else [0.0] * 3)
    return out


def test_new_levels_are_placed_by_pixel_centres(tmp_path: Path) -> None:
    root = tmp_path / "img.zarr"
    (base,) = volume.create_multiscale(
        root, [((32, 32, 16), (8, 8, 8), (4.0, 4.0, 40.0), (8, 4, 2))], "uint8"
    )
    half = volume.add_level(base, (2, 2, 1))
    quarter = volume.add_level(half, (2, 2, 1))
    # Level k's first voxel is centred r_k / 2 - r_0 / 2 past its corner o_k * r_k.
    assert _translations(root) == [
        [32.0, 16.0, 80.0],
        [32.0 + 2.0, 16.0 + 2.0, 80.0],
        [32.0 + 6.0, 16.0 + 6.0, 80.0],
    ]
    assert (half.offset, quarter.offset) == ((4, 2, 2), (2, 1, 2))
    assert volume.open(root, scale=2).offset == (2, 1, 2)


def test_an_image_with_corner_translations_keeps_them(tmp_path: Path) -> None:
    """As chunkgraph wrote before (and as scale-only images read): every level
    translated by the same corner."""
    root = tmp_path / "corner.zarr"
    (base,) = volume.create_multiscale(root, [((16, 16), (8, 8), (1.0, 1.0), (4, 8))], "uint8")
    volume.add_level(base, 2)
    meta = json.loads((root / "zarr.json").read_text())
    for dataset in meta["attributes"]["ome"]["multiscales"][0]["datasets"]:
        dataset["coordinateTransformations"][1]["translation"] = [4.0, 8.0]
    (root / "zarr.json").write_text(json.dumps(meta))
    assert volume.open(root, scale=1).offset == (2, 4)
    volume.add_level(volume.open(root, scale=1), 2)
    assert _translations(root)[2] == [4.0, 8.0]
    assert volume.open(root, scale=2).offset == (1, 2)


def test_a_level_that_fits_neither_convention_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "odd.zarr"
    (base,) = volume.create_multiscale(root, [((16, 16), (8, 8), (1.0, 1.0))], "uint8")
    volume.add_level(base, 2)
    meta = json.loads((root / "zarr.json").read_text())
    meta["attributes"]["ome"]["multiscales"][0]["datasets"][1]["coordinateTransformations"] = [
        {"type": "scale", "scale": [2.0, 2.0]},
        {"type": "translation", "translation": [0.3, 0.0]},
    ]
    (root / "zarr.json").write_text(json.dumps(meta))
    assert volume.open(root, scale=0).offset == (0, 0)
    with pytest.raises(ConfigError, match=r"level 1 \('1'\).*corners.*centres") as info:
        volume.open(root, scale=1)
    assert info.value.field == "scale"


# -- ngff-zarr ----------------------------------------------------------------------------------


def _ngff_pyramid(path: Path, data: np.ndarray, factors: list[int]) -> Any:
    nz = pytest.importorskip("ngff_zarr")
    image = nz.to_ngff_image(
        data,
        dims=["z", "y", "x"],
        scale={"z": 40.0, "y": 4.0, "x": 4.0},
        translation={"z": 80.0, "y": 32.0, "x": 32.0},
    )
    pyramid = nz.to_multiscales(
        image, scale_factors=[{"z": 1, "y": f, "x": f} for f in factors], chunks=8
    )
    nz.to_ngff_zarr(str(path), pyramid)
    return pyramid


def test_chunkgraph_reads_and_extends_an_ngff_zarr_pyramid(tmp_path: Path) -> None:
    data = RNG.integers(0, 4000, (6, 32, 40)).astype("uint16")
    pyramid = _ngff_pyramid(tmp_path / "ngff.zarr", data, [2, 4])
    paths = [d["path"] for d in _multiscale(tmp_path / "ngff.zarr")["datasets"]]
    for k, image in enumerate(pyramid.images):
        level = volume.open(tmp_path / "ngff.zarr", scale=k)
        assert level.resolution == (40.0, 4.0 * 2**k, 4.0 * 2**k)
        assert level.offset == (2, 8 >> k, 8 >> k)
        np.testing.assert_array_equal(level.read(level.bounds), np.asarray(image.data))
    # A level past ngff-zarr's coarsest sits where ngff-zarr puts its own of that scale.
    coarsest = volume.open(tmp_path / "ngff.zarr", scale=2)
    downsample(coarsest, factor=(1, 2, 2), levels=1, method="max")
    ours = _translations(tmp_path / "ngff.zarr")[3]
    theirs = _ngff_pyramid(tmp_path / "ngff8.zarr", data, [2, 4, 8]).images[3].translation
    assert ours == pytest.approx([theirs["z"], theirs["y"], theirs["x"]])
    assert [d["path"] for d in _multiscale(tmp_path / "ngff.zarr")["datasets"]][:3] == paths
    new = volume.open(tmp_path / "ngff.zarr", scale=3)
    expected = np.asarray(pyramid.images[2].data)
    expected = np.pad(expected, [(0, 0), (0, expected.shape[1] % 2), (0, expected.shape[2] % 2)])
    np.testing.assert_array_equal(
        new.read(new.bounds),
        expected.reshape(6, expected.shape[1] // 2, 2, expected.shape[2] // 2, 2).max(axis=(2, 4)),
    )


def test_ngff_zarr_reads_a_chunkgraph_pyramid_where_it_would_put_its_own(tmp_path: Path) -> None:
    nz = pytest.importorskip("ngff_zarr")
    data = RNG.integers(0, 255, (6, 32, 40)).astype("uint8")
    root = tmp_path / "ours.zarr"
    (base,) = volume.create_multiscale(
        root, [(data.shape, (6, 16, 16), (40.0, 4.0, 4.0), (2, 8, 8))], "uint8"
    )
    base.write(base.bounds, data)
    downsample(base, factor=(1, 2, 2), levels=2, method="stride")
    read = nz.from_ngff_zarr(str(root))
    theirs = _ngff_pyramid(tmp_path / "ngff.zarr", data, [2, 4])
    assert len(read.images) == 3
    for ours, own in zip(read.images, theirs.images, strict=True):
        assert ours.scale == pytest.approx(own.scale)
        assert ours.translation == pytest.approx(own.translation)
    np.testing.assert_array_equal(np.asarray(read.images[2].data), data[:, ::4, ::4])


# -- ome-zarr-py ----------------------------------------------------------------------------------


def test_ome_zarr_py_and_chunkgraph_read_each_others_pyramids(tmp_path: Path) -> None:
    pytest.importorskip("ome_zarr")
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader
    from ome_zarr.writer import write_image

    data = RNG.integers(0, 255, (4, 64, 48)).astype("uint8")
    theirs = tmp_path / "theirs.zarr"
    write_image(data, zarr.open_group(str(theirs), mode="w"), axes="zyx")
    written = [np.asarray(a) for a in next(iter(Reader(parse_url(str(theirs)))())).data]
    assert len(written) > 2
    for k, level_data in enumerate(written):
        level = volume.open(theirs, scale=k)
        assert level.offset == (0, 0, 0)
        np.testing.assert_array_equal(level.read(level.bounds), level_data)
    # ome-zarr-py places levels by pixel centres too: a new one (scale 32 over 1) moves
    # by 32 / 2 - 1 / 2 where it is downsampled.
    coarsest = volume.open(theirs, scale=len(written) - 1)
    downsample(coarsest, factor=(1, 2, 2), method="stride")
    assert _translations(theirs)[-1] == [0.0, 15.5, 15.5]
    again = [np.asarray(a) for a in next(iter(Reader(parse_url(str(theirs)))())).data]
    np.testing.assert_array_equal(again[-1], written[-1][:, ::2, ::2])

    ours = tmp_path / "ours.zarr"
    (base,) = volume.create_multiscale(ours, [(data.shape, (4, 16, 16), (1.0, 0.5, 0.5))], "uint8")
    base.write(base.bounds, data)
    downsample(base, factor=(1, 2, 2), levels=2, method="stride")
    node = next(iter(Reader(parse_url(str(ours)))()))
    read = [np.asarray(a) for a in node.data]
    assert len(read) == 3
    for k, level_data in enumerate(read):
        np.testing.assert_array_equal(level_data, data[:, :: 2**k, :: 2**k])
