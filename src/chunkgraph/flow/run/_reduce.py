"""Reductions: each destination region computed once from the temporary layers.

Policy. The region the flow writes (``FlowSpec.writes``: the bbox, or the caller's
bbox where automatic sizes tile it grown out to the grid) is covered by reduction
boxes aligned to the
destination's storage grid (one destination chunk each, merged per axis up to
``max_reduction_chunk_size``, by default up to the top-level chunk). A
reduction reads, for every top-level task whose padded output meets its box,
that task's unweighted output from the task's layer, weighs it with the
task's blend ramps (computed from geometry, never stored), sums in float64
(or takes the maximum, or copies when the top level does not blend) and
writes each destination chunk exactly once::

    layer (0,0) --+
    layer (0,1) --+--> sum_t  w_t * out_t   --> round / cast --> dst.write(box)
    layer (1,0) --+    (t = top tasks meeting box; weights sum to 1)
    layer (1,1) --+

A reduction box at the bbox edge may cover destination voxels outside the
bbox (the bbox need not be chunk-aligned): those are read from the
destination first and written back unchanged. No other task of the flow
writes that destination chunk; another flow over the adjacent region may, so
such edge chunks are locked while they are rewritten (``_edge_locks``). A
destination on an object store needs no lock: the region inside the bbox is
merged into the edge chunks by conditional writes (``Volume.merge_write``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph._errors import CorruptChunkError
from chunkgraph.execute._breakdown import NO_TIMES, TaskTimer, TaskTimes
from chunkgraph.flow.plan import FlowSpec, can_saturate, count_saturated
from chunkgraph.flow.run._checkerboard import LayerPlan
from chunkgraph.flow.run._deferred import GEOMETRY_KEY
from chunkgraph.flow.run._edge_locks import write_inside
from chunkgraph.flow.run._late_writes import check_run_live
from chunkgraph.flow.run._subchunk import (
    add_weighted,
    at,
    cast_to,
    lowest,
    weighted_sum_start,
    weights_over,
)
from chunkgraph.flow.state import StateRoot, clean_command, read_flow_info, state_store
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.volume import Volume


def reduction_boxes(spec: FlowSpec, dst: Volume) -> tuple[list[Box], tuple[int, ...]]:
    """The write boxes of all reductions in C order, and their grid shape."""
    return _split(reduction_region(spec, dst), spec.max_reduction_chunk_size)


def reduction_region(spec: FlowSpec, dst: Volume) -> Box:
    """The region the reductions tile (from its start, ``max_reduction_chunk_size`` each,
    the last on an axis clipped): the region the flow writes (the caller's bbox when the
    tasks tile it grown out to the grid) snapped outward to dst's chunks, inside dst."""
    snapped = spec.writes.snapped(dst.spatial_chunks, offset=dst.bounds.start)
    return snapped.intersection(dst.bounds)


