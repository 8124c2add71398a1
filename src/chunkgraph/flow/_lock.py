"""Exclusive ownership of one flow's state: one run at a time per flow directory.

Two runs of the same flow (same id: same fn, volumes and settings) share one
directory of layers and done markers. Unguarded, the second run clears the
first's markers and the first to finish deletes the directory under the
other, and both exit successfully with holes in dst. So a run holds
``<intermediates>/<flow id>.lock`` from before it touches the directory until
after it has cleaned up.

Mechanism. An advisory ``flock`` on that file, taken without blocking. The
kernel releases it when its holder dies, however it dies (SIGKILL included),
so a lock can never be stale: a dead owner's file is simply lockable again.
The file's content (owner pid, host, start time) only serves the message
a refused run prints. ``flock`` works across hosts on NFSv4 (Linux maps it
to byte-range locks there).

The owner unlinks the file while still holding the lock, then closes it. A
run that was waiting on the old file may then hold a lock on an unlinked
inode; it therefore checks, once it holds a lock, that the path still names
the same file, and starts over if not. So at most one run holds the lock of
a path, and no lock file outlives its run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from chunkgraph._errors import FlowLockedError
from chunkgraph._util import named_os_error

# How often a run that waits for a lock tries again; short next to any flow.
_POLL_SECONDS = 0.1


@contextlib.contextmanager
def flow_lock(path: Path, wait: float = 0.0) -> Iterator[None]:
    """Hold the lock file ``path`` for the body; refuse (or wait ``wait`` seconds) if held.

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
    fd = _acquire(path, wait)
    try:
        _write_owner(fd, path)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock, after the unlink (see the module docstring)


def _acquire(path: Path, wait: float) -> int:
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
                raise _busy_error(path, wait) from None
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


def _write_owner(fd: int, path: Path) -> None:
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
    except OSError as err:  # a full disk: the error names no file by itself
        raise named_os_error(err, path, "writing the flow's lock") from err


def _busy_error(path: Path, wait: float) -> FlowLockedError:
    try:
        owner = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        owner = {}
    who = "another run"
    if owner:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("since", 0)))
        who = f"process {owner.get('pid')} on host {owner.get('host')!r} (since {since})"
    waited = f" after waiting {wait:g} s" if wait > 0 else ""
    return FlowLockedError(
        f"this flow is already running{waited}: {who} holds {path}. Two runs of one flow would "
        "overwrite each other's temporaries; wait for it to finish (then rerun with resume=True "
        "to reuse its work), pass lock_wait=<seconds> to wait, or stop that process. The lock "
        "is released by the operating system when its holder exits, even if killed",
        lock=str(path),
        holder=who,
    )
