"""The run lock of a flow kept in an object store: a lease object that expires.

Policy. An object store has no ``flock`` and no process that dies with its
holder, so a run holds ``<root>/<flow id>.lock`` as a *lease*: an object naming
its owner (pid, host, start) and a ttl, created by a conditional write (S3
``If-None-Match: *``, obstore ``mode="create"``) and renewed every ttl/3 by a
background thread with writes conditional on the ETag it last wrote
(``If-Match``). At the end the owner deletes it, after checking the ETag is
still its own.

A run that finds a lease reads it (body and ETag). The lease is free when its
holder is certainly dead (``_holder.dead_here``: on this host, and no process
with its pid and start time lives: a ``kill -9`` followed at once by a resume
on the same host waits for nothing), or when it has expired. It is expired when
it was last written more than ``ttl + CLOCK_SLACK`` seconds ago by the
*server's* clock: its ``last_modified`` against the ``last_modified`` of a tiny
object this run writes under the root just then. Client clocks are never
compared (hosts disagree by seconds or more); ``CLOCK_SLACK`` covers the
one-second resolution of ``Last-Modified``. A free lease is taken over with
a write conditional on the ETag just read, so of two runs taking it over at
once exactly one wins; the other sees a precondition failure and looks again.

Guarantee.

* A ``kill -9`` (or a lost host) cannot leave a lock forever: nothing renews
  the lease, and ``ttl + CLOCK_SLACK`` seconds later the next run takes it; a run
  on the holder's own host takes it at once. A refusal says when the lease lapses.
* Two live runs never both hold it. Creation and takeover are conditional
  writes, so at most one run wins each version of the object. A holder counts
  itself the holder only while its last successful renewal *started* less than
  ``ttl`` ago by its own monotonic clock (``Lease.valid``): that renewal's
  ``last_modified`` is no earlier than its start, and a takeover needs the server
  to see it more than ``ttl`` old, so a holder's validity ends before anyone can
  take the lease over (clock *rates* agree; only clock *readings* differ). A
  holder whose renewals fail (network, a takeover) stops being valid within
  ``ttl`` and the run stops before writing further markers (``check``, called
  before each marker write: a flag and a clock read, no request). ``check`` says
  which: ``FlowLockedError`` when another run took the lease over, ``StoreError``
  (naming the lease's URL and the endpoint) when the store failed or stopped
  answering the renewals: no other run is to blame for that.

``ttl`` defaults to ``DEFAULT_TTL`` seconds; ``CHUNKGRAPH_LEASE_TTL`` overrides it
(tests use 2 s). A shorter ttl finds a dead holder's flow sooner and costs one
small write per ttl/3 while a run lives.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from chunkgraph._errors import ConfigError, FlowLockedError, StoreError
from chunkgraph.flow.state._holder import dead_here, describe, this_process
from chunkgraph.volume._store_errors import is_store_failure, store_failure

# What a refused run is told: given the holder's record, the seconds it waited and the
# seconds until the lock lapses unless renewed (None: a lock that never lapses, flock).
Busy = Callable[[dict[str, Any], float, float | None], FlowLockedError]

DEFAULT_TTL = 30.0
TTL_ENV = "CHUNKGRAPH_LEASE_TTL"
# Last-Modified is an HTTP date: whole seconds. One second either way, plus a little.
CLOCK_SLACK = 1.5
# How often a run waiting for a held lease looks again.
_POLL_SECONDS = 0.2
# How long release waits for a renewal in flight. A store that answers takes
# milliseconds; one that does not would hold the run's exit for its request bounds.
RELEASE_WAIT = 2.0
# Where a run writes the object whose Last-Modified tells it the server's time.
CLOCK_PREFIX = ".clock/"


def lease_ttl() -> float:
    """The ttl in seconds: ``CHUNKGRAPH_LEASE_TTL`` when set (a positive number), else
    ``DEFAULT_TTL``."""
    text = os.environ.get(TTL_ENV)
    if not text:
        return DEFAULT_TTL
    try:
        ttl = float(text)
    except ValueError:
        ttl = -1.0
    if not ttl > 0:
        raise ConfigError(
            f"{TTL_ENV}={text!r} is not a positive number of seconds; unset it for the "
            f"default ({DEFAULT_TTL:g} s) or give e.g. {TTL_ENV}=30",
            field=TTL_ENV,
        )
    return ttl


def server_now(store: Any) -> float:
    """The object store's clock, in epoch seconds: the Last-Modified of an object written
    just now (then deleted)."""
    import obstore

    key = f"{CLOCK_PREFIX}{uuid.uuid4().hex}"
    obstore.put(store, key, b"")
    try:
        return float(obstore.head(store, key)["last_modified"].timestamp())
    finally:
        with contextlib.suppress(Exception):
            obstore.delete(store, key)


@dataclass(frozen=True)
class LeaseFound:
    """A lease as read from the store: its owner record, ETag and age (server clock)."""

    owner: dict[str, Any]
    e_tag: str | None
    age: float
    ttl: float

    @property
    def expired(self) -> bool:
        return self.age > self.ttl + CLOCK_SLACK

    @property
    def free(self) -> bool:
        """Whether a run may take it over: expired, or its holder is dead on this host."""
        return self.expired or dead_here(self.owner)

    @property
    def lapses_in(self) -> float:
        """Seconds until it expires, unless its holder renews it first."""
        return max(0.0, self.ttl + CLOCK_SLACK - self.age)

    def describe(self) -> str:
        return describe(self.owner, f"; renewed {self.age:.0f} s ago, ttl {self.ttl:g} s")


def read_lease(store: Any, key: str) -> LeaseFound | None:
    """The lease at ``key`` (None when there is none)."""
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        got = obstore.get(store, key)
        body = bytes(got.bytes())
    except (NotFoundError, FileNotFoundError):
        return None
    try:
        owner = json.loads(body.decode() or "{}")
    except ValueError:
        owner = {}
    if not isinstance(owner, dict):
        owner = {}
    modified = float(got.meta["last_modified"].timestamp())
    ttl = owner.get("ttl")
    return LeaseFound(
        owner=owner,
        e_tag=got.meta.get("e_tag"),
        age=max(0.0, server_now(store) - modified),
        ttl=float(ttl) if isinstance(ttl, int | float) and ttl > 0 else DEFAULT_TTL,
    )


class Lease:
    """A run's lease on ``key`` in ``store`` (an obstore store); see the module docstring.

    ``where`` names the lease in messages (its URL); ``about``: more fields for its
    record (what a refused run is told of the holder); ``busy``: the refusal (default:
    this flow is already running).
    """

    def __init__(
        self,
        store: Any,
        key: str,
        where: str,
        ttl: float | None = None,
        *,
        about: dict[str, Any] | None = None,
        busy: Busy | None = None,
    ) -> None:
        self.store, self.key, self.where = store, key, where
        self.about, self.busy = dict(about or {}), busy
        self.ttl = lease_ttl() if ttl is None else float(ttl)
        self._e_tag: str | None = None
        self._renewed_at = 0.0  # monotonic start of the last successful write
        self._lost: str | None = None
        self._failed: BaseException | None = None  # the last renewal's error, if it failed
        self._asking = False  # a renewal waits for the store's answer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.took_over: LeaseFound | None = None
        self._holder = this_process()
        self._token = uuid.uuid4().hex  # tells this run's writes from another's in the body

    # -- acquiring -------------------------------------------------------------------

    def acquire(self, wait: float = 0.0) -> None:
        """Hold the lease; ``FlowLockedError`` naming the holder after ``wait`` seconds."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        deadline = time.monotonic() + wait
        while True:
            started = time.monotonic()
            try:
                put = obstore.put(self.store, self.key, self._body(), mode="create")
            except AlreadyExistsError:
                pass
            else:
                self._held(put, started)
                return
            found = read_lease(self.store, self.key)
            if found is None:
                continue  # released meanwhile: create it
            if found.free and found.e_tag is not None:
                started = time.monotonic()
                try:
                    put = obstore.put(
                        self.store,
                        self.key,
                        self._body(),
                        mode={"e_tag": found.e_tag},
                    )
                except (PreconditionError, AlreadyExistsError):
                    continue  # another run took it over first (or its holder renewed)
                self.took_over = found
                self._held(put, started)
                return
            if time.monotonic() >= deadline:
                raise self._busy(found, wait)
            time.sleep(_POLL_SECONDS)

    def _body(self) -> bytes:
        owner = {**self.about, **self._holder, "ttl": self.ttl, "token": self._token}
        return json.dumps(owner).encode()

    def _held(self, put: Any, started: float) -> None:
        self._e_tag = put["e_tag"]
        self._renewed_at = started
        self._lost = None
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"chunkgraph-lease-{self.key}", daemon=True
        )
        self._thread.start()

    def _busy(self, found: LeaseFound, wait: float) -> FlowLockedError:
        if self.busy is not None:
            return self.busy(found.owner, wait, found.lapses_in)
        waited = f" after waiting {wait:g} s" if wait > 0 else ""
        who = found.describe()
        return FlowLockedError(
            f"this flow is already running{waited}: {who} holds the lease {self.where}. Two "
            "runs of one flow would overwrite each other's temporaries; wait for it to finish "
            "(then rerun with resume=True to reuse its work), pass lock_wait=<seconds> to "
            f"wait, or stop that process. {lapse_note(found.lapses_in)}",
            lock=self.where,
            holder=who,
            lapses_in=found.lapses_in,
        )

    # -- holding ---------------------------------------------------------------------

    def _renew_loop(self) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        while not self._stop.wait(self.ttl / 3):
            started = time.monotonic()
            self._asking = True
            try:
                put = obstore.put(
                    self.store,
                    self.key,
                    self._body(),
                    mode={"e_tag": self._e_tag},
                )
            except (PreconditionError, NotFoundError, AlreadyExistsError):
                with self._lock:
                    self._lost = (
                        f"the flow's lease {self.where} was taken over by another run (this "
                        "run had not renewed it for longer than its ttl)"
                    )
                return
            except Exception as err:  # a network hiccup: the next tick tries again
                with self._lock:
                    self._failed = err
                continue
            finally:
                self._asking = False
            with self._lock:
                if self._stop.is_set():
                    return
                self._e_tag, self._renewed_at = put["e_tag"], started
                self._failed = None

    def valid(self) -> bool:
        """Whether this run may still act as the holder (see the guarantee)."""
        with self._lock:
            return (
                self._lost is None
                and self._e_tag is not None
                and time.monotonic() - self._renewed_at < self.ttl
            )

    def check(self) -> None:
        """Raise when this run no longer holds the lease: call before writing anything the
        lease guards (a done marker). ``FlowLockedError`` when another run took it over,
        ``StoreError`` when the store did not let this run renew it."""
        if self.valid():
            return
        with self._lock:
            lost, failed, asking = self._lost, self._failed, self._asking
        if lost is None and (failed is not None or asking):
            raise self._store_stopped(failed)
        why = lost or (
            f"this run did not renew the flow's lease {self.where} for {self.ttl:g} s (was "
            "it paused?), so another run may take it over"
        )
        raise FlowLockedError(
            f"{why}; stopping before writing more state. Resume it (resume=True; `--resume` "
            "on the command line) once the other run is done: done work is kept",
            lock=self.where,
            holder="another run",
        )

    def _store_stopped(self, failed: BaseException | None) -> StoreError:
        """The lease could not be renewed for its ttl: the store's fault, said as such."""
        endpoint = getattr(self.store, "config", {}).get("endpoint")
        if failed is not None and is_store_failure(failed):
            why = str(store_failure(failed, self.where, endpoint))  # what the last one met
        else:  # the renewal is still waiting for an answer
            where = endpoint or "the provider's default endpoint"
            why = f"{self.where} at endpoint {where}: a renewal got no answer"
        return StoreError(
            f"the flow's lease could not be renewed for {self.ttl:g} s: the store stopped "
            f"answering ({why}); this run stops before writing more state, and the work "
            "done so far is kept for a resumed run",
            url=self.where,
            endpoint=endpoint or "",
        )

    def release(self) -> None:
        """Stop renewing and delete the lease, when it is still this run's and the store
        answers; otherwise leave it to expire. Never raises for a failing store."""
        import obstore
        from obstore.exceptions import BaseError

        self._stop.set()
        if self._thread is not None:
            self._thread.join(RELEASE_WAIT)
            if self._thread.is_alive():  # a renewal waits on a store that stopped answering
                return
            self._thread = None
        with self._lock:
            ours, self._e_tag = self._e_tag, None
            # A renewal was due and did not succeed: the store is failing too.
            failing = time.monotonic() - self._renewed_at > self.ttl / 3 + RELEASE_WAIT
        # Asking a failing store again would hold the exit for as long as its request
        # bounds; the lease expires by itself, ttl + CLOCK_SLACK after its last renewal.
        if ours is None or self._lost is not None or failing:
            return
        # Gone already, or the store cannot be reached (NotFoundError is a BaseError).
        try:
            now = obstore.head(self.store, self.key)
        except (BaseError, FileNotFoundError):
            return
        if now.get("e_tag") == ours:
            with contextlib.suppress(BaseError, FileNotFoundError):
                obstore.delete(self.store, self.key)


def lapse_note(seconds: float) -> str:
    """What a refusal says of a lease that its holder may have stopped renewing."""
    at = time.strftime("%H:%M:%S", time.localtime(time.time() + seconds))
    return (
        f"If that process is gone (killed, or its host lost), the lease lapses in "
        f"{seconds:.0f} s (at {at}, unless renewed); lock_wait=<seconds> (`--lock-wait` on "
        "the command line) waits for it. A holder on this host that is no longer alive is "
        "taken over at once"
    )


@contextlib.contextmanager
def held_lease(
    store: Any,
    key: str,
    where: str,
    wait: float = 0.0,
    *,
    about: dict[str, Any] | None = None,
    busy: Busy | None = None,
) -> Iterator[Lease]:
    """Hold the lease ``key`` of ``store`` for the body (see ``Lease``)."""
    lease = Lease(store, key, where, about=about, busy=busy)
    lease.acquire(wait)
    try:
        yield lease
    finally:
        lease.release()
