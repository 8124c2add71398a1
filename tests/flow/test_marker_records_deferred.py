"""``reduce_deferred`` and the status of a deferred flow whose done markers are records
(``MarkerStore.mark_done_many``, one per batch of tasks): a record's keys count exactly
as plain markers, for the top-level tasks it checks and the reductions it skips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph.flow import apply, reduce_deferred
from chunkgraph.flow.run import _deferred_run as reduce_module
from chunkgraph.flow.state import REDUCE, TOP, MarkerStore, StateRoot
from chunkgraph.flow.state._layout import MARKERS_NAME
from chunkgraph.flow.state._status import FlowStatus, read_flow
from chunkgraph.flow.state._store import join
from chunkgraph.geometry import Box

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")

SHAPE, CHUNKS = (40, 56), (8, 8)
FLOW: dict[str, Any] = dict(
    chunk_sizes=[(16, 24), (10, 14)], crop_pads=[0, 1], blend_pads=[2, 0],
    bbox=Box((4, 8), (36, 56)), cast="unsafe",
)  # fmt: skip


def mean9(src: np.ndarray) -> np.ndarray:
    h, w = src.shape[0] - 2, src.shape[1] - 2
    return sum(src[i : i + h, j : j + w].astype(np.float64) for i in range(3) for j in range(3)) / 9


def _into_records(flow_dir: Path, kind: str, per_record: int) -> int:
    """Move the flow's plain markers of ``kind`` into records of ``per_record`` keys each,
    as batches of tasks write them; how many keys."""
    markers = MarkerStore(StateRoot.of(flow_dir))
    plain = sorted(markers.done_keys(kind))
    for n in range(0, len(plain), per_record):
        markers.mark_done_many(kind, plain[n : n + per_record], f"batch-{n}")
    for key in plain:
        markers.store.delete(join(MARKERS_NAME, kind, key))
    assert not markers.store.names(join(MARKERS_NAME, kind))
    assert markers.done_keys(kind) == set(plain)
    return len(plain)


def test_a_deferred_flow_marked_in_records_is_deferred_and_reduces(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = files.source(files.random(SHAPE, "uint8"), CHUNKS)
    dst, reference = files.empty(SHAPE, CHUNKS, "uint8"), files.empty(SHAPE, CHUNKS, "uint8")
    report = apply(
        mean9, src, dst, blend_modes=["defer", "linear"], intermediates=files.root / "t", **FLOW
    )
    apply(mean9, src, reference, blend_modes="linear", intermediates=files.root / "r", **FLOW)
    flow_dir = Path(str(report.intermediates))
    assert _into_records(flow_dir, TOP, per_record=3) == 4
    state = read_flow(StateRoot.of(flow_dir.parent), flow_dir.name)
    assert state.status is FlowStatus.DEFERRED and state.top_done == state.top_total == 4

    # A reduction that fails on its third box leaves two reductions marked: as a record.
    real, calls = reduce_module.reduce_box, []

    def fails_third(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk went away")
        return real(*args, **kw)

    monkeypatch.setattr(reduce_module, "reduce_box", fails_third)
    with pytest.raises(ExceptionGroup):
        reduce_deferred(report, dst, blend_mode="linear", executor="sync", retries=0)
    monkeypatch.setattr(reduce_module, "reduce_box", real)
    assert _into_records(flow_dir, REDUCE, per_record=5) == 2

    resumed = reduce_deferred(report, dst, blend_mode="linear")
    assert resumed.reductions_skipped == 2 and resumed.reductions > 0
    np.testing.assert_array_equal(dst.read(dst.bounds), reference.read(reference.bounds))
    assert not flow_dir.exists()  # reduced: its records went with its markers
