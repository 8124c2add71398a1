"""``chunkgraph downsample`` and ``chunkgraph transfer`` meeting another flow: refused
(exit 1) with the command that shows that flow, or waiting with ``--lock-wait``."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.flow.state._dst_lock import claimed
from chunkgraph.flow.state._lock import flow_lock
from chunkgraph.geometry import Box


def _source(tmp_path: Path) -> Path:
    path = tmp_path / "v.zarr"
    src = volume.create(path, (32, 32, 16), (16, 16, 16), "uint8")
    src.write(src.bounds, (np.arange(32 * 32 * 16).reshape(32, 32, 16) % 251).astype("uint8"))
    return path


def test_a_busy_downsample_names_its_level_for_status_and_waits_with_lock_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    assert cli.main(["downsample", "--quiet", str(src)]) == 0
    capsys.readouterr()
    (state,) = (tmp_path / ".v_s1.zarr.chunkgraph").glob("*.done")  # the level's flow
    lock = state.with_suffix(".lock")
    codes: list[int] = []
    # The same downsample again (--resume: its level is there) while that flow is running.
    with flow_lock(lock, 0.0):
        assert cli.main(["downsample", "--quiet", "--resume", str(src)]) == 1
        err = capsys.readouterr().err
        assert "this flow is already running" in err
        assert f"`chunkgraph status {tmp_path / 'v_s1.zarr'}` shows its progress" in err
        assert "--lock-wait SECONDS" in err and "resume=True" not in err
        waiting = threading.Thread(
            target=lambda: codes.append(
                cli.main(["downsample", "--quiet", "--resume", "--lock-wait", "60", str(src)])
            )
        )
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive(), codes  # waiting for the lock held here
    waiting.join(60)
    assert codes == [0]


def test_a_transfer_of_a_volume_being_written_is_refused_and_makes_no_dst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    held = volume.open(src)
    with claimed(held, Box((0, 0, 0), (16, 32, 16)), {"flow": "beef", "fn": "paint"}, 0.0):
        assert cli.main(["transfer", "--quiet", str(src), str(tmp_path / "copy.zarr")]) == 1
        err = capsys.readouterr().err
        assert f"{src}, which this flow reads, is being written by another flow" in err
        assert "flow beef (fn paint)" in err and "half-written" in err
        assert f"`chunkgraph status {src}` shows its progress" in err
        assert "--lock-wait SECONDS" in err
        assert not (tmp_path / "copy.zarr").exists()
    argv = ["transfer", "--quiet", "--lock-wait", "5", str(src), str(tmp_path / "copy.zarr")]
    assert cli.main(argv) == 0
    copy = volume.open(tmp_path / "copy.zarr")
    np.testing.assert_array_equal(copy.read(copy.bounds), held.read(held.bounds))
