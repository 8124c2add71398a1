"""The requests a flow's state costs in an object store (``flow.state``), counted at a proxy.

At a cloud region's 20 ms a request, each request the state code makes one after
another is time the flow waits: the start's look for stale flows, clearing the
markers and the end's deletion are counted here (and, for the look at other flows,
shown to overlap), against a real S3 server (moto) behind ``latency_proxy``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chunkgraph.flow.state._markers import TOP, MarkerStore, discard_flow
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import flow_ids, read_flows, warn_if_stale
from chunkgraph.flow.state._store import ObjectStateStore, join, state_store
from chunkgraph.testing import Proxy, S3Server, latency_proxy


@contextmanager
def requests_seen(server: S3Server, latency: float = 0.0) -> Iterator[tuple[Proxy, list[Any]]]:
    """The proxy and every request it admits, as ``(time, method, path)`` in order."""
    seen: list[Any] = []
    lock = threading.Lock()
    with latency_proxy(server.endpoint, latency=latency) as proxy:
        counted = proxy._admit

        def admit(method: str, path: str) -> bool:
            with lock:
                seen.append((time.monotonic(), method, path))
            return counted(method, path)

        proxy._admit = admit  # type: ignore[method-assign]
        yield proxy, seen


def _lists(seen: list[Any]) -> int:
    return sum(1 for _, method, path in seen if method == "GET" and "list-type" in path)


def _flow(store: ObjectStateStore, flow_id: str, markers: int = 3) -> None:
    """A run's state as a killed run leaves it: lock gone, flow.json, markers, a layer."""
    store.write(join(flow_id, "flow.json"), b'{"top_tasks": 8, "reductions": 0}')
    for i in range(markers):
        store.touch(join(flow_id, "markers", TOP, f"0_{i}"))
    store.write(join(flow_id, "layers", "l0", "c", "0"), b"x" * 10)


def test_a_lone_flow_looks_for_stale_flows_in_one_listing(server: S3Server, bucket: str) -> None:
    root = StateRoot.of(f"s3://{bucket}/state")
    with requests_seen(server) as (_, seen):
        store = state_store(root)
        assert isinstance(store, ObjectStateStore)
        _flow(store, "a11ce")
        store.write("a11ce.done", b"{}")
        del seen[:]
        warn_if_stale(root, "a11ce")  # no other flow: nothing but the root's listing
        assert [(m, p.split("?")[0]) for _, m, p in seen] == [("GET", f"/{bucket}")]
        del seen[:]
        assert flow_ids(root) == ["a11ce"]
        assert len(seen) == 2  # the root's listing (names and folders), a look in the folder


def test_other_flows_are_read_at_once(server: S3Server, bucket: str) -> None:
    """The state of four other flows is read in requests side by side: at 50 ms a request,
    requests one after another are admitted at least 50 ms apart, overlapping ones not."""
    latency = 0.05
    root = StateRoot.of(f"s3://{bucket}/state")
    store = state_store(root)
    assert isinstance(store, ObjectStateStore)
    others = [f"0be{i}" for i in range(4)]
    for flow_id in others:
        _flow(store, flow_id)
    with requests_seen(server, latency) as (_, seen):
        flows = read_flows(root, sizes=False)
    assert [f.flow_id for f in flows] == others  # in order, as before
    assert all(f.top_done == 3 and f.top_total == 8 for f in flows)
    times = sorted(t for t, _, _ in seen)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) < latency / 2, "the flows' reads went one after another"


def test_clearing_markers_lists_once(server: S3Server, bucket: str) -> None:
    root = StateRoot.of(f"s3://{bucket}/state/f")
    with requests_seen(server) as (_, seen):
        markers = MarkerStore(root)
        for i in range(5):
            markers.mark_done(TOP, f"0_{i}")
        markers.mark_done("reduce", "0_0")
        del seen[:]
        markers.clear()
        assert _lists(seen) == 1
        assert sum(1 for _, m, _ in seen if m in ("POST", "DELETE")) == 1  # one bulk delete
        assert markers.done_keys(TOP) == set() and markers.done_keys("reduce") == set()


@pytest.mark.parametrize("markers", [2, 1500])
def test_discard_lists_once_and_deletes_markers_first(
    server: S3Server, bucket: str, markers: int
) -> None:
    """A finished flow's state goes in one listing and bulk deletes (S3 takes 1000 keys a
    request), its markers before anything they vouch for."""
    root = StateRoot.of(f"s3://{bucket}/state")
    store = state_store(root)
    assert isinstance(store, ObjectStateStore)
    _flow(store, "f", markers=markers)
    with requests_seen(server) as (_, seen):
        discard_flow(root, "f")
    deletes = [p for _, m, p in seen if m in ("POST", "DELETE")]
    assert _lists(seen) == -(-(markers + 2) // 1000)  # one listing (of 1000-key pages)
    assert len(deletes) == -(-markers // 1000) + 1  # the markers' batches, then the rest
    assert server.keys(bucket, "state/") == []
