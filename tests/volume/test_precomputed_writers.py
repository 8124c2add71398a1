"""Precomputed volumes as the field's reference writers make them by default read exactly,
or are refused naming what is not read; a chunk that is there but does not decode is never
read as a missing one.

CloudVolume gzips raw and compressed_segmentation chunks unless told not to (jpeg too
with ``compress=True``): on a local disk each chunk file ends in ``.gz``, on s3 the object
carries ``Content-Encoding: gzip``. Sharded scales are written as plain ``.shard`` files
(their chunks gzipped inside, ``data_encoding``) unless ``compress=True``, which gzips
the whole shard file (``.shard.gz``, which CloudVolume itself does not read back).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from chunkgraph import ConfigError, CorruptChunkError, transfer, volume
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server

cloudvolume = pytest.importorskip("cloudvolume")

RNG = np.random.default_rng(30)
SRC_DIR = Path(__file__).resolve().parents[2] / "src"
SHAPE = (64, 64, 16)
DTYPES = {"raw": "uint16", "compressed_segmentation": "uint64", "jpeg": "uint8"}
# Shards of 2 x 2 x 2 chunks (16, 16, 8): identity hash, one shard per 32 x 32 x 16 box.
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 3, "hash": "identity",
    "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "gzip",
}  # fmt: skip


def _info(encoding: str, sharded: bool = False) -> dict[str, Any]:
    info: dict[str, Any] = cloudvolume.CloudVolume.create_new_info(
        num_channels=1,
        layer_type="segmentation" if encoding == "compressed_segmentation" else "image",
        data_type=DTYPES[encoding], encoding=encoding, resolution=[4, 4, 40],
        voxel_offset=[2, 4, 6], chunk_size=[16, 16, 8], volume_size=list(SHAPE),
    )  # fmt: skip
    if sharded:
        data_encoding = "raw" if encoding == "jpeg" else "gzip"
        info["scales"][0]["sharding"] = {**SHARDING, "data_encoding": data_encoding}
    return info


def _data(encoding: str) -> np.ndarray:
    if encoding == "jpeg":  # smooth, so the lossy codec keeps it close
        x, y, z = np.meshgrid(*(np.arange(n) for n in SHAPE), indexing="ij")
        return ((x * 3 + y * 2 + z * 5) % 256).astype("uint8")
    high = 2**40 if encoding == "compressed_segmentation" else 60000
    return RNG.integers(0, high, SHAPE).astype(DTYPES[encoding])


def _cloudvolume_writes(
    url: str, encoding: str, compress: Any, sharded: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Write a volume with CloudVolume; (what was written, what CloudVolume reads back)."""
    cv = cloudvolume.CloudVolume(url, info=_info(encoding, sharded), progress=False,
                                 compress=compress)  # fmt: skip
    cv.commit_info()
    data = _data(encoding)
    step = (32, 32, 16) if sharded else SHAPE  # CloudVolume writes a shard at a time
    x0, y0, _ = cv.voxel_offset
    for x in range(0, SHAPE[0], step[0]):
        for y in range(0, SHAPE[1], step[1]):
            part = data[x : x + step[0], y : y + step[1]]
            cv[x0 + x : x0 + x + step[0], y0 + y : y0 + y + step[1], :] = part[..., None]
    if sharded and compress is True:
        return data, data  # CloudVolume cannot read these back (see the module docstring)
    back = cloudvolume.CloudVolume(url, progress=False, fill_missing=False)
    return data, np.asarray(back[:, :, :])[..., 0]


def _client(server: S3Server) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=server.endpoint)  # credentials: the environment's


def _scale_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / "4_4_40"))


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
@pytest.mark.parametrize("compress", [None, True, False], ids=["default", "gzip", "plain"])
@pytest.mark.parametrize("encoding", list(DTYPES))
def test_what_cloudvolume_writes_reads_exactly_or_is_refused(
    tmp_path: Path, encoding: str, compress: Any, sharded: bool
) -> None:
    root = tmp_path / "cv"
    data, cv_read = _cloudvolume_writes(f"file://{root}", encoding, compress, sharded)
    if encoding != "jpeg":
        np.testing.assert_array_equal(cv_read, data)
    gzipped = compress is True or (compress is None and encoding != "jpeg" and not sharded)
    assert any(name.endswith(".gz") for name in _scale_files(root)) == gzipped
    if sharded and compress is True:
        with pytest.raises(ConfigError, match=r"\.shard\.gz") as refused:
            volume.open(f"precomputed://{root}")
        assert "compress=False" in str(refused.value)
        return
    v = volume.open(f"precomputed://{root}")
    assert v.offset == (2, 4, 6)
    # jpeg: exactly what CloudVolume itself decodes, the same lossy pixels
    np.testing.assert_array_equal(v.read(v.bounds), cv_read)


