"""What chunkgraph writes in each format, the field's reference tools read back exactly, and
the other way round: CloudVolume for precomputed, ome-zarr-models (the OME-Zarr 0.4/0.5
schemas) for OME-Zarr, TensorStore's own drivers, spelled out here, for N5 and Zarr v2.

The s3 cases run against moto's server on loopback: chunkgraph writes to the bucket and
the reference tool reads the objects it finds there (copied to a directory, so the check
is of the bytes in the bucket), or the reference tool's files are put in the bucket and
chunkgraph reads them from there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from chunkgraph import volume
from chunkgraph.testing import S3Server, s3_server

cloudvolume = pytest.importorskip("cloudvolume")
ts = pytest.importorskip("tensorstore")
ome_zarr_models = pytest.importorskip("ome_zarr_models")

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server(("interop",)) as running:
        yield running


def _client() -> object:
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def _download(server: S3Server, prefix: str, into: Path) -> Path:
    client = _client()
    for key in server.keys("interop", prefix):
        target = into / key
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file("interop", key, str(target))  # type: ignore[attr-defined]
    return into / prefix


def _upload(root: Path, prefix: str) -> str:
    client = _client()
    for path in root.rglob("*"):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(root).as_posix()}"
            client.upload_file(str(path), "interop", key)  # type: ignore[attr-defined]
    return f"s3://interop/{prefix}"


def _cloudvolume(path: Path, mip: int = 0) -> object:
    return cloudvolume.CloudVolume(f"file://{path}", mip=mip, progress=False, fill_missing=False)


# -- precomputed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "encoding"),
    [
        ("uint16", "raw"),
        ("uint32", "compressed_segmentation"),
        ("uint64", "compressed_segmentation"),
    ],
)
def test_cloudvolume_reads_the_precomputed_scales_chunkgraph_writes(
    tmp_path: Path, dtype: str, encoding: str
) -> None:
    root = tmp_path / "img"
    base, half = volume.create_multiscale(
        f"precomputed://{root}",
        [((48, 32, 16), (16, 16, 8), (4, 4, 40), (8, 16, 2)),
         ((24, 16, 16), (16, 16, 8), (8, 8, 40), (4, 8, 2))],
        dtype, encoding=encoding,
    )  # fmt: skip
    data = RNG.integers(0, 2**31, (48, 32, 16)).astype(dtype)
    base.write(base.bounds, data)
    half.write(half.bounds, data[::2, ::2])
    cv = _cloudvolume(root)
    assert tuple(cv.voxel_offset) == (8, 16, 2) and tuple(cv.resolution) == (4, 4, 40)
    np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0], data)
    cv1 = _cloudvolume(root, mip=1)
    assert tuple(cv1.voxel_offset) == (4, 8, 2) and tuple(cv1.resolution) == (8, 8, 40)
    np.testing.assert_array_equal(np.asarray(cv1[:, :, :])[..., 0], data[::2, ::2])


def test_cloudvolume_reads_a_sharded_scale_chunkgraph_writes(tmp_path: Path) -> None:
    root = tmp_path / "sharded"
    v = volume.create(f"precomputed://{root}", (64, 64, 16), (16, 16, 8), "uint32",
                      resolution=(8, 8, 40), write_chunks=(32, 32, 16),
                      encoding="compressed_segmentation")  # fmt: skip
    data = RNG.integers(0, 50, (64, 64, 16)).astype("uint32")
    for box in v.bounds.split(v.spatial_chunks):
        v.write(box, data[box.slices(relative_to=v.bounds)])
    cv = _cloudvolume(root)
    assert "sharding" in cv.scale
    np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0], data)


def test_chunkgraph_reads_what_cloudvolume_writes_with_channels(tmp_path: Path) -> None:
    root = tmp_path / "cv"
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=2, layer_type="image", data_type="float32", encoding="raw",
        resolution=[6, 6, 30], voxel_offset=[3, 5, 7], chunk_size=[16, 16, 4],
        volume_size=[32, 16, 8],
    )  # fmt: skip
    cv = cloudvolume.CloudVolume(f"file://{root}", info=info, progress=False, compress=False)
    cv.commit_info()
    data = RNG.random((32, 16, 8, 2), dtype="float32")
    cv[:, :, :] = data
    v = volume.open(f"precomputed://file://{root}")
    assert (v.offset, v.resolution, v.channel_shape) == ((3, 5, 7), (6, 6, 30), (2,))
    np.testing.assert_array_equal(v.read(v.bounds), np.moveaxis(data, 3, 0))


def test_chunkgraph_reads_compressed_segmentation_cloudvolume_writes(tmp_path: Path) -> None:
    root = tmp_path / "seg"
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64",
        encoding="compressed_segmentation", resolution=[4, 4, 40], voxel_offset=[0, 0, 0],
        chunk_size=[16, 16, 8], volume_size=[32, 32, 8],
    )  # fmt: skip
    cv = cloudvolume.CloudVolume(f"file://{root}", info=info, progress=False, compress=False)
    cv.commit_info()
    data = RNG.integers(0, 2**40, (32, 32, 8)).astype("uint64")
    cv[:, :, :] = data
    v = volume.open(f"precomputed://{root}")
    np.testing.assert_array_equal(v.read(v.bounds), data)


def test_chunkgraph_reads_a_sharded_scale_cloudvolume_writes_shard_by_shard(
    tmp_path: Path,
) -> None:
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64", encoding="raw",
        resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=[16, 16, 8],
        volume_size=[64, 64, 16],
    )  # fmt: skip
    info["scales"][0]["sharding"] = {
        "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 3, "hash": "identity",
        "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "gzip",
        "data_encoding": "gzip",
    }  # fmt: skip
    cv = cloudvolume.CloudVolume(f"file://{tmp_path}/cv", info=info, progress=False, compress=False)
    cv.commit_info()
    data = RNG.integers(0, 2**40, (64, 64, 16)).astype("uint64")
    for x in (0, 32):  # CloudVolume writes one whole shard at a time
        for y in (0, 32):
            cv[x : x + 32, y : y + 32, :] = data[x : x + 32, y : y + 32]
    v = volume.open(f"precomputed://{tmp_path}/cv")
    assert (v.chunks, v.read_chunks) == ((32, 32, 16), (16, 16, 8))
    np.testing.assert_array_equal(v.read(v.bounds), data)


def test_precomputed_on_s3_both_ways(server: S3Server, tmp_path: Path) -> None:
    v = volume.create("precomputed://s3://interop/pc", (32, 32, 8), (16, 16, 8), "uint8",
                      resolution=(4, 4, 40), offset=(1, 2, 3))  # fmt: skip
    data = RNG.integers(0, 255, (32, 32, 8)).astype("uint8")
    v.write(v.bounds, data)
    local = _download(server, "pc", tmp_path / "down")
    np.testing.assert_array_equal(np.asarray(_cloudvolume(local)[:, :, :])[..., 0], data)

    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=1, layer_type="image", data_type="uint16", encoding="raw",
        resolution=[2, 2, 2], voxel_offset=[10, 0, 0], chunk_size=[8, 8, 8],
        volume_size=[16, 16, 8],
    )  # fmt: skip
    cv = cloudvolume.CloudVolume(f"file://{tmp_path}/up", info=info, progress=False, compress=False)
    cv.commit_info()
    written = RNG.integers(0, 1000, (16, 16, 8)).astype("uint16")
    cv[:, :, :] = written
    url = _upload(tmp_path / "up", "cvup")
    back = volume.open(f"precomputed://{url}")
    assert back.offset == (10, 0, 0)
    np.testing.assert_array_equal(back.read(back.bounds), written)


def _define_models() -> None:
    """ome-zarr-models 1.6 leaves its 0.4 models to be completed with pydantic-zarr's v2
    ``ArraySpec`` (pydantic names the missing type and asks for this)."""
    from ome_zarr_models.v04 import image, image_label
    from pydantic_zarr.v2 import ArraySpec, GroupSpec

    names = {"ArraySpec": ArraySpec, "GroupSpec": GroupSpec}
    for model in (image.Image, image_label.ImageLabel):
        model.model_rebuild(_types_namespace=names)


# -- OME-Zarr ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_zarr_models_validates_the_pyramids_chunkgraph_writes(
    tmp_path: Path, version: str
) -> None:
    root = tmp_path / "img.zarr"
    base, _ = volume.create_multiscale(
        root, [((2, 32, 32), (2, 16, 16), (0.5, 0.5), (4, 6))], "uint16", version=version,
        unit="micrometer",
    ), None  # fmt: skip
    volume.add_level(base[0], 2)
    _define_models()
    model = ome_zarr_models.open_ome_zarr(zarr.open_group(root, mode="r"), version=version)
    (multiscale,) = (
        model.attributes.multiscales if version == "0.4" else model.ome_attributes.multiscales
    )
    assert [a.name for a in multiscale.axes] == ["c", "y", "x"]
    transforms = multiscale.datasets[1].coordinateTransformations
    assert list(transforms[0].scale) == [1, 1, 1]
    # Pixel centres: level 1's first voxel (offset (2, 3), scale 1) is centred half its
    # voxel minus half of level 0's (0.5) past its corner.
    assert list(transforms[1].translation) == [0, 2.25, 3.25]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_chunkgraph_reads_the_levels_of_a_pyramid_ome_zarr_models_writes(
    tmp_path: Path, version: str
) -> None:
    if version == "0.5":
        from ome_zarr_models.v05.axes import Axis
        from ome_zarr_models.v05.image import Image
        from pydantic_zarr.v3 import ArraySpec
    else:
        from ome_zarr_models.v04.axes import Axis  # type: ignore[assignment]
        from ome_zarr_models.v04.image import Image  # type: ignore[assignment]
        from pydantic_zarr.v2 import ArraySpec  # type: ignore[assignment]
    levels = [
        RNG.random((3, 8, 16, 16), dtype="float32"),
        RNG.random((3, 8, 8, 8), dtype="float32"),
    ]
    _define_models()
    names = ["c", "z", "y", "x"]
    specs = [
        ArraySpec.from_array(a, dimension_names=names)  # type: ignore[call-arg]
        if version == "0.5"
        else ArraySpec.from_array(a, dimension_separator="/")  # type: ignore[call-arg]
        for a in levels
    ]
    image = Image.new(
        array_specs=specs,
        paths=["s0", "s1"],
        axes=[Axis(name="c", type="channel"), Axis(name="z", type="space"),
              Axis(name="y", type="space"), Axis(name="x", type="space")],
        scales=[[1, 40, 4, 4], [1, 40, 8, 8]],
        translations=[[0, 80, 0, 8], [0, 80, 0, 8]],
    )  # fmt: skip
    store = zarr.storage.LocalStore(tmp_path / "ref.zarr")
    image.to_zarr(store, "/")
    for key, data in zip(["s0", "s1"], levels, strict=True):
        zarr.open_array(store, path=key, mode="r+")[...] = data
    v = volume.open(tmp_path / "ref.zarr", scale="s1")
    assert (v.resolution, v.offset, v.channel_shape) == ((40, 8, 8), (2, 0, 1), (3,))
    np.testing.assert_array_equal(v.read(v.bounds), levels[1])
    first = volume.open(tmp_path / "ref.zarr")
    assert (first.resolution, first.offset) == ((40, 4, 4), (2, 0, 2))
    np.testing.assert_array_equal(first.read(first.bounds), levels[0])


def test_ome_zarr_on_s3_both_ways(server: S3Server, tmp_path: Path) -> None:
    (level,) = volume.create_multiscale(
        "s3://interop/ome.zarr", [((16, 16), (8, 8), (2, 2))], "uint8"
    )
    level.write(level.bounds, np.full((16, 16), 3, "uint8"))
    local = _download(server, "ome.zarr", tmp_path / "down")
    ome_zarr_models.open_ome_zarr(zarr.open_group(local, mode="r"), version="0.5")
    assert zarr.open_array(local / "0", mode="r")[...].sum() == 3 * 256

    from ome_zarr_models.v05.axes import Axis
    from ome_zarr_models.v05.image import Image
    from pydantic_zarr.v3 import ArraySpec

    data = RNG.integers(0, 255, (12, 10)).astype("uint8")
    image = Image.new(
        array_specs=[ArraySpec.from_array(data, dimension_names=["y", "x"])],
        paths=["0"],
        axes=[Axis(name="y", type="space"), Axis(name="x", type="space")],
        scales=[[3, 3]],
        translations=[[30, 6]],
    )
    store = zarr.storage.LocalStore(tmp_path / "up.zarr")
    image.to_zarr(store, "/")
    zarr.open_array(store, path="0", mode="r+")[...] = data
    back = volume.open(_upload(tmp_path / "up.zarr", "omeup.zarr"))
    assert (back.offset, back.resolution) == ((10, 2), (3, 3))
    np.testing.assert_array_equal(back.read(back.bounds), data)


# -- N5 and Zarr v2, against TensorStore's drivers ----------------------------------------------


def _ts_spec(driver: str, path: str) -> dict[str, object]:
    if path.startswith("s3://"):
        bucket, _, key = path[5:].partition("/")
        kv: dict[str, object] = {
            "driver": "s3", "bucket": bucket, "path": key + "/",
            "endpoint": os.environ["AWS_ENDPOINT_URL"], "aws_region": os.environ["AWS_REGION"],
        }  # fmt: skip
    else:
        kv = {"driver": "file", "path": path}
    return {"driver": driver, "kvstore": kv}


@pytest.mark.parametrize(("prefix", "driver"), [("n5", "n5"), ("zarr2", "zarr")])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_tensorstore_drivers_and_chunkgraph_read_each_others_datasets(
    server: S3Server, tmp_path: Path, prefix: str, driver: str, where: str
) -> None:
    base = f"s3://interop/{where}-{prefix}" if where == "s3" else str(tmp_path)
    ours, theirs = f"{base}/ours", f"{base}/theirs"
    data = RNG.integers(-1000, 1000, (20, 30, 6)).astype("int32")
    v = volume.create(f"{prefix}://{ours}", data.shape, (8, 16, 6), "int32")
    v.write(v.bounds, data)
    read = ts.open(_ts_spec(driver, ours), open=True, read=True).result()
    np.testing.assert_array_equal(read.read().result(), data)

    meta = (
        {"dimensions": list(data.shape), "blockSize": [16, 8, 3], "dataType": "int32",
         "compression": {"type": "gzip"}}
        if driver == "n5"
        else {"shape": list(data.shape), "chunks": [16, 8, 3], "dtype": "<i4"}
    )  # fmt: skip
    written = ts.open({**_ts_spec(driver, theirs), "metadata": meta}, create=True).result()
    written.write(data).result()
    back = volume.open(f"{prefix}://{theirs}")
    assert back.chunks == (16, 8, 3)
    np.testing.assert_array_equal(back.read(back.bounds), data)
