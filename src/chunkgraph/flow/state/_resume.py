"""Which earlier flow a resume continues when its own flow id finds no state: the same
work, planned with other automatic sizes.

Policy. Automatic sizes follow ``memory_limit``, whose default (half the memory
available, rounded down to a power of two) moves when the free memory crosses a power
of two: the same call then plans other sizes, so another flow id, and a resume would
start over. So each flow records the sizes its plan gave ``apply`` (``flow.json``'s
``sizes``: ``FlowPlan.arguments()``). A resume under the default budget whose own id
has no state asks ``earlier_sizes`` for the unfinished flows (failed or interrupted)
under the same root whose fingerprint (``_fingerprint.flow_id_parts``) matches in
everything but the spec (function, fn_kwargs, inputs, dst), newest first, with their
sizes. ``apply`` validates the call again with those sizes, and resumes that flow only
when this gives its very flow id (so the same spec: sizes, pads, blend modes, bbox);
its plan is then sized by the budget of now, or refused when the sizes need more.

Reads only: ``flow.json`` of each flow under the root (``_status.read_flows``).
"""

from __future__ import annotations

from typing import Any

from chunkgraph.flow.state._info import read_flow_info
from chunkgraph.flow.state._layout import DONE_SUFFIX
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._status import read_flows
from chunkgraph.flow.state._store import state_store

# flow.json's record of the sizes the flow's plan gave apply (FlowPlan.arguments()).
SIZES_KEY = "sizes"
# The parts of the fingerprint that must match for a flow to be the same work with
# other sizes: everything but the spec.
_SAME_WORK = ("function", "fn_kwargs", "inputs", "dst")


def earlier_sizes(
    root: StateRoot, flow_id: str, fingerprint: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """``(flow id, sizes)`` of each unfinished flow under ``root`` of the same work as the
    flow ``fingerprint`` describes but another spec, newest first; [] when ``flow_id``
    itself has state there (a resume continues its own, or finds it finished)."""
    store = state_store(root)
    if store.exists(flow_id) or store.exists(f"{flow_id}{DONE_SUFFIX}"):
        return []
    found = []
    for state in read_flows(root, sizes=False, skip=flow_id):
        if not state.unfinished:
            continue
        info = read_flow_info(state_store(state.flow_dir))
        parts, sizes = info.get("fingerprint"), info.get(SIZES_KEY)
        if not isinstance(parts, dict) or not isinstance(sizes, dict):
            continue  # written before sizes were recorded, or not by this code
        if all(parts.get(k) == fingerprint.get(k) for k in _SAME_WORK):
            found.append((state.modified, state.flow_id, sizes))
    return [(fid, sizes) for _, fid, sizes in sorted(found, key=lambda f: -f[0])]
