"""Fixtures of the command-line tests: a spec's working folder, and running the installed
``chunkgraph`` where the file system refuses: read-only, or full.

Both are made for real, for the command only, in a private mount namespace of its own
(``unshare -m``, root): a read-only bind mount of a test's directory, or a small tmpfs
over it. The kernel then answers as on a read-only mount or a full disk (EROFS, ENOSPC),
and nothing outside the command sees a mount. A user other than root gets the write
bits taken off the directory instead (0o555), which is real for that user (for root,
permission bits stop nothing). Where neither is possible the test is skipped, saying why.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume

CHUNKGRAPH = Path(sys.executable).parent / "chunkgraph"
HERE = Path(__file__).resolve().parent


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """``raw.zarr`` (32³ float32, chunks 16³, values in [0, 1)) beside spec_functions.py."""
    shutil.copy(HERE / "spec_functions.py", tmp_path)
    raw = volume.create(tmp_path / "raw.zarr", (32, 32, 32), (16, 16, 16), "float32")
    raw.write(raw.bounds, np.random.default_rng(7).random((32, 32, 32), dtype="float32"))
    return tmp_path


TIMEOUT_S = 120


@functools.cache
def can_mount() -> bool:
    """Whether a command may get a mount namespace of its own with a tmpfs mounted in it."""
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True,
    )  # fmt: skip
    return probe.returncode == 0


def _confined(setup: list[str], argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = " && ".join([*setup, "exec " + shlex.join(argv)])
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def run_read_only(
    directory: Path, args: Sequence[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``chunkgraph ARGS`` with ``directory`` (and all below it) read-only."""
    argv = [str(CHUNKGRAPH), *args]
    if os.geteuid() != 0:
        folders = [directory, *(p for p in directory.rglob("*") if p.is_dir())]
        modes = {p: p.stat().st_mode for p in folders}
        for folder in folders:
            folder.chmod(0o555)
        try:
            return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
        finally:
            for folder, mode in modes.items():
                folder.chmod(mode)
    if not can_mount():
        pytest.skip("root without a mount namespace of its own (unshare -m): no way to make "
                    "a directory read-only for root")  # fmt: skip
    d = shlex.quote(str(directory))
    return _confined([f"mount --bind {d} {d}", f"mount -o remount,bind,ro {d}"], argv, cwd)


def run_on_small_disk(
    directory: Path, size: str, args: Sequence[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``chunkgraph ARGS`` with ``directory`` a new, empty file system of ``size`` (tmpfs's
    spelling: ``"300k"``)."""
    if not can_mount():
        pytest.skip("a full disk needs a small tmpfs in a mount namespace of the command's "
                    "own (unshare -m, root)")  # fmt: skip
    d = shlex.quote(str(directory))
    return _confined([f"mount -t tmpfs -o size={size} tmpfs {d}"], [str(CHUNKGRAPH), *args], cwd)


@pytest.fixture
def read_only() -> object:
    """``run_read_only``: runs the command with a directory read-only."""
    return run_read_only


@pytest.fixture
def small_disk() -> object:
    """``run_on_small_disk``: runs the command with a directory on a small, new disk."""
    return run_on_small_disk
