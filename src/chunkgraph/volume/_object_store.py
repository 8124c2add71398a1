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

Secrets. ``StoreOptions`` keeps the values of secret keys (``_store_keys``: every
option obstore takes, classified once) apart: they are never shown (``repr``),
never written (``public()``) and never pickled. An unpickled ``StoreOptions``
(on a Dask worker, in a pool process) has the public keys only, and the
worker's own environment or credential files supply the rest, as they do for the providers' tools.

    >>> StoreOptions.of({"region": "eu-west-1", "secret_access_key": "hunter2"})
    StoreOptions(region='eu-west-1', secret_access_key=<secret>)
    >>> split_url("s3://bucket/data/a.zarr")
    ('s3', 'bucket', 'data/a.zarr')
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkgraph._errors import ConfigError
from chunkgraph.volume._store_client import client_settings
from chunkgraph.volume._store_errors import is_store_failure, store_failure
from chunkgraph.volume._store_keys import CLIENT_KEYS, STORE_TIMEOUT_KEYS, canonical, is_secret_key

SCHEMES = ("s3", "gs")


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key prefix)`` of an object-store URL.

    Args:
        url: An object-store URL, ``s3://bucket/key`` or ``gs://bucket/key``.

    Raises:
        ConfigError: For any other scheme, naming the supported ones, or a URL that
            names no bucket.
    """
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


# S3's bucket names: 3 to 63 lowercase letters, digits, dots and hyphens, a letter or
# digit at each end, no dot beside a dot or a hyphen, not an IP address, none of the
# prefixes and suffixes AWS keeps for itself; or an old us-east-1 name (capitals and
# underscores, up to 255). Checked before a client is made: TensorStore raises a bare
# ValueError for any other, and a store answers "no such bucket" as for a typo.
_S3_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_OLD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")
_S3_RESERVED = (("xn--", "sthree-"), ("-s3alias", "--ol-s3"))


def s3_bucket_refusal(url: str, bucket: str) -> str | None:
    """Why ``bucket`` (of ``url``) is not an S3 bucket name, or None when it is one.

    >>> s3_bucket_refusal("s3://rv/x", "rv").split(";")[0]
    "'s3://rv/x': 'rv' is not an S3 bucket name"
    >>> [s3_bucket_refusal("", b) is None for b in ("my-data.v2", "ab.-c", "10.0.0.1", "Old_Name")]
    [True, False, False, True]
    """
    old = any(c.isupper() or c == "_" for c in bucket)
    shaped = (_S3_OLD_NAME if old else _S3_NAME).fullmatch(bucket)
    odd = any(pair in bucket for pair in ("..", ".-", "-."))
    address = re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket)
    reserved = bucket.startswith(_S3_RESERVED[0]) or bucket.endswith(_S3_RESERVED[1])
    if shaped and not odd and not address and not reserved:
        return None
    return (
        f"{url!r}: {bucket!r} is not an S3 bucket name; a bucket is named by 3 to 63 "
        "lowercase letters, digits, dots and hyphens, beginning and ending with a letter or "
        "digit, with no dot beside a dot or hyphen and not an IP address (e.g. "
        "s3://my-bucket/path)"
    )


def check_bucket_name(scheme: str, url: str, bucket: str) -> None:
    """Raise ``ConfigError`` for an ``s3://`` bucket name S3 does not allow
    (``s3_bucket_refusal``), before any client is made."""
    if scheme == "s3" and (why := s3_bucket_refusal(url, bucket)):
        raise ConfigError(why, field="path")


# A word and a colon at the start of a path, not followed by "//": a URL with a slash
# lost (``s3:/bucket/x``), which would otherwise be a local folder named ``s3:``. One
# letter is a Windows drive (``C:/data``), not a scheme.
_BROKEN_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


def broken_url(path: str, known: tuple[str, ...]) -> str | None:
    """Why ``path`` looks like a URL but is not one (None when it does not look like one):
    ``scheme:/...`` with one slash, or a ``known`` scheme followed by ``:`` alone.

    >>> broken_url("s3:/bucket/x", ("s3",))
    "'s3:/bucket/x' starts with 's3:/', which is neither a URL (s3://...) nor a local path"
    >>> broken_url("C:/data/a.zarr", ("s3",)), broken_url("a:b/c.zarr", ("s3",))
    (None, None)
    """
    found = _BROKEN_URL.match(path)
    if found is None:
        return None
    word, rest = found.group(1), path[found.end() :]
    if not rest.startswith("/") and word.lower() not in known:
        return None
    return (
        f"{path!r} starts with {path[: found.end() + rest.startswith('/')]!r}, which is "
        f"neither a URL ({word}://...) nor a local path"
    )


def normal_url(url: str) -> str:
    """One spelling of an object URL: no trailing or doubled slashes in its key prefix
    (a store names its objects by key, so ``s3://b//a.zarr/`` is ``s3://b/a.zarr``), so
    that comparing two URLs compares the data they name. Anything else is returned as is.

    >>> normal_url("s3://bucket//data/a.zarr/")
    's3://bucket/data/a.zarr'
    """
    if not is_object_url(url):
        return url
    scheme, _, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    keys = "/".join(part for part in prefix.split("/") if part)
    return f"{scheme}://{bucket}/{keys}" if keys else f"{scheme}://{bucket}"


def is_object_url(path: str) -> bool:
    """Whether ``path`` names an object in a store this module reaches.

    Args:
        path: A path or URL; ``s3://`` and ``gs://`` are object stores.
    """
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


# The process whose object-store clients exist: obstore's runtime does not survive a fork
# (a forked child's requests, on its parent's clients or on new ones, never answer).
_CLIENTS_OF: list[int] = []


def check_not_forked() -> None:
    """A ``ConfigError`` in a process forked from one that reached an object store, which
    would otherwise wait forever on its first request."""
    if _CLIENTS_OF and _CLIENTS_OF[0] != os.getpid():
        raise ConfigError(
            f"this process (pid {os.getpid()}) was forked from one that used an object "
            f"store (pid {_CLIENTS_OF[0]}), and object-store clients do not survive a fork: "
            "start workers with multiprocessing's 'spawn' or 'forkserver' context, or open "
            "the volume only in the child"
        )


def object_store(url: str, options: StoreOptions | Mapping[str, Any] | None = None) -> Any:
    """The obstore store rooted at ``url``'s key prefix (keys are relative to it), with
    the request bounds of ``_store_client``."""
    check_not_forked()
    if not _CLIENTS_OF:
        _CLIENTS_OF.append(os.getpid())
    from obstore.store import from_url

    opts = StoreOptions.of(options)
    scheme, bucket, prefix = split_url(url)
    check_bucket_name(scheme, url, bucket)
    # Store config keeps the user's spelling (obstore knows them all); client and retry
    # settings go apart under the names obstore's client_options and retry_config take.
    settings = opts.everything()
    bounds = {canonical(k): settings.pop(k) for k in list(settings)
              if canonical(k) in STORE_TIMEOUT_KEYS}  # fmt: skip
    client = {canonical(k): settings.pop(k) for k in list(settings) if canonical(k) in CLIENT_KEYS}
    client_bounds, retry = client_settings({**client, **bounds})
    client.update(client_bounds)
    endpoint = endpoint_of(scheme, opts)
    if endpoint and endpoint.startswith("http://"):
        client.setdefault("allow_http", True)
    named = {canonical(k) for k in settings}
    if scheme == "s3" and endpoint:
        if "endpoint" not in named:
            settings["endpoint"] = endpoint
        # moto, MinIO and most S3 work-alikes answer conditional writes on ETags.
        if "conditional_put" not in named:
            settings["conditional_put"] = "etag"
    if scheme == "gs" and endpoint and "base_url" not in named:
        settings["base_url"] = endpoint
    root = f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"
    try:
        return from_url(  # type: ignore[call-overload]
            root, config=settings or None, client_options=client, retry_config=retry
        )
    except Exception as err:  # obstore names the bad key; say what kind of thing was wrong
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(
            f"cannot reach {url!r} with storage_options {opts!r}: {first}",
            field="storage_options",
        ) from None


def endpoint_of(scheme: str, options: StoreOptions) -> str | None:
    """The endpoint a store of ``scheme`` is reached at: ``storage_options`` (any spelling
    of ``endpoint`` / ``base_url``), else the environment; None for the provider's own.
    ConfigError naming where it came from when it is not an http(s) URL."""
    for key, value in options.public().items():
        if canonical(key) in ("endpoint", "base_url") and value:
            return _checked_endpoint(str(value), f"storage_options {key!r}")
    if scheme == "s3":
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if os.environ.get(name):
                return _checked_endpoint(os.environ[name], name)
        return None
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host and "://" not in host:  # the emulator convention: host:port alone
        host = f"http://{host}"
    return _checked_endpoint(host, "STORAGE_EMULATOR_HOST") if host else None


def _checked_endpoint(value: str, source: str) -> str:
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https") or not rest.strip("/"):
        raise ConfigError(
            f"{source}={value!r} is not an endpoint URL; write it with its scheme, e.g. "
            f"http://{rest or value or '127.0.0.1:9000'} (or https://...)",
            field="storage_options" if source.startswith("storage_options") else None,
        )
    return value


@contextlib.contextmanager
def reaching(url: str, options: StoreOptions) -> Iterator[None]:
    """Turn a failed request (no answer, refused credentials, ...) into one line naming
    the URL and the endpoint tried (``store_failure``: a ``StoreError``, or a ConfigError
    when there are no credentials at all); a missing object stays ``FileNotFoundError``.
    Nothing changes for a local path."""
    try:
        yield
    except Exception as err:
        if not is_store_failure(err) or not is_object_url(url):
            raise
        raise store_failure(err, url, endpoint_of(split_url(url)[0], options)) from None


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
        endpoint = endpoint_of(scheme, options)
        where = f" at {endpoint}" if endpoint else ""
        return ConfigError(
            f"bucket {bucket!r}{where} does not exist (from {url!r}); create it first, or "
            "check the bucket's name and the endpoint",
            field="path",
        )
    return None
