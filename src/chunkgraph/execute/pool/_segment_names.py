"""Shared-memory segment names: who owns a segment, and removing those whose owner is gone.

A pool's prefix names its owner, ``cg_<pid>_<start>_<pidns>_<n>_``
(hex: the owner's pid, its start time in clock ticks since boot, its pid
namespace, a per-process pool counter), and each segment adds ``<creator pid>_<k>``.
A process killed outright (``kill -9`` of a whole process group takes the
workers and the resource tracker with it) leaves its segments behind;
``sweep_orphans()``, run when a pool starts, unlinks those whose owner is gone:
no process with that pid, a zombie, or a process with that pid but another start
time (the pid was reused). Segments of another pid namespace are never judged
(their pids mean nothing here), nor names in any other format.
"""

from __future__ import annotations

import itertools
import os

try:  # The same primitive multiprocessing.shared_memory is built on.
    import _posixshmem as posixshmem  # type: ignore[import-not-found]
except ImportError as error:  # pragma: no cover - Windows
    raise ImportError("chunkgraph's process pool needs POSIX shared memory") from error

# Where POSIX shared memory names appear as files on Linux; used to sweep the
# segments of a pool whose creator died before reporting them.
_SHM_DIR = "/dev/shm"


def open_name(name: str, flags: int) -> int:
    """A file descriptor of segment ``name`` (``os.open`` flags; owner-only permissions)."""
    fd: int = posixshmem.shm_open("/" + name, flags, mode=0o600)
    return fd


def unlink_name(name: str) -> bool:
    """Remove a segment name; False if it was already gone."""
    try:
        posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        return False
    return True


_pool_counter = itertools.count()


def _process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot); None if it is not running (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name (field 2) may hold spaces and parentheses: split after it.
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):  # dead, not yet reaped by its parent
        return None
    return int(fields[19])


def _pid_namespace() -> int:
    """This process's pid namespace (an inode number), 0 where /proc does not tell."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_prefix() -> str:
    """A new segment prefix owned by this process: ``cg_<pid>_<start>_<pidns>_<n>_`` (hex)."""
    pid = os.getpid()
    start = _process_start(pid) or 0
    return f"cg_{pid:x}_{start:x}_{_pid_namespace():x}_{next(_pool_counter):x}_"


def owner_of(name: str) -> tuple[int, int, int] | None:
    """``(pid, start, pid namespace)`` of the process owning segment ``name``;
    None for a name in any other format.

    >>> owner_of("cg_1f_2a_3_0_31_7"), owner_of("cg_a1b2c3_31_7")
    ((31, 42, 3), None)
    """
    parts = name.split("_")
    if len(parts) != 7 or parts[0] != "cg":
        return None
    try:
        pid, start, namespace = (int(part, 16) for part in parts[1:4])
    except ValueError:
        return None
    return pid, start, namespace


def sweep_orphans() -> list[str]:
    """Unlink every segment whose owning process is gone; returns their names.

    An owner is gone when no process has its pid, or the one that has it
    started at another time (the pid was reused). Segments of live owners,
    of another pid namespace and of other users, and names in other formats
    are left alone. Linux only (elsewhere segments cannot be listed).
    """
    namespace = _pid_namespace()
    if not namespace:
        return []
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return []
    running: dict[tuple[int, int], bool] = {}
    removed = []
    for name in names:
        owner = owner_of(name)
        if owner is None or owner[2] != namespace:
            continue
        pid, start, _ = owner
        if (pid, start) not in running:
            running[pid, start] = _process_start(pid) == start
        if running[pid, start]:
            continue
        try:
            if unlink_name(name):
                removed.append(name)
        except OSError:  # another user's segment: not ours to remove
            continue
    return removed


def unlink_prefix(prefix: str) -> list[str]:
    """Unlink every segment whose name starts with ``prefix``; returns the names.

    The last-resort sweep for segments created by a process that died before
    handing them over. Only Linux lists segments as files; elsewhere this finds
    nothing and the resource tracker is the safety net.
    """
    try:
        names = [entry for entry in os.listdir(_SHM_DIR) if entry.startswith(prefix)]
    except OSError:
        return []
    return [name for name in names if unlink_name(name)]


def list_prefix(prefix: str) -> list[str]:
    """Names of existing segments starting with ``prefix`` (Linux only)."""
    try:
        return sorted(entry for entry in os.listdir(_SHM_DIR) if entry.startswith(prefix))
    except OSError:
        return []
