"""What a failed object-store request means, in one line: ``StoreError`` or ``ConfigError``.

obstore's errors carry the request, the server's answer and a Rust debug dump
of dozens of lines. ``store_failure`` reads them once and says which of these
happened, with what to do::

    what the client saw                      error          says
    no credentials (it asked 169.254.169.254) ConfigError   the variables to set
    403 with a code (InvalidAccessKeyId, ...) StoreError    the code, what it means
    no answer within the bounds               StoreError    the bounds, how to raise them
    connection refused, unknown host          StoreError    the endpoint, where it comes from
    anything else after the retries           StoreError    the status and code, if any

Not ``CorruptChunkError``: no bytes arrived, so none are known to be bad, and
deleting the chunk would lose good data. A missing object is not a failure
(``FileNotFoundError``, read as fill value), nor is a conditional write that lost
to another writer (``_object_zarr``).

    >>> text = "Error performing GET http://h:9/b/k in 2ms - Server returned non-2xx status "
    >>> text += "code: 403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code></Error>"
    >>> store_failure(RuntimeError(text), "s3://b/k").code
    'SignatureDoesNotMatch'
"""

from __future__ import annotations

import os
import re

from chunkgraph._errors import ConfigError, StoreError

# Where the cloud SDKs ask for a VM's own credentials when none are configured.
METADATA_ADDRESS = "169.254.169.254"

_CODE = re.compile(r"<Code>([^<]+)</Code>")
_STATUS = re.compile(r"(?:status code|HTTP response code): (\d{3})|http_response_code='(\d{3})'")
_REQUEST = re.compile(r"performing (?:list request: Error performing )?([A-Z]+) (\S+)")
_TRIES = re.compile(r"after (\d+) retries|All (\d+) retry attempts")
_WITHIN = re.compile(r" in ([0-9.]+)(m?s)")
# curl's low-speed watchdog, as TensorStore reports it: the bound of one try.
_WATCHDOG = re.compile(r"transferred the last (\d+) seconds")

# What a 401/403 code means for the person holding the credentials.
_ACCESS_CODES = {
    "InvalidAccessKeyId": "the access key id is not known to this store: check "
    "AWS_ACCESS_KEY_ID (or storage_options access_key_id) and that the endpoint is the "
    "store the key belongs to",
    "SignatureDoesNotMatch": "the secret key does not match the access key id: check "
    "AWS_SECRET_ACCESS_KEY (or storage_options secret_access_key)",
    "ExpiredToken": "the session token has expired: renew the temporary credentials "
    "(AWS_SESSION_TOKEN)",
    "InvalidToken": "the session token is not valid: check AWS_SESSION_TOKEN",
    "AccessDenied": "the credentials are valid but may not do this here: ask for access "
    "to the bucket, or use credentials that have it",
}

# A HEAD answer has no body, so no code: any of the reasons above.
_NO_CODE = (
    "the access key id is unknown there, the secret key does not match it, or the "
    "credentials may not do this: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
    "(or storage_options) and the endpoint"
)

_CREDENTIAL_HELP = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
    "temporary credentials), or AWS_PROFILE; for a public bucket pass "
    "storage_options={'skip_signature': True}",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file; for a "
    "public bucket pass storage_options={'skip_signature': True}",
}
# How obstore (reqwest) and TensorStore (curl) say that nothing listens there.
_REFUSED = (
    "ConnectionRefused", "Connection refused", "dns error", "Couldn't connect", "Could not connect",
    "Could not resolve host", "Couldn't resolve host",
)  # fmt: skip
# A connection that was open and stopped working (the server went away mid-request).
_BROKEN = ("error sending request", "connection closed", "Connection reset", "broken pipe")
_ENDPOINT_ENV = {"s3": "AWS_ENDPOINT_URL", "gs": "STORAGE_EMULATOR_HOST"}


# TensorStore's statuses for a request its s3 driver gave up on (a decode error is
# DATA_LOSS; a missing key is no error at all).
_TENSORSTORE_FAILED = (
    "ABORTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "PERMISSION_DENIED", "UNAUTHENTICATED",
)  # fmt: skip


# TensorStore's words when its credential provider found nothing (``_ts_view``).
_TENSORSTORE_NO_CREDENTIALS = "INTERNAL: Failed to get credentials"


# What makes an AWS client's default chain find credentials besides the key variables.
_AWS_CHAIN_ENV = (
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def aws_credentials_configured() -> bool:
    """Whether this process names AWS credentials: the key variables, a profile, web
    identity, a container's, or a credentials or config file (where the SDKs look)."""
    if os.environ.get("AWS_ACCESS_KEY_ID") or any(map(os.environ.get, _AWS_CHAIN_ENV)):
        return True
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", os.path.expanduser("~/.aws/credentials")),
        os.environ.get("AWS_CONFIG_FILE", os.path.expanduser("~/.aws/config")),
    )
    return any(map(os.path.isfile, files))


