"""What a flow records about itself: ``flow.json``, why it failed, and the mark of an
in-place flow.

Policy. ``flow.json`` (``write_flow_info``) holds a flow's totals, whether its layers
are its result (``deferred``), the dst stamp and the fingerprint, so that ``status``
shows progress and a resume knows what it resumes. ``failed.json`` (``write_failure``)
holds the first line of the error a run ended with, so that ``status`` tells a flow
whose fn raised (failed) from one that was killed or stopped (interrupted: nothing
written); the next run of the flow removes it as it starts.

An in-place flow (dst is also its input) marks dst (``IN_PLACE_MARK``) before its
first task and unmarks it when it finishes: a run with other intermediates finds the
interrupted flow through the mark, and one that finds a mark whose state is gone
refuses (``lost_in_place_state``).
Each is written atomically (``StateStore.write``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from chunkgraph.flow.state._layout import DONE_SUFFIX, FAILED_NAME, IN_PLACE_MARK, INFO_NAME
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import StateStore, join, read_json, state_store, volume_store
from chunkgraph.volume import Volume


def write_flow_info(
    store: StateStore,
    *,
    top_tasks: int,
    reductions: int,
    deferred: bool,
    dst: str | None = None,
    **extra: Any,
) -> None:
    """Record a flow's totals (and whether its layers are its result) in ``flow.json`` in
    ``store``, the store of the flow's folder.

    For ``apply`` to call once it knows them; ``status`` then shows ``top 3/8`` instead of
    ``top 3/?``, and a deferred flow's layers are never taken for abandoned temporaries.
    ``extra``: more JSON fields (a deferred flow's geometry, ``_deferred``). Written
    atomically (``StateStore.write``).
    """
    info = {
        "top_tasks": int(top_tasks),
        "reductions": int(reductions),
        "deferred": deferred,
        "dst": dst,  # markers/_markers.dst_stamp: the destination these markers wrote to
        **extra,
    }
    store.write(INFO_NAME, json.dumps(info).encode())


def read_flow_info(store: StateStore) -> dict[str, Any]:
    """``flow.json`` in ``store``, the store of a flow's folder ({} when missing or
    unreadable)."""
    return read_json(store, INFO_NAME) or {}


def write_failure(store: StateStore, error: str) -> None:
    """Record in ``store`` (the flow's folder) that its run failed with ``error`` (one
    line), and when."""
    failure = {"error": error, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    store.write(FAILED_NAME, json.dumps(failure).encode())


def read_failure(store: StateStore, flow_id: str = "") -> str | None:
    """The error line ``write_failure`` recorded in ``store`` (the flow's folder, or the
    root holding folder ``flow_id``); None: the flow's last run did not fail, or is
    running, or the record is unreadable."""
    error = (read_json(store, join(flow_id, FAILED_NAME)) or {}).get("error")
    return error if isinstance(error, str) else None


def in_place_mark(dst: Volume) -> tuple[StateRoot, str] | None:
    """``(intermediates root, flow id)`` of the in-place flow last started on ``dst`` that
    has not finished (None: no mark, or dst is a memory volume)."""
    store = volume_store(dst)
    found = read_json(store, IN_PLACE_MARK) if store is not None else None
    if not found:
        return None
    recorded, flow_id = found.get("intermediates"), found.get("flow_id")
    if not isinstance(recorded, str) or not isinstance(flow_id, str):
        return None  # not a mark this code wrote
    return StateRoot.of(recorded), flow_id


def mark_in_place(dst: Volume, root: StateRoot, flow_id: str) -> None:
    """Record in ``dst`` that in-place flow ``flow_id``, state under ``root``, rewrites it."""
    store = volume_store(dst)
    if store is not None:
        mark = {"intermediates": str(root.resolved()), "flow_id": flow_id}
        store.write(IN_PLACE_MARK, json.dumps(mark).encode())


def lost_in_place_state(dst: Volume) -> str | None:
    """When ``dst`` carries the mark of an in-place flow that did not finish and whose
    state is gone (removed with ``clean``, say): why no flow may start on it now. dst may
    be partly rewritten, and nothing says which part."""
    mark = in_place_mark(dst)
    store = volume_store(dst)
    if mark is None or store is None:
        return None
    root, flow_id = mark
    state = state_store(root)
    if state.exists(flow_id) or state.exists(f"{flow_id}{DONE_SUFFIX}"):
        return None  # its state says what happened (in_place_conflict), or it finished
    return (
        f"dst carries the mark of in-place flow {flow_id}, which did not finish, and its state "
        f"under {root} is gone (removed?): part of dst may hold fn's output, not the input. "
        f"If dst holds the original data again (restored), delete {store.where(IN_PLACE_MARK)} "
        "and run again"
    )


def unmark_in_place(dst: Volume) -> None:
    """The in-place flow finished: dst holds its result, nothing half-written."""
    store = volume_store(dst)
    if store is not None:
        store.delete(IN_PLACE_MARK)
