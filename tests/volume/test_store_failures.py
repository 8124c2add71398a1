"""A store that fails: silent (accepts connections, never answers), refusing, without
credentials, with wrong ones. Each fails within its bounds, in one line naming the URL
and the endpoint, as a ``StoreError`` (or a ``ConfigError`` for what the user must set),
never as a corrupt chunk."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph._errors import ConfigError, CorruptChunkError, StoreError
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server, freezing_proxy, silent_endpoint
from chunkgraph.volume._object_store import object_store
from chunkgraph.volume._store_client import TIMEOUT_ENV, client_settings, failure_bound


def test_the_defaults_fail_a_dead_store_within_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    store = object_store("s3://bucket/a.zarr", {"endpoint": "http://127.0.0.1:9"})
    # What the store was actually built with, not only what chunkgraph meant to give it.
    assert store.client_options["timeout"] == "20s"
    assert store.client_options["connect_timeout"] == "5s"
    assert store.retry_config["max_retries"] == 3
    assert store.retry_config["retry_timeout"].total_seconds() == 30
    assert failure_bound({}) == 50 < 60
    # The setting users raise: the environment for every store, storage_options per volume.
    monkeypatch.setenv(TIMEOUT_ENV, "120")
    assert failure_bound({}) == 120 + 180
    assert failure_bound({"timeout": "2s", "retry_timeout": "1s"}) == 3
    with pytest.raises(ConfigError, match=r"retry_timeout='soon'.*'20s'"):
        client_settings({"retry_timeout": "soon"})
    monkeypatch.setenv(TIMEOUT_ENV, "never")
    with pytest.raises(ConfigError, match=TIMEOUT_ENV):
        failure_bound({})


def test_a_silent_endpoint_fails_within_the_setting_naming_the_url_and_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "0.4")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "any")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "any")
    with silent_endpoint() as endpoint:
        for attempt in (
            lambda: volume.open("s3://bucket/a.zarr", storage_options={"endpoint": endpoint}),
            lambda: volume.create(
                "s3://bucket/a.zarr", (4,), (2,), "uint8", storage_options={"endpoint": endpoint}
            ),
        ):
            started = time.monotonic()
            with pytest.raises(StoreError) as caught:
                attempt()
            took = time.monotonic() - started
            assert took < 5, took  # 0.4 s a try, tries within 0.6 s: about 1 s
            message = str(caught.value)
            assert "'s3://bucket/a.zarr'" in message and endpoint in message
            assert "did not answer" in message and TIMEOUT_ENV in message
            assert "\n" not in message and "Debug" not in message
            assert caught.value.endpoint == endpoint


def test_a_store_that_freezes_after_opening_fails_a_read_as_a_store_error(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened and read while the store answers, then it hangs: the next read is a
    StoreError naming the chunk's URL, never a CorruptChunkError (whose advice, delete
    the file, would lose good data)."""
    url = f"s3://{bucket}/a.zarr"
    vol = volume.create(url, (8, 8), (4, 4), "uint8")
    vol.write(vol.bounds, np.ones((8, 8), "uint8"))
    monkeypatch.setenv(TIMEOUT_ENV, "0.4")
    with freezing_proxy(server.endpoint) as forwarder:
        through = volume.open(url, storage_options={"endpoint": forwarder.endpoint})
        assert through.read(Box((0, 0), (4, 4))).sum() == 16
        forwarder.freeze()
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            through.read(Box((4, 4), (8, 8)))
        assert time.monotonic() - started < 5
    assert not isinstance(caught.value, CorruptChunkError)
    message = str(caught.value)
    assert f"{url!r} at endpoint {forwarder.endpoint} (object 'c/1/1')" in message
    assert caught.value.url == f"{url}/c/1/1"
    assert "did not answer" in message


def test_a_refusing_endpoint_is_named_with_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(StoreError, match="refused the connection") as caught:
        volume.open("s3://bucket/a.zarr")
    assert "http://127.0.0.1:9" in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)


_TENSORSTORE_SILENT = """
import os, sys, time
from chunkgraph import volume
from chunkgraph._errors import StoreError
started = time.monotonic()
try:
    options = {"endpoint": sys.argv[1], "max_retries": 1}
    volume.open("precomputed://s3://bucket/img", storage_options=options)
except Exception as err:
    print(type(err).__name__, round(time.monotonic() - started, 1), str(err)[:300])
"""