def test_cloudvolumes_gzip_objects_on_s3_read_exactly(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CloudVolume's own s3 writer against the S3 server: ``Content-Encoding: gzip``."""
    import cloudfiles.paths

    # cloudfiles names a custom endpoint by an alias; it also requires a session token.
    cloudfiles.paths.add_alias("motos3", f"s3://{server.endpoint}/")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    data, _ = _cloudvolume_writes(f"motos3://{bucket}/cv", "raw", None)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    head = _client(server).head_object(Bucket=bucket, Key="cv/4_4_40/2-18_4-20_6-14")
    assert head["ContentEncoding"] == "gzip"
    v = volume.open(f"precomputed://s3://{bucket}/cv")
    np.testing.assert_array_equal(v.read(v.bounds), data)


def test_gz_chunk_keys_in_a_bucket_read_exactly(
    tmp_path: Path, server: S3Server, bucket: str
) -> None:
    """A local CloudVolume volume copied to a bucket as files (``aws s3 sync``): the keys
    end in ``.gz`` and the objects have no Content-Encoding."""
    root = tmp_path / "cv"
    data, _ = _cloudvolume_writes(f"file://{root}", "compressed_segmentation", None)
    client = _client(server)
    for path in root.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), bucket, f"cv/{path.relative_to(root).as_posix()}")
    v = volume.open(f"precomputed://s3://{bucket}/cv")
    np.testing.assert_array_equal(v.read(v.bounds), data)


def test_writes_into_a_gzip_scale_stay_gzip_and_read_back_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "cv"
    data, _ = _cloudvolume_writes(f"file://{root}", "raw", None)
    v = volume.open(f"precomputed://{root}", "r+")
    box = Box((2, 4, 6), (34, 20, 14))  # two whole chunks
    new = RNG.integers(0, 60000, box.shape).astype("uint16")
    new[:16] = 0  # a chunk of zeros: its file is removed, as TensorStore does with fill
    v.write(box, new)
    files = _scale_files(root)
    assert all(name.endswith(".gz") for name in files), files
    assert "2-18_4-20_6-14.gz" not in files and "18-34_4-20_6-14.gz" in files
    data[0:32, 0:16, 0:8] = new
    np.testing.assert_array_equal(volume.open(f"precomputed://{root}").read(v.bounds), data)
    back = cloudvolume.CloudVolume(f"file://{root}", progress=False, fill_missing=True)
    np.testing.assert_array_equal(np.asarray(back[:, :, :])[..., 0], data)


def test_transfer_of_a_gzip_volume_copies_it_exactly(tmp_path: Path) -> None:
    root = tmp_path / "cv"
    data, _ = _cloudvolume_writes(f"file://{root}", "raw", None)
    transfer(f"precomputed://{root}", tmp_path / "copy.zarr")
    copy = volume.open(str(tmp_path / "copy.zarr"))
    np.testing.assert_array_equal(copy.read(copy.bounds), data)


def test_downsample_of_a_gzip_volume_adds_an_exact_scale(tmp_path: Path) -> None:
    root = tmp_path / "cv"
    data, _ = _cloudvolume_writes(f"file://{root}", "compressed_segmentation", None)
    command = [
        sys.executable, "-m", "chunkgraph", "downsample", f"precomputed://{root}",
        "--factor", "2,2,1", "--method", "max", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    level = volume.open(f"precomputed://{root}", scale=1)
    expected = data.reshape(32, 2, 32, 2, 16).max(axis=(1, 3))
    np.testing.assert_array_equal(level.read(level.bounds), expected)
    cv = cloudvolume.CloudVolume(f"file://{root}", mip=1, progress=False, fill_missing=False)
    np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0], expected)


@pytest.mark.parametrize("compress", [None, False], ids=["gzip", "plain"])
@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
def test_a_chunk_that_does_not_decode_is_named_and_a_missing_one_reads_as_zero(
    tmp_path: Path, encoding: str, compress: Any
) -> None:
    root = tmp_path / "cv"
    data, _ = _cloudvolume_writes(f"file://{root}", encoding, compress)
    suffix = "" if compress is False else ".gz"
    missing = root / "4_4_40" / f"34-50_4-20_6-14{suffix}"
    missing.unlink()
    damaged = root / "4_4_40" / f"2-18_20-36_14-22{suffix}"
    damaged.write_bytes(damaged.read_bytes()[:40])
    v = volume.open(f"precomputed://{root}")
    with pytest.raises(CorruptChunkError) as raised:
        v.read(v.bounds)
    assert raised.value.files == (str(damaged),)
    assert "(2, 20, 14)" in str(raised.value)  # the chunk's global box starts there
    data[32:48, 0:16, 0:8] = 0
    inner = Box((2, 4, 6), (66, 20, 22))  # the missing chunk, not the damaged
    np.testing.assert_array_equal(v.read(inner), data[:, :16, :])