def is_store_failure(error: BaseException) -> bool:
    """Whether ``error`` is a failed request (obstore's, or TensorStore's), not
    chunkgraph's or the data's."""
    if isinstance(error, ValueError) and str(error).startswith(
        (*_TENSORSTORE_FAILED, _TENSORSTORE_NO_CREDENTIALS)
    ):
        return True
    try:
        from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
    except ImportError:  # pragma: no cover - obstore is a dependency
        return False
    # A missing object, and a conditional write another writer won, are answers.
    expected = (FileNotFoundError, AlreadyExistsError, PreconditionError)
    return isinstance(error, BaseError) and not isinstance(error, expected)


def store_failure(
    error: BaseException, url: str, endpoint: str | None = None, key: str = ""
) -> StoreError | ConfigError:
    """The ``StoreError`` (or, for missing credentials, ``ConfigError``) saying what the
    request for ``url`` (its object ``key``, when one was asked for) met; raise it
    ``from None``: the dump stays out of the message."""
    text = str(error)
    scheme = url.partition("://")[0] or "s3"
    method, asked = _request(text)
    where = endpoint or _endpoint_of(asked) or "the provider's default endpoint"
    head = f"cannot reach {url!r} at endpoint {where}" + (f" (object {key!r})" if key else "")
    code_match, status_match = _CODE.search(text), _STATUS.search(text)
    code = code_match.group(1) if code_match else ""
    status = (status_match.group(1) or status_match.group(2)) if status_match else ""
    no_credentials = _no_credentials(text, scheme, status)
    if no_credentials:
        help_ = _CREDENTIAL_HELP.get(scheme, _CREDENTIAL_HELP["s3"])
        return ConfigError(f"{head}: {no_credentials}; {help_}", field="storage_options")
    full = f"{url.rstrip('/')}/{key}" if key else url
    why = _why(text, scheme, method, status, code)
    return StoreError(f"{head}: {why}", url=full, endpoint=where, code=code)


def _no_credentials(text: str, scheme: str, status: str) -> str:
    """How the client showed that it found no credentials, or "" when it found some."""
    if METADATA_ADDRESS in text or "credential" in text.lower().split("debug source")[0]:
        return (
            f"no credentials were found (the client fell back to asking the cloud "
            f"instance-metadata address {METADATA_ADDRESS}, which answers only on a cloud VM)"
        )
    if (
        status in ("401", "403")
        and text.startswith("PERMISSION_DENIED")  # TensorStore, asking anonymously
        and scheme == "s3"
        and not aws_credentials_configured()
    ):
        return (
            "no credentials were found (none in the environment or ~/.aws files), "
            f"and the store refused the unsigned request ({status})"
        )
    return ""


def _why(text: str, scheme: str, method: str, status: str, code: str) -> str:
    """What a failed request with credentials met, and what to do about it."""
    if status in ("401", "403"):
        meaning = _ACCESS_CODES.get(code, _NO_CODE if not code else _ACCESS_CODES["AccessDenied"])
        return f"the store refused access ({status} {code or 'Forbidden'}): {meaning}"
    if "Timeout" in text or "TimedOut" in text or "timed out" in text:
        return (
            f"the store did not answer{f' ({method})' if method else ''} within "
            f"{_took(text)}{_tries(text)}. If it is "
            "only slow, raise CHUNKGRAPH_STORE_TIMEOUT (seconds per try) or "
            "storage_options={'timeout': ..., 'retry_timeout': ...}"
        )
    if any(word in text for word in _REFUSED):
        unknown = "dns error" in text or "resolve host" in text
        what = "is not a known host" if unknown else "refused the connection"
        return (
            f"the endpoint {what}{_tries(text)}: is the store running there? The endpoint "
            f"comes from {_ENDPOINT_ENV.get(scheme, 'AWS_ENDPOINT_URL')} or "
            "storage_options={'endpoint': ...}"
        )
    if any(word in text for word in _BROKEN):
        return f"the store broke off the connection{_tries(text)}: is it still running there?"
    if status:
        return f"the store answered {status} {code}".rstrip() + _tries(text)
    return _first_line(text)


def _request(text: str) -> tuple[str, str]:
    found = _REQUEST.search(text)
    return (found.group(1), found.group(2)) if found else ("", "")


def _endpoint_of(asked: str) -> str:
    scheme, sep, rest = asked.partition("://")
    return f"{scheme}://{rest.split('/')[0]}" if sep else ""


def _took(text: str) -> str:
    watchdog = _WATCHDOG.search(text)
    if watchdog:
        return f"{watchdog.group(1)} s a try"
    found = _WITHIN.search(text)
    if not found:
        return "the timeouts"
    value = float(found.group(1)) / (1000 if found.group(2) == "ms" else 1)
    return f"{value:.3g} s"


def _tries(text: str) -> str:
    found = _TRIES.search(text)
    if not found:
        return ""
    # Both count the tries after the first (TensorStore's "All 4 retry attempts" made 5).
    tries = int(found.group(1) or found.group(2)) + 1
    return f" (after {tries} tries)"


def _first_line(text: str) -> str:
    line = (text.strip().splitlines() or [""])[0].strip()
    return line[:300] or "the request failed"
