"""kill -9 of a flow into a bucket (moto), then a resume at once on the same host.

The killed run leaves its lease on the flow and its claim on dst, each good for
its ttl (30 s by default). Neither may hold the resume back: the holder is on this
host and no process with its pid and start time lives. ``chunkgraph status`` does
not call the flow running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.flow.state._lease import TTL_ENV
from chunkgraph.geometry import Box

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
SHAPE = (16, 24)

# A fresh interpreter each time, so that fn's identity and the flow id are the same in the
# killed run and in the resumed one.
SCRIPT = """
import json, sys, time
sys.path.insert(0, {src!r})
from chunkgraph import volume

mode, bucket, started = sys.argv[1:4]

def tripled(src):
    if mode == "fresh":
        open(started, "w").close()
        time.sleep(600)  # held in the probe, both locks taken: killed here
    return src.astype("float32") * 3

src = volume.open(f"s3://{{bucket}}/src.zarr")
dst = volume.open(f"s3://{{bucket}}/dst.zarr", mode="r+")
report = volume.apply(tripled, src, dst, chunk_sizes=[(8, 12)], resume=True, lock_wait=0)
print(json.dumps(dict(tasks=report.tasks_per_level)))
"""


def test_a_resume_right_after_kill_9_is_not_refused_and_status_says_interrupted(
    bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE)
    src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 12), "float32")
    src.write(src.bounds, data)
    volume.create(f"s3://{bucket}/dst.zarr", SHAPE, (8, 12), "float32")
    script = tmp_path / "flow.py"
    script.write_text(SCRIPT.format(src=str(SRC_DIR)))
    env = {k: v for k, v in os.environ.items() if k != TTL_ENV}  # the default ttl, 30 s
    started = tmp_path / "started"
    run = [sys.executable, str(script)]
    first = subprocess.Popen([*run, "fresh", bucket, str(started)], env=env, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert first.poll() is None and time.monotonic() < deadline, "never started"
            time.sleep(0.02)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    killed = time.monotonic()

    assert cli.main(["status", f"s3://{bucket}/dst.zarr"]) == 0
    said = capsys.readouterr().out
    assert "running" not in said and "interrupted" in said, said

    resumed = subprocess.run(
        [*run, "resume", bucket, str(started)], env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["tasks"] == [4]
    assert time.monotonic() - killed < 30  # not the killed run's ttl: nothing waited it out
    out = volume.open(f"s3://{bucket}/dst.zarr").read(Box.from_shape(SHAPE))
    np.testing.assert_array_equal(out, data * 3)
