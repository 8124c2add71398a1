"""How long a request to an object store may take: timeouts and bounded retries.

Policy. A store that accepts connections and never answers must fail a request
within a minute, not hang for the client's defaults (30 s a try, retried for 3
minutes: six minutes for a run's two first requests). Each request is tried
with these bounds, then retried with exponential backoff while the retry window
is open::

    try 1 ──timeout──> try 2 ──timeout──> (window closed: StoreError)
    |<──────────── retry_timeout ───────────>|<─ last try ─>|

    option            default              what it bounds
    connect_timeout   5 s                  opening a connection
    timeout           20 s                 one try, from the request to its last byte
    retry_timeout     1.5 x timeout        when a new try may still start
    max_retries       3                    tries after the first

so a silent store fails a request after about ``timeout + retry_timeout`` (50 s
by default). Transient answers (5xx, a reset connection, a timeout) are what is
retried; 4xx answers (no such bucket, access denied) fail at once.

Raising it. ``CHUNKGRAPH_STORE_TIMEOUT`` (seconds) sets ``timeout`` for every
store of the process, and the window follows it; each of the four is also a
``storage_options`` key of a volume (``{"timeout": "60s", "max_retries": 5}``),
which wins. Values are seconds, or text with a unit: ``"500ms"``, ``"20s"``,
``"2min"``.

TensorStore (precomputed, N5 on ``s3://``) has no retry window, only a count, and
curl's low-speed watchdog at ``timeout`` bounds each try (``tensorstore_bounds``):
it gets as many tries as fit in the same bound, ``timeout + retry_timeout`` (two
of 20 s by default, so a silent store fails it within about 45 s too), never more
than ``max_retries`` allows.

    >>> client, retry = client_settings({})
    >>> client["timeout"].total_seconds(), client["connect_timeout"].total_seconds()
    (20.0, 5.0)
    >>> retry["max_retries"], retry["retry_timeout"].total_seconds()
    (3, 30.0)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from chunkgraph._errors import ConfigError

TIMEOUT_ENV = "CHUNKGRAPH_STORE_TIMEOUT"

# One try. Long enough for a chunk of tens of MB over a slow link; short enough that a
# silent store is noticed within the minute the policy promises.
DEFAULT_TIMEOUT_S = 20.0
# A connection that a live server would accept in milliseconds.
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# New tries start within this many timeouts of the first: one retry of a silent try.
RETRY_WINDOW = 1.5
DEFAULT_MAX_RETRIES = 3
# Backoff between tries: 0.1 s, doubling, at most 5 s (a throttled store calms down).
INIT_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0

_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def seconds(value: object, name: str) -> float:
    """``value`` (a number of seconds, or text like ``"500ms"``, ``"20s"``, ``"2min"``)
    in seconds; ConfigError naming ``name`` for anything else.

    >>> seconds("500ms", "timeout"), seconds(3, "timeout"), seconds("2min", "timeout")
    (0.5, 3.0, 120.0)
    """
    if isinstance(value, timedelta):
        found = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found = float(value)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(value).lower())
        unit = match and _UNITS.get(match.group(2) or "s")
        found = float(match.group(1)) * unit if match and unit else -1.0
    if not found > 0:
        raise ConfigError(
            f"{name}={value!r} is not a duration; give seconds (20) or text with a unit "
            "('500ms', '20s', '2min')",
            field="storage_options" if name != TIMEOUT_ENV else None,
        )
    return found


def _default_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    return seconds(text, TIMEOUT_ENV) if text else DEFAULT_TIMEOUT_S


def client_settings(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(obstore's ``client_options``, its ``retry_config``) for a store given ``options``
    (its storage options, canonical names): the bounds above, each overridable."""
    timeout = seconds(options["timeout"], "timeout") if "timeout" in options else None
    timeout = timeout or _default_timeout()
    connect = options.get("connect_timeout")
    connect_s = (
        seconds(connect, "connect_timeout")
        if connect is not None
        else min(DEFAULT_CONNECT_TIMEOUT_S, timeout)
    )
    window = options.get("retry_timeout")
    window_s = seconds(window, "retry_timeout") if window is not None else RETRY_WINDOW * timeout
    retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(
            f"max_retries={retries!r} is not a count; give an int >= 0 (default "
            f"{DEFAULT_MAX_RETRIES})",
            field="storage_options",
        )
    client = {
        "timeout": timedelta(seconds=timeout),
        "connect_timeout": timedelta(seconds=connect_s),
    }
    retry = {
        "max_retries": retries,
        "retry_timeout": timedelta(seconds=window_s),
        "backoff": {
            "init_backoff": timedelta(seconds=INIT_BACKOFF_S),
            "max_backoff": timedelta(seconds=MAX_BACKOFF_S),
            "base": 2,
        },
    }
    return client, retry


def failure_bound(options: Mapping[str, Any]) -> float:
    """Seconds after which a request to a store that never answers has failed, at most
    (the last try may start just before the window closes)."""
    client, retry = client_settings(options)
    return float((retry["retry_timeout"] + client["timeout"]).total_seconds())


def tensorstore_bounds(options: Mapping[str, Any]) -> dict[str, Any]:
    """The TensorStore context entries bounding its s3 requests' retries as above; sets
    curl's low-speed watchdog (a try that moves under 1 byte/s for ``timeout`` fails) in
    this process's environment unless it is set, since TensorStore reads it from there."""
    client, retry = client_settings(options)
    timeout = client["timeout"].total_seconds()
    watchdog = max(1, round(timeout))
    os.environ.setdefault("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", str(watchdog))
    os.environ.setdefault("TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES", "1")
    # The tries that fit in obstore's bound, each a whole watchdog (curl checks once a
    # second, so a try of a silent store lasts a little over it).
    fit = int(failure_bound(options) // max(timeout, watchdog))
    tries = max(1, min(retry["max_retries"] + 1, fit))
    return {
        "s3_request_retries": {
            "max_retries": tries - 1,  # TensorStore's count is of tries after the first
            "initial_delay": f"{INIT_BACKOFF_S:g}s",
            "max_delay": f"{MAX_BACKOFF_S:g}s",
        }
    }
