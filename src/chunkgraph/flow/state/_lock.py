"""The lock of a flow, or of a dst's region: one holder at a time, for either store.

Policy. ``hold(store, key, wait)`` takes the lock named ``key`` in a ``_store``:
a ``flock`` on a file under a folder (``flow_lock``), a lease object in an object
store (``_lease.held_lease``). It gives a ``Fence``, which a holder checks before
writing the state the lock guards (a lease can be lost; a ``flock`` cannot while
its file descriptor is open). ``holder(store, key)`` says whether the lock is held,
and by whom, without taking it.

Lock (``flow_lock``): one run at a time per flow directory. Two runs of the
same flow (same id: same fn, volumes and settings) share one directory of
layers and done markers. Unguarded, the second run clears the first's markers
and the first to finish deletes the directory under the other, and both exit
successfully with holes in dst. So a run holds ``<root>/<flow id>.lock``
from before it touches the directory until after it has cleaned up:
an advisory ``flock`` on that file, taken without blocking. The kernel
releases it when its holder dies, however it dies (SIGKILL included), so a
lock can never be stale: a dead owner's file is simply lockable again. The
file's content (owner pid, host, start time) only serves the message a refused
run prints. ``flock`` works across hosts on NFSv4 (Linux maps it to byte-range
locks there). The owner unlinks the file while still holding the lock, then
closes it. A run that was waiting on the old file may then hold a lock on an
unlinked inode; it therefore checks, once it holds a lock, that the path still
names the same file, and starts over if not. So at most one run holds the lock
of a path, and no lock file outlives its run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from chunkgraph._errors import FlowLockedError
from chunkgraph._util import named_os_error
from chunkgraph.flow.state._holder import describe, this_process
from chunkgraph.flow.state._lease import Busy, held_lease, read_lease
from chunkgraph.flow.state._store import DirStore, ObjectStateStore, StateStore


class Fence(Protocol):
    """What a holder of a flow's lock checks before writing state it guards."""

    def check(self) -> None: ...


class _NoFence:
    """A ``flock`` cannot be lost while its file descriptor is open: nothing to check."""

    def check(self) -> None:
        return None


@contextlib.contextmanager
def hold(
    store: StateStore,
    key: str,
    wait: float,
    *,
    about: dict[str, Any] | None = None,
    busy: Busy | None = None,
) -> Iterator[Fence]:
    """Hold the lock ``key`` of ``store`` for the body (``FlowLockedError`` after ``wait``
    seconds): a lease in an object store, a ``flock`` on a disk. ``about``: more fields
    for the owner record; ``busy``: the refusal (default: this flow is already running)."""
    if isinstance(store, ObjectStateStore):
        where = store.where(key)
        with held_lease(store.store, key, where, wait, about=about, busy=busy) as lease:
            yield lease
        return
    path = _dir_store(store).path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with flow_lock(path, wait, about=about, busy=busy):
        yield _NoFence()


def holder(store: StateStore, key: str) -> tuple[bool, dict[str, Any] | None]:
    """Whether the lock ``key`` of ``store`` is held, and its owner record (or None). A
    lease is held while unexpired and its holder is not known dead (``_holder.dead_here``);
    its owner record gains ``lapses_in``: seconds until it expires unless renewed."""
    if isinstance(store, ObjectStateStore):
        found = read_lease(store.store, key)
        if found is None:
            return False, None
        return not found.free, {**found.owner, "lapses_in": round(found.lapses_in, 1)}
    return lock_holder(_dir_store(store).path(key))


def _dir_store(store: StateStore) -> DirStore:
    if not isinstance(store, DirStore):
        raise TypeError(f"no lock for a state store of type {type(store).__name__}")
    return store


# How often a run that waits for a lock tries again; short next to any flow.
_POLL_SECONDS = 0.1


@contextlib.contextmanager
def flow_lock(
    path: Path,
    wait: float = 0.0,
    *,
    about: dict[str, Any] | None = None,
    busy: Busy | None = None,
) -> Iterator[None]:
    """Hold the lock file ``path`` for the body; refuse (or wait ``wait`` seconds) if held.

    ``about``: more fields for the owner record; ``busy``: the refusal (default: this
    flow is already running).

    >>> import tempfile
    >>> lock = Path(tempfile.mkdtemp()) / "f.lock"
    >>> with flow_lock(lock):
    ...     with flow_lock(lock):
    ...         pass
    Traceback (most recent call last):
      ...
    chunkgraph.FlowLockedError: ...
    >>> lock.exists()
    False
    """
    fd = _acquire(path, wait, busy)
    try:
        _write_owner(fd, path, about)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock, after the unlink (see the module docstring)


def _acquire(path: Path, wait: float, busy: Busy | None) -> int:
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                raise _busy_error(path, wait, busy) from None
            time.sleep(_POLL_SECONDS)
            continue
        if _same_file(fd, path):
            return fd
        os.close(fd)  # the holder we waited for unlinked it: lock the new file instead


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _write_owner(fd: int, path: Path, about: dict[str, Any] | None) -> None:
    owner = {**(about or {}), **this_process()}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
    except OSError as err:  # a full disk: the error names no file by itself
        raise named_os_error(err, path, "writing the flow's lock") from err


def _busy_error(path: Path, wait: float, busy: Busy | None) -> FlowLockedError:
    try:
        owner = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        owner = {}
    if not isinstance(owner, dict):
        owner = {}
    if busy is not None:
        return busy(owner, wait, None)
    who = describe(owner) if owner else "another run"
    waited = f" after waiting {wait:g} s" if wait > 0 else ""
    return FlowLockedError(
        f"this flow is already running{waited}: {who} holds {path}. Two runs of one flow would "
        "overwrite each other's temporaries; wait for it to finish (then rerun with resume=True "
        "to reuse its work), pass lock_wait=<seconds> to wait, or stop that process. The lock "
        "is released by the operating system when its holder exits, even if killed",
        lock=str(path),
        holder=who,
    )


def lock_holder(lock: Path) -> tuple[bool, dict[str, Any] | None]:
    """Whether the lock file ``lock`` is held, and its owner as written there (or None).

    Probes like ``_acquire`` but shared, read-only, never creating the file, and
    releases at once: a held lock is never taken over.
    """
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            held = True
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            owner = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        except ValueError:
            owner = None
    finally:
        os.close(fd)
    return held, owner if isinstance(owner, dict) else None
