"""``FlowShape``: apply's arguments that shape a flow, one frozen value from apply to
``validate_flow``; automatic sizes replace its sizes in a new value, never in place."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.flow._apply import FlowShape, _planned
from chunkgraph.flow.plan import resolve_memory_limit


def _shape(**given: object) -> FlowShape:
    fields: dict[str, object] = dict(
        chunk_sizes="auto", crop_pads=2, blend_pads=0, blend_modes="quadratic", bbox=None,
        auto_divisibility=False, expand_bbox=False, cast="safe", max_reduction_chunk_size=None,
        skip_intermediates=None,
    )  # fmt: skip
    return FlowShape(**(fields | given))  # type: ignore[arg-type]


def test_automatic_sizes_make_a_new_shape_that_validates_to_the_plan(tmp_path: Path) -> None:
    src = volume.create(tmp_path / "src.zarr", (64, 64), (16, 16), "uint8")
    dst = volume.create(tmp_path / "dst.zarr", (64, 64), (16, 16), "uint8")
    given = _shape()
    limit, source = resolve_memory_limit(None)
    plan, planned = _planned(src, dst, given, 2, limit, source)
    assert plan is not None and given.chunk_sizes == "auto"  # the given value is as it was
    assert planned.chunk_sizes == list(plan.chunk_sizes)
    assert planned.skip_intermediates == plan.direct_writes
    spec = planned.validate(np.negative, src, dst)
    assert tuple(level.chunk for level in spec.levels) == plan.chunk_sizes
    with pytest.raises(dataclasses.FrozenInstanceError):
        planned.chunk_sizes = [(8, 8)]  # type: ignore[misc]
    # Given sizes: no plan, the shape as given; skip_intermediates None reads as False.
    none, same = _planned(src, dst, _shape(chunk_sizes=[(16, 16)]), 2, limit, source)
    assert none is None and not same.validate(np.negative, src, dst).skip_intermediates
