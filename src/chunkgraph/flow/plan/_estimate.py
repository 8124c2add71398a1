"""Dry-run arithmetic: what a flow will do, computed from its ``FlowSpec`` alone.

Policy. ``estimate_flow`` reads no data and enumerates nothing below the top
level: a 100,000 x 100,000 x 10,000 bbox has ~10^8 bottom chunks but only a
few hundred top chunks per axis. Every quantity that sums over top tasks is a
product over axes of a per-axis sum, because top chunks form a grid and each
task's box is a product of per-axis intervals::

    sum over tasks (i, j, k) of f0(i) * f1(j) * f2(k)
        = (sum_i f0(i)) * (sum_j f1(j)) * (sum_k f2(k))

so the cost is O(n0 + n1 + n2) vectorised numpy, never O(n0 * n1 * n2).

Quantities (``C`` top chunk, ``P`` = ``context_pad`` = sum of every level's
crop + blend pads, ``b`` top blend pad; all per axis):

* tasks per level: ``prod(bbox / C)`` at the top; each level ``l > 0`` multiplies by
  ``prod(region_shape[l-1] / chunk[l])`` (the divisibility rule makes it exact).
* bytes to read, per input: a top task reads ``chunk.padded(P)`` once; the
  storage counts whole storage chunks touched, clipped to the input's bounds
  (the storage layer's own accounting), so that is what is counted: the worst
  case, ``bytes_to_read``. A chunk cache shared by neighbouring tasks serves the
  halo chunks they share, so the storage reads less: ``with_cache`` scales the
  figure by the plan's read model (``_auto_sizes``: per axis, the union of the
  tasks' reads where the cache keeps the reuse along it, else their sum) into
  ``expected_bytes_to_read``. E.g. 64^3 float32 in 16^3 storage chunks, top
  chunks 16^3 with crop 4: 15.6 MiB without a cache, 1.0 MiB with apply's.
  Neither counts ``probe``'s read of the first bottom chunk (the plan's
  ``read_amplification`` does, where no cache keeps it for the first task), and with
  a process executor each process keeps its own cache, so the figure lies between
  the two.
* temporary bytes: each top task writes its output over ``chunk.padded(b)``,
  clipped to the bbox (``defer``: whole, its margin past the bbox included),
  to a checkerboard layer in the layer dtype; reductions read them back once.
  None with ``skip_intermediates``.
* reductions: the bbox snapped outward to dst chunks (clipped to dst bounds),
  tiled by the reduction chunk; none with ``skip_intermediates`` or ``defer``.
* dst bytes: that snapped region (whole dst chunks, edge ones clipped).
* read amplification: bytes to read over the input bytes inside the bbox (and the
  inputs' bounds).
* top-task memory: every input over ``chunk.padded(P)`` plus one buffer per level
  over that level's ``region_shape`` in the accumulation dtype (depth first:
  one child per level alive at a time; each extra thread working below the
  top adds one more set of lower-level buffers).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph.flow.plan._resolution import Scale, scaled
from chunkgraph.flow.plan._spec import FlowSpec, layer_dtype
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.flow.plan._auto_sizes import FlowPlan
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class FlowEstimate:
    """What a flow will do; see the module docstring for how each figure is computed.

    Attributes:
        tasks_per_level: Chunks processed at each level, top first.
        reductions: Reduction tasks.
        bytes_to_read: All inputs, whole storage chunks (clipped to bounds), no cache:
            the worst case.
        bytes_to_write: ``temporary_bytes + dst_bytes``.
        top_task_memory_bytes: What one top-level task holds at once.
        input_bytes: ``bytes_to_read`` per input name.
        temporary_bytes: Bytes written to checkerboard layers (read back once by the
            reductions).
        dst_bytes: Bytes written to dst, by reductions or directly.
        needed_bytes: Input bytes inside the bbox: what reading each voxel once costs.
        expected_bytes_to_read: ``bytes_to_read`` through the chunk cache the plan
            sizes; None: not predicted.
    """

    tasks_per_level: tuple[int, ...]
    reductions: int
    bytes_to_read: int  # all inputs, whole storage chunks (clipped to bounds), no cache: worst case
    bytes_to_write: int  # temporary_bytes + dst_bytes
    top_task_memory_bytes: int
    # The parts of the sums above, for reports that show them apart.
    input_bytes: tuple[tuple[str, int], ...] = ()  # bytes_to_read per input name
    temporary_bytes: int = 0  # written to checkerboard layers (read back once by reductions)
    dst_bytes: int = 0  # written to dst by reductions (or directly)
    needed_bytes: int = 0  # input bytes inside the bbox: what reading each voxel once costs
    # bytes_to_read through the chunk cache the plan sizes (with_cache); None: not predicted.
    expected_bytes_to_read: int | None = None

    @property
    def read_amplification(self) -> float:
        """``bytes_to_read / needed_bytes`` without a cache (1.0: every needed byte once)."""
        return self.bytes_to_read / self.needed_bytes if self.needed_bytes else 0.0

    @property
    def total_tasks(self) -> int:
        """Chunks processed at all levels together."""
        return sum(self.tasks_per_level)


def estimate_flow(spec: FlowSpec, inputs: Mapping[str, Volume], dst: Volume) -> FlowEstimate:
    """The dry-run figures of ``spec`` over ``inputs`` and ``dst``; arithmetic only."""
    tasks = tasks_per_level(spec)
    starts = _top_starts(spec)
    per_input = tuple(
        (name, _input_read_bytes(spec, starts, vol, spec.scale_of(name)))
        for name, vol in inputs.items()
    )
    temporary = 0 if spec.skip_intermediates else _temporary_bytes(spec, starts, dst)
    region = written_region(spec, dst)
    dst_bytes = 0 if spec.deferred else region.size * _voxel_bytes(dst)
    reductions = 0 if spec.skip_intermediates or spec.deferred else _reduction_count(spec, region)
    return FlowEstimate(
        tasks_per_level=tasks,
        reductions=reductions,
        bytes_to_read=sum(b for _, b in per_input),
        bytes_to_write=temporary + dst_bytes,
        top_task_memory_bytes=top_task_memory(spec, inputs, dst),
        input_bytes=per_input,
        temporary_bytes=temporary,
        dst_bytes=dst_bytes,
        needed_bytes=needed_input_bytes(spec, inputs),
    )


def with_cache(est: FlowEstimate, plan: FlowPlan) -> FlowEstimate:
    """``est`` with ``expected_bytes_to_read``: its worst case times the share of it that
    ``plan``'s read model fetches through the cache (both counted over the same reads).

    >>> est = FlowEstimate((64,), 64, 16_384_000, 0, 0, needed_bytes=1_048_576)
    >>> class Plan:  # the plan of 16^3 top chunks with crop 4 over 16^3 storage chunks
    ...     read_amplification, amplification_without_cache = 1.0, 15.625
    >>> with_cache(est, Plan()).expected_bytes_to_read
    1048576
    """
    uncached = plan.amplification_without_cache
    if uncached <= 0:
        return dataclasses.replace(est, expected_bytes_to_read=est.bytes_to_read)
    share = min(1.0, plan.read_amplification / uncached)
    return dataclasses.replace(est, expected_bytes_to_read=round(est.bytes_to_read * share))


def tasks_per_level(spec: FlowSpec) -> tuple[int, ...]:
    """Chunks processed at each level, top first.

    Level ``l`` splits each parent region ``chunk + 2*crop + 2*blend`` of level
    ``l - 1`` exactly, e.g. top 256 with crop 8 over bottom 68 -> 272 / 68 = 4 per axis.
    """
    counts = [math.prod(spec.top_grid)]
    for parent, child in zip(spec.levels, spec.levels[1:], strict=False):
        per_parent = math.prod(
            r // c for r, c in zip(parent.region_shape, child.chunk, strict=True)
        )
        counts.append(counts[-1] * per_parent)
    return tuple(counts)


def written_region(spec: FlowSpec, dst: Volume) -> Box:
    """The dst region reductions write: the region the flow writes (``spec.writes``)
    snapped outward to dst chunks, inside dst."""
    chunks = dst.spatial_chunks
    bounds: Box = dst.bounds
    return spec.writes.snapped(chunks, offset=bounds.start).intersection(bounds)


def _top_starts(spec: FlowSpec) -> list[np.ndarray]:
    """Per axis, the start coordinate of every top chunk (int64)."""
    top = spec.levels[0].chunk
    return [
        spec.bbox.start[a] + np.arange(n, dtype=np.int64) * top[a]
        for a, n in enumerate(spec.top_grid)
    ]


def _input_read_bytes(spec: FlowSpec, starts: list[np.ndarray], vol: Volume, scale: Scale) -> int:
    """Bytes of the storage chunks every top task's padded read touches, summed (at the
    input's own resolution: the dst box times ``scale``, integral by validation)."""
    top, pad = spec.levels[0].chunk, spec.context_pad
    chunks = vol.spatial_chunks
    bounds: Box = vol.bounds
    total = _voxel_bytes(vol)
    for a, first in enumerate(starts):
        p, q = scale[a].numerator, scale[a].denominator
        lo = np.maximum((first - pad[a]) * p // q, bounds.start[a])
        hi = np.minimum((first + top[a] + pad[a]) * p // q, bounds.stop[a])
        origin, size = bounds.start[a], chunks[a]
        span_lo = origin + (lo - origin) // size * size
        span_hi = np.minimum(origin - (origin - hi) // size * size, bounds.stop[a])
        total *= int(np.where(hi > lo, span_hi - span_lo, 0).sum())
    return total


def _temporary_bytes(spec: FlowSpec, starts: list[np.ndarray], dst: Volume) -> int:
    """Each top task's output over ``chunk.padded(blend)``, clipped to the bbox (``defer``:
    kept whole, margin included), summed."""
    top = spec.levels[0]
    kept = spec.bbox.padded(top.blend) if spec.deferred else spec.bbox
    total = math.prod(dst.channel_shape) * layer_dtype(spec).itemsize
    for a, first in enumerate(starts):
        lo = np.maximum(first - top.blend[a], kept.start[a])
        hi = np.minimum(first + top.chunk[a] + top.blend[a], kept.stop[a])
        total *= int((hi - lo).sum())
    return total


def _reduction_count(spec: FlowSpec, region: Box) -> int:
    size = spec.max_reduction_chunk_size
    return math.prod(-(-n // s) for n, s in zip(region.shape, size, strict=True))


def top_task_memory(spec: FlowSpec, inputs: Mapping[str, Volume], dst: Volume) -> int:
    """Peak bytes of one top-level task: its padded read plus one buffer per level."""
    read = Box((0,) * spec.spatial_ndim, spec.levels[0].chunk).padded(spec.context_pad)
    held = sum(
        scaled(read, spec.scale_of(name)).size * _voxel_bytes(vol) for name, vol in inputs.items()
    )
    out_item = math.prod(dst.channel_shape) * spec.accumulate_dtype.itemsize
    return held + sum(math.prod(lv.region_shape) * out_item for lv in spec.levels)


def needed_input_bytes(spec: FlowSpec, inputs: Mapping[str, Volume]) -> int:
    """Bytes of the inputs inside the bbox and their bounds, each at its own resolution:
    what a read amplification of 1 reads (a bbox expanded past an input's edge reads
    nothing there, so that part is no work the reads could be measured against)."""
    return sum(
        scaled(spec.bbox, spec.scale_of(name)).intersection(vol.bounds).size * _voxel_bytes(vol)
        for name, vol in inputs.items()
    )


def _voxel_bytes(vol: Volume) -> int:
    """Bytes of one spatial voxel, all channels included."""
    return int(np.dtype(vol.dtype).itemsize) * math.prod(vol.channel_shape)
