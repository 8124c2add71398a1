"""Two ``chunkgraph run`` at once creating one new output: the one that finds the output
made meanwhile by the other is refused naming that flow (exit 1), or waits for it with
``--lock-wait``, on a disk and in a bucket (moto).

The runs are real: the first a process of its own holding its flow inside fn, the second
this process, which read its spec (no output yet) before the first made the output."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.cli._cmd_run import _run, _spec_dir_importable
from chunkgraph.cli._main import build_parser
from chunkgraph.cli._spec import load_spec
from chunkgraph.testing import S3Server

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(params=["disk", "s3"])
def output(request: pytest.FixtureRequest, work: Path) -> str:
    if request.param == "disk":
        return str(work / "out.zarr")
    return f"s3://{request.getfixturevalue('bucket')}/out.zarr"


def _spec(work: Path, name: str, output: str, function: str, kwargs: str) -> str:
    (work / name).write_text(
        f"input: {work / 'raw.zarr'}\n"
        f"output: {{path: '{output}', dtype: float32, chunks: [16, 16, 16]}}\n"
        f"function: spec_functions:{function}\nkwargs: {kwargs}\n"
        "chunk_sizes: [16]\nprobe: false\nrun: {executor: sync}\n"
    )
    return str(work / name)


def _loaded(spec: str) -> Any:
    """The second run's spec, read while the output is not there yet."""
    with _spec_dir_importable(spec):
        resolved = load_spec(spec)
    assert resolved.output.existing is None
    return resolved


def _second(spec: str, resolved: Any, *options: str) -> tuple[int, str]:
    """The second run, from its read spec on (as ``chunkgraph run`` goes on after it)."""
    args = build_parser().parse_args(["run", "--quiet", *options, spec])
    err = io.StringIO()
    with redirect_stderr(err):
        code = _run(args, resolved)
    return code, err.getvalue()


@pytest.fixture
def first(work: Path, output: str) -> Iterator[subprocess.Popen[str]]:
    """The first run, making the output and holding its flow inside fn until released."""
    kwargs = f"{{started: {work / 'started'}, release: {work / 'release'}}}"
    spec = _spec(work, "first.yaml", output, "gate", kwargs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(work)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "chunkgraph", "run", "--quiet", spec],
        cwd=work, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        (work / "release").touch()
        proc.communicate(timeout=120)


def _started(work: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not (work / "started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first run never called fn"
        time.sleep(0.02)


def test_the_run_that_finds_the_new_output_made_meanwhile_is_refused_naming_the_other(
    work: Path, output: str, server: S3Server, request: pytest.FixtureRequest
) -> None:
    spec = _spec(work, "second.yaml", output, "scale", "{factor: 3.0}")
    resolved = _loaded(spec)
    proc = request.getfixturevalue("first")
    _started(work, proc)
    code, err = _second(spec, resolved)
    assert code == 1, err
    assert "is being written by another flow" in err and "spec_functions.gate" in err, err
    assert "exist_ok" not in err and "Traceback" not in err, err
    (work / "release").touch()
    _, first_err = proc.communicate(timeout=120)
    assert proc.returncode == 0, first_err
    out = volume.open(output)
    raw = volume.open(work / "raw.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), raw.read(raw.bounds))  # the first's


def test_with_lock_wait_the_run_that_finds_it_made_meanwhile_waits_then_runs(
    work: Path, output: str, server: S3Server, request: pytest.FixtureRequest
) -> None:
    spec = _spec(work, "second.yaml", output, "scale", "{factor: 3.0}")
    resolved = _loaded(spec)
    proc = request.getfixturevalue("first")
    _started(work, proc)
    result: list[tuple[int, str]] = []
    second = threading.Thread(
        target=lambda: result.append(_second(spec, resolved, "--lock-wait", "60"))
    )
    second.start()
    second.join(0.5)
    assert second.is_alive(), result  # waiting for the first
    (work / "release").touch()
    second.join(120)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert result and result[0][0] == 0, result
    out = volume.open(output)
    raw = volume.open(work / "raw.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), raw.read(raw.bounds) * 3)
