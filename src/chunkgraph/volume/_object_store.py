"""Object stores (``s3://``, ``gs://``): one way to reach a bucket, for volumes and flow state.

Policy. A URL names a bucket and a key prefix; the store behind it is an
``obstore`` store (Rust ``object_store``: many requests in flight from one
thread, and the conditional writes the flow's lease and partial-chunk writes
need). Endpoint, region and credentials come from the environment exactly as
the providers' own tools read them (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``;
``GOOGLE_APPLICATION_CREDENTIALS``, ``STORAGE_EMULATOR_HOST``), and
``storage_options`` add or override anything else (obstore's config keys, e.g.
``{"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1"}``).

Secrets. ``StoreOptions`` keeps the values of secret keys (``SECRET_KEYS``)
apart: they are never shown (``repr``), never written (``public()``) and never
pickled. An unpickled ``StoreOptions`` (on a Dask worker, in a pool process)
has the public keys only, and the worker's own environment or credential files
supply the rest, as they do for the providers' tools.

    >>> StoreOptions.of({"region": "eu-west-1", "secret_access_key": "hunter2"})
    StoreOptions(region='eu-west-1', secret_access_key=<secret>)
    >>> split_url("s3://bucket/data/a.zarr")
    ('s3', 'bucket', 'data/a.zarr')
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkgraph._errors import ConfigError

SCHEMES = ("s3", "gs")

# Keys whose values are credentials, in any of the spellings obstore accepts.
SECRET_KEYS = frozenset(
    {
        "access_key_id",
        "aws_access_key_id",
        "secret_access_key",
        "aws_secret_access_key",
        "session_token",
        "aws_session_token",
        "token",
        "aws_token",
        "service_account_key",
        "google_service_account_key",
        "application_credentials",
        "google_application_credentials",
    }
)

# Words that make any other key secret too: a misspelled secret (``secret_acess_key``)
# must not be printed in the error saying that obstore does not know it.
_SECRET_WORDS = ("secret", "token", "password", "credential", "private")


def is_secret_key(name: str) -> bool:
    """Whether the value of option ``name`` is kept out of sight.

    >>> [is_secret_key(k) for k in ("region", "aws_secret_access_key", "secret_acess_key")]
    [False, True, True]
    """
    name = name.lower()
    return name in SECRET_KEYS or any(word in name for word in _SECRET_WORDS)


# Client settings (as opposed to store config) obstore takes apart.
_CLIENT_KEYS = frozenset({"allow_http", "timeout", "connect_timeout", "pool_max_idle_per_host"})


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key prefix)`` of an object-store URL; ConfigError naming the
    supported schemes for anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ConfigError(
            f"{url!r} is not an object-store URL; chunkgraph reads and writes "
            + ", ".join(f"{s}://bucket/path" for s in SCHEMES)
            + " (and local paths)",
            field="path",
        )
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"{url!r} names no bucket; write {scheme}://BUCKET/path", field="path")
    return scheme, bucket, prefix.strip("/")


def is_object_url(path: str) -> bool:
    """Whether ``path`` names an object in a store this module reaches."""
    return path.partition("://")[0] in SCHEMES and "://" in path


@dataclass(frozen=True)
class StoreOptions:
    """``storage_options`` with their secrets kept out of sight, writing and pickles."""

    public_items: tuple[tuple[str, Any], ...] = ()
    _secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, options: Mapping[str, Any] | StoreOptions | None) -> StoreOptions:
        if isinstance(options, StoreOptions):
            return options
        if options is None:
            return cls()
        if not isinstance(options, Mapping):
            raise ConfigError(
                f"storage_options must be a mapping of option names to values, not "
                f"{type(options).__name__}",
                field="storage_options",
            )
        public: list[tuple[str, Any]] = []
        secret: list[tuple[str, Any]] = []
        for key, value in sorted(options.items()):
            name = str(key).lower()
            (secret if is_secret_key(name) else public).append((name, value))
        return cls(tuple(public), tuple((k, str(v)) for k, v in secret))

    def public(self) -> dict[str, Any]:
        """The options that may be written down (flow.json, reports, the flow id)."""
        return dict(self.public_items)

    def secret_values(self) -> tuple[str, ...]:
        """The secret values themselves (for tests and redaction only)."""
        return tuple(v for _, v in self._secrets)

    def secret_names(self) -> tuple[str, ...]:
        """The names of the secret options (safe to show and to pickle)."""
        return tuple(k for k, _ in self._secrets)

    def everything(self) -> dict[str, Any]:
        return {**self.public(), **dict(self._secrets)}

    def __repr__(self) -> str:
        shown = [f"{k}={v!r}" for k, v in self.public_items]
        shown += [f"{k}=<secret>" for k, _ in self._secrets]
        return f"StoreOptions({', '.join(sorted(shown))})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Secrets stay on this machine: the receiver's environment supplies its own.
        return (StoreOptions, (self.public_items,))

    def __bool__(self) -> bool:
        return bool(self.public_items or self._secrets)


def object_store(url: str, options: StoreOptions | Mapping[str, Any] | None = None) -> Any:
    """The obstore store rooted at ``url``'s key prefix (keys are relative to it)."""
    from obstore.store import from_url

    opts = StoreOptions.of(options)
    scheme, bucket, prefix = split_url(url)
    settings = opts.everything()
    client = {k: settings.pop(k) for k in list(settings) if k in _CLIENT_KEYS}
    endpoint = settings.get("endpoint") or _endpoint_from_env(scheme)
    if endpoint and str(endpoint).startswith("http://"):
        client.setdefault("allow_http", True)
    if scheme == "s3" and endpoint:
        settings.setdefault("endpoint", endpoint)
        # moto, MinIO and most S3 work-alikes answer conditional writes on ETags.
        settings.setdefault("conditional_put", "etag")
    if scheme == "gs" and endpoint:
        settings.setdefault("base_url", endpoint)
    root = f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"
    try:
        return from_url(root, config=settings or None, client_options=client or None)  # type: ignore[arg-type]
    except Exception as err:  # obstore names the bad key; say what kind of thing was wrong
        raise ConfigError(
            f"cannot reach {url!r} with storage_options {opts!r}: {err}", field="storage_options"
        ) from err


