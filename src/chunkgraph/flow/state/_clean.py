"""Removing a flow's state: one flow by id, or the stale ones (``chunkgraph clean``).

Policy. ``clean`` is three steps, each its own function; the command around them only
checks its arguments, words the outcome and picks the exit code::

    flows (FlowState) ──> removals ──> clean_flow, each ──> remove_roots_if_empty
                          named ids      FlowLockedError:     the roots left with
                          + the stale    that flow is kept    nothing in them
                          (FlowState.stale)

Removing (``remove_flow``) takes the flow's own lock (``_lock.hold``, refusing at once if
held: ``FlowLockedError`` names the holder), so no run can start on the directory while
it is renamed to a tombstone and deleted (``_markers.discard_flow_dir``): an interruption
never leaves markers whose layers are gone. A flow removed by name loses its completion
record and the note beside its dst (``_where``) too; a stale one only its temporaries (and
the note, when no record is left for it to find). A root left empty goes last.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._lock import hold
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import FlowState, FlowStatus
from chunkgraph.flow.state._store import state_store
from chunkgraph.flow.state._where import forget_state


@dataclass(frozen=True)
class Removal:
    """One flow ``clean`` removes: ``named`` (asked for by id: its completion record and
    its note beside dst go too), or stale (its temporaries only)."""

    state: FlowState
    named: bool

    @property
    def what(self) -> str:
        """What goes, as a person reads it (a deferred flow's layers are its result)."""
        if not self.named:
            return "temporaries"
        if self.state.status is FlowStatus.DEFERRED:
            return "deferred layers (the flow's result, not temporaries) and its record"
        return "flow and its record"


def unknown_flows(flows: Iterable[FlowState], flow_ids: Iterable[str]) -> list[str]:
    """The ids among ``flow_ids`` of no flow in ``flows``."""
    known = {s.flow_id for s in flows}
    return [f for f in flow_ids if f not in known]


def stale_flows(flows: Iterable[FlowState], older_than_hours: float, now: float) -> list[FlowState]:
    """The flows whose temporaries are abandoned (``FlowState.stale``) at ``now``."""
    return [s for s in flows if s.stale(older_than_hours, now)]


def removals(
    flows: Iterable[FlowState],
    named: Sequence[str],
    *,
    stale: bool,
    older_than_hours: float,
    now: float,
) -> list[Removal]:
    """What ``clean`` removes from ``flows``: those ``named`` (ids of flows there), then,
    with ``stale``, every other one stale after ``older_than_hours`` at ``now``."""
    by_id = {s.flow_id: s for s in flows}
    chosen = [Removal(by_id[f], named=True) for f in named]
    if stale:
        old = stale_flows(by_id.values(), older_than_hours, now)
        chosen += [Removal(s, named=False) for s in old if s.flow_id not in named]
    return chosen


def clean_flow(removal: Removal, *, dst: str | os.PathLike[str] | None) -> None:
    """Remove ``removal``'s flow: its temporaries, and when it was named its completion
    record and its note beside ``dst``. ``FlowLockedError`` while a run holds it (then
    nothing of it is removed)."""
    state = removal.state
    remove_flow(state.root, state.flow_id, record=removal.named)
    # Its note beside dst (state kept elsewhere) goes once nothing of the flow is left: a
    # stale flow without a completion record leaves nothing for the note to find.
    if dst and (removal.named or state.finished is None):
        forget_state(dst, state.flow_id)


def remove_roots_if_empty(roots: Iterable[StateRoot]) -> None:
    """Remove each of ``roots`` (once) that nothing is left in."""
    for root in dict.fromkeys(roots):
        remove_root_if_empty(root)


def remove_flow(root: StateRoot, flow_id: str, *, record: bool = False) -> None:
    """Delete flow ``flow_id``'s temporaries (and, with ``record``, its completion record).

    Holds the flow's lock meanwhile; raises ``FlowLockedError`` (naming the holder) when
    a run holds it. Tombstones of earlier interrupted deletions go too.
    """
    state = FlowDir(root, flow_id)
    with hold(state.store, state.lock_key, 0.0):
        state.discard()
        if record:
            state.record.remove()


def remove_root_if_empty(root: StateRoot) -> bool:
    """Remove the intermediates directory when nothing is left in it; True if removed
    (an object-store prefix with nothing under it is gone already)."""
    local = root.local
    if local is None:
        return not state_store(root).names()
    with contextlib.suppress(OSError):
        local.rmdir()
        return True
    return False
