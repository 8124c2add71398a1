"""Counting a flow's done tasks as a resume does: plain markers and the keys in records
(a run's own threads mark in bulk, one record a second: ``flow/state/_journal``)."""

from __future__ import annotations

from pathlib import Path

from chunkgraph.flow.state import TOP, MarkerStore, StateRoot


def done_keys(where: str | Path, kind: str = TOP) -> set[str]:
    """Keys of ``kind`` marked done in the flow folder ``where`` (a path or a URL)."""
    return MarkerStore(StateRoot.of(str(where))).done_keys(kind)


def done_under(root: Path, pattern: str = "*", kind: str = TOP) -> int:
    """Done keys of every flow folder ``root.glob(pattern)`` finds (those with markers)."""
    return sum(len(done_keys(m.parent, kind)) for m in root.glob(f"{pattern}/markers"))
