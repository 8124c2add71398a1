"""``chunkgraph status`` / ``clean`` and apply's warning, on real flows beside a Zarr dst.

Each flow is a 32 x 32 float32 volume in 8 x 8 top-level chunks blended by 2, so
that top-level tasks write temporary layers and leave done markers::

    dst.zarr                       the destination
    .dst.zarr.chunkgraph/
        <finished id>.done         a flow that succeeded
        <failed id>/               a flow whose fn raised on row 2 of the top grid
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.cli._cmd_status import DEFAULT_STALE_HOURS
from chunkgraph.flow.state import STALE_AFTER_HOURS, FlowStatus, StateRoot, state_store
from chunkgraph.flow.state._info import write_flow_info
from chunkgraph.flow.state._layout import default_root
from chunkgraph.flow.state._lock import flow_lock
from chunkgraph.flow.state._status import read_flows
from chunkgraph.geometry import Box

SHAPE = (32, 32)
TWO_DAYS = 48 * 3600


def doubled(x: np.ndarray) -> np.ndarray:
    return x * 2


def halved(x: np.ndarray) -> np.ndarray:
    return x / 2


def fails_from_row_two(x: np.ndarray, box: Box) -> np.ndarray:
    """Top row i covers [8i - 2, 8i + 10): rows 0 and 1 succeed, row 2 raises."""
    if box.start[0] >= 14:
        raise RuntimeError("injected failure")
    return x + 1


def _apply(fn: object, tmp: Path, **kw: object) -> None:
    src = volume.open(str(tmp / "src.zarr"))
    dst = volume.open(str(tmp / "dst.zarr"), mode="r+")
    kw.setdefault("blend_modes", "linear")
    volume.apply(fn, src, dst, chunk_sizes=[(8, 8)], blend_pads=2,  # type: ignore[arg-type]
                 executor="sync", retries=0, **kw)  # fmt: skip


@pytest.fixture
def flows(tmp_path: Path) -> tuple[Path, str, str]:
    """dst beside one finished and one interrupted flow: (dst, finished id, interrupted id)."""
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(src.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    root = default_root(tmp_path / "dst.zarr")
    _apply(doubled, tmp_path)
    (finished,) = [p.stem for p in root.glob("*.done")]
    with pytest.raises(ExceptionGroup):
        _apply(fails_from_row_two, tmp_path)
    (interrupted,) = [p.name for p in root.iterdir() if p.is_dir()]
    return tmp_path / "dst.zarr", finished, interrupted


def _backdate(flow_dir: Path, seconds: float) -> None:
    """Make a flow look untouched for ``seconds``."""
    then = flow_dir.stat().st_mtime - seconds
    for folder, dirs, files in os.walk(flow_dir):
        for name in dirs + files:
            os.utime(Path(folder) / name, (then, then))
    os.utime(flow_dir, (then, then))


def test_status_names_each_flow_and_its_progress(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, finished, interrupted = flows
    assert cli.main(["status", str(dst)]) == 0
    out = capsys.readouterr().out
    assert "2 flow(s)" in out
    (fin_line,) = [line for line in out.splitlines() if finished in line]
    (int_line,) = [line for line in out.splitlines() if interrupted in line]
    assert "finished" in fin_line and "STALE" not in fin_line
    # fn raised: the flow failed (not interrupted), and the line says with what.
    assert "failed" in int_line and "top 8/16" in int_line and "temporaries" in int_line
    assert "interrupted" not in int_line
    assert "RuntimeError: injected failure" in int_line
    assert "STALE" not in int_line  # seconds old: its user may still resume it

    assert cli.main(["status", str(dst), "--json", "--older-than", "0"]) == 0
    rows = {r["flow_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[interrupted]["status"] == "failed" and rows[interrupted]["stale"]
    assert "RuntimeError: injected failure" in rows[interrupted]["error"]
    assert rows[finished]["error"] is None
    assert rows[interrupted]["top_done"] == 8 and rows[interrupted]["temporary_bytes"] > 0
    assert rows[finished]["status"] == "finished" and not rows[finished]["has_temporaries"]


def test_status_without_flows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    volume.create(str(tmp_path / "fresh.zarr"), SHAPE, (8, 8), "float32")
    assert cli.main(["status", str(tmp_path / "fresh.zarr")]) == 0
    assert "no flows under" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["status", "clean", "reduce"])
def test_a_destination_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A mistyped path used to say "no flows" and exit 0, as if all were well."""
    missing = tmp_path / "outt.zarr"
    extra = ["--stale"] if command == "clean" else []
    assert cli.main([command, str(missing), *extra]) == 2
    err = capsys.readouterr().err
    assert f"chunkgraph {command}: the destination {missing} does not exist" in err
    assert cli.main([command, str(missing), "--intermediates", str(tmp_path / "nope"), *extra]) == 2
    assert f"--intermediates {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_the_flows_of_a_deleted_destination_are_still_found_and_cleaned(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """dst deleted to start over: its flows directory is what `clean` is for."""
    dst, finished, interrupted = flows
    volume.remove(dst)
    assert cli.main(["status", str(dst)]) == 0
    assert "2 flow(s)" in capsys.readouterr().out
    assert cli.main(["clean", str(dst), finished, interrupted]) == 0
    assert not default_root(dst).exists()


def _state_elsewhere(tmp: Path, *, fn: object = doubled) -> tuple[Path, Path]:
    """dst beside a spec-like run whose state went to ``scratch/`` (intermediates=)."""
    src = volume.create(str(tmp / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(src.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    volume.create(str(tmp / "dst.zarr"), SHAPE, (8, 8), "float32")
    (tmp / "scratch").mkdir()
    _apply(fn, tmp, intermediates=tmp / "scratch")
    return tmp / "dst.zarr", tmp / "scratch"


def test_status_of_a_destination_finds_the_flows_kept_in_another_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst, scratch = _state_elsewhere(tmp_path)
    with pytest.raises(ExceptionGroup):
        _apply(fails_from_row_two, tmp_path, intermediates=scratch)
    (interrupted,) = [p.name for p in scratch.iterdir() if p.is_dir()]
    assert cli.main(["status", str(dst)]) == 0
    out = capsys.readouterr().out
    assert "2 flow(s)" in out
    (line,) = [line for line in out.splitlines() if interrupted in line]
    assert "failed" in line and f"(state under {scratch})" in line
    # removing it by id removes its note beside dst too; the finished one stays listed
    assert cli.main(["clean", str(dst), interrupted]) == 0
    assert not (scratch / interrupted).exists()
    assert not (default_root(dst) / f"{interrupted}.where").exists()
    assert cli.main(["status", str(dst)]) == 0
    assert "1 flow(s)" in capsys.readouterr().out


def test_status_clean_and_reduce_take_the_spec_file_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec's output and intermediates: (relative to the spec), nothing imported."""
    dst, scratch = _state_elsewhere(tmp_path)
    [flow_id] = [p.name[: -len(".done")] for p in scratch.glob("*.done")]
    (default_root(dst) / f"{flow_id}.where").unlink()  # a run from before notes
    spec = tmp_path / "run.yaml"
    spec.write_text(
        "input: src.zarr\noutput: {path: dst.zarr, dtype: float32, chunks: [8, 8]}\n"
        "function: not_imported_here:fn\nintermediates: scratch\n"
    )
    assert cli.main(["status", str(dst)]) == 0
    assert "no flows under" in capsys.readouterr().out
    assert cli.main(["status", str(spec)]) == 0
    out = capsys.readouterr().out
    assert f"1 flow(s) under {scratch}" in out and flow_id in out and "finished" in out
    assert cli.main(["reduce", str(spec), "--quiet"]) == 0  # finished: nothing left to do
    assert "nothing left to reduce" in capsys.readouterr().out
    assert cli.main(["clean", str(spec), flow_id]) == 0
    assert not (scratch / f"{flow_id}.done").exists()
    spec.write_text("output: {path: dst.zarr\n")
    assert cli.main(["status", str(spec)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_clean_stale_removes_the_interrupted_temporaries_only(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, finished, interrupted = flows
    root = default_root(dst)
    assert cli.main(["clean", str(dst), "--stale"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert (root / interrupted).is_dir()

    _backdate(root / interrupted, TWO_DAYS)
    assert cli.main(["status", str(dst)]) == 0
    assert "STALE" in capsys.readouterr().out
    assert cli.main(["clean", str(dst), "--stale"]) == 0
    assert f"removed {interrupted}'s temporaries" in capsys.readouterr().out
    assert not (root / interrupted).exists()
    assert not list(root.glob(".*deleted-*"))
    assert (root / f"{finished}.done").is_file()
    assert [s.flow_id for s in read_flows(StateRoot.of(root))] == [finished]


def test_clean_refuses_a_flow_whose_lock_is_held(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, _, interrupted = flows
    root = default_root(dst)
    with flow_lock(root / f"{interrupted}.lock"):
        (state,) = [s for s in read_flows(StateRoot.of(root)) if s.flow_id == interrupted]
        assert state.status is FlowStatus.RUNNING and state.owner["pid"] == os.getpid()  # type: ignore[index]
        assert cli.main(["clean", str(dst), "--all"]) == 0  # running: not stale
        assert cli.main(["clean", str(dst), interrupted]) == 1
        said = capsys.readouterr()
        assert "already running" in said.err
        # clean's own words: who holds it, not a run's advice; no "freed 0 B" beside it
        assert f"process {os.getpid()}" in said.err and "resume" not in said.err
        assert "freed" not in said.out
        assert (root / interrupted).is_dir()
    assert cli.main(["clean", str(dst), interrupted]) == 0
    assert not (root / interrupted).exists()


def test_clean_needs_a_selection(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, _, _ = flows
    assert cli.main(["clean", str(dst)]) == 2
    assert "--stale" in capsys.readouterr().err
    assert (
        cli.main(["clean", str(dst), "0123456789abcdef"]) == 2
    )  # a flow id that is not there: a usage error
    assert "no flow 0123456789abcdef" in capsys.readouterr().err


def test_apply_warns_when_a_new_flow_starts_beside_a_stale_one(
    flows: tuple[Path, str, str],
) -> None:
    dst, _, interrupted = flows
    tmp = dst.parent
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _apply(halved, tmp)  # the interrupted flow is fresh: no warning
    assert not [w for w in caught if "stale" in str(w.message)]

    _backdate(default_root(dst) / interrupted, TWO_DAYS)
    listed = rf"chunkgraph status {dst}; to delete them: chunkgraph clean {dst} --stale"
    with pytest.warns(UserWarning, match=rf"stale flow.*{interrupted}.*{listed}") as got:
        _apply(doubled, tmp)
    assert got[0].filename == __file__  # points at the caller's apply, not inside chunkgraph


def test_cli_default_matches_the_flow_constant() -> None:
    assert DEFAULT_STALE_HOURS == STALE_AFTER_HOURS


def test_recorded_totals_and_a_deferred_flow(flows: tuple[Path, str, str]) -> None:
    """With ``flow.json`` the totals show, and deferred layers (the result) are never stale."""
    dst, _, interrupted = flows
    root = default_root(dst)
    write_flow_info(
        state_store(StateRoot.of(root / interrupted)), top_tasks=16, reductions=16, deferred=False
    )
    (state,) = [s for s in read_flows(StateRoot.of(root)) if s.flow_id == interrupted]
    assert state.progress().startswith("top 8/16, reductions ") and state.stale(0.0)
    # deferred, but 8 of 16 top-level tasks done: a failed run's leftovers, not a result
    write_flow_info(
        state_store(StateRoot.of(root / interrupted)), top_tasks=16, reductions=0, deferred=True
    )
    (state,) = [s for s in read_flows(StateRoot.of(root)) if s.flow_id == interrupted]
    assert state.status is FlowStatus.FAILED and state.stale(0.0)
    write_flow_info(
        state_store(StateRoot.of(root / interrupted)), top_tasks=8, reductions=0, deferred=True
    )
    (state,) = [s for s in read_flows(StateRoot.of(root)) if s.flow_id == interrupted]
    assert state.status is FlowStatus.DEFERRED and not state.stale(0.0)
    assert cli.main(["clean", str(dst), "--all"]) == 0
    assert (root / interrupted / "layers").is_dir()


def test_a_failed_deferred_apply_is_interrupted_not_deferred(
    flows: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """flow.json says deferred from the run's start; a run that failed is failed, not deferred."""
    dst, _, interrupted = flows
    root = default_root(dst)
    assert cli.main(["clean", str(dst), interrupted]) == 0
    with pytest.raises(ExceptionGroup):
        _apply(fails_from_row_two, dst.parent, blend_modes="defer")
    (failed,) = [p.name for p in root.iterdir() if p.is_dir()]
    capsys.readouterr()
    assert cli.main(["status", str(dst)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if failed in line]
    assert "failed" in line and "deferred" not in line
    assert cli.main(["reduce", str(dst), "--quiet"]) == 2  # not picked as the deferred flow
    err = capsys.readouterr().err
    assert "found: " in err and f"{failed} (failed" in err
    assert f"Flow {failed} was applied with blend_modes='defer' but stopped" in err
    assert cli.main(["clean", str(dst), "--stale", "--older-than", "0"]) == 0
    assert not (root / failed).exists()  # its temporaries no longer leak


@pytest.mark.parametrize("hours", ["-1", "nan", "soon"])
def test_a_negative_or_unreadable_age_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hours: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["clean", str(tmp_path), "--stale", "--older-than", hours])
    assert ended.value.code == 2
    assert "--older-than" in capsys.readouterr().err


def test_status_and_clean_of_a_precomputed_volume_see_the_flows_of_its_scales(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flow writes one scale and keeps its state in the volume's default directory under
    the scale's name (``.pc.chunkgraph/8_8_40/<flow id>``): `status` and `clean` of the
    volume's root must list that flow, never the scale's folder as if it were one (clean
    then removed a running flow's state)."""
    dst = volume.create(f"precomputed://{tmp_path}/pc", (32, 32, 8), (8, 8, 8), "float32",
                        resolution=(8, 8, 40))  # fmt: skip
    src = volume.create(tmp_path / "src.zarr", dst.shape, (8, 8, 8), "float32",
                        resolution=(8, 8, 40))  # fmt: skip
    src.write(src.bounds, np.ones(dst.shape, "float32"))

    def fails_late(x: np.ndarray, box: Box) -> np.ndarray:
        if box.start[0] >= 16:
            raise ValueError("late failure")
        return x

    with pytest.raises(ExceptionGroup):
        volume.apply(fails_late, src, dst, chunk_sizes=[(8, 8, 8)], crop_pads=[(2, 2, 0)],
                     executor="sync", retries=0)  # fmt: skip
    scale_root = default_root(tmp_path / "pc" / "8_8_40")
    ((flow_id, _),) = [(s.flow_id, s) for s in read_flows(StateRoot.of(scale_root))]
    url = f"precomputed://{tmp_path}/pc"
    with flow_lock(scale_root / f"{flow_id}.lock"):
        assert cli.main(["status", url]) == 0
        out = capsys.readouterr().out
        assert flow_id[:8] in out and "running" in out and "8_8_40 " not in out, out
        assert cli.main(["clean", url, "--stale", "--all", "--older-than", "0"]) == 0
        assert (scale_root / flow_id).is_dir()  # a running flow's state is kept
    assert cli.main(["clean", url, "--all"]) == 0
    assert not (scale_root / flow_id).exists()
    assert (tmp_path / "pc" / "info").is_file()
