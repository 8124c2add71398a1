"""``chunkgraph transfer`` and ``chunkgraph downsample`` refused: exit 2 with the command
line's own options in the message, and nothing written, metadata included; what a
finished transfer's JSON log says of saturated voxels."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkgraph import cli, volume


def _mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")}


def _source(tmp_path: Path, dtype: str = "uint16") -> Path:
    path = tmp_path / "src.zarr"
    src = volume.create(path, (32, 32, 8), (16, 16, 8), dtype)
    src.write(src.bounds, (np.arange(32 * 32 * 8).reshape(32, 32, 8) % 1000).astype(dtype))
    return path


def test_a_downsample_refused_for_memory_exits_2_and_lists_no_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "img.zarr"
    volume.create_multiscale(root, [((32, 32, 8), (16, 16, 8), (4.0, 4.0, 40.0))], "uint8")
    before = zarr.open_group(root, mode="r").attrs.asdict()
    argv = ["downsample", str(root), "--factor", "2,2,1", "--levels", "2", "--memory-limit", "1000"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--memory-limit" in err and "chunk_sizes" not in err
    assert zarr.open_group(root, mode="r").attrs.asdict() == before
    assert sorted(p.name for p in root.iterdir()) == ["0", "zarr.json"]


def test_a_transfer_refused_for_memory_exits_2_and_makes_no_dst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    argv = ["transfer", str(src), str(tmp_path / "dst.zarr"), "--memory-limit", "1000"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--memory-limit" in err and "--chunks" in err and "chunk_sizes" not in err
    assert not (tmp_path / "dst.zarr").exists()


def test_a_transfer_onto_its_source_is_refused_and_rewrites_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    src = _source(tmp_path)
    before = _mtimes(tmp_path)
    monkeypatch.chdir(tmp_path)
    for dst in (str(src), "src.zarr", "./src.zarr/"):
        assert cli.main(["transfer", str(src), dst]) == 2
        assert "is the source" in capsys.readouterr().err
    assert _mtimes(tmp_path) == before


def test_a_narrowing_transfer_speaks_of_dash_dash_cast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    assert cli.main(["transfer", str(src), str(tmp_path / "narrow.zarr"), "--dtype", "uint8"]) == 2
    err = capsys.readouterr().err
    assert "--cast same_kind" in err and "--dtype" in err
    assert "fn" not in err.split() and "fn's" not in err and "spec file" not in err
    assert not (tmp_path / "narrow.zarr").exists()


def test_the_json_log_of_a_saturating_transfer_counts_the_voxels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    data = volume.open(str(src)).read(volume.open(str(src)).bounds)
    log = tmp_path / "log.jsonl"
    argv = ["transfer", str(src), str(tmp_path / "narrow.zarr"), "--dtype", "uint8",
            "--cast", "same_kind", "--log-json", str(log)]  # fmt: skip
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "the source's values there did not fit" in err
    assert "fn" not in (out + err).split() and "fn's" not in out + err
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["outcome"] == "finished"
    assert last["saturated_voxels"] == int((data > 255).sum()) > 0
    assert os.path.exists(tmp_path / "narrow.zarr")


def test_a_downsample_refused_for_an_offset_names_the_level_not_a_stand_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "off.zarr"
    volume.create(path, (64, 64, 64), (32, 32, 32), "uint8", offset=(2, 4, 4))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["downsample", str(path), "--levels", "2"]) == 2
    err = capsys.readouterr().err
    assert "dry-run-" not in err
    assert f"level 1 ({str(tmp_path / 'off_s1.zarr')!r}) starts at offset (1, 2, 2)" in err
    assert "level 2" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_transfer_onto_an_existing_volume_is_refused_and_resumed_only_into_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another tool's volume of the same shape, chunks and dtype: refused, and with
    --resume too (transfer did not make it); a dst the transfer made resumes."""
    src = _source(tmp_path)
    dst = tmp_path / "dst.zarr"
    theirs = volume.create(dst, (32, 32, 8), (16, 16, 8), "uint16")
    theirs.write(theirs.bounds, np.full((32, 32, 8), 7, "uint16"))
    before = _mtimes(tmp_path)
    assert cli.main(["transfer", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "pass --resume" in err and "resume=True" not in err
    assert cli.main(["transfer", str(src), str(dst), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"dst {str(dst)!r} (a uint16 volume of shape (32, 32, 8)) was not made by" in err
    assert "--resume continues only a transfer" in err and "remove it first and" in err
    assert "resume=True" not in err and "volume.remove" not in err
    assert _mtimes(tmp_path) == before
    ours = tmp_path / "ours.zarr"
    assert cli.main(["transfer", str(src), str(ours), "--quiet"]) == 0
    assert cli.main(["transfer", str(src), str(ours), "--resume", "--quiet"]) == 0
    np.testing.assert_array_equal(volume.open(ours).read(theirs.bounds),
                                  volume.open(src).read(theirs.bounds))  # fmt: skip


def test_resumed_jobs_refuse_in_the_command_line_s_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transfer resumed with other settings, and a downsample into a level another
    tool made or another method started: exit 2, the options named, nothing written."""
    src = _source(tmp_path)
    copy = tmp_path / "copy.zarr"
    assert cli.main(["transfer", str(src), str(copy), "--chunks", "8,8,8", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["transfer", str(src), str(copy), "--resume", "--dtype", "uint32"]) == 2
    err = capsys.readouterr().err
    was = "started by a transfer with --chunks 8,8,8 and --dtype uint16, and this one has"
    assert f"{was} --chunks 16,16,8 and --dtype uint32: --resume continues only" in err
    theirs = volume.create(tmp_path / "src_s1.zarr", (16, 16, 4), (16, 16, 4), "uint16",
                           resolution=(2, 2, 2))  # fmt: skip
    theirs.write(theirs.bounds, np.full((16, 16, 4), 3, "uint16"))
    assert cli.main(["downsample", str(src), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "level 1" in err and "src_s1.zarr" in err and "was not made by downsample" in err
    assert "another --dst TEMPLATE, or remove it first" in err and "dst=" not in err
    levels = str(tmp_path / "s{level}.zarr")
    assert cli.main(["downsample", str(src), "--dst", levels, "--method", "max", "--quiet"]) == 0
    capsys.readouterr()
    before = _mtimes(tmp_path)
    assert cli.main(["downsample", str(src), "--dst", levels, "--resume"]) == 2
    assert "with --method max, and this one has --method mean" in capsys.readouterr().err
    assert cli.main(["downsample", str(src), "--dst", levels, "--method", "max"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert _mtimes(tmp_path) == before
    assert (volume.open(tmp_path / "src_s1.zarr").read(theirs.bounds) == 3).all()


def test_the_command_line_has_a_word_for_every_word_of_the_jobs() -> None:
    """One table of options spells every parameter a job's refusal names."""
    from chunkgraph.cli._flow_command import OPTIONS
    from chunkgraph.jobs._words import PYTHON_WORDS

    assert set(OPTIONS) == set(PYTHON_WORDS)
