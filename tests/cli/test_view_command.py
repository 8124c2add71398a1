"""``chunkgraph view`` as a person runs it: a real process that prints the viewer's URL
and serves until Ctrl-C; a volume that does not open and a port in use are refused
(exit 2) before anything listens."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np

from chunkgraph import volume

VIEW = [sys.executable, "-m", "chunkgraph", "view", "--no-browser"]


def _zarr(tmp_path: Path) -> str:
    path = tmp_path / "raw.zarr"
    v = volume.create(path, (32, 32, 16), (16, 16, 16), "uint8")
    v.write(v.bounds, np.full((32, 32, 16), 7, "uint8"))
    return str(path)


def test_view_serves_until_interrupted(tmp_path: Path) -> None:
    path = _zarr(tmp_path)
    with subprocess.Popen([*VIEW, path], stdout=subprocess.PIPE, text=True) as served:
        assert served.stdout is not None
        url = served.stdout.readline().strip()  # printed once the server listens
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        served.send_signal(signal.SIGINT)
        assert served.wait(timeout=20) == 0


def test_a_volume_that_does_not_open_is_refused(tmp_path: Path) -> None:
    good = _zarr(tmp_path)
    missing = str(tmp_path / "missing.zarr")
    done = subprocess.run([*VIEW, good, missing], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "missing.zarr" in done.stderr and "http://" not in done.stdout


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    path = _zarr(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*VIEW, path, "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done.stderr
    assert f"port {port}" in done.stderr and "in use" in done.stderr
