"""On the command line a resume refused for other settings names them as options
(``--chunks 32,32,32``, ``--factor 2,2,2``, ``--method mean``); an invalid ``--chunks`` is
refused as a fresh run refuses it, before any mark is compared; a downsample into an
image with the level already there is refused in the options' words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume


def _source(tmp_path: Path) -> str:
    src = volume.create(tmp_path / "src.zarr", (32, 32, 16), (16, 16, 16), "uint8")
    src.write(src.bounds, np.arange(32 * 32 * 16).reshape(32, 32, 16).astype("uint8"))
    return str(tmp_path / "src.zarr")


def test_a_refused_resume_names_the_settings_as_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), str(tmp_path / "t.zarr")
    assert cli.main(["transfer", src, dst, "--chunks", "8,8,8", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["transfer", src, dst, "--chunks", "16,16,8", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "started by a transfer with --chunks 8,8,8, and this one has --chunks 16,16,8" in err
    assert "give --chunks 8,8,8 again" in err and "8x8x8" not in err
    levels = str(tmp_path / "s{level}.zarr")
    assert cli.main(["downsample", src, "--dst", levels, "--factor", "2,2,1", "--quiet"]) == 0
    capsys.readouterr()
    again = ["downsample", src, "--dst", levels, "--resume", "--factor", "2,2,1"]
    assert cli.main([*again, "--method", "max"]) == 2
    err = capsys.readouterr().err
    assert "with --method mean, and this one has --method max" in err and "'mean'" not in err
    assert cli.main(["downsample", src, "--dst", levels, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "with --factor 2,2,1, and this one has --factor 2,2,2" in err and "2x2" not in err


def test_an_invalid_chunks_is_refused_before_the_mark_is_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), str(tmp_path / "t.zarr")
    assert cli.main(["transfer", src, str(tmp_path / "fresh.zarr"), "--chunks", "16"]) == 2
    fresh = capsys.readouterr().err
    assert "chunks (16,) has 1 axes" in fresh
    assert cli.main(["transfer", src, dst, "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["transfer", src, dst, "--chunks", "16", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "chunks (16,) has 1 axes" in err and "started by" not in err
    assert cli.main(["transfer", src, dst, "--chunks", "0,16,16", "--resume"]) == 2
    assert "started by" not in capsys.readouterr().err


def test_a_level_already_in_an_image_is_refused_in_the_options_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "img.zarr")
    _, top = volume.create_multiscale(root, [
        volume.Level((32, 32, 16), (16, 16, 16), (1, 1, 1)),
        volume.Level((16, 16, 8), (16, 16, 8), (2, 2, 2)),
    ], "uint8")  # fmt: skip
    top.write(top.bounds, np.full(top.shape, 99, "uint8"))
    assert cli.main(["downsample", root]) == 2
    err = capsys.readouterr().err
    assert "level 1 is already in the image" in err
    assert "--resume" in err and "--format zarr3" in err and "format='zarr3'" not in err
    assert (volume.open(root, scale=1).read(top.bounds) == 99).all()
