"""A volume under a URL as a set of objects: whether it exists, what it says, removing it.

What the registry asks of a local array's directory (is ``zarr.json`` there, which
backend made it, ``rmtree``), asked of an object store with one request each:
``HEAD zarr.json``, and a listing of the prefix with one batched delete per page.

Credentials on the receiving side. A ``Volume`` pickles its URL and its public
storage options; secret ones stay where they were given (``StoreOptions``). The
process that unpickles it must find credentials in its own environment, and
``check_credentials_shipped`` says so at once, naming the variables, instead of
letting the first request fail with the server's "access denied" (or, on S3,
obstore asking an instance-metadata endpoint that is not there, for seconds).
A secret that no credential chain stands in for (an SSE-C customer key: without
it a worker would write chunks unencrypted, or fail to read encrypted ones) must
be in the receiver's environment under its own variable
(``AWS_SSE_CUSTOMER_KEY_BASE64``).
"""

from __future__ import annotations

import os

from chunkgraph._errors import ConfigError
from chunkgraph.volume._object_store import StoreOptions, object_store, split_url
from chunkgraph.volume._store_keys import canonical

# Where a provider's tools find credentials when none are given in storage_options.
CREDENTIAL_ENV = {
    "s3": (
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ),
    "gs": (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "STORAGE_EMULATOR_HOST",
    ),
}
# The secret options that a provider's credential chain (CREDENTIAL_ENV) stands in for.
_CHAIN_KEYS = frozenset(
    {
        "access_key_id", "secret_access_key", "session_token", "token", "service_account",
        "service_account_key", "application_credentials", "bearer_token",
    }
)  # fmt: skip
# The prefix of the variable that supplies any other option of the provider's store.
_ENV_PREFIX = {"s3": "AWS_", "gs": "GOOGLE_"}
_SET_THESE = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if temporary)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS (the path of a service-account key file)",
}


def exists(url: str, options: StoreOptions, names: tuple[str, ...] = ("zarr.json",)) -> bool:
    """Whether a Zarr array's ``zarr.json`` (or any of ``names``) is stored at ``url``."""
    import obstore

    store = object_store(url, options)
    for name in names:
        try:
            obstore.head(store, name)
        except FileNotFoundError:
            continue
        return True
    return False


def remove_objects(url: str, options: StoreOptions) -> int:
    """Delete every object under the URL's prefix; how many there were."""
    import obstore

    store = object_store(url, options)
    removed = 0
    for page in obstore.list(store, chunk_size=1000):
        paths = [item["path"] for item in page]
        if paths:
            obstore.delete(store, paths)
            removed += len(paths)
    return removed


def check_credentials_shipped(url: str, dropped_secrets: tuple[str, ...]) -> None:
    """ConfigError when a volume opened with secret options arrives where no credentials are.

    ``dropped_secrets`` are the names (never the values) of the secret storage
    options the sender had; they were not pickled.
    """
    if not dropped_secrets:
        return
    scheme = split_url(url)[0]
    own = [canonical(name) for name in dropped_secrets if canonical(name) not in _CHAIN_KEYS]
    missing = [f"{_ENV_PREFIX[scheme]}{name.upper()}" for name in own]
    missing = [name for name in missing if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"volume {url!r} was opened with secret storage_options ({', '.join(own)}); "
            f"secrets are not shipped to other processes or machines, and this process "
            f"(pid {os.getpid()}) has no {' or '.join(missing)} in its environment. Set "
            f"{', '.join(missing)} in the environment of the workers",
            field="storage_options",
        )
    if len(own) == len(dropped_secrets):
        return
    if any(os.environ.get(name) for name in CREDENTIAL_ENV[scheme]):
        return
    raise ConfigError(
        f"volume {url!r} was opened with secret storage_options ({', '.join(dropped_secrets)}); "
        f"secrets are not shipped to other processes or machines, and this process "
        f"(pid {os.getpid()}) has no credentials in its environment. Set {_SET_THESE[scheme]} "
        f"in the environment of the workers (one of {', '.join(CREDENTIAL_ENV[scheme])})",
        field="storage_options",
    )
