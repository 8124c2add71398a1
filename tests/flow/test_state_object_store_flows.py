"""Apply flows into and out of an object store, end to end (moto's S3 server on loopback).

Byte for byte what the same flow writes on a disk; a flow killed with SIGKILL resumes
from its state in the bucket redoing only unfinished work; two runs of one flow at
once: the second is refused, naming the first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.flow._done import done_keys

from chunkgraph import volume
from chunkgraph.flow.state._lease import TTL_ENV
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server, latency_proxy

SHAPE = (40, 36)
SRC_DIR = Path(__file__).resolve().parents[2] / "src"


def _bucket(server: S3Server) -> str:
    name = f"flows-{uuid.uuid4().hex[:12]}"  # moto keeps buckets per process, across servers
    server.create_bucket(name)
    return name


def affine(src: np.ndarray) -> np.ndarray:
    return src.astype("float64") * 3.0 + 1.0


# One to three levels, crops, blends of each mode (sizes as in test_apply_identity).
CASES_2D: dict[str, dict[str, Any]] = {
    "one level, crop": dict(chunk_sizes=[(10, 12)], crop_pads=3),
    "one level, linear blend": dict(chunk_sizes=[(10, 12)], blend_pads=3, blend_modes="linear"),
    "two levels, crop+blend quadratic": dict(
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 3)],
        blend_modes="quadratic",
    ),
    "two levels, max": dict(
        chunk_sizes=[(20, 18), (8, 11)], blend_pads=[(2, 2), (1, 2)], blend_modes="max"
    ),
    "three levels, sizes differ per level": dict(
        chunk_sizes=[(20, 18), (13, 12), (17, 8)],
        crop_pads=[(1, 1), (1, 1), (0, 0)],
        blend_pads=[(2, 2), (1, 1), (0, 2)],
        blend_modes=["linear", "quadratic", "bump"],
    ),
    # dst's chunks (8, 8) cut at the bbox's edges: partial chunks merged by conditional writes
    "unaligned bbox, two levels": dict(
        chunk_sizes=[(10, 12), (5, 6)], crop_pads=[(0, 0), (2, 1)], bbox=Box((3, 5), (33, 29))
    ),
}
CASES = sorted(CASES_2D)


# The unaligned bbox amplifies reads, on purpose; the warning saying so is not the point.
@pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")
@settings(max_examples=4)
@example(case="unaligned bbox, two levels", seed=1)
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**16))
def test_flows_into_and_out_of_a_bucket_write_what_a_disk_flow_writes(
    server: S3Server, tmp_path_factory: pytest.TempPathFactory, case: str, seed: int
) -> None:
    tmp = tmp_path_factory.mktemp("disk")
    bucket = _bucket(server)
    options = CASES_2D[case]
    data = np.random.default_rng(seed).standard_normal(SHAPE).astype("float32")
    written = {}
    for where in ("disk", "local-to-s3", "s3-to-s3"):
        src_path = f"s3://{bucket}/src.zarr" if where == "s3-to-s3" else str(tmp / "src.zarr")
        dst_path = str(tmp / "dst.zarr") if where == "disk" else f"s3://{bucket}/{where}.zarr"
        src = volume.create(src_path, SHAPE, (8, 8), "float32", exist_ok=True)
        src.write(src.bounds, data)
        dst = volume.create(dst_path, SHAPE, (8, 8), "float32")
        volume.apply(affine, src, dst, executor="threads", workers=2, **options)
        written[where] = volume.open(dst_path).read(Box.from_shape(SHAPE))
    assert written["disk"].tobytes() == written["local-to-s3"].tobytes()
    assert written["disk"].tobytes() == written["s3-to-s3"].tobytes()
    # state beside each dst in the bucket: only the completion records are left
    left = [k for k in server.keys(bucket) if ".chunkgraph/" in k]
    assert len(left) == 2 and all(k.endswith(".done") for k in left)


def test_a_flow_through_a_store_that_fails_one_request_in_twenty_is_exact(
    server: S3Server, tmp_path: Path
) -> None:
    """503 SlowDown on a seeded 5% of requests and 5 ms on the others: the client's
    retries make it exact, and the flow neither fails nor redoes work."""
    bucket = _bucket(server)
    data = np.random.default_rng(5).standard_normal(SHAPE).astype("float32")
    options = CASES_2D["two levels, crop+blend quadratic"]
    disk_src = volume.create(tmp_path / "src.zarr", SHAPE, (8, 8), "float32")
    disk_src.write(disk_src.bounds, data)
    disk_dst = volume.create(tmp_path / "dst.zarr", SHAPE, (8, 8), "float32")
    volume.apply(affine, disk_src, disk_dst, executor="threads", workers=2, **options)
    with latency_proxy(server.endpoint, latency=0.005, fail_fraction=0.05, seed=3) as proxy:
        src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 8), "float32")
        src.write(src.bounds, data)
        dst = volume.create(f"s3://{bucket}/dst.zarr", SHAPE, (8, 8), "float32")
        report = volume.apply(affine, src, dst, executor="threads", workers=2, **options)
        out = volume.open(f"s3://{bucket}/dst.zarr").read(Box.from_shape(SHAPE))
    assert proxy.failed > 0, "no request failed: the test tested nothing"
    assert report.tasks_per_level[0] == (40 // 20) * (36 // 18)  # no task ran twice
    assert out.tobytes() == disk_dst.read(Box.from_shape(SHAPE)).tobytes()


# Run in a fresh interpreter each time, so that fn's identity (module, name, code) and
# with it the flow id are the same in the killed run and in the resumed one.
SCRIPT = """
import json, sys, time
sys.path.insert(0, {src!r})
from chunkgraph import volume

