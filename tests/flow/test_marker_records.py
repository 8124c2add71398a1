"""Done markers in bulk: one record per batch of top tasks (``MarkerStore.mark_done_many``).

A batch of top tasks rewrites one record of the keys it finished, so a flow of 10^6
top tasks leaves thousands of objects in a bucket, not millions, and ``done_keys``,
resume and ``chunkgraph status`` read them as they read plain markers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chunkgraph._errors import ConfigError
from chunkgraph.flow.state._clean import remove_flow
from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._layout import DONE_SUFFIX, MARKERS_NAME, RECORDS_SUFFIX
from chunkgraph.flow.state._markers import REDUCE, TOP, MarkerStore, decode_record
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import FlowStatus, flow_ids, read_flows, warn_if_stale
from chunkgraph.flow.state._store import join
from chunkgraph.testing import S3Server, latency_proxy

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(params=["dir", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> StateRoot:
    if request.param == "dir":
        return StateRoot.of(tmp_path / "flow")
    bucket = request.getfixturevalue("bucket")
    return StateRoot.of(f"s3://{bucket}/root/f00d")


def test_a_record_rewritten_with_more_keys_replaces_the_old_one(root: StateRoot) -> None:
    markers = MarkerStore(root)
    assert markers.record_keys(TOP, "b-0") == set()
    markers.mark_done_many(TOP, ["0_0", "0_1"], "b-0")
    assert markers.record_keys(TOP, "b-0") == {"0_0", "0_1"}
    markers.mark_done_many(TOP, ["0_0", "0_1", "0_2"], "b-0")
    assert markers.record_keys(TOP, "b-0") == {"0_0", "0_1", "0_2"}
    assert markers.record_keys(REDUCE, "b-0") == set()  # records are per kind


def test_done_keys_are_plain_markers_and_every_record_s_keys(root: StateRoot) -> None:
    markers = MarkerStore(root)
    markers.mark_done(TOP, "9_9")
    markers.mark_done_many(TOP, ["0_0", "0_1"], "batch_0")
    markers.mark_done_many(TOP, {"1_0", "0_1"}, "batch_1")  # overlapping: counted once
    markers.mark_done_many(REDUCE, ["5"], "batch_0")
    assert markers.done_keys(TOP) == {"9_9", "0_0", "0_1", "1_0"}
    assert markers.done_keys(REDUCE) == {"5"}
    markers.clear((REDUCE,))
    assert markers.done_keys(REDUCE) == set()
    assert markers.done_keys(TOP) == {"9_9", "0_0", "0_1", "1_0"}
    markers.clear()
    assert markers.done_keys(TOP) == set()
    assert markers.record_keys(TOP, "batch_1") == set()


@pytest.mark.parametrize("record", ["", "a/b", "../x", ".hidden", "x y", "é", "a" * 129])
def test_a_record_name_outside_letters_digits_dash_underscore_is_refused(
    tmp_path: Path, record: str
) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    with pytest.raises(ConfigError, match="letters, digits"):
        markers.mark_done_many(TOP, ["0_0"], record)
    with pytest.raises(ConfigError, match="letters, digits"):
        markers.record_keys(TOP, record)
    assert markers.done_keys(TOP) == set()


def test_a_key_with_a_line_break_is_refused(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    with pytest.raises(ConfigError, match="line break"):
        markers.mark_done_many(TOP, ["0_0", "0\n1"], "b")
    assert markers.done_keys(TOP) == set()


def _flow_of_records(root: StateRoot, flow_id: str, *, top: int, per_record: int) -> FlowDir:
    """A flow whose ``top`` top-level tasks (of ``top + 1``) are all marked in records."""
    state = FlowDir(root, flow_id)
    state.write_info(top_tasks=top + 1, reductions=2, deferred=False)
    keys = [f"{i}_0" for i in range(top)]
    for n in range(0, top, per_record):
        state.markers().mark_done_many(TOP, keys[n : n + per_record], f"batch-{n}")
    state.markers().mark_done(REDUCE, "0")
    return state


def test_status_counts_keys_in_records_as_markers(root: StateRoot) -> None:
    parent = root.parent
    _flow_of_records(parent, "f00d", top=7, per_record=3)
    [state] = read_flows(parent)
    assert (state.top_done, state.top_total, state.reductions_done) == (7, 8, 1)
    assert state.status is FlowStatus.INTERRUPTED and state.has_temporaries
    assert state.progress() == "top 7/8, reductions 1/2"


def test_the_stale_check_counts_keys_in_records(root: StateRoot) -> None:
    parent = root.parent
    state = _flow_of_records(parent, "01d", top=5, per_record=2)
    state.store.write(f"01d{DONE_SUFFIX}", b'{"finished": "then", "reductions": 2}')
    with pytest.warns(UserWarning, match=r"01d \(finished, top 5/6, reductions 1/2"):
        warn_if_stale(parent, "c0ffee")


def test_removing_a_flow_removes_its_records(root: StateRoot) -> None:
    parent = root.parent
    state = _flow_of_records(parent, "f00d", top=4, per_record=2)
    assert state.exists()
    remove_flow(parent, "f00d")
    assert not state.exists()
    assert flow_ids(parent) == []
    assert MarkerStore(state.folder).done_keys(TOP) == set()


# Rewritten in a loop, 1000 keys more each time (then from 1000 again), until killed:
# each record a reader meets must decode whole and hold the keys of one of its writes.
REWRITER = """
import sys
sys.path.insert(0, {src!r})
from chunkgraph.flow.state._markers import TOP, MarkerStore
from chunkgraph.flow.state._root import StateRoot

