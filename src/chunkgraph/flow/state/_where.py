"""Where a destination's flows keep their state, found from the destination alone.

A flow's state lives under its intermediates directory: by default
``.<dst name>.chunkgraph`` beside dst (``_layout.default_root``), where
``chunkgraph status DST`` looks. A run given ``intermediates=DIR`` elsewhere (a
spec's ``intermediates:``) leaves a note there instead, so that the same command
finds it::

    data/.out.zarr.chunkgraph/
        <flow id>.where        {"intermediates": "/scratch/flows"}   (note_state)
    /scratch/flows/
        <flow id>/ ...         the flow's state, as under the default directory

A note is written once per flow, under the flow's lock, before its first task; it
stays after the flow finishes (its completion record is under DIR, and status
shows it finished), and ``chunkgraph clean DST FLOW_ID`` removes it with the flow.
A note whose flow is gone from DIR is skipped. The note is a convenience: where
dst's parent cannot be written, the run goes on without one (``status
--intermediates DIR`` and ``status SPEC.yaml`` still find the flow). Reading the
notes back (``noted``, ``flows_of``) is ``_status``'s: it knows which flows exist.
"""

from __future__ import annotations

import contextlib
import json
import os

from chunkgraph.flow.state._layout import WHERE_SUFFIX as _NOTE
from chunkgraph.flow.state._layout import default_state_root
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import state_store


def note_state(dst_path: str, root: StateRoot, flow_id: str) -> None:
    """Beside dst at ``dst_path`` (a path or a URL), note that flow ``flow_id`` keeps its
    state under ``root`` (nothing when that is the default directory)."""
    default = default_state_root(dst_path)
    if root.same_place(default):
        return
    # dst's parent not writable: no note, the state is still found by DIR (see above)
    with contextlib.suppress(OSError):
        note = {"intermediates": str(root.resolved())}
        state_store(default).write(f"{flow_id}{_NOTE}", json.dumps(note).encode())


def forget_state(dst_path: str | os.PathLike[str], flow_id: str) -> None:
    """Remove the note of flow ``flow_id`` beside dst (its state was removed)."""
    state_store(default_state_root(dst_path)).delete(f"{flow_id}{_NOTE}")
