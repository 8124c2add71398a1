"""What a resumed flow reads: its pending top tasks alone, and the probe.

Policy. The read model (``_read_model``) predicts a whole flow as a product over axes: per
axis, the union of the tasks' reads where the cache serves the reuse along it, else their
sum. A resumed run's done tasks read nothing, so that product no longer holds: a pending
task next to a done one reads the halo they share alone, and no later reader takes it
from the cache (the reader counts leave done tasks out, ``_reader_counts``). The run
measures its reads over the input bytes of the pending tasks (the bbox's share they
cover), so its amplification is above the whole flow's; ``resumed_plan`` predicts that
figure from the same model, with the done tasks left out.

The count, per input, on a grid of cells: along an axis whose reuse the cache serves, the
cells are the pieces between the ends of the tasks' reads (snapped to storage chunks), and
a cell is fetched once if any pending task reads it; along any other axis each task's read
is a cell of its own (each task fetches its halo again)::

    axis reused, reads [96, 224) and [160, 288) of tasks 2, 3 (0, 1 done):
    cells  [96, 160) [160, 224) [224, 288)  all read by a pending task: 192 fetched

    covered(cell) = any pending task t with cell_a in t's read on every axis a
                  = (pending contracted with the per-axis incidence matrices) > 0

The probe reads its region before the tasks: where the cache keeps it (the plan has a
cache), a chunk of it that some pending task reads is fetched once; a chunk only the probe
reads (its first task done) is fetched for the probe alone; without a cache the probe's
whole region is a read of its own.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph.flow.plan._auto_sizes import FlowPlan, StorageLayout, layout_of
from chunkgraph.flow.plan._read_model import read_spans, snap_span
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.flow.plan._spec import FlowSpec
    from chunkgraph.volume import Volume


def resumed_plan(
    plan: FlowPlan,
    spec: FlowSpec,
    inputs: Mapping[str, Volume],
    done: Collection[tuple[int, ...]],
    probe: Box | None,
) -> FlowPlan:
    """``plan`` with the read amplification of a run whose top tasks at ``done`` (grid
    indices) are skipped, over the input bytes of the pending ones as the run measures it,
    and a reason that says so; ``probe``: the probe's read (dst voxels), None without one."""
    pending = np.ones(spec.top_grid, dtype=bool)
    for index in done:
        if all(0 <= i < n for i, n in zip(index, spec.top_grid, strict=True)):
            pending[index] = False
    if pending.all() or not pending.any():
        return plan
    layouts = [layout_of(n, v, spec.scale_of(n)) for n, v in inputs.items()]
    figure = pending_amplification(
        spec.bbox,
        layouts,
        spec.levels[0].chunk,
        spec.context_pad,
        set(plan.cache_axes),
        pending,
        probe,
        probe_kept=plan.cache_bytes > 0,
    )
    reason = (
        f"resumed: {int(pending.sum())} of {pending.size} top tasks pending, the prediction "
        f"is theirs ({figure:.2f}; {plan.read_amplification:.2f} for the whole flow): a "
        "pending task reads the halo it shares with a done neighbour alone"
    )
    return dataclasses.replace(plan, read_amplification=figure, reasons=(*plan.reasons, reason))


