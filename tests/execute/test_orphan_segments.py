"""Shared memory left by processes killed outright is swept when the next pool starts.

Every pool that starts on this machine sweeps, those of other test runs too: an
orphan made here may be removed by one of them before this test's own sweep, so
the tests check what is left, never that a segment outlived its owner for a while.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from chunkgraph.execute.pool._segment_names import (
    list_prefix,
    owner_of,
    owner_prefix,
    sweep_orphans,
    unlink_name,
)
from chunkgraph.execute.pool._shm import _open_mapping

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or not os.path.exists("/proc/self/ns/pid"),
    reason="segments are listed in /dev/shm and owners checked in /proc (Linux)",
)

ROOT = Path(__file__).resolve().parents[2]

# A process run whose last task holds four 8 MB results (shared-memory segments
# owned by the driver) and sleeps; it prints "started" once they exist.
HOLDER = """
import sys
sys.path[:0] = [{src!r}, {root!r}]
import numpy as np
from chunkgraph.execute import run
from chunkgraph.graph import Graph
from tests.execute._tasks import announce_then_sleep

if __name__ == "__main__":
    g = Graph()
    blocks = [g.add(np.full, 1_000_000, float(i)) for i in range(4)]
    g.add(announce_then_sleep, 1000.0, *blocks)
    run(g, executor="processes", workers=2)
"""

SWEEPER = """
import sys
sys.path[:0] = [{src!r}]
from chunkgraph.execute import ProcessPool

if __name__ == "__main__":
    ProcessPool(workers=1).shutdown()
"""


def _script(template: str) -> list[str]:
    code = textwrap.dedent(template).format(src=str(ROOT / "src"), root=str(ROOT))
    return [sys.executable, "-c", code]


def _owned_by(pid: int) -> set[str]:
    return {name for name in list_prefix("cg_") if (owner_of(name) or (0,))[0] == pid}


def _start_holder(new_session: bool) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        _script(HOLDER),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )
    return holder


def _wait_started(holder: subprocess.Popen[str]) -> None:
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "started":
        holder.kill()
        pytest.fail(f"the holder did not start: {holder.communicate()[1]}")


def test_a_killed_process_groups_segments_are_swept_and_a_live_ones_kept() -> None:
    """kill -9 of a driver's whole process group (workers and resource tracker too)
    leaves its segments; the next pool, in a fresh process, removes them, and
    leaves those of a driver that is still running."""
    killed = _start_holder(new_session=True)
    live = _start_holder(new_session=False)
    left: set[str] = set()
    try:
        _wait_started(killed)
        _wait_started(live)
        left, kept = _owned_by(killed.pid), _owned_by(live.pid)
        assert len(left) >= 4 and len(kept) >= 4
        # Nothing of the driver survives to remove them: its workers and resource
        # tracker are all in its process group, and all die with it.
        group = psutil.Process(killed.pid).children(recursive=True)
        assert group and all(_pgid(p.pid) == killed.pid for p in group), group
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(60)
        _, alive = psutil.wait_procs(group, timeout=30)
        assert not alive, alive
        subprocess.run(_script(SWEEPER), check=True, timeout=120, capture_output=True)
        remaining = set(list_prefix("cg_"))
        assert not left & remaining
        assert kept <= remaining
    finally:
        for holder in (killed, live):
            if holder.poll() is None:
                holder.send_signal(signal.SIGINT)
                try:
                    holder.wait(30)
                except subprocess.TimeoutExpired:
                    holder.kill()
        for name in left:
            unlink_name(name)
    assert not _owned_by(live.pid)  # the live one cleaned up after itself on Ctrl-C


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_sweep_judges_owners_by_pid_start_time_and_namespace() -> None:
    pid, start, namespace = owner_of(owner_prefix() + "0_0") or (0, 0, 0)
    assert pid == os.getpid() and start > 0 and namespace > 0
    tag = secrets.token_hex(3)  # no clash with segments of any other test run
    dead = _dead_pid()
    names = {
        "mine": f"cg_{pid:x}_{start:x}_{namespace:x}_{tag}_1_0",
        # Same pid, another start time: the pid was reused, the owner is gone.
        "pid-reused": f"cg_{pid:x}_{start + 1:x}_{namespace:x}_{tag}_1_0",
        "dead": f"cg_{dead:x}_{start:x}_{namespace:x}_{tag}_1_0",
        # Another pid namespace: its pids mean nothing here, so it cannot be judged.
        "foreign": f"cg_{dead:x}_{start:x}_{namespace + 1:x}_{tag}_1_0",
        "other-format": f"cg_{tag}_{dead}_0",
    }
    for name in names.values():
        _open_mapping(name, 4096, create=True).close()
    orphans = {names["pid-reused"], names["dead"]}
    owned = {names["mine"], names["foreign"], names["other-format"]}
    try:
        removed = set(sweep_orphans())
        remaining = set(list_prefix("cg_"))
    finally:
        for name in names.values():
            unlink_name(name)
    assert not (orphans & remaining)  # removed, by this sweep or another pool's
    assert removed & set(names.values()) <= orphans
    assert owned <= remaining


def test_a_zombie_owner_counts_as_gone() -> None:
    """A killed owner its parent has not reaped yet still has a /proc entry."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stat = Path(f"/proc/{child.pid}/stat").read_bytes()
        start = int(stat.rsplit(b")", 1)[1].split()[19])
        namespace = owner_of(owner_prefix() + "0_0")[2]  # type: ignore[index]
        name = f"cg_{child.pid:x}_{start:x}_{namespace:x}_{secrets.token_hex(3)}_1_0"
        _open_mapping(name, 4096, create=True).close()
        try:
            assert name not in sweep_orphans()  # alive: kept
            assert name in list_prefix("cg_")  # by every other pool's sweep too
            child.kill()
            deadline = time.monotonic() + 60
            while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            sweep_orphans()
            assert name not in list_prefix("cg_")
        finally:
            unlink_name(name)
    finally:
        child.kill()
        child.wait()
