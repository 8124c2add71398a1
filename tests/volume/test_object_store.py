"""Volumes on object stores (s3:// through moto's S3 server on loopback): the same
create / open / read / write / remove contract as on disk."""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
from collections.abc import Iterator

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server, s3_server

_buckets = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server() as running:
        yield running


@pytest.fixture
def bucket(server: S3Server) -> str:
    """A fresh bucket per test, so tests never see each other's objects."""
    name = f"vols-{next(_buckets)}"
    server.create_bucket(name)
    return name


def test_a_volume_on_s3_is_written_read_reopened_and_removed(server: S3Server, bucket: str) -> None:
    url = f"s3://{bucket}/data/a.zarr"
    vol = volume.create(url, (2, 40, 30), (2, 16, 16), "uint16", spatial_ndim=2, offset=(5, 0))
    data = np.arange(2 * 40 * 30, dtype="uint16").reshape(2, 40, 30)
    vol.write(vol.bounds, data)
    # An unaligned read across chunk edges and the bounds: fill outside, data inside.
    got = volume.open(url).read(Box((0, 10), (20, 40)))
    assert (got[:, :5] == 0).all() and (got[:, 5:, :20] == data[:, :15, 10:]).all()
    assert sorted(server.keys(bucket)) == sorted(
        ["data/a.zarr/zarr.json"] + [f"data/a.zarr/c/0/{i}/{j}" for i in range(3) for j in range(2)]
    )
    reopened = volume.open(url, "r+")
    assert reopened.offset == (5, 0) and reopened.channel_shape == (2,)
    assert reopened.location.kind == "remote" and not reopened.location.lockable
    volume.remove(url)
    assert server.keys(bucket) == []
    with pytest.raises(VolumeNotFoundError, match=f"s3://{bucket}/data/a.zarr"):
        volume.open(url)


def test_exist_ok_reuses_a_matching_volume_and_refuses_another(bucket: str) -> None:
    url = f"s3://{bucket}/a.zarr"
    first = volume.create(url, (8, 8), (4, 4), "float32")
    first.write(Box((0, 0), (4, 4)), np.ones((4, 4), "float32"))
    with pytest.raises(ConfigError, match="already exists"):
        volume.create(url, (8, 8), (4, 4), "float32")
    again = volume.create(url, (8, 8), (4, 4), "float32", exist_ok=True)
    assert again.read(Box((0, 0), (4, 4))).sum() == 16
    with pytest.raises(ConfigError, match="uint8"):
        volume.create(url, (8, 8), (4, 4), "uint8", exist_ok=True)
    with pytest.raises(ConfigError, match="shape"):
        volume.create(url, (8, 16), (4, 4), "float32", exist_ok=True)


def test_remove_takes_only_its_own_prefix_and_says_when_nothing_is_there(
    server: S3Server, bucket: str
) -> None:
    volume.create(f"s3://{bucket}/a.zarr", (4,), (2,), "uint8")
    volume.create(f"s3://{bucket}/a.zarr2", (4,), (2,), "uint8")  # shares the text prefix
    volume.remove(f"s3://{bucket}/a.zarr")
    assert server.keys(bucket) == ["a.zarr2/zarr.json"]
    with pytest.raises(VolumeNotFoundError, match=f"s3://{bucket}/a.zarr"):
        volume.remove(f"s3://{bucket}/a.zarr")
    volume.remove(f"s3://{bucket}/a.zarr", missing_ok=True)


def test_tensorstore_is_refused_for_urls_naming_the_zarr_backend(bucket: str) -> None:
    with pytest.raises(ConfigError, match="backend='zarr'") as caught:
        volume.create(f"s3://{bucket}/t.zarr", (4,), (2,), "uint8", backend="tensorstore")
    assert caught.value.field == "backend"
    volume.create(f"s3://{bucket}/t.zarr", (4,), (2,), "uint8")
    with pytest.raises(ConfigError, match="backend='zarr'"):
        volume.open(f"s3://{bucket}/t.zarr", backend="tensorstore")


def test_an_unknown_scheme_is_refused_with_the_ones_that_work() -> None:
    with pytest.raises(ConfigError, match="s3://BUCKET"):
        volume.create("ftp://host/a.zarr", (4,), (2,), "uint8")


def test_the_endpoint_is_part_of_where_a_remote_volume_is(server: S3Server, bucket: str) -> None:
    url = f"s3://{bucket}/e.zarr"
    plain = volume.create(url, (4,), (2,), "uint8")
    assert plain.location.identity() == f"disk:{url}"  # the flow ids of URLs are kept
    assert plain.location.conditional_writes
    named = volume.open(url, storage_options={"endpoint": server.endpoint})
    assert named.location.identity() == f"disk:{url} endpoint={server.endpoint}"
    assert not named.location.same_as(plain.location)
    assert named.read(Box((0,), (4,))).tolist() == [0, 0, 0, 0]


def _sum_in_child(vol: volume.Volume) -> int:
    return int(vol.read(vol.bounds).sum())


def test_a_remote_volume_pickles_to_another_process(bucket: str) -> None:
    vol = volume.create(f"s3://{bucket}/p.zarr", (16, 16), (8, 8), "int32")
    vol.write(vol.bounds, np.full((16, 16), 3, "int32"))
    back = pickle.loads(pickle.dumps(vol))
    assert back.path == vol.path and back.mode == "r+"
    # spawn (a fork would inherit obstore's runtime threads stopped): the child gets the
    # environment that names the endpoint and credentials, as a worker would.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_sum_in_child, (vol,)) == 3 * 256
