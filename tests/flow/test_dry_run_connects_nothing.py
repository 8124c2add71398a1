"""A dry run with a Dask scheduler's address plans and estimates only: it starts and
connects to nothing. A real socket listens at the address the run is given, and nothing
may knock on it::

    apply(..., dry_run=True, executor="tcp://127.0.0.1:PORT")   ──x──>  listening socket
    chunkgraph run SPEC --dry-run   (run.executor: tcp://...)   ──x──>  (no connection)
    chunkgraph downsample SRC --dry-run --executor tcp://...    ──x──>
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume

SPEC_FUNCTIONS = Path(__file__).resolve().parents[1] / "cli" / "spec_functions.py"


@pytest.fixture
def listening() -> Iterator[tuple[str, socket.socket]]:
    """``tcp://127.0.0.1:PORT`` of a socket that listens and accepts nothing by itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", server


def _knocked(server: socket.socket) -> bool:
    """Whether anyone connected: a connection a client made is queued for accept()."""
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_apply_dry_run_with_an_address_connects_to_nothing(
    tmp_path: Path, listening: tuple[str, socket.socket]
) -> None:
    address, server = listening
    src = volume.create(str(tmp_path / "src.zarr"), (32, 32), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "dst.zarr"), (32, 32), (8, 8), "float32")
    report = volume.apply(
        np.negative, src, dst, chunk_sizes=[(16, 16)], dry_run=True, executor=address
    )
    assert report.dry_run and report.tasks_per_level == (4,)
    assert not _knocked(server)
    assert not (tmp_path / ".dst.zarr.chunkgraph").exists()


def test_command_line_dry_runs_with_an_address_connect_to_nothing(
    tmp_path: Path, listening: tuple[str, socket.socket], capsys: pytest.CaptureFixture[str]
) -> None:
    address, server = listening
    shutil.copy(SPEC_FUNCTIONS, tmp_path)
    raw = volume.create(str(tmp_path / "raw.zarr"), (32, 32, 32), (16, 16, 16), "float32")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "input: raw.zarr\n"
        "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
        "function: spec_functions:scale\n"
        f"run:\n  executor: {address}\n"
    )
    assert cli.main(["run", str(spec), "--dry-run"]) == 0, capsys.readouterr().err
    assert "(dry run)" in capsys.readouterr().out
    assert not _knocked(server)
    code = cli.main(["downsample", raw.path, "--dry-run", "--executor", address])
    assert code == 0, capsys.readouterr().err
    assert not _knocked(server)
    assert not (tmp_path / "out.zarr").exists() and not (tmp_path / "raw_s1.zarr").exists()
