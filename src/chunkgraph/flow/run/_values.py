"""Flows without a destination (``dst=None``): ``fn``'s return value per bottom chunk.

For statistics (a histogram, a count, the bounding box of a label) or side
effects (``fn`` writes somewhere of its own). No level blends and only the
bottom crops (``validate_flow``), so the bottom chunks tile the bbox and each
voxel belongs to exactly one call: summing the values counts each voxel once.

::

    top task (one per top chunk)                           the driver
      read inputs once over chunk + bottom crop  ──>  [(bottom box, value), ...]  ──>  {box: value}
      fn on each bottom chunk (local pool)

Nothing is kept on disk: no temporaries, no markers, so there is nothing to
resume (``resume=True`` is refused) and no flow lock (nothing shared to guard).
Values travel back through the executor, so they should be small (and
picklable under process executors).

Past the edge. ``expand_bbox`` (or ``auto_divisibility``) may grow the bbox past
the volume (the first input, which stands in for dst). A flow with a dst drops
what it computes there; a value cannot be cut, so here the bottom chunks are
cut instead: each is clipped to the volume (``ValuesJob.edge``), ``fn`` gets
the real voxels of its chunk (plus its crop context, fill past the edge as at
any edge), ``box`` and the value's key say which, and a chunk wholly past the
edge is not called. Only the last chunk on an axis is smaller, as dask's last
block is. Worked: 100 x 60 voxels, chunks 64 x 64, bbox expanded to 128 x 64:
chunks [0, 64) x [0, 60) and [64, 100) x [0, 60), 6,000 voxels, not 8,192. With
an input at a coarser resolution the clip is rounded up to whole voxels of it
(``step_of``), so up to ``step - 1`` fill voxels may remain there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph.execute import run
from chunkgraph.flow.plan import BOX_KEYWORD, FlowSpec, scaled, step_of
from chunkgraph.flow.run._subchunk import input_view
from chunkgraph.geometry import Box
from chunkgraph.graph import Graph
from chunkgraph.parallel import parallel_map

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, Subscriber
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class ValuesJob:
    """What every top task of a ``dst=None`` flow needs (volumes pickle by path)."""

    spec: FlowSpec
    fn: Callable[..., Any]
    inputs: Mapping[str, Volume]
    edge: Box | None = None  # the real voxels when the bbox leaves the volume (see above)


def collect_top(job: ValuesJob, box: Box) -> tuple[tuple[Box, Any], ...]:
    """Graph task: ``fn``'s value on every bottom chunk of one top chunk, in C order."""
    spec = job.spec
    bottom = spec.levels[-1]
    region = box.padded(bottom.crop)
    data = {name: vol.read(scaled(region, spec.scale_of(name))) for name, vol in job.inputs.items()}
    for array in data.values():
        array.flags.writeable = False  # fn gets views: one call must not change another's input
    starts, stops, _ = box.split_arrays(bottom.chunk)
    chunks = [Box(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    if job.edge is not None:
        chunks = [c for c in (c.intersection(job.edge) for c in chunks) if not c.is_empty]

    def one(chunk: Box) -> tuple[Box, Any]:
        read = chunk.padded(bottom.crop)
        arrays = {name: array[input_view(spec, name, read, region)] for name, array in data.items()}
        extra = {BOX_KEYWORD: read} if spec.pass_box else {}
        try:
            if spec.positional_input:
                return chunk, job.fn(*arrays.values(), **extra)
            return chunk, job.fn(**arrays, **extra)
        except Exception as exc:
            exc.add_note(f"in the apply flow's fn on chunk {chunk} (read {read})")
            raise

    return tuple(parallel_map(one, chunks))


def real_region(spec: FlowSpec, inputs: Mapping[str, Volume]) -> Box | None:
    """The part of the bbox inside the volume (the first input's bounds), its stop rounded
    up to whole voxels of every input; None when the bbox lies inside.

    >>> from types import SimpleNamespace as N
    >>> spec = N(bbox=Box((0, 0), (128, 64)), spatial_ndim=2, input_scales=())
    >>> real_region(spec, {"src": N(bounds=Box((0, 0), (100, 60)))})
    Box(start=(0, 0), stop=(100, 60))
    """
    bounds = next(iter(inputs.values())).bounds
    bbox = spec.bbox
    if bounds.contains(bbox):
        return None
    steps = step_of(list(spec.input_scales), spec.spatial_ndim)
    stop = tuple(
        min(hi, lo + -(-(edge - lo) // step) * step)
        for lo, hi, edge, step in zip(bbox.start, bbox.stop, bounds.stop, steps, strict=True)
    )
    return Box(bbox.start, stop)


def chunks_per_level(spec: FlowSpec, edge: Box | None) -> tuple[int, ...]:
    """How many chunks each level calls: they tile the bbox (no pads above the bottom),
    those wholly past ``edge`` left out.

    >>> from types import SimpleNamespace as N
    >>> from chunkgraph.flow.plan import LevelSpec
    >>> lv = lambda c: LevelSpec((c, c), (0, 0), (0, 0), "linear")
    >>> spec = N(bbox=Box((0, 0), (128, 64)), levels=(lv(64), lv(16)))
    >>> chunks_per_level(spec, None), chunks_per_level(spec, Box((0, 0), (100, 60)))
    ((2, 32), (2, 28))
    """
    extent = (spec.bbox if edge is None else edge).shape
    return tuple(
        int(np.prod([-(-n // c) for n, c in zip(extent, lv.chunk, strict=True)]))
        for lv in spec.levels
    )


def run_values(
    spec: FlowSpec,
    fn: Callable[..., Any],
    inputs: Mapping[str, Volume],
    executor: Executor,
    progress: bool,
    subscribers: tuple[Subscriber, ...],
    edge: Box | None = None,
) -> tuple[dict[Box, Any], int]:
    """Run every top task; ``({bottom box: value} in C order, bytes read)``. ``edge``:
    ``real_region``'s, what the bottom chunks are clipped to."""
    graph = Graph()
    job = ValuesJob(spec, fn, inputs, edge)
    starts, stops, _ = spec.bbox.split_arrays(spec.levels[0].chunk)
    refs = [
        graph.add(collect_top, job, Box(a, b), name=f"apply-values{Box(a, b)}")
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
    ]
    before = sum(v.stats.bytes_read for v in inputs.values())
    results = run(graph, refs, executor, progress=progress, subscribers=subscribers)
    values = {box: value for pairs in results for box, value in pairs}
    read = sum(v.stats.bytes_read for v in inputs.values()) - before
    return values, read
