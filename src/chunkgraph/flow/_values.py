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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkgraph.flow._resolution import scaled
from chunkgraph.flow._spec import BOX_KEYWORD, FlowSpec
from chunkgraph.flow._subchunk import input_view
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, Subscriber
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class ValuesJob:
    """What every top task of a ``dst=None`` flow needs (volumes pickle by path)."""

    spec: FlowSpec
    fn: Callable[..., Any]
    inputs: Mapping[str, Volume]


def collect_top(job: ValuesJob, box: Box) -> tuple[tuple[Box, Any], ...]:
    """Graph task: ``fn``'s value on every bottom chunk of one top chunk, in C order."""
    from chunkgraph.parallel import parallel_map

    spec = job.spec
    bottom = spec.levels[-1]
    region = box.padded(bottom.crop)
    data = {name: vol.read(scaled(region, spec.scale_of(name))) for name, vol in job.inputs.items()}
    for array in data.values():
        array.flags.writeable = False  # fn gets views: one call must not change another's input
    starts, stops, _ = box.split_arrays(bottom.chunk)
    chunks = [Box(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]

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


def run_values(
    spec: FlowSpec,
    fn: Callable[..., Any],
    inputs: Mapping[str, Volume],
    executor: Executor,
    progress: bool,
    subscribers: tuple[Subscriber, ...],
) -> tuple[dict[Box, Any], int]:
    """Run every top task; ``({bottom box: value} in C order, bytes read)``."""
    from chunkgraph.execute import run
    from chunkgraph.graph import Graph

    graph = Graph()
    job = ValuesJob(spec, fn, inputs)
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
