"""Flows that run at the same time on one destination, in real processes.

One flow started twice must not share its state (the second is refused, or
waits); flows over adjacent regions that cut the same storage chunks must not
lose each other's voxels.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.geometry import Box

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
SHAPE = (32, 48)

# A fresh interpreter per run, so both runs of one flow have the same flow id.
SCRIPT = """
import json, sys, time
sys.path.insert(0, {src!r})
from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.volume import FlowLockedError

root, mode = sys.argv[1], sys.argv[2]
start, stop, delay = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

def slow_affine(src):
    time.sleep(delay)
    if mode == "gated":  # hold the flow until the test has tried its second run
        import os
        deadline = time.monotonic() + 60
        while not os.path.exists(root + "/release") and time.monotonic() < deadline:
            time.sleep(0.01)
    return src.astype("float64") * 3.0 + 1.0

if mode == "slow-writes":
    # Storage with latency (a network file system, an object store): a wide window
    # between the read and the write of a partial chunk.
    from chunkgraph.volume import Volume
    plain = Volume.write
    def slow_write(self, box, array):
        time.sleep(0.05)
        plain(self, box, array)
    Volume.write = slow_write
    # Start together, so that both flows rewrite the shared chunks at the same time.
    import os
    open(f"{{root}}/ready-{{start}}", "w").close()
    while len([n for n in os.listdir(root) if n.startswith("ready-")]) < 2:
        time.sleep(0.005)

if mode == "wait":
    # Tell the test once this run has found the flow's lock held: it waits from then on.
    import fcntl
    plain_flock = fcntl.flock
    def flock(fd, operation):
        try:
            return plain_flock(fd, operation)
        except BlockingIOError:
            if operation & fcntl.LOCK_EX:
                open(root + "/waiting", "w").close()
            raise
    fcntl.flock = flock

src = volume.open(root + "/src.zarr")
dst = volume.open(root + "/dst.zarr", mode="r+")
bbox = Box((start, 0), (stop, {width}))
try:
    report = volume.apply(
        slow_affine, src, dst, chunk_sizes=[(stop - start, 8)], blend_pads=[(0, 2)],
        bbox=bbox, resume=True, probe=False, lock_wait=60.0 if mode == "wait" else 0.0,
    )
except FlowLockedError as err:
    print(json.dumps(dict(locked=str(err))))
    sys.exit(3)
print(json.dumps(dict(tasks=report.tasks_per_level, finished=report.finished_before)))
"""


def _setup(root: Path, dst_chunks: tuple[int, int] = (8, 8)) -> np.ndarray:
    data = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    src = volume.create(str(root / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(Box.from_shape(SHAPE), data)
    volume.create(str(root / "dst.zarr"), SHAPE, dst_chunks, "float32")
    (root / "flow.py").write_text(SCRIPT.format(src=str(SRC_DIR), width=SHAPE[1]))
    return data


def _start(root: Path, mode: str, rows: tuple[int, int], delay: float) -> subprocess.Popen[str]:
    args = [str(root / "flow.py"), str(root), mode, str(rows[0]), str(rows[1]), str(delay)]
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert lines, err
    return proc.returncode, json.loads(lines[-1])


def _wait_for_lock(root: Path) -> Path:
    deadline = time.monotonic() + 60  # a Python process starting on a loaded machine
    while time.monotonic() < deadline:
        locks = list((root / ".dst.zarr.chunkgraph").glob("*.lock"))
        if locks and locks[0].stat().st_size:
            return locks[0]
        time.sleep(0.01)
    raise AssertionError("the first run never took its lock")


def test_the_same_flow_started_twice_is_refused_then_waits(tmp_path: Path) -> None:
    data = _setup(tmp_path)
    first = _start(tmp_path, "gated", (0, 32), 0.0)
    _wait_for_lock(tmp_path)
    code, refused = _result(_start(tmp_path, "run", (0, 32), 0.0))
    assert code == 3 and f"process {first.pid} on host" in refused["locked"]
    waiting = _start(tmp_path, "wait", (0, 32), 0.0)
    deadline = time.monotonic() + 60
    while not (tmp_path / "waiting").exists():
        assert waiting.poll() is None, waiting.communicate()
        assert time.monotonic() < deadline, "the second run never waited for the lock"
        time.sleep(0.01)
    (tmp_path / "release").touch()
    code, done = _result(first)
    assert code == 0 and done["tasks"] == [6]
    code, waited = _result(waiting)
    # It waited for the first run, then found the flow finished: nothing left to do.
    assert code == 0 and waited["tasks"] == [0] and waited["finished"]
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)
    assert not list((tmp_path / ".dst.zarr.chunkgraph").glob("*.lock"))


def test_a_killed_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    data = _setup(tmp_path)
    first = _start(tmp_path, "run", (0, 32), 0.3)
    lock = _wait_for_lock(tmp_path)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert lock.exists()  # the file stays, but nobody holds it any more
    code, _ = _result(_start(tmp_path, "run", (0, 32), 0.0))
    assert code == 0
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("repeat", range(2))
def test_adjacent_unaligned_flows_do_not_lose_edge_voxels(tmp_path: Path, repeat: int) -> None:
    """Rows [0, 12) and [12, 32) both cut the dst chunks of rows [8, 16) (chunks of 16 x 8)."""
    data = _setup(tmp_path, dst_chunks=(16, 8))
    runs = [
        _start(tmp_path, "slow-writes", (0, 12), 0.0),
        _start(tmp_path, "slow-writes", (12, 32), 0.0),
    ]
    for run in runs:
        code, _ = _result(run)
        assert code == 0
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)