mode, bucket, log = sys.argv[1:4]

calls = iter(range(10**6))

def slow_affine(src):
    with open(log, "a") as f:
        f.write("call\\n")
    time.sleep(0.15)
    if mode == "fresh" and next(calls) >= 3:
        time.sleep(600)  # the first run does 3 tasks, then waits to be killed mid-run
    return src.astype("float64") * 3.0 + 1.0

src = volume.open(f"s3://{{bucket}}/src.zarr")
dst = volume.open(f"s3://{{bucket}}/dst.zarr", mode="r+")
report = volume.apply(
    slow_affine, src, dst, chunk_sizes=[(8, 12)], blend_pads=2, blend_modes="linear",
    resume=(mode == "resume"), probe=False, executor="threads", workers=2,
    lock_wait=30 if mode == "resume" else 0,  # the resume waits out a killed run's lease
)
print(json.dumps(dict(tasks=report.tasks_per_level, skipped=report.top_tasks_skipped,
                      reductions=report.reductions, reductions_skipped=report.reductions_skipped)))
"""
TOP_TASKS = (40 // 8) * (36 // 12)


def _start(script: Path, mode: str, bucket: str, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, TTL_ENV: "2"}
    return subprocess.Popen(
        [sys.executable, str(script), mode, bucket, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _top_markers(server: S3Server, bucket: str) -> int:
    """Top-level tasks marked done, plain markers and records' keys (as a resume counts)."""
    prefix = ".dst.zarr.chunkgraph/"
    keys = server.keys(bucket, prefix)
    flows = {k[len(prefix) :].split("/")[0] for k in keys if "/markers/" in k}
    return sum(len(done_keys(f"s3://{bucket}/{prefix}{flow}")) for flow in flows)


def _wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_flow_killed_mid_run_resumes_from_its_state_in_the_bucket(
    server: S3Server, tmp_path: Path
) -> None:
    bucket = _bucket(server)
    data = np.random.default_rng(5).standard_normal(SHAPE).astype("float32")
    src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 12), "float32")
    src.write(src.bounds, data)
    volume.create(f"s3://{bucket}/dst.zarr", SHAPE, (8, 12), "float32")
    script = tmp_path / "flow_script.py"
    script.write_text(SCRIPT.format(src=str(SRC_DIR)))

    first = _start(script, "fresh", bucket, tmp_path / "log1")
    try:
        _wait_for(lambda: _top_markers(server, bucket) >= 3)
        # a second run of the same flow meanwhile: refused, naming the first
        second = _start(script, "fresh", bucket, tmp_path / "log-second")
        _, err = second.communicate(timeout=120)
        assert second.returncode != 0 and "FlowLockedError" in err
        assert f"process {first.pid}" in err
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    done_before = _top_markers(server, bucket)
    assert 3 <= done_before < TOP_TASKS, "the kill must land mid-run"

    resumed = _finish(_start(script, "resume", bucket, tmp_path / "log2"))  # waits out the ttl
    assert resumed["skipped"] == done_before
    assert resumed["tasks"] == [TOP_TASKS - done_before]
    assert (tmp_path / "log2").read_text().count("call") == TOP_TASKS - done_before
    assert [k for k in server.keys(bucket) if ".chunkgraph/" in k and "/markers/" in k] == []

    out = volume.open(f"s3://{bucket}/dst.zarr").read(Box.from_shape(SHAPE))
    ref = volume.create(str(tmp_path / "ref.zarr"), SHAPE, (8, 12), "float32")
    local_src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 12), "float32")
    local_src.write(local_src.bounds, data)
    volume.apply(affine, local_src, ref, chunk_sizes=[(8, 12)], blend_pads=2,
                 blend_modes="linear", executor="sync")  # fmt: skip
    assert out.tobytes() == ref.read(ref.bounds).tobytes()


