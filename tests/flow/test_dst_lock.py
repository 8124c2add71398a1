"""One flow at a time on a region of a destination, on a disk and in a bucket (moto).

Two *different* flows (other ``fn_kwargs``: other flow ids) on one dst: the second is
refused naming the first, and dst ends holding exactly the first's result; with
``lock_wait`` it waits, and runs once the first has finished. A claim from a killed
run on this host is taken over at once; one from another host is refused with the
time it lapses.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import FlowLockedError, volume
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server

SHAPE = (24, 32)
CLAIMS, GUARD = ".chunkgraph-writers", ".chunkgraph-writers.lock"  # in dst (_dst_lock)

# The gate that holds the first flow (factor 2) inside its first call of fn (the probe,
# after both its locks are taken); module globals, so that they are no part of the flow id.
GATE = threading.Event()
STARTED = threading.Event()
CALLS: list[float] = []  # factors, in the order fn was called


def scaled(src: np.ndarray, factor: float) -> np.ndarray:
    CALLS.append(factor)
    if factor == 2.0:
        STARTED.set()
        GATE.wait(60)
    return src.astype("float32") * np.float32(factor)


@pytest.fixture(autouse=True)
def _fresh_gate() -> Any:
    GATE.clear()
    STARTED.clear()
    CALLS.clear()
    yield
    GATE.set()  # never leave a flow thread blocked


def _volumes(where: str) -> tuple[Any, Any, np.ndarray]:
    data = np.random.default_rng(3).standard_normal(SHAPE).astype("float32")
    src = volume.create(f"{where}/src.zarr", SHAPE, (8, 8), "float32")
    src.write(src.bounds, data)
    dst = volume.create(f"{where}/dst.zarr", SHAPE, (8, 8), "float32")
    return src, dst, data


@pytest.fixture(params=["disk", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "disk":
        return str(tmp_path)
    server: S3Server = request.getfixturevalue("server")
    name = f"t-{uuid.uuid4().hex[:16]}"
    server.create_bucket(name)
    return f"s3://{name}"


def _apply(src: Any, dst: Any, factor: float, **options: Any) -> Any:
    return volume.apply(
        scaled, src, dst, fn_kwargs={"factor": factor}, chunk_sizes=[(8, 16)],
        executor="threads", workers=2, **options,
    )  # fmt: skip


def _in_thread(
    src: Any, dst: Any, factor: float, **options: Any
) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["report"] = _apply(src, dst, factor, **options)
        except BaseException as err:  # the test reads it below
            out["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _read(dst: Any) -> np.ndarray:
    return np.asarray(volume.open(str(dst.path)).read(Box.from_shape(SHAPE)))


def test_a_second_flow_on_one_dst_is_refused_naming_the_first(where: str) -> None:
    src, dst, data = _volumes(where)
    first, out = _in_thread(src, dst, 2.0)
    _wait_for(STARTED.is_set)
    try:
        with pytest.raises(FlowLockedError) as refused:
            _apply(src, dst, 1.0)
    finally:
        GATE.set()
        first.join(60)
    assert "error" not in out, out.get("error")
    message = str(refused.value)
    assert out["report"].flow_id in message and "scaled" in message
    assert f"process {os.getpid()} on host {socket.gethostname()!r}" in message
    assert "lock_wait" in message and "--lock-wait" in message
    assert refused.value.destination == str(dst.path)
    assert [2.0] * len(CALLS) == CALLS  # the refused flow never called fn
    np.testing.assert_array_equal(_read(dst), data * np.float32(2.0))
    if where.startswith("/"):  # nothing of the claims is left in dst
        assert not (Path(where) / "dst.zarr" / CLAIMS).exists()
        assert not (Path(where) / "dst.zarr" / GUARD).exists()


def test_with_lock_wait_the_second_flow_waits_then_runs(where: str, server: S3Server) -> None:
    src, dst, data = _volumes(where)
    first, out1 = _in_thread(src, dst, 2.0)
    _wait_for(STARTED.is_set)
    second, out2 = _in_thread(src, dst, 5.0, lock_wait=60)
    try:
        # the second holds its own flow's lock, then waits for dst: two flow locks
        _wait_for(lambda: len(_flow_locks(where, server)) == 2)
        assert second.is_alive() and CALLS == [2.0]
    finally:
        GATE.set()
        first.join(60)
        second.join(60)
    assert "error" not in out1 and "error" not in out2, (out1, out2)
    first_calls = CALLS.count(2.0)
    assert [2.0] * first_calls + [5.0] * (len(CALLS) - first_calls) == CALLS
    np.testing.assert_array_equal(_read(dst), data * np.float32(5.0))


def _flow_locks(where: str, server: S3Server) -> list[str]:
    if where.startswith("s3://"):
        bucket = where[len("s3://") :]
        return [k for k in server.keys(bucket, ".dst.zarr.chunkgraph/") if k.endswith(".lock")]
    return [p.name for p in (Path(where) / ".dst.zarr.chunkgraph").glob("*.lock")]


def test_flows_over_disjoint_regions_of_one_dst_run_at_once(where: str) -> None:
    src, dst, data = _volumes(where)
    top = Box((0, 0), (8, 32))
    first, out = _in_thread(src, dst, 2.0, bbox=top)
    _wait_for(STARTED.is_set)
    try:
        with pytest.raises(FlowLockedError, match=r"writes \[0:8, 0:32\]"):
            _apply(src, dst, 1.0, bbox=Box((0, 16), (16, 32)))  # overlaps rows 0-8
        GATE.set()  # the next one runs while the first may still be running
        _apply(src, dst, 1.0, bbox=Box((8, 0), (24, 32)))
    finally:
        GATE.set()
        first.join(60)
    assert "error" not in out, out.get("error")
    expected = data.copy()
    expected[:8] *= np.float32(2.0)
    np.testing.assert_array_equal(_read(dst), expected)


def test_a_claim_from_another_host_is_refused_with_when_it_lapses(bucket: str) -> None:
    import obstore

    from chunkgraph.volume._object_store import object_store

    src, dst, _ = _volumes(f"s3://{bucket}")
    record = {
        "flow": "f00dfeed", "fn": "elsewhere.smooth", "region": [[0, 0], list(SHAPE)],
        "pid": os.getpid(), "host": "another-host", "since": time.time(), "ttl": 30.0,
    }  # fmt: skip
    store = object_store(str(dst.path))
    obstore.put(store, f"{CLAIMS}/x.lock", json.dumps(record).encode())
    with pytest.raises(FlowLockedError) as refused:
        _apply(src, dst, 1.0)
    message = str(refused.value)
    assert "flow f00dfeed (fn elsewhere.smooth)" in message and "'another-host'" in message
    assert "lapses in" in message and "--lock-wait" in message
    assert refused.value.lapses_in is not None and 25 < refused.value.lapses_in <= 31.5
    assert CALLS == []


def test_a_downsample_pass_claims_each_level_it_writes(tmp_path: Path) -> None:
    """One pass writes levels 1 and 2 (level 2 from fn, beside apply's dst): a flow
    writing level 2 meanwhile refuses the pass, which writes nothing into level 2."""
    from chunkgraph.flow.state._dst_lock import claimed
    from chunkgraph.jobs._pyramid import downsample
    from chunkgraph.jobs._pyramid_dst import level_marks

    data = np.random.default_rng(2).integers(0, 255, (128, 128, 64)).astype(np.uint8)
    src = volume.create(tmp_path / "src.zarr", data.shape, (16, 16, 16), "uint8")
    src.write(src.bounds, data)
    first = downsample(src, levels=2, method="max", dst=str(tmp_path / "a_{level}.zarr"))
    assert first.levels_per_pass == (2,)  # fused: level 2 is written by fn, not by apply
    # Level 2 of the same downsample, made before (its mark: a resume continues into it).
    mark = level_marks(src, 2, (2, 2, 2), "max")[1]
    level2 = volume.create(
        tmp_path / "b_2.zarr", (32, 32, 16), (16, 16, 16), "uint8", resolution=(4, 4, 4),
        made_by=mark,
    )  # fmt: skip
    again = {"levels": 2, "method": "max", "dst": str(tmp_path / "b_{level}.zarr"), "resume": True}
    with (
        claimed(level2, Box((0, 0, 0), (8, 8, 8)), {"flow": "f00d", "fn": "paint"}, 0.0),
        pytest.raises(FlowLockedError, match="flow f00d \\(fn paint\\)"),
    ):
        downsample(src, **again)
    assert not np.any(level2.read(level2.bounds))
    downsample(src, **again)
    np.testing.assert_array_equal(
        level2.read(level2.bounds), volume.open(tmp_path / "a_2.zarr").read(level2.bounds)
    )


def test_reduce_deferred_claims_the_region_it_writes(tmp_path: Path) -> None:
    from chunkgraph.flow import reduce_deferred
    from chunkgraph.flow.state._dst_lock import claimed

    src, dst, data = _volumes(str(tmp_path))
    GATE.set()
    deferred = volume.apply(
        scaled, src, dst, fn_kwargs={"factor": 2.0}, chunk_sizes=[(8, 16)], blend_pads=2,
        blend_modes="defer",
    )  # fmt: skip
    with (
        claimed(dst, Box((20, 0), (24, 8)), {"flow": "beef", "fn": "paint"}, 0.0),
        pytest.raises(FlowLockedError, match=r"flow beef \(fn paint\).* writes \[20:24, 0:8\]"),
    ):
        reduce_deferred(deferred, dst)
    assert not np.any(_read(dst))
    reduce_deferred(deferred, dst)
    np.testing.assert_array_equal(_read(dst), data * np.float32(2.0))


def test_a_flow_reading_a_volume_another_flow_writes_is_refused_or_waits(where: str) -> None:
    """A downsample of the dst a running flow writes: refused naming that flow, no level
    made; with ``lock_wait`` it waits, and its level is made of the finished data."""
    from chunkgraph import VolumeNotFoundError
    from chunkgraph.flow import downsample

    src, dst, data = _volumes(where)
    first, out = _in_thread(src, dst, 2.0)
    _wait_for(STARTED.is_set)
    result: dict[str, Any] = {}
    try:
        with pytest.raises(FlowLockedError) as refused:
            downsample(dst, method="max")
        with pytest.raises(VolumeNotFoundError):
            volume.open(f"{where}/dst_s1.zarr")  # refused before the level was made
        with pytest.raises(FlowLockedError, match="is being written by another flow"):
            volume.apply(scaled, dst, None, fn_kwargs={"factor": 3.0}, chunk_sizes=[(8, 16)])
        waiting = threading.Thread(
            target=lambda: result.update(report=downsample(dst, method="max", lock_wait=60))
        )
        waiting.start()
    finally:
        GATE.set()
        first.join(60)
    waiting.join(60)
    assert "error" not in out, out.get("error")
    error = refused.value
    assert error.reads == "src" and error.destination == str(dst.path)
    assert out["report"].flow_id in str(error) and "scaled" in str(error)
    assert "half-written" in str(error) and "lock_wait" in str(error)
    assert "report" in result
    level = volume.open(f"{where}/dst_s1.zarr").read(Box((0, 0), (12, 16)))
    expected = (data * np.float32(2.0)).reshape(12, 2, 16, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(level, expected)


def test_an_input_read_around_a_claim_is_read_and_one_read_over_it_is_refused(
    tmp_path: Path,
) -> None:
    """The box read is the bbox padded by the pads: a claim just past the bbox refuses a
    flow with a crop pad that reaches it, and not one without."""
    from chunkgraph.flow.state._dst_lock import claimed

    src, dst, data = _volumes(str(tmp_path))
    GATE.set()
    about = {"flow": "feed", "fn": "paint"}
    with claimed(src, Box((16, 0), (24, 32)), about, 0.0):
        _apply(src, dst, 1.0, bbox=Box((0, 0), (16, 32)))
        with pytest.raises(FlowLockedError, match=r"writes \[16:24, 0:32\].* reads \[-2:18"):
            volume.apply(
                scaled, src, dst, fn_kwargs={"factor": 4.0}, chunk_sizes=[(8, 16)],
                crop_pads=[(2, 0)], bbox=Box((0, 0), (16, 32)),
            )  # fmt: skip
    np.testing.assert_array_equal(_read(dst)[:16], data[:16])


def test_a_downsample_of_a_precomputed_volume_being_written_adds_no_scale(
    tmp_path: Path,
) -> None:
    from chunkgraph.flow import downsample
    from chunkgraph.flow.state._dst_lock import claimed

    path = f"precomputed://{tmp_path / 'pc'}"
    pc = volume.create(path, (64, 64, 32), (32, 32, 16), "uint8", resolution=(4, 4, 40))
    info = (tmp_path / "pc" / "info").read_text()
    with (
        claimed(pc, pc.bounds, {"flow": "cafe", "fn": "paint"}, 0.0),
        pytest.raises(FlowLockedError, match="flow cafe \\(fn paint\\)"),
    ):
        downsample(volume.open(path), factor=(2, 2, 1))
    assert (tmp_path / "pc" / "info").read_text() == info
    assert len(downsample(volume.open(path), factor=(2, 2, 1)).paths) == 1
