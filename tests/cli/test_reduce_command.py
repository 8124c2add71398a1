"""``chunkgraph reduce``: a deferred flow reduced from the command line (real Zarr v3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.cli._cmd_reduce import REDUCE_MODES
from chunkgraph.flow.plan._blend import ALL_MODES

SHAPE = (32, 48)


def halved(x: np.ndarray) -> np.ndarray:
    return x // 2


def _deferred(tmp: Path, *, twice: bool = False) -> tuple[Path, np.ndarray]:
    """dst beside a deferred flow (two when ``twice``); the data it was applied to."""
    data = np.random.default_rng(3).integers(0, 255, SHAPE, dtype="uint8")
    src = volume.create(str(tmp / "src.zarr"), SHAPE, (8, 8), "uint8")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp / "dst.zarr"), SHAPE, (8, 8), "uint8")
    for fn in (halved, np.invert)[: 1 + twice]:
        volume.apply(fn, src, dst, chunk_sizes=[(16, 16)], blend_pads=4, blend_modes="defer",
                     executor="sync")  # fmt: skip
    assert not dst.read(dst.bounds).any()  # deferred: nothing in dst yet
    return tmp / "dst.zarr", data


def test_reduce_writes_what_apply_writes_then_does_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst, data = _deferred(tmp_path)
    assert cli.main(["reduce", str(dst), "--quiet", "--blend-mode", "linear"]) == 0
    np.testing.assert_array_equal(
        volume.open(str(dst)).read(volume.open(str(dst)).bounds), data // 2
    )
    assert "reductions" in capsys.readouterr().out
    # Nothing is left to reduce: said so, with what was looked at, and that is success.
    assert cli.main(["reduce", str(dst), "--quiet"]) == 0
    again = capsys.readouterr()
    assert again.err == ""
    assert f"nothing left to reduce for {dst}" in again.out
    assert str(tmp_path / ".dst.zarr.chunkgraph") in again.out
    assert "finished" in again.out and "reduced with linear" in again.out
    # Asked for another mode than it was reduced with: said, and not success.
    assert cli.main(["reduce", str(dst), "--quiet", "--blend-mode", "max"]) == 2
    assert "reduced with linear, not max" in capsys.readouterr().err
    assert cli.main(["status", str(dst)]) == 0
    status = capsys.readouterr().out
    assert "finished" in status and "stale" not in status.lower()
    # The layers went on success; the flow, named, answers "already reduced".
    assert not [p for p in (tmp_path / ".dst.zarr.chunkgraph").iterdir() if p.is_dir()]
    [record] = (tmp_path / ".dst.zarr.chunkgraph").glob("*.done")
    flow_id = record.name.removesuffix(".done")
    assert cli.main(["reduce", str(dst), flow_id, "--quiet", "--blend-mode", "linear"]) == 0
    assert "already finished" in capsys.readouterr().out


def test_reduce_needs_a_flow_id_when_several_are_deferred(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst, _ = _deferred(tmp_path, twice=True)
    assert cli.main(["reduce", str(dst), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "give the FLOW_ID" in err and "deferred flows there" in err
    ids = err.split("deferred flows there: ")[1].split(" under ")[0].split(", ")
    assert len(ids) == 2
    assert cli.main(["reduce", str(dst), ids[0], "--quiet", "--executor", "sync"]) == 0
    assert not (volume.open(str(dst)).read(volume.open(str(dst)).bounds) == 0).all()


def test_a_dst_that_does_not_match_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst, _ = _deferred(tmp_path)
    (flow_id,) = [p.name for p in (tmp_path / ".dst.zarr.chunkgraph").iterdir() if p.is_dir()]
    other = volume.create(str(tmp_path / "other.zarr"), SHAPE, (16, 16), "uint8")
    args = ["reduce", str(tmp_path / "other.zarr"), flow_id, "--quiet"]
    assert cli.main([*args, "--intermediates", str(tmp_path / ".dst.zarr.chunkgraph")]) == 2
    assert "chunks" in capsys.readouterr().err
    assert not other.read(other.bounds).any()
    with pytest.raises(SystemExit):  # argparse: usage error, the valid modes listed
        cli.main(["reduce", str(dst), "--blend-mode", "nearest"])
    assert "linear" in capsys.readouterr().err


def test_python_refuses_a_read_only_dst_before_anything_runs(tmp_path: Path) -> None:
    from chunkgraph import ConfigError, flow

    dst, _ = _deferred(tmp_path)
    (flow_dir,) = [p for p in (tmp_path / ".dst.zarr.chunkgraph").iterdir() if p.is_dir()]
    with pytest.raises(ConfigError, match="mode='r\\+'"):
        flow.reduce_deferred(flow_dir, volume.open(str(dst)))


def test_the_command_offers_the_modes_the_flow_accepts() -> None:
    assert set(REDUCE_MODES) == set(ALL_MODES) - {"defer"}


def test_a_log_json_path_in_a_missing_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst, _ = _deferred(tmp_path)
    code = cli.main(["reduce", str(dst), "--log-json", str(tmp_path / "nodir" / "x.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--log-json" in err and "does not exist" in err and "Traceback" not in err
    assert not volume.open(str(dst)).read(volume.open(str(dst)).bounds).any()  # not reduced


def test_a_flow_already_being_reduced_is_said_in_command_line_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from chunkgraph.flow.state import StateRoot
    from chunkgraph.flow.state._layout import default_root
    from chunkgraph.flow.state._lock import flow_lock
    from chunkgraph.flow.state._status import read_flows

    dst, _ = _deferred(tmp_path)
    root = default_root(str(dst))
    (state,) = read_flows(StateRoot.of(root), sizes=False)
    with flow_lock(root / f"{state.flow_id}.lock"):  # held: status says running, so name it
        code = cli.main(["reduce", str(dst), state.flow_id, "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"process {os.getpid()} on host" in err and f"chunkgraph status {dst}" in err
    assert f"`chunkgraph reduce {dst} {state.flow_id}`" in err
    assert "resume=True" not in err and "lock_wait" not in err


def test_a_deferred_flow_kept_in_another_directory_is_found_from_dst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """apply was given intermediates=scratch: the note it left beside dst leads there."""
    data = np.random.default_rng(3).integers(0, 255, SHAPE, dtype="uint8")
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "uint8")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "uint8")
    volume.apply(halved, src, dst, chunk_sizes=[(16, 16)], blend_pads=4, blend_modes="defer",
                 executor="sync", intermediates=tmp_path / "scratch")  # fmt: skip
    assert cli.main(["reduce", str(tmp_path / "dst.zarr"), "--quiet"]) == 0, capsys.readouterr().err
    np.testing.assert_array_equal(dst.read(dst.bounds), data // 2)


def test_without_any_flow_it_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "uint8")
    assert cli.main(["reduce", str(tmp_path / "dst.zarr"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"nothing to reduce for {tmp_path / 'dst.zarr'}" in err
    assert str(tmp_path / ".dst.zarr.chunkgraph") in err and "found no flow" in err
    assert "--intermediates" in err and "blend_modes='defer'" in err


def test_an_interrupted_deferred_apply_is_named_and_not_taken_for_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkgraph.flow.state import TOP, MarkerStore, StateRoot
    from chunkgraph.flow.state._layout import default_root
    from chunkgraph.flow.state._status import read_flows

    dst, _ = _deferred(tmp_path)
    root = default_root(str(dst))
    (state,) = read_flows(StateRoot.of(root), sizes=False)
    # One top-level task's marker gone: what a deferred apply killed midway leaves.
    markers = MarkerStore(StateRoot.of(str(state.flow_dir)))
    kept = sorted(markers.done_keys(TOP))[1:]
    markers.clear((TOP,))
    markers.mark_done_many(TOP, kept, "all-but-one")
    assert cli.main(["reduce", str(dst), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{state.flow_id} (interrupted, top 5/6" in err
    assert "--resume" in err and "nothing left" not in err
    assert not volume.open(str(dst)).read(volume.open(str(dst)).bounds).any()
