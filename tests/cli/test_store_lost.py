"""The command line when a store fails or cannot be reached: one line saying what and
where, never a traceback. A store lost in the middle of ``chunkgraph run`` is a real run
in its own process with its S3 server (moto, on loopback, started here) stopped under
it: it exits 1 and leaves its lease to expire (it cannot delete it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chunkgraph import cli, volume
from chunkgraph.testing import S3Server, freezing_proxy, s3_server, silent_endpoint
from chunkgraph.volume._store_client import TIMEOUT_ENV

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _wait_for_chunks(
    server: S3Server, proc: subprocess.Popen[str], seconds: float, bucket: str = "lost-mid-run"
) -> None:
    """Until the run has written an output chunk (it is under way: probed, state open)."""
    deadline = time.monotonic() + seconds
    while not server.keys(bucket, "out.zarr/c/"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run wrote no chunk"
        time.sleep(0.05)


def test_a_store_lost_mid_run_is_one_line_naming_the_url(work: Path) -> None:
    started = work / "started"  # touched by fn (spec_functions.slow); not waited on
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(s3_server(("lost-mid-run",)))
        raw = volume.open(str(work / "raw.zarr"))
        src = volume.create("s3://lost-mid-run/raw.zarr", raw.shape, raw.chunks, raw.dtype)
        src.write(src.bounds, raw.read(raw.bounds))
        (work / "spec.yaml").write_text(
            "input: s3://lost-mid-run/raw.zarr\n"
            "output: {path: s3://lost-mid-run/out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
            "function: spec_functions:slow\n"
            f"kwargs: {{started: {started}, seconds: 0.3}}\n"
            "chunk_sizes: [16]\n"
            "retries: 0\n"
            "run: {executor: sync}\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, str(work)]),
            TIMEOUT_ENV: "0.5",
            "CHUNKGRAPH_LEASE_TTL": "2",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "chunkgraph", "run", "--quiet", str(work / "spec.yaml")],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_chunks(server, proc, 60)
        assert server.endpoint in env["AWS_ENDPOINT_URL"]
    # The server is stopped: every request from now on is refused.
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 1, (proc.returncode, err)
    assert "Traceback" not in err and "Debug source" not in err, err
    assert len(lines) == 2 and "the object store failed" in lines[0], err
    assert "s3://lost-mid-run/" in lines[0] and "127.0.0.1" in lines[0], err
    assert "--resume" in lines[1], err


def _spec_to(work: Path, output: str, source: str = "", slow: bool = False) -> str:
    """A spec from ``source`` (raw.zarr beside it by default) to ``output``; fn scales,
    or with ``slow`` takes 0.2 s a chunk."""
    function = "slow" if slow else "scale"
    (work / "spec.yaml").write_text(
        f"input: {source or work / 'raw.zarr'}\n"
        f"output: {{path: '{output}', dtype: float32, chunks: [16, 16, 16]}}\n"
        f"function: spec_functions:{function}\n"
        + (f"kwargs: {{started: {work / 'started'}, seconds: 0.2}}\n" if slow else "")
        + "chunk_sizes: [16]\nretries: 0\nrun: {executor: sync}\n"
    )
    return str(work / "spec.yaml")


def test_status_of_a_silent_store_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "0.4")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "any")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "any")
    with silent_endpoint() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        started = time.monotonic()
        assert cli.main(["status", "s3://bucket/out.zarr"]) == 1
        assert time.monotonic() - started < 10
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "s3://bucket/" in line and endpoint in line and "did not answer" in line


def test_an_endpoint_without_its_scheme_is_refused_naming_the_variable(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    assert cli.main(["run", "--quiet", _spec_to(work, "s3://bucket/out.zarr")]) == 2
    err = capsys.readouterr().err
    assert "AWS_ENDPOINT_URL='127.0.0.1:9000'" in err and "http://127.0.0.1:9000" in err
    assert "Traceback" not in err and "panicked" not in err


def test_an_output_url_missing_a_slash_is_refused_and_nothing_is_written(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(work)
    spec = _spec_to(work, "s3:/bucket/out.zarr")
    before = sorted(work.iterdir())
    assert cli.main(["run", "--quiet", spec]) == 2
    err = capsys.readouterr().err
    assert "output.path" in err and "neither a URL (s3://...)" in err
    assert sorted(work.iterdir()) == before  # no ./s3: folder, no flow state
    assert not (work / "s3:").exists()


def test_an_output_in_a_missing_bucket_says_so_not_that_it_does_not_open(
    work: Path, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--quiet", _spec_to(work, "s3://no-such-bucket-x/out.zarr")]) == 2
    err = capsys.readouterr().err
    assert "bucket 'no-such-bucket-x'" in err and "does not exist" in err
    assert "does not open" not in err


def test_a_store_that_freezes_mid_run_fails_the_run_within_its_bounds(work: Path) -> None:
    """The store stops answering (connections stay open, no byte comes back) while the
    run writes: it fails within about its request bound (0.5 s a try, retries for
    0.75 s: 1.25 s), plus the lease renewal it does not wait for, not minutes."""
    with s3_server(("frozen-mid-run",)) as server, freezing_proxy(server.endpoint) as proxy:
        raw = volume.open(str(work / "raw.zarr"))
        src = volume.create("s3://frozen-mid-run/raw.zarr", raw.shape, raw.chunks, raw.dtype)
        src.write(src.bounds, raw.read(raw.bounds))
        spec = _spec_to(
            work, "s3://frozen-mid-run/out.zarr", "s3://frozen-mid-run/raw.zarr", slow=True
        )
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "PYTHONPATH": os.pathsep.join([SRC, str(work)]),
            TIMEOUT_ENV: "0.5",
            "CHUNKGRAPH_LEASE_TTL": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "chunkgraph", "run", "--quiet", spec],
            cwd=work, env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _wait_for_chunks(server, proc, 60, "frozen-mid-run")
        proxy.freeze()
        frozen = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - frozen
    assert proc.returncode == 1, err
    assert took < 10, took
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "did not answer" in lines[0] and proxy.endpoint in lines[0], err


def test_a_lease_the_frozen_store_does_not_renew_is_blamed_on_the_store(work: Path) -> None:
    """The store freezes while fn computes (a top task whose layer is on local scratch):
    the lease goes unrenewed past its ttl, and the run stops before its next marker
    saying that the store stopped answering, not that another run may hold the flow,
    and in the command line's words (--resume, not resume=True)."""
    started = work / "started"
    with s3_server(("lease-frozen",)) as server, freezing_proxy(server.endpoint) as proxy:
        raw = volume.open(str(work / "raw.zarr"))
        src = volume.create("s3://lease-frozen/raw.zarr", raw.shape, raw.chunks, raw.dtype)
        src.write(src.bounds, raw.read(raw.bounds))
        (work / "spec.yaml").write_text(
            "input: s3://lease-frozen/raw.zarr\n"
            "output: {path: s3://lease-frozen/out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
            "function: spec_functions:slow\n"
            f"kwargs: {{started: {started}, seconds: 2.5}}\n"
            "chunk_sizes: [16]\nblend_pads: [2]\nprobe: false\nretries: 0\n"
            "run: {executor: sync}\n"
        )
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "PYTHONPATH": os.pathsep.join([SRC, str(work)]),
            TIMEOUT_ENV: "5",  # longer than the lease's ttl: the lease is missed first
            "CHUNKGRAPH_LEASE_TTL": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "chunkgraph", "run", "--quiet", str(work / "spec.yaml")],
            cwd=work, env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not started.exists():  # the first task has read its input and computes
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "fn was never called"
            time.sleep(0.02)
        proxy.freeze()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    assert "the flow's lease could not be renewed" in err and "stopped answering" in err, err
    assert proxy.endpoint in err and "s3://lease-frozen/" in err, err
    assert "another run" not in err and "resume=True" not in err and "--resume" in err, err