def _split(region: Box, chunk: tuple[int, ...]) -> tuple[list[Box], tuple[int, ...]]:
    starts, stops, grid = region.split_arrays(chunk, mode="shrink")
    boxes = [Box(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    return boxes, tuple(int(g) for g in grid)


def top_chunk_box(spec: FlowSpec, index: tuple[int, ...]) -> Box:
    """The top-level chunk at grid ``index``."""
    top = spec.levels[0].chunk
    start = tuple(b + i * c for b, i, c in zip(spec.bbox.start, index, top, strict=True))
    return Box(start, tuple(s + c for s, c in zip(start, top, strict=True)))


def top_indices_meeting(spec: FlowSpec, box: Box) -> list[tuple[int, ...]]:
    """Grid indices of top-level chunks whose blend-padded output meets ``box``.

    Chunk ``i`` covers ``[b + i*C - p, b + (i+1)*C + p)`` on an axis, so it
    meets ``[q0, q1)`` iff ``floor((q0 - b - p) / C) <= i < ceil((q1 - b + p) / C)``.
    """
    top = spec.levels[0]
    grid = tuple(s // c for s, c in zip(spec.bbox.shape, top.chunk, strict=True))
    ranges = []
    for q0, q1, b, c, p, n in zip(
        box.start, box.stop, spec.bbox.start, top.chunk, top.blend, grid, strict=True
    ):
        lo = max(0, (q0 - b - p) // c)
        hi = min(n, -((b - p - q1) // c))
        ranges.append(range(lo, hi))
    return list(itertools.product(*ranges))


@dataclass(frozen=True)
class ReductionStats:
    """What one reduction did: destination bytes written, layer bytes read, and voxels
    whose value did not fit dst's dtype when cast into it here (``_cast``); its reads
    and its write, timed (``_breakdown``)."""

    bytes_written: int
    temporary_bytes_read: int
    saturated: int = 0
    times: TaskTimes = NO_TIMES


def reduce_box(
    spec: FlowSpec,
    layers: LayerPlan,
    layer_vols: list[Volume],
    dst: Volume,
    box: Box,
    run_token: str = "",
) -> ReductionStats:
    """Compute the flow's output over ``box`` (a reduction's write box) and write it."""
    timer = TaskTimer()
    compute = box.intersection(spec.writes)
    top = spec.levels[0]
    channels = tuple(dst.channel_shape)
    layer_read = 0
    if layers.n_layers == 1 and not any(top.blend):
        copied = timer.read(lambda: _read_layer(layer_vols[0], compute))
        saturated = _saturated(copied, spec)
        result = cast_to(copied, spec.dst_dtype)
        layer_read = result.nbytes
        del copied
    else:
        weighted = top.blend_mode != "max"
        acc = _empty_accumulator(channels + compute.shape, weighted, layers.dtype, spec)
        for index in top_indices_meeting(spec, compute):
            padded = top_chunk_box(spec, index).padded(top.blend)
            part = padded.intersection(compute)
            if part.is_empty:
                continue
            layer = layer_vols[layers.layer_of(index)]
            data = timer.read(lambda: _read_layer(layer, part))  # noqa: B023 - called here
            layer_read += data.nbytes
            target = acc[at(part, compute)]
            if weighted:
                add_weighted(target, data, weights_over(padded, top, spec.bbox, part))
            else:
                np.maximum(target, data, out=target)
            del data, target
        saturated = _saturated(acc, spec)
        result = cast_to(acc, spec.dst_dtype)
        del acc  # the accumulator (float64) need not outlive its cast during the write
    check_run_live(run_token)
    # A read-modify-write of the edge chunks the bbox cuts is timed as the write it is.
    written = timer.write(lambda: write_inside(dst, box, compute, result))
    return ReductionStats(written, layer_read, saturated, timer.times())


def _saturated(values: np.ndarray, spec: FlowSpec) -> int:
    """Voxels of a reduction's result (each dst voxel in exactly one) that do not fit
    dst's dtype; none where the layers already hold it (they were counted then)."""
    if not can_saturate(values.dtype, spec.dst_dtype):
        return 0
    return count_saturated(values, spec.dst_dtype)


def _read_layer(layer: Volume, box: Box) -> np.ndarray:
    """``layer.read(box)``; a corrupt chunk there is the flow's damaged temporaries."""
    try:
        return layer.read(box)
    except CorruptChunkError as error:
        raise damaged_layer_error(error, layer.path) from error


def damaged_layer_error(error: CorruptChunkError, layer_path: str) -> CorruptChunkError:
    """The volume-level error, reworded for a flow's temporary layer.

    The volume's advice (delete the chunk file to read it as fill) is wrong here: a
    deleted layer chunk reads as zeros and reduces into wrong voxels without a word,
    and a resumed run skips the top-level task that wrote it. What fixes a damaged
    layer is computing it again: the flow without ``resume`` (or removing the flow,
    ``chunkgraph clean DST FLOW_ID``, then applying again).
    """
    # <intermediates>/<flow id>/layers/layer_k.zarr
    flow_dir = StateRoot.of(layer_path).parent.parent
    root, flow_id = flow_dir.parent, flow_dir.name
    deferred = GEOMETRY_KEY in read_flow_info(state_store(flow_dir))
    listed = ", ".join(repr(f) for f in error.files[:3]) or repr(error.volume)
    said = str(error).split(" Rewrite that region")[0]  # not its advice: deleting is wrong here
    what = (
        "its deferred layers (the result blend_modes='defer' left for reduce_deferred)"
        if deferred
        else "its temporary layers (the top-level tasks' outputs the reduction combines)"
    )
    fix = (
        "apply it again with blend_modes='defer' and without resume=True (that recomputes "
        "every layer), then reduce_deferred again"
        if deferred
        else "rerun apply without resume=True (that recomputes every layer)"
    )
    message = (
        f"flow {flow_id} under {root}: {what} are damaged: a stored chunk of layer "
        f"{layer_path!r} cannot be decoded (file {listed}). Do not delete the file: a missing "
        f"layer chunk reads as 0 and reduces into wrong voxels, and a resumed run does not "
        f"recompute it. To fix it, {fix}; or delete the flow with "
        f"`{clean_command(root, flow_id)}` and apply again. Volume said: {said}"
    )
    return CorruptChunkError(
        message, volume=error.volume, chunks=error.chunks, keys=error.keys, files=error.files
    )


def _empty_accumulator(
    shape: tuple[int, ...], weighted: bool, layer_dtype: np.dtype, spec: FlowSpec
) -> np.ndarray:
    if weighted:
        return weighted_sum_start(shape, spec.accumulate_dtype)
    # max: stay in the layer dtype (exact for every integer width) from its minimum.
    return np.full(shape, lowest(layer_dtype), dtype=layer_dtype)
