"""Time limits: a try past ``timeout`` fails with TimeoutError, is retried, then fails the run."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from tests.execute._tasks import hang_once, mix, sleep_then

from chunkgraph import CallTimeoutError
from chunkgraph._errors import ConfigError, TaskError
from chunkgraph.execute import Event, EventKind, LocalExecutor, ProcessPool, run
from chunkgraph.execute._thread_pool import acquire_pool, release_pool
from chunkgraph.graph import Graph

ROOT = Path(__file__).resolve().parents[2]


BAD_TIMEOUTS = [0, -1.0, True, "1", math.nan, math.inf]


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_a_bad_timeout_is_a_config_error(bad: Any) -> None:
    g = Graph()
    g.add(mix, 0)
    with pytest.raises(ConfigError, match="timeout must be a positive number of seconds"):
        run(g, timeout=bad)


def test_a_bad_call_timeout_is_a_config_error() -> None:
    with ProcessPool(workers=1) as pool:
        for bad in BAD_TIMEOUTS:
            with pytest.raises(ConfigError, match="timeout must be a positive number"):
                pool.submit(abs, (1,), timeout=bad)  # type: ignore[arg-type]
        assert pool.submit(abs, (-1,), timeout=5).result() == 1


def test_sync_refuses_a_timeout_it_cannot_enforce() -> None:
    g = Graph()
    g.add(mix, 0)
    with pytest.raises(ConfigError, match="executor='sync'"):
        run(g, executor="sync", timeout=1)
    assert LocalExecutor("sync", timeout=None).timeout is None
    assert LocalExecutor("threads", timeout=2).timeout == 2.0


@pytest.mark.parametrize("kind", ["threads", "adaptive", "processes"])
def test_tasks_within_their_limit_are_unaffected(kind: Any) -> None:
    """a0..a9 -> total: a generous limit changes no result."""
    g = Graph()
    parts = [g.add(mix, i) for i in range(10)]
    total = g.add(mix, 0, *parts)
    assert run(g, total, executor=kind, workers=2, timeout=60) == mix(0, *map(mix, range(10)))


def test_a_hung_thread_task_is_abandoned_retried_and_cannot_commit_late() -> None:
    """hangs-first (blocks on its first try) -> consumer.

    The first try overruns: it fails with TimeoutError, its thread is abandoned and
    replaced, and the retry's value is the one used. When the stuck call finally
    returns, nothing of it reaches the run or the pool.
    """
    release = threading.Event()
    calls: list[threading.Thread] = []

    def hangs_first(value: int) -> int:
        calls.append(threading.current_thread())
        if len(calls) == 1:
            release.wait(60)
            return -1  # too late to count
        return value

    g = Graph()
    consumer = g.add(mix, 0, g.add(hangs_first, 7, name="hangs-first"))
    events: list[Event] = []
    # 1 s: the other tries must never overrun it, even on a loaded machine
    got = run(g, consumer, workers=2, timeout=1.0, retries=1, subscribers=[events.append])
    assert got == mix(0, 7)
    (retried,) = [e for e in events if e.kind is EventKind.RETRIED]
    assert isinstance(retried.error, TimeoutError)
    assert "task 'hangs-first' exceeded timeout=1 s" in str(retried.error)
    finished = [e.name for e in events if e.kind is EventKind.FINISHED]
    assert finished.count("hangs-first") == 1
    stuck = calls[0]
    assert stuck.is_alive() and stuck.daemon  # it cannot be killed, and keeps no one waiting
    release.set()
    stuck.join(30)
    assert not stuck.is_alive()  # its job returned, it saw it was abandoned, and it left
    pool, shared = acquire_pool(2)
    release_pool(pool, shared)
    assert shared and stuck not in pool._threads and len(pool._threads) == 2
    assert all(t.is_alive() for t in pool._threads)
    assert finished == [e.name for e in events if e.kind is EventKind.FINISHED]  # no late event
    assert run(g, consumer, workers=2) == mix(0, 7)  # later runs are sound


def test_a_thread_task_that_always_overruns_fails_the_run() -> None:
    """stuck -> never-runs: two tries time out, then one TaskError, promptly."""
    release = threading.Event()
    returned: list[bool] = []

    def stuck() -> None:
        release.wait(60)
        returned.append(True)

    g = Graph()
    g.add(mix, 0, g.add(stuck, name="stuck"), name="never-runs")
    try:
        with pytest.raises(ExceptionGroup) as info:
            run(g, workers=2, timeout=0.2, retries=1)
        assert not returned  # the run gave up on both tries; it did not wait for them
    finally:
        release.set()
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and error.task == "stuck" and error.attempts == 2
    assert isinstance(error.__cause__, TimeoutError)
    assert "exceeded timeout=0.2 s" in str(error) and "abandoned" in str(error)
    assert "1 task(s) did not run" in str(info.value)


def test_a_hung_process_task_is_killed_and_retried(tmp_path: Path) -> None:
    """hangs-once (sleeps 1000 s on its first try) -> consumer, plus independent work."""
    marker = tmp_path / "pid"
    g = Graph()
    consumer = g.add(mix, 0, g.add(hang_once, str(marker), 5, name="hangs-once"))
    others = [g.add(mix, i) for i in range(6)]
    events: list[Event] = []
    got = run(
        g,
        [consumer, *others],
        executor="processes",
        workers=2,
        timeout=2.0,  # the other tries must never overrun it, even on a loaded machine
        retries=1,
        subscribers=[events.append],
    )
    assert got == [mix(0, 5), *map(mix, range(6))]
    (retried,) = [e for e in events if e.kind is EventKind.RETRIED]
    assert isinstance(retried.error, TimeoutError)
    message = str(retried.error)
    assert "task 'hangs-once' exceeded timeout=2 s" in message and "SIGKILL" in message
    assert not psutil.pid_exists(int(marker.read_text()))  # killed and reaped


def test_a_process_task_that_always_overruns_fails_the_run() -> None:
    g = Graph()
    g.add(mix, 0, g.add(sleep_then, 1000.0, 1, name="sleeps"))
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor="processes", workers=1, timeout=0.3, retries=1)
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and error.task == "sleeps" and error.attempts == 2
    assert isinstance(error.__cause__, TimeoutError)
    assert "exceeded timeout=0.3 s" in str(error)


def test_the_pool_kills_only_the_overrunning_call() -> None:
    """One worker: the sleeper overruns; the calls queued behind it run on the replacement."""
    with ProcessPool(workers=1) as pool:
        first = pool.worker_pids
        sleeper = pool.submit(time.sleep, (600,), timeout=0.3)
        queued = [pool.submit(abs, (-i,), timeout=30) for i in range(5)]
        with pytest.raises(CallTimeoutError, match=r"timeout=0\.3 s.*SIGKILL") as info:
            sleeper.result(timeout=60)
        assert isinstance(info.value, TimeoutError) and info.value.pid == first[0]
        assert [f.result(timeout=60) for f in queued] == list(range(5))
        assert pool.worker_pids != first


def test_a_limit_counts_from_the_start_not_from_the_submit() -> None:
    """Four 0.5 s calls on one worker, each limited to 1.25 s: the last two end 1.5 s and
    2 s after they were submitted, and must still not be killed (0.75 s to spare each)."""
    with ProcessPool(workers=1) as pool:
        futures = [pool.submit(sleep_then, (0.5, i), timeout=1.25) for i in range(4)]
        assert [f.result(timeout=60) for f in futures] == [0, 1, 2, 3]


DAEMON = """
import sys
sys.path[:0] = [{src!r}, {root!r}]
from chunkgraph.execute import run
from chunkgraph.graph import Graph
from tests.execute._tasks import sleep_then

if __name__ == "__main__":
    g = Graph()
    g.add(sleep_then, 1000.0, 1, name="sleeps")
    try:
        run(g, executor="threads", workers=2, timeout=0.2)
    except ExceptionGroup as group:
        print(type(group.exceptions[0].__cause__).__name__, flush=True)
"""


def test_an_abandoned_thread_does_not_keep_the_program_alive(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DAEMON).format(src=str(ROOT / "src"), root=str(ROOT)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "TimeoutError"