def test_a_store_lost_while_tasks_write_chunks_is_one_line_with_its_url_whole(
    work: Path,
) -> None:
    """Tasks in threads, with a reduction step, writing dst's chunks meet the refused store
    (the flow's state is on disk here, so no marker write meets it first): still the one
    line, the URL not mangled."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(s3_server(("lost-in-tasks",)))
        raw = volume.open(str(work / "raw.zarr"))
        src = volume.create("s3://lost-in-tasks/raw.zarr", raw.shape, raw.chunks, raw.dtype)
        src.write(src.bounds, raw.read(raw.bounds))
        spec = _spec_to(work, "s3://lost-in-tasks/out.zarr", "s3://lost-in-tasks/raw.zarr", True)
        text = Path(spec).read_text().replace("retries: 0\nrun: {executor: sync}\n", "")
        state = f"intermediates: {work / 'state'}\n"
        Path(spec).write_text(text + state + "crop_pads: [4]\nretries: 1\nrun: {workers: 4}\n")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, str(work)]),
            TIMEOUT_ENV: "0.5",
            "CHUNKGRAPH_LEASE_TTL": "2",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "chunkgraph", "run", "--quiet", spec],
            cwd=work, env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _wait_for_chunks(server, proc, 60, "lost-in-tasks")
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 1, (proc.returncode, err)
    assert len(lines) == 2 and "the object store failed" in lines[0], err
    assert "s3://lost-in-tasks/" in lines[0] and "s3:/lost" not in err, err
