"""A flow's state in an object store (``flow.state._store``), against a real S3 server (moto).

The same state code runs over a folder and over a key prefix: the stores answer the
same questions alike, and markers, records, ``flow.json``, status and removal round
trip through a bucket as they do through a disk.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import FlowLockedError, volume
from chunkgraph.flow.state._clean import remove_flow
from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._markers import REDUCE, TOP, CompletionRecord, fenced
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import FlowStatus, read_flows
from chunkgraph.flow.state._store import DirStore, ObjectStateStore, StateStore, state_store
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server

SHAPE = (32, 32)


@pytest.fixture(params=["dir", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "dir":
        return state_store(StateRoot.of(tmp_path / "root"))
    bucket = request.getfixturevalue("bucket")
    return state_store(StateRoot.of(f"s3://{bucket}/root"))


def test_both_stores_answer_alike(store: StateStore) -> None:
    assert store.read("f/flow.json") is None and store.names() == []
    assert not store.exists("f")
    store.write("f/flow.json", b"{}")
    store.write("f/markers/top/0_1", b"")
    store.write("f.done", b"done")
    assert store.read("f/flow.json") == b"{}"
    assert store.names() == ["f", "f.done"] and store.folders() == ["f"]
    assert store.names("f/markers/top") == ["0_1"]
    assert store.exists("f") and store.exists("f.done") and not store.exists("g")
    assert store.size("f") >= 2
    assert store.modified("f.done") is not None and store.modified("g") is None
    store.delete_tree("f/markers")
    assert store.names("f") == ["flow.json"]
    store.delete("f.done")
    store.delete("f.done")  # missing: fine
    assert store.names() == ["f"]


def test_stores_pickle_as_their_location(bucket: str) -> None:
    remote = state_store(StateRoot.of(f"s3://{bucket}/root/", {"secret_access_key": "hunter2"}))
    assert isinstance(remote, ObjectStateStore) and remote.url == f"s3://{bucket}/root"
    remote.write("k", b"v")  # opens its client
    again = pickle.loads(pickle.dumps(remote))
    assert again == remote and again.read("k") == b"v"
    assert b"hunter2" not in pickle.dumps(remote)
    assert isinstance(state_store(StateRoot.of("rel/dir")), DirStore)


def test_markers_record_and_info_round_trip_in_a_bucket(server: S3Server, bucket: str) -> None:
    state = FlowDir(StateRoot.of(f"s3://{bucket}/.out.zarr.chunkgraph"), "f00d")
    assert state.location == f"s3://{bucket}/.out.zarr.chunkgraph/f00d"
    markers = pickle.loads(pickle.dumps(state.markers()))  # as a process worker gets it
    markers.mark_done(TOP, "0_1")
    markers.mark_done(TOP, "1_1")
    markers.mark_done(REDUCE, "0_0")
    assert state.markers().done_keys(TOP) == {"0_1", "1_1"}
    state.write_info(top_tasks=4, reductions=2, deferred=False, dst="stamp")
    assert state.read_info()["top_tasks"] == 4
    (flow,) = read_flows(state.root)
    assert (flow.status, flow.top_done, flow.top_total) == (FlowStatus.INTERRUPTED, 2, 4)
    assert str(flow.flow_dir) == state.location and flow.has_temporaries
    state.markers().clear((TOP,))
    assert state.markers().done_keys(TOP) == set()
    assert state.markers().done_keys(REDUCE) == {"0_0"}
    record = CompletionRecord(state.root, "f00d")
    assert record.read() is None
    record.store.write(record.key, b'{"finished": "then", "reductions": 2}')
    state.discard()
    (flow,) = read_flows(state.root)
    assert flow.status is FlowStatus.FINISHED and not flow.has_temporaries
    assert server.keys(bucket) == [".out.zarr.chunkgraph/f00d.done"]


def test_a_run_holding_the_lease_shows_running_and_cannot_be_removed(bucket: str) -> None:
    state = FlowDir(StateRoot.of(f"s3://{bucket}/root"), "f00d")
    with state.held(0.0):
        state.markers().mark_done(TOP, "0_0")
        (flow,) = read_flows(state.root)
        assert flow.status is FlowStatus.RUNNING and flow.owner is not None
        with pytest.raises(FlowLockedError):
            remove_flow(state.root, "f00d")
        with pytest.raises(FlowLockedError), state.held(0.0):
            pass
    remove_flow(state.root, "f00d", record=True)
    assert read_flows(state.root) == []


def test_a_marker_is_refused_once_the_lease_is_lost(bucket: str) -> None:
    class Lost:
        def check(self) -> None:
            raise FlowLockedError("lost", lock="x")

    state = FlowDir(StateRoot.of(f"s3://{bucket}/root"), "f00d")
    markers = state.markers()
    with fenced(markers.location, Lost()):
        with pytest.raises(FlowLockedError):
            markers.mark_done(TOP, "0_0")
        with pytest.raises(FlowLockedError):
            state.record.write(object())  # refused before the report is read
        state.store.write("f00d/markers/top/9_9", b"")  # the next holder's
        with pytest.raises(FlowLockedError):
            state.discard()  # leaves the next holder's state alone
    assert markers.done_keys(TOP) == {"9_9"} and state.record.read() is None
    markers.mark_done(TOP, "0_0")  # no run of this process holds it: nothing to check


# -- a flow into a local dst with its state in a bucket -----------------------------


def doubled(x: np.ndarray) -> np.ndarray:
    return x * 2


# Whether doubled_failing fails on top row 2: flipped between runs of one flow (its id
# hashes fn's code and file, not this value), as a transient failure would be.
FAILING = {"row_two": False}


def doubled_failing(x: np.ndarray, box: Box) -> np.ndarray:
    """Top row i covers [8i - 2, 8i + 10): rows 0 and 1 succeed, row 2 may raise."""
    if FAILING["row_two"] and box.start[0] >= 14:
        raise RuntimeError("injected failure")
    return x * 2


def _volumes(tmp: Path, name: str) -> tuple[volume.Volume, volume.Volume]:
    src_path = tmp / "src.zarr"
    if not src_path.exists():
        src = volume.create(str(src_path), SHAPE, (8, 8), "float32")
        src.write(src.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    dst = volume.create(str(tmp / name), SHAPE, (8, 8), "float32")
    return volume.open(str(src_path)), dst


def _apply(fn: object, src: volume.Volume, dst: volume.Volume, **kw: object) -> Any:
    return volume.apply(fn, src, dst, chunk_sizes=[(8, 8)], blend_pads=2,  # type: ignore[arg-type]
                        blend_modes="linear", executor="sync", retries=0, **kw)  # fmt: skip


def _interrupted(tmp: Path, name: str, root: str) -> tuple[volume.Volume, volume.Volume, str]:
    """A flow into ``name`` with state under ``root`` whose top row 2 failed."""
    src, dst = _volumes(tmp, name)
    FAILING["row_two"] = True
    try:
        with pytest.raises(ExceptionGroup) as failed:
            _apply(doubled_failing, src, dst, intermediates=root)
    finally:
        FAILING["row_two"] = False
    assert root in "\n".join(failed.value.__notes__)  # where the kept state is
    (flow,) = read_flows(StateRoot.of(root))
    assert (flow.status, flow.top_done, flow.top_total) == (FlowStatus.FAILED, 8, 16)
    return src, dst, flow.flow_id


def test_a_flow_keeps_its_state_in_a_bucket_and_resumes_from_it(
    tmp_path: Path, server: S3Server, bucket: str
) -> None:
    """intermediates= a URL: state and layers there (a resume elsewhere finds both)."""
    src, local = _volumes(tmp_path, "local.zarr")
    _apply(doubled_failing, src, local)
    root = f"s3://{bucket}/flows"
    src, dst, flow_id = _interrupted(tmp_path, "dst.zarr", root)
    state = FlowDir(StateRoot.of(root), flow_id)
    assert state.read_info()["layers"] == f"{root}/{flow_id}/layers"
    assert any("/layers/layer_" in k for k in server.keys(bucket, "flows/"))

    report = _apply(doubled_failing, src, dst, intermediates=root, resume=True)
    assert (report.top_tasks_skipped, report.tasks_per_level) == (8, (8,))
    assert np.array_equal(dst.read(dst.bounds), local.read(local.bounds))
    (flow,) = read_flows(StateRoot.of(root))
    assert flow.status is FlowStatus.FINISHED and not flow.has_temporaries
    assert server.keys(bucket, "flows/") == [f"flows/{flow_id}.done"]
    again = _apply(doubled_failing, src, dst, intermediates=root, resume=True)
    assert again.finished_before and again.tasks_per_level == (0,)


def test_layers_beside_a_bucket_dst_go_to_local_scratch_and_a_resume_without_them_redoes_them(
    tmp_path: Path, server: S3Server, bucket: str
) -> None:
    """State beside dst in the bucket, layers on this machine's scratch (a local executor):
    scratch wiped (or the resume runs on another machine), the done markers vouch for
    layers that are not there, so the top-level tasks run again instead of reducing fill."""
    src, local = _volumes(tmp_path, "local.zarr")
    _apply(doubled_failing, src, local)
    url = f"s3://{bucket}/out.zarr"
    dst = volume.create(url, SHAPE, (8, 8), "float32")
    dry = _apply(doubled_failing, src, dst, dry_run=True)
    assert "on local scratch" in dry.summary() and f"state in s3://{bucket}/.out.zarr" in (
        dry.summary()
    )
    FAILING["row_two"] = True
    try:
        with pytest.raises(ExceptionGroup):
            _apply(doubled_failing, src, dst)
    finally:
        FAILING["row_two"] = False
    root = f"s3://{bucket}/.out.zarr.chunkgraph"
    (flow,) = read_flows(StateRoot.of(root))
    layers = FlowDir(StateRoot.of(root), flow.flow_id).layers_dir.local
    assert isinstance(layers, Path) and layers.is_dir()
    assert (
        FlowDir(StateRoot.of(root), flow.flow_id).read_info()["layers"] == str(layers) == dry.layers
    )
    assert not any("layer_" in k for k in server.keys(bucket))  # no layer in the bucket
    shutil.rmtree(layers)
    report = _apply(doubled_failing, src, dst, resume=True)
    assert (report.top_tasks_skipped, report.tasks_per_level) == (0, (16,))
    assert np.array_equal(dst.read(dst.bounds), local.read(local.bounds))
    assert not layers.parent.exists()
