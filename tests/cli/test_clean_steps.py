"""``chunkgraph clean`` is the state's named steps (``chunkgraph.flow.state``: which flows
go, removing one, removing emptied roots) behind a command that checks its arguments,
words the outcome and picks the exit code; each part stays readable in one screen."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from radon.complexity import cc_visit

from chunkgraph import FlowLockedError
from chunkgraph.flow.state import (
    TOP,
    FlowDir,
    FlowStatus,
    StateRoot,
    clean_flow,
    flows_for,
    removals,
    remove_roots_if_empty,
    unknown_flows,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "chunkgraph"
MAX_COMPLEXITY = 20


@pytest.mark.parametrize("module", ["cli/_cmd_status.py", "flow/state/_clean.py"])
def test_the_clean_command_and_its_steps_are_below_the_complexity_limit(module: str) -> None:
    blocks = []
    for block in cc_visit((SRC / module).read_text()):
        blocks.extend(getattr(block, "methods", None) or [block])
    over = [f"{b.name} ({b.complexity})" for b in blocks if b.complexity > MAX_COMPLEXITY]
    assert not over, f"{module}: above complexity {MAX_COMPLEXITY}: {over}"


def _flow(root: StateRoot, flow_id: str, *, done: int, hours_old: float = 0.0) -> None:
    """An interrupted flow's state: ``done`` top-level markers, last touched long ago."""
    state = FlowDir(root, flow_id)
    markers = state.markers()
    for i in range(done):
        markers.mark_done(TOP, f"{i}_0")
    state.write_info(top_tasks=4, reductions=0, deferred=False)
    if hours_old:
        then = time.time() - hours_old * 3600
        assert root.local is not None
        for folder, dirs, files in os.walk(root.local / flow_id):
            for name in [*dirs, *files, "."]:
                os.utime(Path(folder) / name, (then, then))


def test_the_steps_choose_remove_and_tidy(tmp_path: Path) -> None:
    root = StateRoot.of(tmp_path / "flows")
    _flow(root, "c01d", done=2, hours_old=48)
    _flow(root, "b0e1", done=1)
    _flow(root, "a5ced", done=3)
    flows = flows_for(None, root)
    assert [s.status for s in flows] == [FlowStatus.INTERRUPTED] * 3
    assert unknown_flows(flows, ["a5ced", "gone"]) == ["gone"]

    # named first (record too), then the stale ones not named; a young one stays
    chosen = removals(flows, ["a5ced"], stale=True, older_than_hours=24.0, now=time.time())
    assert [(r.state.flow_id, r.named, r.what) for r in chosen] == [
        ("a5ced", True, "flow and its record"),
        ("c01d", False, "temporaries"),
    ]
    assert removals(flows, [], stale=False, older_than_hours=0.0, now=time.time()) == []

    # a flow whose lock is held is kept whole
    asked = FlowDir(root, "a5ced")
    with asked.held(0.0), pytest.raises(FlowLockedError):
        clean_flow(chosen[0], dst=None)
    assert asked.markers().done_keys(TOP) == {"0_0", "1_0", "2_0"}
    for removal in chosen:
        clean_flow(removal, dst=None)
    assert [s.flow_id for s in flows_for(None, root)] == ["b0e1"]

    remove_roots_if_empty([root])  # b0e1 is still there
    assert root.local is not None and root.local.is_dir()
    clean_flow(removals(flows_for(None, root), ["b0e1"], stale=False,
                        older_than_hours=0.0, now=0.0)[0], dst=None)  # fmt: skip
    remove_roots_if_empty([root, root])
    assert not root.local.exists()
