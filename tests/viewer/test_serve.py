"""The viewer serves what the volumes hold: its server is started for real and asked
over HTTP, as the browser asks it (``/neuroglancer/info/KEY`` for a layer's geometry,
``/neuroglancer/npz/KEY/SCALE/START/END`` for a chunk's voxels)."""

from __future__ import annotations

import io
import json
import socket
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError, VolumeNotFoundError, volume
from chunkgraph.geometry import Box
from chunkgraph.viewer import View, view, view_command

RNG = np.random.default_rng(5)


@pytest.fixture
def memory_image() -> Iterator[volume.Volume]:
    v = volume.create("view-image", (40, 24, 8), (16, 16, 8), "float32", backend="memory")
    v.write(v.bounds, RNG.random((40, 24, 8), dtype="float32"))
    yield v
    volume.remove("view-image")


def _base(shown: View) -> str:
    return shown.url.split("/v/", 1)[0]


def _key(shown: View, layer: int) -> str:
    source = shown.viewer.state.layers[layer].source[0].url
    return str(source).removeprefix("python://volume/")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: bytes = reply.read()
    return body


def _chunk(
    shown: View, layer: int, start: tuple[int, ...], stop: tuple[int, ...], encoding: str = "npz"
) -> Any:
    """A chunk at full scale, as the server sends it: its bytes for ``raw`` (what the
    viewer asks for), the array for ``npz`` (Fortran order, zlib), which says its shape
    and dtype."""
    ones = ",".join("1" for _ in start)
    where = f"{','.join(map(str, start))}/{','.join(map(str, stop))}"
    body = _get(f"{_base(shown)}/neuroglancer/{encoding}/{_key(shown, layer)}/{ones}/{where}")
    return body if encoding == "raw" else np.load(io.BytesIO(zlib.decompress(body)))


def test_a_memory_volume_is_served_chunk_by_chunk(memory_image: volume.Volume) -> None:
    served = memory_image.with_cache(1 << 20)  # a handle with a cache is served as it is
    with view(served) as shown:
        # Opening read the chunk at the centre, (16, 0, 0)-(32, 16, 8), for the contrast.
        assert served.stats.chunks_read == 1
        assert shown.layers == ("view-image",)
        info = json.loads(_get(f"{_base(shown)}/neuroglancer/info/{_key(shown, 0)}"))
        assert info["volumeType"] == "image" and info["dataType"] == "float32"
        assert info["shape"] == [40, 24, 8] and info["encoding"] == "raw"
        got = _chunk(shown, 0, (0, 0, 0), (16, 16, 8))
        np.testing.assert_array_equal(got, memory_image.read(Box((0, 0, 0), (16, 16, 8))))
        assert served.stats.chunks_read == 2  # the one chunk asked for, no more
        _chunk(shown, 0, (0, 0, 0), (16, 16, 8))
        assert served.stats.chunks_read == 2  # asked again: from the cache
        raw = _chunk(shown, 0, (16, 16, 0), (32, 24, 8), "raw")  # what the browser asks
        want = memory_image.read(Box((16, 16, 0), (32, 24, 8)))
        assert raw == want.tobytes("F")  # the first axis fastest


def test_a_terabyte_volume_opens_reading_one_chunk(tmp_path: Path) -> None:
    """(16384, 16384, 4096) uint8 is 1 TiB; nothing is written, nothing listed."""
    big = volume.create(tmp_path / "big.zarr", (1 << 14, 1 << 14, 1 << 12), (64, 64, 64), "uint8")
    big.write(Box((8192, 8192, 2048), (8256, 8256, 2112)), np.full((64, 64, 64), 9, "uint8"))
    served = volume.open(tmp_path / "big.zarr", cache_bytes=1 << 20)
    with view(served) as shown:
        assert served.stats.chunks_read == 1  # the centre's chunk, for the contrast
        got = _chunk(shown, 0, (8192, 8192, 2048), (8256, 8256, 2112))
        assert (got == 9).all() and served.stats.chunks_read == 1  # from the cache


