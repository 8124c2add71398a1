"""One top-level task: read the padded superchunk once, run every level, write, mark done.

::

    inputs ──read once over chunk.padded(sum of all crop + blend pads)──> arrays (read-only)
        │
        v  _subchunk: levels below the top, in memory, on the local thread pool
    output over chunk.padded(top blend) ──cast──> its checkerboard layer (or dst, when direct)
        │
        v
    done marker (only after the data is written)

Reads and locality. Top-level tasks start in C order of the top grid, so a
task's successor is its neighbour along the fastest-varying axis that has
more than one task (``sweep_axis``). With a chunk cache on an input, the
reads of one flow's tasks take turns (one lock per flow and process) and
each walks its region in slabs one storage chunk thick along that axis: the
cache then sees one sequential sweep, and the halo chunks a task shares with
its successor are the last ones it read, which LRU keeps. Interleaved
concurrent reads would fetch shared chunks twice (two misses on one chunk
before either fills the cache). Without a cache nothing is shared, so reads
run concurrently. Compute and writes of different tasks always overlap.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph.geometry import Box
from chunkgraph.volume._checkerboard import LayerPlan
from chunkgraph.volume._flow_spec import FlowSpec
from chunkgraph.volume._resume import TOP, MarkerStore, grid_key
from chunkgraph.volume._subchunk import (
    LevelCounter,
    SubchunkContext,
    at,
    cast_to,
    process_chunk,
    stream_chunk,
)

if TYPE_CHECKING:
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class TopJob:
    """Everything a top-level task or a reduction needs; shared by all tasks of a flow.

    ``layers`` is None when the flow writes straight to ``dst``
    (``skip_intermediates``). Volumes pickle by path, so a process executor
    can ship a job to its workers.
    """

    spec: FlowSpec
    fn: Callable[..., Any]
    inputs: Mapping[str, Volume]
    positional: bool
    dst: Volume
    layers: LayerPlan | None
    layer_vols: tuple[Volume, ...]
    marker_root: str
    sweep_axis: int = -1


@dataclass(frozen=True)
class TopStats:
    """What one top-level task did.

    ``bytes_read`` is measured on the task's own input objects: exact under a
    process executor (each task unpickles its own), polluted by concurrent
    tasks under threads, where the driver measures instead.
    """

    tasks_per_level: tuple[int, ...]
    bytes_read: int
    bytes_written: int


def run_top_task(job: TopJob, index: tuple[int, ...], box: Box) -> TopStats:
    """Graph task: read the padded superchunk once, process all levels, write, mark done."""
    spec = job.spec
    region = box.padded(spec.context_pad)
    before = sum(v.stats.bytes_read for v in job.inputs.values())
    data = read_inputs(job, region)
    read = sum(v.stats.bytes_read for v in job.inputs.values()) - before
    ctx = SubchunkContext(
        spec=spec,
        fn=job.fn,
        positional=job.positional,
        data=data,
        data_box=region,
        out_channel_shape=tuple(job.dst.channel_shape),
        counter=LevelCounter([0] * len(spec.levels)),
    )
    if job.layers is None:
        written_bytes = stream_chunk(ctx, 0, box, job.dst)
        MarkerStore(Path(job.marker_root)).mark_done(TOP, grid_key(index))
        return TopStats(tuple(ctx.counter.counts), read, written_bytes)
    out = process_chunk(ctx, 0, box)
    out_box = box.padded(spec.levels[0].blend)
    keep = out_box.intersection(spec.bbox)
    part = out[at(keep, out_box)]
    target, dtype = job.layer_vols[job.layers.layer_of(index)], job.layers.dtype
    written = cast_to(part, dtype)
    target.write(keep, written)
    MarkerStore(Path(job.marker_root)).mark_done(TOP, grid_key(index))
    return TopStats(tuple(ctx.counter.counts), read, int(written.nbytes))


def read_inputs(job: TopJob, region: Box) -> dict[str, np.ndarray]:
    """Every input over ``region``, read once (in ordered slabs when cached, see above).

    The arrays are made read-only: ``fn`` gets views of them, and one chunk's
    ``fn`` writing into its input would corrupt its neighbours' inputs.
    """
    cached = any(getattr(v, "cache_bytes", 0) for v in job.inputs.values())
    data: dict[str, np.ndarray] = {}
    if cached:
        with _read_lock(job.marker_root):
            for name, vol in job.inputs.items():
                data[name] = _read_in_slabs(vol, region, job.sweep_axis % region.ndim)
    else:
        data = {name: vol.read(region) for name, vol in job.inputs.items()}
    for array in data.values():
        array.flags.writeable = False
    return data


def _read_in_slabs(vol: Volume, region: Box, axis: int) -> np.ndarray:
    """``vol.read(region)``, one storage-chunk-thick slab along ``axis`` after another.

    The storage chunks inside one slab are fetched concurrently (one read per
    chunk on the local pool): the cache still sees the slabs in order, which
    is all the sweep needs, and decoding uses every core.
    """
    from chunkgraph.parallel import parallel_map

    out = np.empty(tuple(vol.channel_shape) + region.shape, dtype=vol.dtype)
    spatial = vol.chunks[len(vol.chunks) - region.ndim :]
    cuts = [_cuts(region, a, int(spatial[a]), int(vol.offset[a])) for a in range(region.ndim)]
    others = [a for a in range(region.ndim) if a != axis]

    def read_piece(piece: Box) -> None:
        out[at(piece, region)] = vol.read(piece)

    for lo, hi in itertools.pairwise(cuts[axis]):
        pieces = []
        for bounds in itertools.product(*(itertools.pairwise(cuts[a]) for a in others)):
            start, stop = list(region.start), list(region.stop)
            start[axis], stop[axis] = lo, hi
            for a, (b0, b1) in zip(others, bounds, strict=True):
                start[a], stop[a] = b0, b1
            pieces.append(Box(start, stop))
        parallel_map(read_piece, pieces)
    return out


def _cuts(region: Box, axis: int, chunk: int, origin: int) -> list[int]:
    """Where ``region`` crosses storage chunk boundaries on ``axis``, with both ends.

    >>> _cuts(Box((-8,), (72,)), 0, 64, 0)
    [-8, 0, 64, 72]
    """
    first = origin + ((region.start[axis] - origin) // chunk + 1) * chunk
    return [region.start[axis], *range(first, region.stop[axis], chunk), region.stop[axis]]


# One lock per flow (keyed by its directory) and process: see read_inputs. Kept out of
# TopJob so that jobs stay picklable for process executors.
_READ_LOCKS: dict[str, threading.Lock] = {}
_READ_LOCKS_GUARD = threading.Lock()


def _read_lock(flow: str) -> threading.Lock:
    with _READ_LOCKS_GUARD:
        return _READ_LOCKS.setdefault(flow, threading.Lock())