def test_gzip_bytes_that_do_not_gunzip_are_corrupt_not_missing(tmp_path: Path) -> None:
    root = tmp_path / "cv"
    _cloudvolume_writes(f"file://{root}", "raw", None)
    damaged = root / "4_4_40" / "2-18_4-20_6-14.gz"
    damaged.write_bytes(gzip.compress(b"short")[:-6])
    v = volume.open(f"precomputed://{root}")
    with pytest.raises(CorruptChunkError, match=r"2-18_4-20_6-14\.gz"):
        v.read(v.bounds)


@pytest.mark.parametrize("compress", ["br", "zstd"])
def test_other_compressions_of_chunk_files_are_refused_by_name(
    tmp_path: Path, compress: str
) -> None:
    root = tmp_path / "cv"
    _cloudvolume_writes(f"file://{root}", "raw", compress)
    with pytest.raises(ConfigError, match=rf"\.{compress}\b") as refused:
        volume.open(f"precomputed://{root}")
    assert "compress='gzip'" in str(refused.value)


@pytest.mark.parametrize("cut", [slice(0, 100), slice(0, -100)], ids=["head-kept", "tail-cut"])
@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_a_damaged_shard_is_named_by_its_file(tmp_path: Path, which: int, cut: slice) -> None:
    root = tmp_path / "cv"
    _cloudvolume_writes(f"file://{root}", "raw", None, sharded=True)
    shards = _scale_files(root)
    assert shards == ["0.shard", "1.shard", "2.shard", "3.shard"]
    damaged = root / "4_4_40" / shards[which]
    damaged.write_bytes(damaged.read_bytes()[cut])
    v = volume.open(f"precomputed://{root}")
    with pytest.raises(CorruptChunkError) as raised:
        v.read(v.bounds)
    assert raised.value.files == (str(damaged),)


@contextlib.contextmanager
def _listing_refused(server: S3Server) -> Iterator[str]:
    """A loopback proxy to ``server`` that answers every listing ``403 AccessDenied``, as a
    bucket that grants reads but not ListBucket does; its endpoint."""
    from http.server import ThreadingHTTPServer

    from chunkgraph.testing import Proxy, _handler

    forward = _handler(Proxy("", server.endpoint, 0.0, 0.0))

    class RefuseListing(forward):  # type: ignore[misc, valid-type]
        def _forward(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if self.command == "GET" and ("list-type" in query or "prefix" in query):
                denied = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
                self._answer(403, [("Content-Type", "application/xml")], denied)
                return
            super()._forward()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), RefuseListing)
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_bucket_that_refuses_listing_still_opens_cloudvolumes_objects(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look for ``.gz`` keys is a listing; without ListBucket the scale reads as its
    plain keys and Content-Encoding objects, which is how CloudVolume writes to buckets."""
    import cloudfiles.paths

    cloudfiles.paths.add_alias("motos3", f"s3://{server.endpoint}/")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    data, _ = _cloudvolume_writes(f"motos3://{bucket}/cv", "raw", None)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    with _listing_refused(server) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        v = volume.open(f"precomputed://s3://{bucket}/cv")
        np.testing.assert_array_equal(v.read(v.bounds), data)


READS = "it reads raw, compressed_segmentation, jpeg, png"


@pytest.mark.parametrize(
    ("encoding", "dtype", "named", "valid"),
    [
        ("compresso", "uint64", "'compresso'", READS),
        ("crackle", "uint64", "'crackle'", READS),
        ("fpzip", "float32", "'fpzip'", READS),
        ("raw", "float64", "data_type 'float64'", "it reads uint8, int8, uint16"),
    ],
)
def test_encodings_and_dtypes_tensorstore_does_not_decode_are_refused_by_name(
    tmp_path: Path, encoding: str, dtype: str, named: str, valid: str
) -> None:
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type=dtype, encoding=encoding,
        resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=[16, 16, 8],
        volume_size=[32, 32, 8],
    )  # fmt: skip
    cloudvolume.CloudVolume(f"file://{tmp_path}/cv", info=info, progress=False).commit_info()
    with pytest.raises(ConfigError, match=named) as refused:
        volume.open(f"precomputed://{tmp_path}/cv")
    assert valid in str(refused.value)


def test_three_channel_jpeg_in_gzip_files_reads_as_written(tmp_path: Path) -> None:
    """CloudVolume reads its own 3-channel jpeg back up to 94 levels off this smooth image
    (cloud-volume 12.15); TensorStore's decoder, chunkgraph's, stays within jpeg's loss."""
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=3, layer_type="image", data_type="uint8", encoding="jpeg",
        resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=[16, 16, 8],
        volume_size=[32, 32, 8],
    )  # fmt: skip
    cv = cloudvolume.CloudVolume(f"file://{tmp_path}/cv", info=info, progress=False,
                                 compress=True)  # fmt: skip
    cv.commit_info()
    x, y, z, c = np.meshgrid(*(np.arange(n) for n in (32, 32, 8, 3)), indexing="ij")
    data = (x * 2 + y * 2 + z * 3 + c * 30).astype("uint8")
    cv[:, :, :] = data
    assert all(name.endswith(".gz") for name in _scale_files(tmp_path / "cv"))
    v = volume.open(f"precomputed://{tmp_path}/cv")
    got = v.read(v.bounds).astype(int)
    assert np.abs(got - np.moveaxis(data, 3, 0)).max() <= 4