def test_tensorstore_gives_up_on_a_silent_endpoint_within_its_bounds() -> None:
    """TensorStore reads its curl watchdog from the environment once per process: a
    process of its own, started with the setting."""
    with silent_endpoint() as endpoint:
        env = {**os.environ, TIMEOUT_ENV: "1"}
        env.pop("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", None)
        done = subprocess.run(
            [sys.executable, "-c", _TENSORSTORE_SILENT, endpoint],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    kind, took, *_ = done.stdout.split() or ["(nothing)", "0"]
    assert kind == "StoreError", done.stdout + done.stderr
    assert "did not answer" in done.stdout and "(after 2 tries)" in done.stdout
    assert float(took) < 10, done.stdout  # 2 tries of 1 s; it hung for minutes before


_TENSORSTORE_DEFAULTS = """
import sys, time
from chunkgraph import volume
started = time.monotonic()
try:
    volume.open("precomputed://s3://bucket/img", storage_options={"endpoint": sys.argv[1]})
except Exception as err:
    print(type(err).__name__, round(time.monotonic() - started, 1), str(err))
"""


def test_tensorstore_on_a_silent_endpoint_fails_within_the_bound_zarr_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No retry window in TensorStore, only a count: it gets the tries that fit in the
    bound obstore's stores have (timeout + retry_timeout), with the default retries; and
    its message says the bound of a try, not "(the request)"."""
    from chunkgraph.volume._store_client import tensorstore_bounds

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    tries = tensorstore_bounds({})["s3_request_retries"]["max_retries"] + 1
    assert tries * 20 <= failure_bound({}) < 60  # 2 tries of 20 s by default (was 5)
    with silent_endpoint() as endpoint:
        env = {**os.environ, TIMEOUT_ENV: "2"}
        env.pop("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", None)
        done = subprocess.run(
            [sys.executable, "-c", _TENSORSTORE_DEFAULTS, endpoint],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    kind, took, message = [*done.stdout.split(maxsplit=2), "", "0", ""][:3]
    assert kind == "StoreError", done.stdout + done.stderr
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    assert float(took) < failure_bound({}) + 1, done.stdout  # 5 s; it took 12 s before
    assert f"'s3://bucket/img' at endpoint {endpoint}" in message
    assert "did not answer within 2 s a try (after 2 tries)" in message, message
    assert "(the request)" not in message and TIMEOUT_ENV in message


def test_an_endpoint_without_its_scheme_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    for url in ("s3://bucket/a.zarr", "precomputed://s3://bucket/img"):
        with pytest.raises(ConfigError, match=r"AWS_ENDPOINT_URL='127\.0\.0\.1:9000'") as caught:
            volume.open(url)
        assert "http://127.0.0.1:9000" in str(caught.value)  # what to write instead
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    with pytest.raises(ConfigError, match="storage_options 'endpoint_url'") as caught:
        volume.open("s3://bucket/a.zarr", storage_options={"endpoint_url": "minio:9000"})
    assert caught.value.field == "storage_options"


@pytest.mark.parametrize(
    "path", ["s3:/bucket/x.zarr", "gs:/bucket/x", "s3:bucket/x", "precomputed://s3:/b/i"]
)
def test_a_url_missing_a_slash_is_refused_not_written_to_a_local_folder(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for attempt in (
        lambda: volume.create(path, (4,), (2,), "uint8"),
        lambda: volume.open(path),
    ):
        with pytest.raises(ConfigError, match="neither a URL") as caught:
            attempt()
        assert "s3://BUCKET/path" in str(caught.value) and caught.value.field == "path"
    assert list(tmp_path.iterdir()) == []  # no ./s3: folder
    # A Windows drive and a colon further in are paths, as before.
    assert volume.create("a:b.zarr", (4,), (2,), "uint8").path.endswith("a:b.zarr")


def test_no_credentials_at_all_names_the_variables_to_set(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # No ~/.aws files to fall back on either, whatever this machine has.
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    with pytest.raises(ConfigError) as caught:
        volume.open(f"s3://{bucket}/a.zarr")
    message = str(caught.value)
    assert "no credentials" in message and "169.254.169.254" in message
    assert "AWS_ACCESS_KEY_ID" in message and "AWS_SECRET_ACCESS_KEY" in message
    assert "skip_signature" in message and "\n" not in message


def test_wrong_credentials_show_the_store_s_error_code(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto checks credentials once ``INITIAL_NO_AUTH_ACTION_COUNT`` requests were served
    (infinite by default): 0 makes it check every one, against its own IAM users."""
    import boto3
    import moto.settings

    volume.create(f"s3://{bucket}/a.zarr", (4,), (2,), "uint8")
    iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1")
    user = f"u-{bucket}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    for key_id, secret, code, says in (
        ("AKIANOSUCHKEY0000000", "whatever", "InvalidAccessKeyId", "AWS_ACCESS_KEY_ID"),
        (key["AccessKeyId"], "not-the-secret", "SignatureDoesNotMatch", "AWS_SECRET_ACCESS_KEY"),
        (key["AccessKeyId"], key["SecretAccessKey"], "AccessDenied", "ask for access"),
    ):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        with pytest.raises(StoreError) as caught:
            volume.open(f"s3://{bucket}/a.zarr")
        message = str(caught.value)
        assert caught.value.code == code and f"403 {code}" in message and says in message
        assert secret not in message and server.endpoint in message
        # create asks with HEAD, whose answer has no body and so no code: all reasons.
        with pytest.raises(StoreError, match=r"403 Forbidden.*AWS_SECRET_ACCESS_KEY"):
            volume.create(f"s3://{bucket}/b.zarr", (4,), (2,), "uint8")


def test_precomputed_with_wrong_or_no_credentials_says_what_zarr_says(
    server: S3Server,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """TensorStore's own words (``PERMISSION_DENIED ... http_response_body=<?xml``) and
    its credential chain's log lines on stderr become the one line Zarr's stores give."""
    import moto.settings

    url = f"precomputed://s3://{bucket}/img"
    volume.create(url, (32, 32, 32), (16, 16, 16), "uint8")
    capfd.readouterr()
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    with pytest.raises(StoreError) as caught:
        volume.open(url)
    message = str(caught.value)
    assert caught.value.code == "InvalidAccessKeyId" and "403 InvalidAccessKeyId" in message
    assert "AWS_ACCESS_KEY_ID" in message and server.endpoint in message
    assert "http_response_body" not in message and "<?xml" not in message
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    with pytest.raises(ConfigError) as missing:
        volume.open(url)
    message = str(missing.value)
    assert "no credentials" in message and "AWS_ACCESS_KEY_ID" in message
    assert "skip_signature" in message and "PERMISSION_DENIED" not in message
    assert capfd.readouterr().err == ""  # none of TensorStore's credential log lines