def test_state_beside_dst_reaches_the_store_with_dst_s_storage_options(
    server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No endpoint nor credentials in the environment: only dst's storage_options say
    where the bucket is, and the flow's state beside dst is kept there too."""
    from chunkgraph.testing import TEST_ENV

    bucket = _bucket(server)
    for name in (*TEST_ENV, "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    reach = {
        "endpoint": server.endpoint,
        "region": TEST_ENV["AWS_REGION"],
        "access_key_id": TEST_ENV["AWS_ACCESS_KEY_ID"],
        "secret_access_key": TEST_ENV["AWS_SECRET_ACCESS_KEY"],
    }
    data = np.arange(32 * 32, dtype="float32").reshape(32, 32)
    src = volume.create(f"s3://{bucket}/src.zarr", (32, 32), (8, 8), "float32",
                        storage_options=reach)  # fmt: skip
    src.write(src.bounds, data)
    dst = volume.create(f"s3://{bucket}/dst.zarr", (32, 32), (8, 8), "float32",
                        storage_options=reach)  # fmt: skip
    volume.apply(affine, src, dst, chunk_sizes=[(8, 8)], blend_pads=2, blend_modes="linear",
                 executor="threads", workers=2)  # fmt: skip
    np.testing.assert_array_equal(dst.read(dst.bounds), data * 3.0 + 1.0)
    assert next(k for k in server.keys(bucket) if ".chunkgraph/" in k).endswith(".done")


def _double_unless_last(marker: Path, x: np.ndarray, box: Box) -> np.ndarray:
    """x * 2; fails on the last top chunk while ``marker`` does not exist."""
    if box.start == (24, 24) and not marker.exists():
        raise ValueError("interrupted")
    return x * 2


def test_an_interrupted_in_place_flow_in_a_bucket_is_never_started_over(
    server: S3Server, tmp_path: Path
) -> None:
    """The in-place mark is an object in dst's prefix: another flow, with its state
    elsewhere, is refused; the resume finishes exactly and removes the mark."""
    import functools

    from chunkgraph import ConfigError

    bucket = _bucket(server)
    url = f"s3://{bucket}/a.zarr"
    vol = volume.create(url, (32, 32), (8, 8), "float32")
    before = np.arange(32 * 32, dtype="float32").reshape(32, 32)
    vol.write(vol.bounds, before)
    src, dst = volume.open(url), volume.open(url, mode="r+")
    marker = tmp_path / "fixed"
    fn = functools.partial(_double_unless_last, marker)
    kw: dict[str, Any] = dict(chunk_sizes=[(8, 8)], executor="sync", retries=0, probe=False)
    with pytest.raises(ExceptionGroup):
        volume.apply(fn, src, dst, **kw)
    assert "a.zarr/.chunkgraph-in-place.json" in server.keys(bucket, "a.zarr/.")[0]
    marker.touch()
    with pytest.raises(ConfigError, match=r"unfinished flow .*intermediates="):
        volume.apply(fn, src, dst, intermediates=f"s3://{bucket}/elsewhere", **kw)
    volume.apply(fn, src, dst, resume=True, **kw)
    assert np.array_equal(dst.read(dst.bounds), before * 2)
    assert server.keys(bucket, "a.zarr/.") == []


def test_a_resume_into_a_bucket_dst_deleted_and_created_again_starts_over(
    bucket: str,
) -> None:
    """The new volume at the same URL has no work in it, though the flow id is the same:
    the records of the old one must not make the resume skip anything."""
    data = np.random.default_rng(9).standard_normal(SHAPE).astype("float32")
    src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 12), "float32")
    src.write(src.bounds, data)
    url = f"s3://{bucket}/dst.zarr"
    options = dict(chunk_sizes=[(8, 12)], executor="threads", workers=2)
    first = volume.create(url, SHAPE, (8, 12), "float32")
    volume.apply(affine, src, first, **options)
    volume.remove(url)
    again = volume.create(url, SHAPE, (8, 12), "float32")
    assert again.stamp() is not None and again.stamp() != first.stamp()
    with pytest.warns(UserWarning, match="created anew"):
        report = volume.apply(affine, src, again, resume=True, **options)
    assert not report.finished_before and report.top_tasks_skipped == 0
    out = volume.open(url).read(Box.from_shape(SHAPE))
    np.testing.assert_array_equal(out, affine(data).astype("float32"))


def test_a_deferred_flow_with_intermediates_named_in_a_bucket_reduces_later(bucket: str) -> None:
    """``intermediates`` named in a bucket keeps the layers there (``layers_place``);
    ``reduce_deferred`` finds them where ``flow.json`` says, by the report or by the flow's
    folder (it looked on local scratch: the reduction's own bookkeeping dropped the
    recorded place)."""
    import chunkgraph as cg

    data = np.arange(32 * 32, dtype="float32").reshape(32, 32)
    src = volume.create(f"s3://{bucket}/src.zarr", (32, 32), (8, 8), "float32")
    src.write(src.bounds, data)
    for name, by_folder in (("a", False), ("b", True)):
        dst = volume.create(f"s3://{bucket}/{name}.zarr", (32, 32), (8, 8), "float32")
        report = cg.apply(
            np.negative, src, dst, chunk_sizes=[(16, 16)], blend_pads=2, blend_modes="defer",
            intermediates=f"s3://{bucket}/state-{name}", probe=False,
        )  # fmt: skip
        assert str(report.layers).startswith(f"s3://{bucket}/state-{name}/")
        cg.flow.reduce_deferred(str(report.intermediates) if by_folder else report, dst)
        np.testing.assert_array_equal(dst.read(dst.bounds), -data)
