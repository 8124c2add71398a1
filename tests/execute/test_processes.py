"""Process-executor specifics: dead workers are retried, Ctrl-C leaves no stray processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from tests.execute._tasks import always_exit, exit_once, hang_once, mix

from chunkgraph._errors import TaskError, WorkerDiedError
from chunkgraph.execute import Event, EventKind, run
from chunkgraph.graph import Graph

ROOT = Path(__file__).resolve().parents[2]


def test_a_killed_worker_is_retried_on_a_fresh_one(tmp_path: Path) -> None:
    """
    exits-once (kills its worker on the first try) -> consume
    """
    g = Graph()
    x = g.add(exit_once, str(tmp_path / "marker"), 41, name="exits-once")
    y = g.add(mix, 0, x)
    others = [g.add(mix, i) for i in range(6)]
    events: list[Event] = []
    got = run(
        g, [y, *others], executor="processes", retries=1, workers=2, subscribers=[events.append]
    )
    assert got == [mix(0, 41), *[mix(i) for i in range(6)]]
    (retried,) = [e for e in events if e.kind is EventKind.RETRIED]
    assert retried.name == "exits-once" and isinstance(retried.error, WorkerDiedError)


def test_a_worker_killed_from_outside_mid_task_is_retried(tmp_path: Path) -> None:
    """hangs-once (its worker gets SIGKILL from here while it runs) -> consume."""
    marker = tmp_path / "pid"
    g = Graph()
    y = g.add(mix, 0, g.add(hang_once, str(marker), 41, name="hangs-once"))
    events: list[Event] = []
    with ThreadPoolExecutor(1) as caller:  # run() blocks; the kill comes from this thread
        outcome = caller.submit(
            run, g, y, executor="processes", retries=1, workers=2, subscribers=[events.append]
        )
        deadline = time.monotonic() + 60
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.01)
        os.kill(int(marker.read_text()), signal.SIGKILL)
        assert outcome.result(timeout=60) == mix(0, 41)
    (retried,) = [e for e in events if e.kind is EventKind.RETRIED]
    assert retried.name == "hangs-once" and isinstance(retried.error, WorkerDiedError)
    assert "SIGKILL" in str(retried.error)


def test_a_worker_death_without_retries_is_a_task_error() -> None:
    g = Graph()
    g.add(always_exit, name="dies")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor="processes", workers=1)
    (error,) = info.value.exceptions
    assert isinstance(error, TaskError) and error.task == "dies" and error.attempts == 1
    assert isinstance(error.__cause__, WorkerDiedError)


def test_a_death_counts_as_a_try() -> None:
    g = Graph()
    g.add(always_exit, name="dies")
    with pytest.raises(ExceptionGroup) as info:
        run(g, executor="processes", workers=1, retries=2)
    assert info.value.exceptions[0].attempts == 3  # type: ignore[attr-defined]


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{src!r}, {root!r}]
    import numpy as np
    from chunkgraph.execute import run
    from chunkgraph.graph import Graph
    from tests.execute._tasks import announce_then_sleep

    if __name__ == "__main__":  # workers import this module: run only in the driver
        g = Graph()
        parts = [g.add(announce_then_sleep, 30.0, i) for i in range(8)]
        g.add(np.sum, parts)
        print("running", flush=True)
        run(g, executor="processes", workers=2)
    """
)


def test_ctrl_c_in_the_driver_leaves_no_child_process(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(src=str(ROOT / "src"), root=str(ROOT)))
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
        # Both workers run a sleeping task once each has printed "started" (two
        # processes' prints may interleave on the one pipe).
        seen = ""
        while seen.count("started") < 2:
            line = proc.stdout.readline()
            assert line, f"the driver ended first: {proc.communicate()}"
            seen += line
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len(workers) >= 3, f"not the forkserver and two workers: {workers}"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert alive == [], f"stray processes: {alive}"
