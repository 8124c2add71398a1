"""Removing a flow's state: one flow by id, or the stale ones (``chunkgraph clean``).

Policy. Removing (``remove_flow``) takes the flow's own lock (``_lock.hold``,
refusing at once if held: ``FlowLockedError`` names the holder), so no run can start
on the directory while it is renamed to a tombstone and deleted
(``_markers.discard_flow_dir``): an interruption never leaves markers whose layers
are gone. A flow removed by name loses its completion record and the note beside its
dst (``_where``) too; a stale one (``FlowState.stale``) only its temporaries. A root
left empty goes last (``remove_roots_if_empty``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._layout import Root, as_root
from chunkgraph.flow.state._lock import hold
from chunkgraph.flow.state._status import FlowState
from chunkgraph.flow.state._store import state_store
from chunkgraph.flow.state._where import forget_state
from chunkgraph.volume import is_url


def stale_flows(flows: Iterable[FlowState], older_than_hours: float, now: float) -> list[FlowState]:
    """The flows whose temporaries are abandoned (``FlowState.stale``) at ``now``."""
    return [s for s in flows if s.stale(older_than_hours, now)]


def clean_flow(state: FlowState, *, named: bool, dst: str | os.PathLike[str] | None) -> None:
    """Remove ``state``'s flow: its temporaries, and when it was ``named`` (asked for by
    id) its completion record and its note beside ``dst``. ``FlowLockedError`` while a
    run holds it."""
    remove_flow(state.root, state.flow_id, record=named)
    if named and dst:
        forget_state(dst, state.flow_id)  # its note beside dst, when it was kept elsewhere


def remove_roots_if_empty(roots: Iterable[Root]) -> None:
    """Remove each of ``roots`` (once) that nothing is left in."""
    for root in dict.fromkeys(roots):
        remove_root_if_empty(root)


def remove_flow(root: Root, flow_id: str, *, record: bool = False) -> None:
    """Delete flow ``flow_id``'s temporaries (and, with ``record``, its completion record).

    Holds the flow's lock meanwhile; raises ``FlowLockedError`` (naming the holder) when
    a run holds it. Tombstones of earlier interrupted deletions go too.
    """
    state = FlowDir(as_root(root), flow_id)
    with hold(state.store, state.lock_key, 0.0):
        state.discard()
        if record:
            state.record.remove()


def remove_root_if_empty(root: Root) -> bool:
    """Remove the intermediates directory when nothing is left in it; True if removed
    (an object-store prefix with nothing under it is gone already)."""
    if isinstance(root, str) and is_url(root):
        return not state_store(root).names()
    with contextlib.suppress(OSError):
        Path(root).rmdir()
        return True
    return False