markers = MarkerStore(StateRoot.of(sys.argv[1]))
keys = [f"{{i}}_{{j}}_7" for i in range(40) for j in range(1000)]
n = 1000
while True:
    markers.mark_done_many(TOP, keys[:n], "batch-0")
    n = n % len(keys) + 1000
"""
ALL_KEYS = [f"{i}_{j}_7" for i in range(40) for j in range(1000)]


def _whole(data: bytes | None) -> int:
    """How many keys the record's bytes hold: a ``ValueError`` unless they decode whole
    (gzip's CRC) into the keys of one write (the first ``n`` of ``ALL_KEYS``)."""
    assert data is not None
    keys = decode_record(data)
    assert len(keys) % 1000 == 0 and keys == set(ALL_KEYS[: len(keys)])
    return len(keys)


def test_a_record_rewritten_by_a_killed_process_is_old_or_new_never_part(
    root: StateRoot, tmp_path: Path
) -> None:
    """Read while it is rewritten (a reader sees a whole record each time), then after
    its writer is SIGKILLed mid-loop (what is left is whole too)."""
    script = tmp_path / "rewriter.py"
    script.write_text(REWRITER.format(src=str(SRC_DIR)))
    markers = MarkerStore(root)
    record = join(MARKERS_NAME, f"{TOP}{RECORDS_SUFFIX}", "batch-0")
    writer = subprocess.Popen([sys.executable, str(script), str(root)])
    try:
        deadline, sizes = time.monotonic() + 60, set()
        while len(sizes) < 12:  # a reader's look at 12 of its writes, each whole
            assert writer.poll() is None and time.monotonic() < deadline, "no rewrites"
            data = markers.store.read(record)
            if data is not None:
                sizes.add(_whole(data))
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    left = _whole(markers.store.read(record))
    assert len(markers.done_keys(TOP)) == left  # a temporary file left by the kill is no record


def _objects_under(root: StateRoot, server: S3Server, bucket: str) -> int:
    return len(server.keys(bucket, f"{root.place.split('/', 3)[3]}/markers/"))


def test_records_list_a_thousandth_of_the_objects_plain_markers_list(
    server: S3Server, bucket: str
) -> None:
    """10^4 keys of one kind, as 10 records of 1000 keys or as 10^4 plain markers: reading
    the records lists 10 objects (two listings, then ten GETs side by side, ``at_once``);
    reading the markers lists all 10^4, a page of 1000 after another. At 10^5 keys (the
    benchmark, ``benchmarks/marker_records.py``): 100 objects against 100,000."""
    n, per_record = 10_000, 1000
    keys = [f"{i // 100}_{i % 100}_3" for i in range(n)]
    as_records = StateRoot.of(f"s3://{bucket}/records/f00d")
    as_markers = StateRoot.of(f"s3://{bucket}/markers/f00d")
    with latency_proxy(server.endpoint) as proxy:
        batches = MarkerStore(as_records)
        for i in range(0, n, per_record):
            batches.mark_done_many(TOP, keys[i : i + per_record], f"batch-{i // per_record}")
        assert proxy.by_method == {"PUT": n // per_record}  # a PUT per batch, not per key
        _seed_markers(bucket, "markers/f00d", keys)  # 10^4 PUTs would take the test 20 s
        for root, objects, lists, gets in ((as_records, 10, 2, 10), (as_markers, n, 11, 0)):
            proxy.by_method.clear()
            assert MarkerStore(root).done_keys(TOP) == set(keys)
            assert _objects_under(root, server, bucket) == objects
            seen = (proxy.by_method.get("GET", 0) - gets, gets, proxy.requests)
            assert proxy.by_method == {"GET": lists + gets}, (root, seen)


def _seed_markers(bucket: str, prefix: str, keys: list[str]) -> None:
    """Plain markers put straight into moto's store, in this process (what 10^4 PUTs leave)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key in keys:
        backend.put_object(bucket, f"{prefix}/{MARKERS_NAME}/{TOP}/{key}", b"")