def _endpoint_from_env(scheme: str) -> str | None:
    if scheme == "s3":
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host and "://" not in host:
        host = f"http://{host}"
    return host


@contextlib.contextmanager
def reaching(url: str, options: StoreOptions) -> Iterator[None]:
    """Turn a store that does not answer (a wrong endpoint, no such bucket, refused
    credentials) into a ConfigError naming the URL and the endpoint tried, instead of the
    client's retry log; a missing object stays ``FileNotFoundError``."""
    from obstore.exceptions import BaseError, NotFoundError

    try:
        yield
    except NotFoundError:
        raise
    except BaseError as err:
        scheme = url.partition("://")[0]
        endpoint = options.public().get("endpoint") or _endpoint_from_env(scheme)
        where = f"endpoint {endpoint}" if endpoint else "the provider's default endpoint"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        env = "AWS_ENDPOINT_URL" if scheme == "s3" else "STORAGE_EMULATOR_HOST"
        raise ConfigError(
            f"cannot reach {url!r} at {where}: {first[:300]}. Check that the bucket exists "
            f"and the credentials are right; a store other than the provider's own is named "
            f"by {env} or storage_options={{'endpoint': ...}}",
            field="path",
        ) from None


def no_bucket_error(url: str, options: StoreOptions) -> ConfigError | None:
    """A ConfigError naming the bucket when ``url``'s bucket does not exist (None when it
    does, or the store cannot say): asked only once an object was found missing, to tell
    "no such volume" from "no such bucket"."""
    import obstore
    from obstore.exceptions import BaseError, NotFoundError

    scheme, bucket, _ = split_url(url)
    try:
        next(iter(obstore.list(object_store(f"{scheme}://{bucket}", options), chunk_size=1)), None)
    except BaseError as err:
        # A listing answers 404 (S3: NoSuchBucket) only for the bucket itself.
        if not isinstance(err, NotFoundError) and "404" not in str(err):
            return None
        endpoint = options.public().get("endpoint") or _endpoint_from_env(scheme)
        where = f" at {endpoint}" if endpoint else ""
        return ConfigError(
            f"bucket {bucket!r}{where} does not exist (from {url!r}); create it first, or "
            "check the bucket's name and the endpoint",
            field="path",
        )
    return None
