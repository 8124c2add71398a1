"""The lease that locks a flow kept in an object store, against a real S3 server (moto).

Each behaviour the lease promises (``_lease``'s guarantee): one holder at a time
however many runs race, a killed holder's lease taken over once it expires by the
server's clock (never before), a holder that lost its lease stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest

from chunkgraph import FlowLockedError
from chunkgraph.flow.state._lease import CLOCK_SLACK, TTL_ENV, Lease, read_lease
from chunkgraph.testing import S3Server
from chunkgraph.volume._object_store import object_store

TTL = 2.0


@pytest.fixture
def root(server: S3Server) -> str:
    """A fresh bucket's URL per test, so tests share the server but no objects."""
    name = f"lease-{uuid.uuid4().hex[:12]}"  # moto keeps buckets per process, across servers
    server.create_bucket(name)
    return f"s3://{name}/state"


def lease(root: str, ttl: float = TTL) -> Lease:
    return Lease(object_store(root), "f00d.lock", f"{root}/f00d.lock", ttl=ttl)


def wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_second_run_is_refused_naming_the_holder(root: str) -> None:
    first = lease(root)
    first.acquire()
    try:
        with pytest.raises(FlowLockedError) as refused:
            lease(root).acquire()
        assert f"process {os.getpid()}" in refused.value.holder
        assert refused.value.lock == f"{root}/f00d.lock"
        assert "lapses in" in str(refused.value) and "--lock-wait" in str(refused.value)
        assert refused.value.lapses_in is not None and refused.value.lapses_in <= TTL + 1.5
    finally:
        first.release()
    again = lease(root)
    again.acquire()  # released: free at once
    again.release()
    assert read_lease(object_store(root), "f00d.lock") is None


def test_a_live_holder_keeps_its_lease_past_the_ttl(root: str) -> None:
    holder = lease(root)
    holder.acquire()
    try:
        time.sleep(TTL + CLOCK_SLACK + 0.5)  # the span the lease must outlive: no condition
        assert holder.valid()
        with pytest.raises(FlowLockedError):
            lease(root).acquire()
    finally:
        holder.release()


def test_many_racing_runs_never_hold_it_together(root: str) -> None:
    """Threads race to acquire (each its own client, as separate runs have), hold a
    moment, release; a counter of holders never exceeds one, and every run gets a turn."""
    holding, most, turns = 0, 0, 0
    guard = threading.Lock()
    errors: list[BaseException] = []

    def run() -> None:
        nonlocal holding, most, turns
        mine = lease(root)
        try:
            mine.acquire(wait=60)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)
            return
        with guard:
            holding += 1
            most, turns = max(most, holding), turns + 1
        time.sleep(0.05)
        with guard:
            holding -= 1
        mine.release()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (most, turns) == (1, 8)


def test_racing_takeovers_of_an_expired_lease_have_one_winner(root: str) -> None:
    dead = lease(root)
    dead.acquire()
    dead._stop.set()  # its holder stops renewing, as a killed one does
    store = object_store(root)
    wait_until(lambda: (found := read_lease(store, "f00d.lock")) is not None and found.expired)
    winners: list[Lease] = []
    refused: list[BaseException] = []
    start = threading.Barrier(6)

    def take() -> None:
        mine = lease(root)
        start.wait()
        try:
            mine.acquire()
        except FlowLockedError as err:
            refused.append(err)
        else:
            winners.append(mine)

    threads = [threading.Thread(target=take) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(refused) == 5
    assert winners[0].took_over is not None
    winners[0].release()


def test_a_holder_whose_lease_was_taken_over_stops(root: str) -> None:
    holder = lease(root)
    holder.acquire()
    holder.check()
    holder._stop.set()  # its renewals stall (a paused process)...
    assert holder._thread is not None
    holder._thread.join()
    # ...so it stops counting itself the holder before anyone may take it over
    wait_until(lambda: not holder.valid())
    with pytest.raises(FlowLockedError, match="did not renew"):
        holder.check()
    taker = lease(root)
    taker.acquire(wait=30)
    assert taker.took_over is not None
    # the stalled holder's renewal, conditional on its old ETag, now fails: lost for good
    holder._stop.clear()
    thread = threading.Thread(target=holder._renew_loop)
    thread.start()
    wait_until(lambda: holder._lost is not None)
    holder._stop.set()
    thread.join()
    with pytest.raises(FlowLockedError, match="taken over"):
        holder.check()
    holder.release()  # not its lease any more: left alone
    assert read_lease(object_store(root), "f00d.lock") is not None
    taker.release()


_HOLDER = textwrap.dedent(
    """
    import socket, sys, time
    from chunkgraph.flow.state._lease import Lease
    from chunkgraph.volume._object_store import object_store
    root, host = sys.argv[1], sys.argv[2]
    if host != "here":
        socket.gethostname = lambda: host  # its record names another host
    Lease(object_store(root), "f00d.lock", root + "/f00d.lock").acquire()
    print("held", flush=True)
    time.sleep(600)
    """
)


def _killed_holder(root: str, host: str, ttl: float) -> int:
    """The pid of a process that held the lease and was killed with SIGKILL (reaped)."""
    env = {**os.environ, TTL_ENV: str(ttl)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, root, host], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        found = read_lease(object_store(root), "f00d.lock")
        assert found is not None and found.owner["pid"] == proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.pid


def test_a_killed_holder_on_another_host_blocks_until_its_lease_lapses(root: str) -> None:
    pid = _killed_holder(root, "another-host", TTL)
    killed = time.monotonic()
    with pytest.raises(FlowLockedError) as refused:
        lease(root).acquire()  # dead, but from another host: nothing here can tell
    assert f"process {pid} on host 'another-host'" in refused.value.holder
    assert "lapses in" in str(refused.value) and "lock_wait" in str(refused.value)
    nxt = lease(root)
    nxt.acquire(wait=30)
    waited = time.monotonic() - killed
    try:
        assert nxt.took_over is not None and nxt.took_over.owner["pid"] == pid
        # taken once expired by the server's clock, and not long after
        assert waited < TTL + CLOCK_SLACK + 3
    finally:
        nxt.release()


def test_a_killed_holder_on_this_host_is_taken_over_at_once(root: str) -> None:
    """A ttl of a minute: only seeing that the holder is dead lets the next run in."""
    pid = _killed_holder(root, "here", 60.0)
    store = object_store(root)
    found = read_lease(store, "f00d.lock")
    assert found is not None and not found.expired and found.free
    nxt = lease(root, ttl=60.0)
    nxt.acquire()  # no wait: refused if the dead holder still counted
    try:
        assert nxt.took_over is not None and nxt.took_over.owner["pid"] == pid
    finally:
        nxt.release()


def test_a_live_pid_with_another_start_time_is_a_reused_pid() -> None:
    from chunkgraph.flow.state._holder import dead_here, this_process

    me = this_process()
    assert not dead_here(me)  # this very process: alive
    assert dead_here({**me, "pid_start": me["pid_start"] - 3600})  # the pid, given anew
    assert not dead_here({**me, "host": "another-host", "pid_start": 0.0})  # not ours to judge
    assert not dead_here({**me, "pid_ns": "pid:[1]", "pid_start": 0.0})  # another container
    assert not dead_here({k: v for k, v in me.items() if k != "pid_start"})  # older record


def test_a_bad_ttl_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkgraph import ConfigError
    from chunkgraph.flow.state._lease import lease_ttl

    monkeypatch.setenv(TTL_ENV, "-3")
    with pytest.raises(ConfigError, match="positive") as bad:
        lease_ttl()
    assert bad.value.field == TTL_ENV
