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


def test_a_transfer_onto_an_existing_volume_is_refused_unless_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    dst = tmp_path / "dst.zarr"
    theirs = volume.create(dst, (32, 32, 8), (16, 16, 8), "uint16")
    theirs.write(theirs.bounds, np.full((32, 32, 8), 7, "uint16"))
    before = _mtimes(tmp_path)
    assert cli.main(["transfer", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--resume" in err
    assert _mtimes(tmp_path) == before
    assert cli.main(["transfer", str(src), str(dst), "--resume", "--quiet"]) == 0
    np.testing.assert_array_equal(volume.open(dst).read(theirs.bounds),
                                  volume.open(src).read(theirs.bounds))  # fmt: skip
