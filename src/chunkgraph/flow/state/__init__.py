"""Where a flow's state lives and what it records: the flow's memory between runs.

Policy. One import direction, lowest first (the ``flow state`` contract in
pyproject.toml checks it; no module here imports another inside a function)::

    _root                               StateRoot: a folder, or an object-store prefix
    _layout | _fingerprint | _holder    names of the parts; the flow id; who a holder is
    _store                              a folder or an object-store prefix (read, write, list)
    _lease                              the lock as a lease object in an object store
    _lock                               hold(store, key): flock or lease; Fence
    _markers | _dst_lock                done markers, completion record; claims on dst regions
    _info | _where | _journal           flow.json, the in-place mark; notes beside dst; markers
                                        of the driver's own tasks written in bulk
    _flow_dir                           FlowDir: one flow's state behind methods
    _status                             what each flow under a root is doing
    _clean | _resume                    removing a flow, or the stale ones; the unfinished
                                        flow of the same work a resume may continue

A root is a value (``StateRoot``), made once from what a person gave
(``StateRoot.of``, ``state_root``) and passed whole: nothing here asks a root's
spelling whether it is a URL.

Nothing here imports the flow's planning or running (``chunkgraph.flow.plan``,
``chunkgraph.flow.run``); the run imports these names from here.
"""

from __future__ import annotations

from chunkgraph.flow.state._clean import (
    Removal,
    clean_flow,
    removals,
    remove_roots_if_empty,
    stale_flows,
    unknown_flows,
)
from chunkgraph.flow.state._dst_lock import claimed, refuse_if_written
from chunkgraph.flow.state._fingerprint import flow_id_of, flow_id_parts
from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._info import in_place_mark, lost_in_place_state, read_flow_info
from chunkgraph.flow.state._journal import (
    MarkerJournal,
    close_journal,
    journal_of,
    open_journal,
)
from chunkgraph.flow.state._layout import (
    clean_command,
    default_root,
    default_state_root,
    dst_of_state_root,
    layers_place,
    state_root,
    status_command,
)
from chunkgraph.flow.state._markers import REDUCE, TOP, MarkerStore, grid_key
from chunkgraph.flow.state._resume import SIZES_KEY, earlier_sizes
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import (
    STALE_AFTER_HOURS,
    FlowState,
    FlowStatus,
    flows_for,
    in_place_conflict,
    kept_state_note,
    warn_if_resume_mismatch,
    warn_if_stale,
)
from chunkgraph.flow.state._store import flow_location, reach, state_store

__all__ = [
    "REDUCE",
    "SIZES_KEY",
    "STALE_AFTER_HOURS",
    "TOP",
    "FlowDir",
    "FlowState",
    "FlowStatus",
    "MarkerJournal",
    "MarkerStore",
    "Removal",
    "StateRoot",
    "claimed",
    "clean_command",
    "clean_flow",
    "close_journal",
    "default_root",
    "default_state_root",
    "dst_of_state_root",
    "earlier_sizes",
    "flow_id_of",
    "flow_id_parts",
    "flow_location",
    "flows_for",
    "grid_key",
    "in_place_conflict",
    "in_place_mark",
    "journal_of",
    "kept_state_note",
    "layers_place",
    "lost_in_place_state",
    "open_journal",
    "reach",
    "read_flow_info",
    "refuse_if_written",
    "removals",
    "remove_roots_if_empty",
    "stale_flows",
    "state_root",
    "state_store",
    "status_command",
    "unknown_flows",
    "warn_if_resume_mismatch",
    "warn_if_stale",
]
