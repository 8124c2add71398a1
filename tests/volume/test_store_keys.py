"""Every option obstore takes is classified secret or public, once; secret ones (an SSE-C
customer key included) never show in a repr or an error, and are never pickled."""

from __future__ import annotations

import ast
import base64
import pickle
from pathlib import Path

import cloudpickle
import obstore
import pytest
from obstore.store import AzureStore, S3Store

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.testing import S3Server
from chunkgraph.volume._object_store import StoreOptions
from chunkgraph.volume._store_keys import (
    CLIENT_KEYS,
    OPTION_KINDS,
    STORE_TIMEOUT_KEYS,
    canonical,
    is_secret_key,
)

# The TypedDicts of obstore's stubs that list what ``storage_options`` may hold.
_CONFIGS = ("S3Config", "GCSConfig", "AzureConfig", "ClientConfig")


def _obstore_keys() -> dict[str, set[str]]:
    """Each config TypedDict's keys, read from the stubs obstore ships (the TypedDicts
    exist only there: at run time obstore takes plain dicts)."""
    found: dict[str, set[str]] = {}
    for stub in (Path(obstore.__file__).parent / "_store").glob("*.pyi"):
        for node in ast.parse(stub.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name in _CONFIGS:
                found[node.name] = {
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
    return found


def test_every_key_obstore_accepts_is_classified_in_the_one_table() -> None:
    keys = _obstore_keys()
    assert set(keys) == set(_CONFIGS), "obstore's stubs moved: find its config TypedDicts"
    every = set().union(*keys.values())
    unclassified = sorted(every - set(OPTION_KINDS))
    assert not unclassified, (
        f"obstore accepts {unclassified}, which chunkgraph.volume._store_keys.OPTION_KINDS "
        "does not classify: add each as 'secret' (it can read, write or decrypt data) or "
        "'public'"
    )
    # Nothing stale either: the table holds obstore's keys and chunkgraph's retry keys only.
    assert set(OPTION_KINDS) - every == set(STORE_TIMEOUT_KEYS)
    assert keys["ClientConfig"] == CLIENT_KEYS


@pytest.mark.parametrize(
    "name",
    [
        "access_key_id", "secret_access_key", "session_token", "sse_customer_key_base64",
        "service_account_key", "service_account", "application_credentials", "bearer_token",
        "account_key", "client_secret", "sas_key", "token", "fabric_session_token",
        "encryption_key", "web_identity_token_file", "proxy_url", "default_headers",
    ],
)  # fmt: skip
def test_credentials_are_secret_in_every_spelling(name: str) -> None:
    for spelling in (name, name.upper(), f"aws_{name}", f"google_{name}", f"azure_{name}"):
        assert is_secret_key(spelling), spelling


def test_the_aliases_fold_onto_the_key_obstore_itself_folds_them_onto() -> None:
    # obstore reports the canonical name of each key it was given in `.config`.
    for alias in (
        "aws_sse_customer_key_base64",
        "AWS_SESSION_TOKEN",
        "aws_endpoint",
        "endpoint_url",
    ):
        (given,) = [k for k in S3Store("b", config={alias: "x"}).config if k != "bucket"]
        assert canonical(alias) == given, alias
        assert is_secret_key(alias) == (OPTION_KINDS[given] == "secret")
    for alias in ("azure_storage_token", "azure_client_secret", "azure_fabric_session_token"):
        config = AzureStore("c", config={alias: "x", "account_name": "a"}).config
        (given,) = [k for k in config if k not in ("account_name", "container_name")]
        assert canonical(alias) == given and is_secret_key(alias)


KEY = base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()  # 256 bits


def test_an_sse_c_key_never_shows_and_is_not_pickled(
    server: S3Server, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {"sse_customer_key_base64": KEY, "server_side_encryption": "sse-c"}
    held = StoreOptions.of(options)
    assert held.secret_names() == ("sse_customer_key_base64",)
    assert KEY not in repr(held) and held.public() == {"server_side_encryption": "sse-c"}
    for blob in (pickle.dumps(held), cloudpickle.dumps(held)):
        assert KEY.encode() not in blob
    # An error that shows the options (an unknown one among them) does not show the key.
    with pytest.raises(ConfigError) as caught:
        volume.open(f"s3://{bucket}/a.zarr", storage_options={**options, "no_such": 1})
    assert "no_such" in str(caught.value) and KEY not in str(caught.value)
    for spelling in ("aws_sse_customer_key_base64", "AWS_SSE_CUSTOMER_KEY_BASE64"):
        assert KEY not in repr(StoreOptions.of({spelling: KEY}))


def test_a_volume_with_an_sse_c_key_arriving_without_it_names_the_variable(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials in the environment do not stand in for the customer key: without it a
    worker would write chunks unencrypted."""
    url = f"s3://{bucket}/sse.zarr"
    volume.create(url, (4,), (2,), "uint8")
    options = {"sse_customer_key_base64": KEY}
    blob = pickle.dumps(volume.open(url, storage_options=options))
    monkeypatch.delenv("AWS_SSE_CUSTOMER_KEY_BASE64", raising=False)
    with pytest.raises(ConfigError, match="AWS_SSE_CUSTOMER_KEY_BASE64") as caught:
        pickle.loads(blob)
    assert KEY not in str(caught.value) and "sse_customer_key_base64" in str(caught.value)
    monkeypatch.setenv("AWS_SSE_CUSTOMER_KEY_BASE64", KEY)
    assert pickle.loads(blob).path == url