def pending_amplification(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    top: tuple[int, ...],
    context: tuple[int, ...],
    reused: Collection[int],
    pending: np.ndarray,
    probe: Box | None = None,
    *,
    probe_kept: bool = False,
) -> float:
    """Bytes the ``pending`` top tasks (a boolean mask over the top grid) and the probe
    fetch, over the input bytes inside the bbox times the pending tasks' share of it.

    With every task pending it is the read model's figure:

    >>> vol = StorageLayout("src", Box((0,), (256,)), (32,), 4)
    >>> every = np.ones(4, dtype=bool)
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), {0}, every)
    1.0
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), set(), every)  # 448 / 256
    1.75
    >>> half = np.array([False, False, True, True])  # [96, 256) read for [128, 256)
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), {0}, half)
    1.25
    >>> probe = Box((-2,), (34,))  # [0, 64), in done task 0's read: for the probe alone
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), {0}, half, probe, probe_kept=True)
    1.75
    >>> probe = Box((126,), (162,))  # [96, 192), all in pending tasks' reads
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), {0}, half, probe, probe_kept=True)
    1.25
    >>> pending_amplification(vol.bounds, [vol], (64,), (2,), {0}, half, probe)  # read twice
    2.0
    """
    share = float(pending.sum()) / pending.size if pending.size else 0.0
    total = sum(v.voxel_bytes * bbox.intersection(v.bounds).size for v in inputs) * share
    if not total:
        return 0.0
    fetched = 0
    for vol in inputs:
        spans = [read_spans(bbox, vol, top, context, a) for a in range(bbox.ndim)]
        fetched += _covered_bytes(spans, set(reused), pending, None) * vol.voxel_bytes
        snapped = None if probe is None else _snapped(probe, vol)
        if snapped is None:
            continue
        if probe_kept:  # a chunk some pending task reads is fetched once, for both
            every = set(range(bbox.ndim))
            fetched += _covered_bytes(spans, every, pending, snapped, outside=True) * (
                vol.voxel_bytes
            )
        else:
            fetched += snapped.size * vol.voxel_bytes
    return fetched / total


def _covered_bytes(
    spans: list[list[tuple[int, int]]],
    reused: set[int],
    pending: np.ndarray,
    probe: Box | None,
    *,
    outside: bool = False,
) -> int:
    """Voxels of the cells some pending task reads (``outside``: of the cells inside
    ``probe`` that no pending task reads); see the module's grid of cells."""
    lengths, incidence, in_probe = [], [], []
    for a, axis_spans in enumerate(spans):
        extra = () if probe is None else (probe.start[a], probe.stop[a])
        cells, length, matrix = _cells(axis_spans, a in reused, extra)
        lengths.append(length)
        incidence.append(matrix)
        if probe is not None:
            in_probe.append(
                np.array([probe.start[a] <= lo and hi <= probe.stop[a] for lo, hi in cells])
            )
    readers = pending.astype(np.float64)
    for a, matrix in enumerate(incidence):  # pending x M_a, axis by axis
        readers = np.moveaxis(np.tensordot(matrix, readers, axes=([1], [a])), 0, a)
    weight = _outer(lengths)
    if probe is None:
        return int((weight * (readers > 0)).sum())
    inside = _outer([m.astype(np.int64) for m in in_probe]) > 0
    wanted = inside & ~(readers > 0) if outside else inside & (readers > 0)
    return int((weight * wanted).sum())


def _cells(
    spans: list[tuple[int, int]], reused: bool, extra: tuple[int, ...]
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """One axis's cells, their lengths and which tasks read each (cells x tasks): the
    pieces between every read's ends (and ``extra`` ends) where the cache serves the reuse,
    else one cell per task."""
    if not reused:
        cells = list(spans)
        return cells, np.array([hi - lo for lo, hi in cells]), np.eye(len(spans))
    ends = sorted({e for span in spans for e in span} | set(extra))
    cells = [(lo, hi) for lo, hi in itertools.pairwise(ends) if hi > lo]
    matrix = np.array([[lo <= c0 and c1 <= hi for lo, hi in spans] for c0, c1 in cells])
    return cells, np.array([hi - lo for lo, hi in cells]), matrix.astype(np.float64)


def _outer(vectors: list[np.ndarray]) -> np.ndarray:
    """The outer product of per-axis vectors (an n-d array)."""
    out = np.ones((), dtype=np.int64)
    for v in vectors:
        out = np.multiply.outer(out, v)
    return out


def _snapped(box: Box, vol: StorageLayout) -> Box | None:
    """``box`` clipped to ``vol``'s bounds and snapped out to its storage chunks (the
    chunks a read of it fetches); None when it reads nothing there."""
    spans = [snap_span(box.start[a], box.stop[a], vol, a) for a in range(box.ndim)]
    if any(span is None for span in spans):
        return None
    return Box(tuple(s[0] for s in spans if s), tuple(s[1] for s in spans if s))
