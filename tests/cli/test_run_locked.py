"""``chunkgraph run`` on an output another flow is writing: refused (exit 1) naming that
flow, or, with ``--lock-wait``, run once it is done."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.flow.state._dst_lock import claimed
from chunkgraph.geometry import Box

SPEC = (
    "input: raw.zarr\noutput: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
    "function: spec_functions:scale\nkwargs: {factor: 3.0}\nchunk_sizes: [16]\n"
)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["run", "--quiet", *args])
    return code, capsys.readouterr().err


def test_run_on_an_output_another_flow_writes_is_refused_then_waits(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = work / "spec.yaml"
    spec.write_text(SPEC)
    out = volume.create(work / "out.zarr", (32, 32, 32), (16, 16, 16), "float32")
    other = {"flow": "0123456789abcdef", "fn": "other.module.blur"}
    with claimed(out, Box((0, 0, 0), (8, 32, 32)), other, 0.0):
        code, err = _run(capsys, str(spec))
        assert code == 1, err
        assert f"{out.path} is being written by another flow" in err
        assert "flow 0123456789abcdef (fn other.module.blur)" in err
        assert f"process {os.getpid()}" in err and "--lock-wait SECONDS" in err
        assert not np.any(out.read(out.bounds))  # nothing written

        codes: list[int] = []
        runner = threading.Thread(
            target=lambda: codes.append(
                cli.main(["run", "--quiet", "--lock-wait", "60", str(spec)])
            )
        )
        runner.start()
        # It holds its own flow's lock, then waits for the claim held here.
        deadline = time.monotonic() + 60
        while not list((work / ".out.zarr.chunkgraph").glob("*.lock")):
            assert runner.is_alive() and time.monotonic() < deadline, codes
            time.sleep(0.01)
        assert runner.is_alive() and not np.any(out.read(out.bounds))
    runner.join(60)
    assert codes == [0]
    raw = volume.open(work / "raw.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), raw.read(raw.bounds) * 3)


def test_lock_wait_must_be_seconds(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "spec.yaml").write_text(SPEC)
    with pytest.raises(SystemExit) as bad:
        cli.main(["run", "--lock-wait", "-1", str(work / "spec.yaml")])
    assert bad.value.code == 2
    assert "not a number of seconds" in capsys.readouterr().err
