"""A volume's resolution (physical voxel size): stored, read back, checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.volume.conftest import MakeVolume

from chunkgraph import ConfigError, volume


def test_resolution_defaults_to_ones(make_volume: MakeVolume, backend: str) -> None:
    vol = make_volume(backend, (2, 8, 8), (2, 4, 4), spatial_ndim=2)
    assert vol.resolution == (1, 1)


def test_resolution_is_kept_and_read_back(make_volume: MakeVolume, backend: str) -> None:
    vol = make_volume(backend, (8, 8, 4), (4, 4, 4), resolution=(4, 4.0, 40.5))
    assert vol.resolution == (4, 4, 40.5)
    again = volume.open(vol.path, backend=backend)
    assert again.resolution == (4, 4, 40.5)
    assert vol.with_cache(1024).resolution == (4, 4, 40.5)


@pytest.mark.parametrize("writer, reader", [("zarr", "tensorstore"), ("tensorstore", "zarr")])
def test_resolution_is_in_the_zarr_attributes(tmp_path: Path, writer: str, reader: str) -> None:
    path = str(tmp_path / "v.zarr")
    volume.create(path, (8, 8), (4, 4), "uint8", backend=writer, resolution=(8, 2))
    attrs = json.loads((tmp_path / "v.zarr" / "zarr.json").read_text())["attributes"]
    assert attrs["chunkgraph"]["resolution"] == [8, 2]
    assert volume.open(path, backend=reader).resolution == (8, 2)


def test_exist_ok_refuses_another_resolution(tmp_path: Path) -> None:
    path = str(tmp_path / "v.zarr")
    volume.create(path, (8, 8), (4, 4), "uint8", resolution=(8, 2))
    assert volume.create(path, (8, 8), (4, 4), "uint8", resolution=(8, 2), exist_ok=True)
    with pytest.raises(ConfigError, match=r"resolution\) .*\(8, 2\)\).*\(4, 4\)\)"):
        volume.create(path, (8, 8), (4, 4), "uint8", resolution=4, exist_ok=True)


@pytest.mark.parametrize(
    "bad, words",
    [
        ((4, 4, 4), "3 entries but the volume has 2 spatial axes"),
        ((4, 0), "0 on axis 1; a voxel size must be a positive"),
        ((4, float("inf")), "inf on axis 1"),
        ((True, 4), "True on axis 0"),
        (("4", 4), "'4' on axis 0"),
    ],
)
def test_bad_resolution_is_refused(make_volume: MakeVolume, bad: object, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        make_volume("memory", (8, 8), (4, 4), resolution=bad)
