"""``FlowSpec.deferred``: the one place that reads "the top level defers" off the blend modes."""

from __future__ import annotations

from typing import Any

import pytest

from chunkgraph.flow.plan._estimate import estimate_flow
from chunkgraph.flow.plan._spec import validate_flow


@pytest.mark.parametrize(
    ("blend_modes", "deferred"),
    [(["defer", "quadratic"], True), (["defer", "max"], True), ("linear", False), ("max", False)],
)
def test_deferred_is_the_top_levels_mode(files: Any, blend_modes: Any, deferred: bool) -> None:
    """Two levels of 16 over 8, blend 2 at the top: a deferred flow writes nothing to dst and
    has no reduction; the others reduce into dst."""
    src = files.empty((32, 32), (8, 8), "float32", backend="memory")
    dst = files.empty((32, 32), (8, 8), "float32", backend="memory")
    spec = validate_flow(
        lambda x: x,
        src,
        dst,
        chunk_sizes=[(16, 16), (10, 10)],
        blend_pads=[2, 0],
        blend_modes=blend_modes,
    )
    assert spec.deferred is deferred
    estimate = estimate_flow(spec, {"src": src}, dst)
    assert (estimate.reductions == 0) is deferred
    assert (estimate.dst_bytes == 0) is deferred
