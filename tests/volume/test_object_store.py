"""Volumes on object stores (s3:// through moto's S3 server on loopback): the same
create / open / read / write / remove contract as on disk."""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
import time

import cloudpickle
import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server, latency_proxy
from chunkgraph.volume._remote import CREDENTIAL_ENV, check_credentials_shipped

_buckets = itertools.count()


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


def test_a_volume_reached_through_a_proxy_failing_one_request_in_20_is_exact(
    server: S3Server, bucket: str
) -> None:
    data = np.random.default_rng(1).integers(0, 60000, (48, 48, 48)).astype("uint16")
    url = f"s3://{bucket}/flaky.zarr"
    with latency_proxy(server.endpoint, fail_fraction=0.05, seed=7) as proxy:
        vol = volume.create(url, data.shape, (16, 16, 16), "uint16", aligned_writes=False)
        vol.write(vol.bounds, data)
        vol.write(Box((5, 5, 5), (30, 30, 30)), data[5:30, 5:30, 5:30] + 1)  # cuts chunks
        got = volume.open(url).read(Box((0, 0, 0), (48, 48, 48)))
    expected = data.copy()
    expected[5:30, 5:30, 5:30] += 1
    np.testing.assert_array_equal(got, expected)
    # obstore retried what the proxy failed; the proxy saw every try.
    assert proxy.failed >= 3 and proxy.requests > vol.stats.requests
    np.testing.assert_array_equal(volume.open(url).read(vol.bounds), expected)  # direct


SECRET = "s3cr3t-value-that-must-never-show"
KEY_ID = "AKIA-KEY-ID-THAT-MUST-NEVER-SHOW"


def test_secret_storage_options_never_show_and_are_not_shipped(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    options = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "region": "us-east-1"}
    url = f"s3://{bucket}/secret.zarr"
    vol = volume.create(url, (8, 8), (4, 4), "uint8", storage_options=options)
    vol.write(vol.bounds, np.full((8, 8), 5, "uint8"))
    again = volume.open(url, storage_options=options)
    assert again.read(vol.bounds).sum() == 5 * 64
    shown = [repr(vol), repr(vol.storage_options), repr(vol.location), vol.location.identity()]
    shown += [str(vol.storage_options.public()), repr(vol.stats)]
    errors: list[BaseException] = []
    for attempt in (
        lambda: volume.open(f"s3://{bucket}/missing.zarr", storage_options=options),
        lambda: volume.create(url, (8, 8), (4, 4), "uint8", storage_options=options),
        lambda: volume.open(url, storage_options={**options, "no_such_option": "x"}),
    ):
        with pytest.raises((ConfigError, VolumeNotFoundError)) as caught:
            attempt()
        errors.append(caught.value)
    blobs = [pickle.dumps(vol), cloudpickle.dumps(vol), pickle.dumps(vol.storage_options)]
    with pytest.raises(ConfigError) as unshipped:
        pickle.loads(blobs[0])
    errors.append(unshipped.value)
    message = str(unshipped.value)
    assert "not shipped" in message and "AWS_ACCESS_KEY_ID" in message
    assert "secret_access_key" in message  # the name of what was left behind, not its value
    for secret in (SECRET, KEY_ID):
        for text in shown + [
            f"{e} {e.__notes__ if hasattr(e, '__notes__') else ''}" for e in errors
        ]:
            assert secret not in text, text
        for blob in blobs:
            assert secret.encode() not in blob
    # Where the environment has credentials, the pickled volume opens and reads.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    assert pickle.loads(blobs[0]).read(vol.bounds).sum() == 5 * 64


def test_a_gs_volume_arriving_without_credentials_names_the_google_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in CREDENTIAL_ENV["gs"]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS") as caught:
        check_credentials_shipped("gs://bucket/a.zarr", ("service_account_key",))
    assert "service_account_key" in str(caught.value) and caught.value.field == "storage_options"
    check_credentials_shipped("gs://bucket/a.zarr", ())  # nothing was left behind
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/worker.json")
    check_credentials_shipped("gs://bucket/a.zarr", ("service_account_key",))


def test_the_proxy_delays_and_counts_every_request(server: S3Server, bucket: str) -> None:
    volume.create(f"s3://{bucket}/slow.zarr", (4,), (2,), "uint8")
    with latency_proxy(server.endpoint, latency=0.05) as proxy:
        started = time.perf_counter()
        volume.open(f"s3://{bucket}/slow.zarr")
        took = time.perf_counter() - started
    assert took >= 0.05 and proxy.by_method == {"GET": 1} and proxy.failed == 0


def test_a_missing_bucket_is_named_on_create_and_on_open(server: S3Server) -> None:
    for make in (
        lambda: volume.create("s3://no-such-bucket-here/a.zarr", (4,), (2,), "uint8"),
        lambda: volume.open("s3://no-such-bucket-here/a.zarr"),
    ):
        with pytest.raises(ConfigError, match="bucket 'no-such-bucket-here' at http") as caught:
            make()
        assert caught.value.field == "path"


def test_a_misspelled_secret_option_is_not_shown_in_the_error_about_it(server: S3Server) -> None:
    with pytest.raises(ConfigError) as caught:
        volume.open("s3://any-bucket/a.zarr", storage_options={"secret_acess_key": "HUNTER2XYZ"})
    assert "secret_acess_key" in str(caught.value) and "HUNTER2XYZ" not in str(caught.value)


def _read_in_fork(url: str, queue: multiprocessing.Queue[str]) -> None:
    try:
        volume.open(url).read(Box((0, 0), (4, 4)))
        queue.put("read")
    except Exception as err:  # the child reports what it met
        queue.put(f"{type(err).__name__}: {err}")


def test_a_forked_child_of_a_process_that_used_a_store_is_refused_not_hung(bucket: str) -> None:
    """obstore's runtime does not survive a fork: a child's requests never answer. The
    child is told so, naming the start methods that work, instead of waiting forever."""
    url = f"s3://{bucket}/forked.zarr"
    v = volume.create(url, (8, 8), (4, 4), "uint8")
    v.write(v.bounds, np.ones((8, 8), "uint8"))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_fork, args=(url, queue))
    child.start()
    try:
        said = queue.get(timeout=60)
    finally:
        child.kill()
        child.join(10)
    assert said.startswith("ConfigError") and "'spawn'" in said, said


@pytest.mark.parametrize(
    "name", ["rv", "-bucket", "a..b", "has space", "ab.-c", "ab-.c", "192.168.5.4", "xn--abc"]
)
def test_a_bucket_name_s3_does_not_allow_is_a_clear_error(server: S3Server, name: str) -> None:
    """TensorStore refuses such a name with a bare ValueError while a format is guessed,
    and a store answers "no such bucket" as for a typo: every format's open says the
    name is not one S3 allows, as a ConfigError (exit 2)."""
    for url in (f"s3://{name}/src.zarr", f"precomputed://s3://{name}/img"):
        with pytest.raises(ConfigError, match=r"is not an S3 bucket name.*3 to 63"):
            volume.open(url)