def test_a_precomputed_label_volume_keeps_its_offset_and_resolution(tmp_path: Path) -> None:
    path = f"precomputed://{tmp_path}/labels"
    labels = volume.create(path, (32, 32, 8), (16, 16, 8), "uint64",
                           resolution=(8, 8, 40), offset=(100, 200, 10))  # fmt: skip
    data = RNG.integers(0, 9, (32, 32, 8)).astype("uint64")
    labels.write(labels.bounds, data)
    with view(path, position=(110, 210, 12)) as shown:
        layer = shown.viewer.state.layers[0]
        assert layer.type == "segmentation"
        assert list(shown.viewer.state.position) == [110, 210, 12]
        info = json.loads(_get(f"{_base(shown)}/neuroglancer/info/{_key(shown, 0)}"))
        assert info["volumeType"] == "segmentation" and info["dataType"] == "uint64"
        assert [int(o) for o in info["voxelOffset"]] == [100, 200, 10]
        space = info["coordinateSpace"]
        assert [space[a] for a in "xyz"] == [[8e-9, "m"], [8e-9, "m"], [40e-9, "m"]]
        # Chunk coordinates are relative to the first voxel.
        np.testing.assert_array_equal(_chunk(shown, 0, (16, 0, 0), (32, 16, 8)), data[16:, :16])


def test_a_path_that_does_not_open_is_refused_before_serving(tmp_path: Path) -> None:
    with pytest.raises(VolumeNotFoundError, match="nowhere"):
        view(str(tmp_path / "nowhere.zarr"))


def test_a_port_in_use_is_refused(memory_image: volume.Volume) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} .* is in use"):
            view(memory_image, port=port)


def test_a_position_must_have_one_coordinate_per_axis(memory_image: volume.Volume) -> None:
    with pytest.raises(ConfigError, match="3 spatial axes"):
        view(memory_image, position=(1, 2))


def test_the_view_command_quotes_its_paths() -> None:
    assert view_command(["a b.zarr"], Box((0, 0), (4, 4))) == (
        "chunkgraph view 'a b.zarr' --bbox 0,0:4,4"
    )


def test_two_images_are_side_by_side_with_the_labels_over_each(
    memory_image: volume.Volume,
) -> None:
    labels = volume.create("view-labels", (40, 24, 8), (16, 16, 8), "uint32", backend="memory")
    try:
        with view(memory_image, "view-labels", memory_image) as shown:
            panels = shown.viewer.state.layout.children
            assert [list(p.layers) for p in panels] == [
                ["view-image (0)", "view-labels"],
                ["view-image (2)", "view-labels"],
            ]
    finally:
        del labels
        volume.remove("view-labels")


@pytest.mark.parametrize(
    ("dtype", "shown", "kind"),
    [
        ("int64", "uint64", "segmentation"),
        ("bool", "uint8", "image"),
        ("float64", "float32", "image"),
    ],
)
def test_dtypes_the_viewer_cannot_draw_are_converted(dtype: str, shown: str, kind: str) -> None:
    data = (RNG.integers(-3, 3, (16, 16, 4)) * 1000).astype(dtype)
    v = volume.create("view-dtype", (16, 16, 4), (16, 16, 4), dtype, backend="memory")
    try:
        v.write(v.bounds, data)
        with view(v) as served:
            info = json.loads(_get(f"{_base(served)}/neuroglancer/info/{_key(served, 0)}"))
            assert (info["dataType"], info["volumeType"]) == (shown, kind)
            got = _chunk(served, 0, (0, 0, 0), (16, 16, 4))
            expected = data.view("uint64") if dtype == "int64" else data.astype(shown)
            np.testing.assert_array_equal(got, expected)
    finally:
        volume.remove("view-dtype")


def test_a_bbox_is_outlined_and_centred_on(memory_image: volume.Volume) -> None:
    with view(memory_image, bbox=Box((8, 4, 0), (24, 20, 8))) as shown:
        state = shown.viewer.state
        assert list(state.position) == [16, 12, 4]
        box = state.layers["bbox"].annotations[0]
        assert (list(box.point_a), list(box.point_b)) == ([8, 4, 0], [24, 20, 8])


def test_images_with_and_without_channels_open_side_by_side(
    memory_image: volume.Volume,
) -> None:
    """Each layer's contrast is read at the same spatial centre, whatever its channels
    (a volume with a channel axis beside one without failed on the first's)."""
    rgb = volume.create(
        "view-rgb", (3, 40, 24, 8), (3, 16, 16, 8), "uint8", backend="memory", spatial_ndim=3
    )
    try:
        for order in ((rgb, memory_image), (memory_image, rgb)):
            with view(*order) as shown:
                assert len(shown.layers) == 2
    finally:
        del rgb
        volume.remove("view-rgb")
