"""Who holds a lock: this process, written down, and whether a written-down one still lives.

Policy. Every lock record a run writes (a flow's ``flock`` file, its lease in an
object store, its claim on a destination) names its holder::

    {"pid": 4242, "host": "node7", "pid_start": 1764331200.53, "pid_ns": "pid:[4026531836]",
     "since": 1764331201.2}

``pid_start`` is the process's start time (psutil), so a pid the kernel has
since given to another process is not taken for the holder; ``pid_ns`` is the
process's pid namespace, so a container that shares the host's name but not
its processes never judges a holder it cannot see.

``dead_here(record)`` is True only when the holder certainly is gone: the
record names this host and this pid namespace, and no process with that pid
and that start time exists (or it is a zombie: killed, not yet reaped). A
record from another host, another namespace, or without a start time (written
by an older version while its pid lives) is never judged dead: the lock is then
held until its own expiry (a lease's ttl; a ``flock`` needs none, the kernel
releases it).
"""

from __future__ import annotations

import functools
import os
import socket
import time
from typing import Any

# psutil's start times are the kernel's clock ticks since boot plus the boot time: the
# same process reads the same value every time, to far better than this.
_START_TOLERANCE = 0.05


@functools.cache
def _pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[4026531836]``), None where /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds); None when there is no such live process."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None  # killed, not yet reaped by its parent: gone for every purpose here
        return float(process.create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # it exists; whose it is cannot be told, so it counts as live
        return -1.0


def this_process() -> dict[str, Any]:
    """The holder record of this process (``since``: now)."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "pid_start": _start_time(pid),
        "pid_ns": _pid_namespace(),
        "since": time.time(),
    }


def dead_here(record: dict[str, Any]) -> bool:
    """Whether the holder ``record`` names is on this host and certainly no longer alive."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    ns = record.get("pid_ns")
    if ns is not None and ns != _pid_namespace():
        return False
    started = _start_time(pid)
    if started is None:
        return True  # no such process (or only its zombie)
    recorded = record.get("pid_start")
    if not isinstance(recorded, int | float) or started < 0:
        return False  # a live pid, and nothing to tell a reused one by
    return abs(started - float(recorded)) > _START_TOLERANCE  # the pid was given to another


def describe(record: dict[str, Any], more: str = "") -> str:
    """``process 12 on host 'a' (since 2026-11-28 12:00:01)``, as a refusal names a holder;
    ``more`` goes inside the parentheses."""
    since = record.get("since")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        if isinstance(since, int | float)
        else "?"
    )
    return f"process {record.get('pid')} on host {record.get('host')!r} (since {when}{more})"