@pytest.mark.parametrize("which", ["0.shard", "3.shard"])
def test_a_damaged_shard_tensorstore_wrote_is_named_by_its_file(tmp_path: Path, which: str) -> None:
    v = volume.create(f"precomputed://{tmp_path}/ts", SHAPE, (16, 16, 8), "uint32",
                      resolution=(4, 4, 40), write_chunks=(32, 32, 16))  # fmt: skip
    v.write(v.bounds, RNG.integers(1, 2**31, SHAPE).astype("uint32"))
    assert _scale_files(tmp_path / "ts") == ["0.shard", "1.shard", "2.shard", "3.shard"]
    damaged = tmp_path / "ts" / "4_4_40" / which
    damaged.write_bytes(damaged.read_bytes()[:-100])
    for opened in (v, volume.open(f"precomputed://{tmp_path}/ts")):
        with pytest.raises(CorruptChunkError) as raised:
            opened.read(opened.bounds)
        assert raised.value.files == (str(damaged),)


@pytest.mark.parametrize(
    "damage",
    [lambda b: b"", lambda b: b[:8], lambda b: b[:-300] + bytes(300)],
    ids=["empty", "shorter-than-its-index", "tail-zeroed"],
)
def test_a_stored_shard_empty_short_or_zeroed_is_corrupt_not_missing(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    root = tmp_path / "cv"
    _cloudvolume_writes(f"file://{root}", "raw", None, sharded=True)
    damaged = root / "4_4_40" / "1.shard"
    damaged.write_bytes(damage(damaged.read_bytes()))
    v = volume.open(f"precomputed://{root}")
    with pytest.raises(CorruptChunkError) as raised:
        v.read(v.bounds)
    assert raised.value.files == (str(damaged),)


def test_an_empty_shard_object_on_s3_is_corrupt_not_missing() -> None:
    import obstore

    from chunkgraph.testing import s3_server
    from chunkgraph.volume._object_store import object_store

    with s3_server(("empty-shard",)):
        v = volume.create("precomputed://s3://empty-shard/pc", SHAPE, (16, 16, 8), "uint16",
                          resolution=(4, 4, 40), write_chunks=(32, 32, 16))  # fmt: skip
        v.write(v.bounds, np.ones(SHAPE, "uint16"))
        obstore.put(object_store("s3://empty-shard/pc", None), "4_4_40/1.shard", b"")
        opened = volume.open("precomputed://s3://empty-shard/pc")
        with pytest.raises(CorruptChunkError) as raised:
            opened.read(opened.bounds)
        assert raised.value.files == ("s3://empty-shard/pc/4_4_40/1.shard",)


def test_an_object_whose_body_is_not_its_content_encoding_is_a_corrupt_chunk(
    server: S3Server, bucket: str
) -> None:
    """``Content-Encoding: gzip`` over bytes that are not gzip: they arrived and do not
    decode (curl's error 61), so the read names the chunk, key and box and is not worth
    another try, as a garbled chunk is; the other chunks still read."""
    from chunkgraph._errors import is_permanent

    v = volume.create(f"precomputed://s3://{bucket}/img", (32, 32, 32), (16, 16, 16), "uint8")
    v.write(v.bounds, np.ones((32, 32, 32), "uint8"))
    key = "img/1_1_1/0-16_16-32_0-16"
    _client(server).put_object(Bucket=bucket, Key=key, Body=b"not gzip" * 8, ContentEncoding="gzip")
    again = volume.open(f"precomputed://s3://{bucket}/img")
    with pytest.raises(CorruptChunkError) as caught:
        again.read(again.bounds)
    message = str(caught.value)
    assert "'1_1_1/0-16_16-32_0-16'" in message and "Box(start=(0, 16, 0)" in message
    assert is_permanent(caught.value)
    assert again.read(Box((16, 0, 0), (32, 32, 32))).sum() == 16 * 32 * 32
