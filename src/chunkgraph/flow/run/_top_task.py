"""One top-level task: read the padded superchunk once, run every level, write, mark done.

::

    inputs ──read once over chunk.padded(sum of all crop + blend pads)──> arrays (read-only)
           (each at its own resolution: that box scaled, see _resolution)
        │
        v  _subchunk: levels below the top, in memory, on the local thread pool
    output over chunk.padded(top blend) ──cast──> its checkerboard layer (or dst, when direct)
        │
        v
    done marker (only after the data is written)

On a GPU (``job.device``, see ``_device``) the task binds its thread to its
device, uploads each input once after the read, runs the levels below there
in its own thread, and downloads its (cast) output once before the write.

Reads and locality. Top-level tasks start in C order of the top grid, so a
task's successor is its neighbour along the fastest-varying axis that has
more than one task (``sweep_axis``). With a chunk cache on an input, the
reads of one flow's tasks take turns (one lock per flow and process) and
each walks its region in slabs one storage chunk thick along that axis: the
cache then sees one sequential sweep. A cache apply owns keeps the halo chunks
a task shares with its successor by the plan's reader counts (``_reader_counts``);
a caller's own cache (LRU) keeps them as the last ones read. Interleaved
concurrent reads would fetch shared chunks twice (two misses on one chunk
before either fills the cache). Without a cache nothing is shared, so reads
run concurrently. Compute and writes of different tasks overlap when more
than one task may hold its superchunk (below).

Memory. The superchunk is a task's largest buffer, and a task already spreads
the levels below over the local pool. So only as many tasks should hold one
at a time as it takes for their bottom chunks to cover the cores
(``superchunks_in_flight``: one for the usual multi-level flow; one per core for a
one-level flow, whose task is its own bottom chunk). The flow
says so to the scheduler: each top-level task declares its memory
(``top_task_memory``) and the flow's plan gets a budget of that many tasks'
worth, so the executor admits the next task only when one ends, in the
plan's (sweep) order. A task drops its superchunk as soon as the levels
below are done, before its output is cast and written. ``apply(workers=n)``
makes ``n`` the cores: ``n`` covers the bound above (still no more tasks than
``memory_limit`` holds) and the levels below run on a pool of ``n`` threads
(``flow_pool``) instead of the process-wide one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph.execute._breakdown import NO_TIMES, TaskTimer, TaskTimes
from chunkgraph.flow.plan import FlowSpec, bottom_chunks_per_top, scaled
from chunkgraph.flow.plan import superchunks_in_flight as _superchunks_rule
from chunkgraph.flow.run._checkerboard import LayerPlan
from chunkgraph.flow.run._device import FlowDevice
from chunkgraph.flow.run._late_writes import check_run_live
from chunkgraph.flow.run._shared_job import pickle_fields, shared_job
from chunkgraph.flow.run._subchunk import (
    LevelCounter,
    SubchunkContext,
    at,
    cast_counting,
    process_chunk,
    stream_chunk,
)
from chunkgraph.flow.state import TOP, MarkerStore, grid_key, journal_of
from chunkgraph.geometry import Box
from chunkgraph.parallel import WorkStealingPool, parallel_map
from chunkgraph.parallel._pool import local_pool

if TYPE_CHECKING:
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class TopJob:
    """Everything a top-level task or a reduction needs; shared by all tasks of a flow.

    ``layers`` is None when the flow writes straight to ``dst``
    (``skip_intermediates``). Volumes pickle by path, so a process executor
    can ship a job to its workers; there, the tasks of one run share one
    unpickled job and its input caches (``_shared_job``).
    """

    spec: FlowSpec
    fn: Callable[..., Any]
    inputs: Mapping[str, Volume]
    dst: Volume
    layers: LayerPlan | None
    layer_vols: tuple[Volume, ...]
    marker_root: str
    markers: MarkerStore  # at marker_root, with the store's options (pickled to workers)
    sweep_axis: int = -1
    run_token: str = ""  # see _late_writes: no writes once the run has ended
    device: FlowDevice | None = None  # device="gpu": in-process executors only (_device)
    # apply's workers: the levels below the top run on a pool of that many threads
    # (``flow_pool``); None: on the process-wide pool (one thread per usable core).
    pool_workers: int | None = None

    @functools.cached_property
    def _pickled_fields(self) -> bytes:
        # Pickled once per job, not once per task that ships it.
        return pickle_fields(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (shared_job, (TopJob, self.run_token, self._pickled_fields))


@dataclass(frozen=True)
class TopStats:
    """What one top-level task did.

    ``bytes_read``: storage bytes this task's reads fetched (see ``read_inputs``:
    exact when the inputs are cached; without a cache, tasks in flight together
    in one process count each other's, so under threads the driver measures
    instead). ``saturated``: voxels of dst whose value did not fit its dtype
    (``_cast``), counted where this task cast them into it. ``times``: its fn calls,
    reads and writes, timed (``_breakdown``).
    """

    tasks_per_level: tuple[int, ...]
    bytes_read: int
    bytes_written: int
    saturated: int = 0
    times: TaskTimes = NO_TIMES


def run_top_task(job: TopJob, index: tuple[int, ...], box: Box) -> TopStats:
    """Graph task: read the padded superchunk once, process all levels, write, mark done."""
    stats = _run_top_task(job, index, box)
    check_run_live(job.run_token)
    mark_done(job, TOP, grid_key(index))
    return stats


def mark_done(job: TopJob, kind: str, key: str) -> None:
    """Mark ``key`` done: through the run's journal where the driver's threads run the
    task (one record a second, ``_journal``), else with a marker of its own."""
    journal = journal_of(job.run_token, kind)
    if journal is None:
        job.markers.mark_done(kind, key)
    else:
        journal.add(key)


def _run_top_task(job: TopJob, index: tuple[int, ...], box: Box) -> TopStats:
    with flow_pool(job.pool_workers):
        if job.device is None:
            return _run_levels(job, index, box, None, 0)
        with job.device.bound(index) as device_index:
            return _run_levels(job, index, box, job.device, device_index)


# Pools of a given size (apply's workers), one per size and process, kept for later runs.
_SIZED_POOLS: dict[int, WorkStealingPool] = {}
_SIZED_POOLS_LOCK = threading.Lock()


def flow_pool(workers: int | None) -> contextlib.AbstractContextManager[None]:
    """Inside this block, this thread's parallel loops (the reads, the levels below
    the top) run on a pool of ``workers`` threads, the calling one included; None: on
    the process-wide pool."""
    if workers is None:
        return contextlib.nullcontext()
    with _SIZED_POOLS_LOCK:
        pool = _SIZED_POOLS.get(workers)
        if pool is None:
            pool = _SIZED_POOLS[workers] = WorkStealingPool(workers)
    return local_pool(pool)


def _forget_sized_pools() -> None:
    global _SIZED_POOLS_LOCK
    _SIZED_POOLS.clear()  # a forked child has none of its parent's threads
    _SIZED_POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_sized_pools)


def _run_levels(
    job: TopJob, index: tuple[int, ...], box: Box, device: FlowDevice | None, device_index: int
) -> TopStats:
    spec = job.spec
    region = box.padded(spec.context_pad)
    timer = TaskTimer()
    data, read = read_inputs(job, region, timer)
    if device is not None:
        # Once per task and input; the host copy goes as soon as the device has its own.
        data = {name: device.upload(array, device_index) for name, array in data.items()}
    ctx = SubchunkContext(
        spec=spec,
        fn=job.fn,
        data=data,
        data_box=region,
        out_channel_shape=tuple(job.dst.channel_shape),
        counter=LevelCounter([0] * len(spec.levels)),
        run_token=job.run_token,
        device=device,
        device_index=device_index,
        timer=timer,
    )
    counter = ctx.counter
    if job.layers is None:
        written_bytes = stream_chunk(ctx, 0, box, job.dst)
        return TopStats(
            tuple(counter.counts), read, written_bytes, counter.saturated, timer.times()
        )
    # The voxels this task stands for in saturation counts: its chunk, inside dst.
    owned = box.intersection(job.dst.bounds)
    out = process_chunk(ctx, 0, box, owned)
    counts = tuple(counter.counts)
    # The superchunk is no longer needed: drop it before the cast and the write allocate.
    del ctx, data
    out_box = box.padded(spec.levels[0].blend)
    # A deferred flow keeps its margin past the bbox too (the layers cover it): a later
    # reduction over a larger region, where this face has a neighbour, blends across it.
    keep = out_box if spec.deferred else out_box.intersection(spec.bbox)
    part = out[at(keep, out_box)]
    target, dtype = job.layer_vols[job.layers.layer_of(index)], job.layers.dtype
    xp = np if device is None else device.xp()
    # Cast where the output is, so the smaller array crosses to the host.
    counted = at(owned.intersection(keep), keep)
    cast = cast_counting(part, dtype, spec.dst_dtype, counted, counter, xp)
    written = cast if device is None else device.download(cast)
    del out, part, cast
    check_run_live(job.run_token)
    timer.write(lambda: target.write(keep, written))
    return TopStats(counts, read, int(written.nbytes), counter.saturated, timer.times())


def read_inputs(job: TopJob, region: Box, timer: TaskTimer) -> tuple[dict[str, np.ndarray], int]:
    """Every input over ``region`` (dst voxels; each input at its own resolution, over
    ``scaled(region, scale)``), read once (in ordered slabs when cached, see above), and
    the bytes that took from storage.

    Cached reads take turns, so their count is this task's own; uncached reads of
    tasks running at once in one process (threads, a multi-threaded Dask worker)
    count each other's.

    The arrays are made read-only: ``fn`` gets views of them, and one chunk's
    ``fn`` writing into its input would corrupt its neighbours' inputs.

    ``timer`` times each read, and the wait for the read lock as a read's wait. An fn
    with a read of its own (``_fn_reader``) reads an uncached input through it.
    """
    cached = any(getattr(v, "cache_bytes", 0) for v in job.inputs.values())
    data: dict[str, np.ndarray] = {}
    if cached:
        lock = _read_lock(job.marker_root)
        timer.read(lock.acquire)
        try:
            before = _bytes_read(job)
            for name, vol in job.inputs.items():
                own = scaled(region, job.spec.scale_of(name))
                data[name] = _read_in_slabs(vol, own, job.sweep_axis % region.ndim, timer)
            read = _bytes_read(job) - before
        finally:
            lock.release()
    else:
        before = _bytes_read(job)
        reader = _fn_reader(job.fn)
        for name, vol in job.inputs.items():
            own = scaled(region, job.spec.scale_of(name))
            got = None if reader is None else timer.read(functools.partial(reader, vol, own))
            data[name] = timer.read(functools.partial(vol.read, own)) if got is None else got
        read = _bytes_read(job) - before
    for array in data.values():
        array.flags.writeable = False
    return data, read


def _fn_reader(fn: Callable[..., Any]) -> Callable[[Volume, Box], Any] | None:
    """fn's own read of an input, where its function has one (``read_input``: a
    downsample reduces each chunk as it is decoded, ``jobs._fused_read``):
    ``read_input(volume, box, **fn's keywords)`` returns what stands for
    ``volume.read(box)`` to fn (indexed alike, with ``flags``), or None for a plain read.
    Uncached inputs only: a cached input is read in slabs, through its cache."""
    reader = getattr(getattr(fn, "func", fn), "read_input", None)
    if reader is None:
        return None
    return functools.partial(reader, **getattr(fn, "keywords", {}))


def _bytes_read(job: TopJob) -> int:
    return sum(v.stats.bytes_read for v in job.inputs.values())


def _read_in_slabs(vol: Volume, region: Box, axis: int, timer: TaskTimer) -> np.ndarray:
    """``vol.read(region)``, one storage-chunk-thick slab along ``axis`` after another.

    The storage chunks inside one slab are fetched concurrently (one read per
    chunk on the local pool): the cache still sees the slabs in order, which
    is all the sweep needs, and decoding uses every core.
    """
    out = np.empty(tuple(vol.channel_shape) + region.shape, dtype=vol.dtype)
    spatial = vol.spatial_chunks
    cuts = [_cuts(region, a, int(spatial[a]), int(vol.offset[a])) for a in range(region.ndim)]
    others = [a for a in range(region.ndim) if a != axis]

    def read_piece(piece: Box) -> None:
        out[at(piece, region)] = timer.read(functools.partial(vol.read, piece))

    for lo, hi in itertools.pairwise(cuts[axis]):
        pieces = []
        for bounds in itertools.product(*(itertools.pairwise(cuts[a]) for a in others)):
            start, stop = list(region.start), list(region.stop)
            start[axis], stop[axis] = lo, hi
            for a, (b0, b1) in zip(others, bounds, strict=True):
                start[a], stop[a] = b0, b1
            pieces.append(Box(start, stop))
        try:
            parallel_map(read_piece, pieces)
        except ExceptionGroup as group:
            failures = list(group.exceptions)
        else:
            continue
        # The piece's own error (a CorruptChunkError naming the file), not the loop's group;
        # raised outside the except block, so the group does not become its __context__.
        first = failures[0]
        if len(failures) > 1:
            first.add_note(f"{len(failures) - 1} other read(s) of the same slab failed too")
        raise first
    return out


def _cuts(region: Box, axis: int, chunk: int, origin: int) -> list[int]:
    """Where ``region`` crosses storage chunk boundaries on ``axis``, with both ends.

    >>> _cuts(Box((-8,), (72,)), 0, 64, 0)
    [-8, 0, 64, 72]
    """
    first = origin + ((region.start[axis] - origin) // chunk + 1) * chunk
    return [region.start[axis], *range(first, region.stop[axis], chunk), region.stop[axis]]


def superchunks_in_flight(
    spec: FlowSpec,
    cores: int,
    *,
    memory_limit: int | None = None,
    top_bytes: int = 0,
    device: FlowDevice | None = None,
    io_waits: bool = False,
) -> int:
    """How many top-level tasks of this flow may hold their superchunk at once in one
    process: ``_read_model.superchunks_in_flight``, whose docstring states the rule, for
    ``spec``'s bottom chunks per top-level task, one more when ``io_waits`` (a volume on
    an object store), no more than ``memory_limit`` holds at ``top_bytes`` a task (when
    both are given) and ``device``'s GPUs. The planner's
    ``FlowPlan.superchunks_in_flight`` is the same figure without the memory and device
    steps (a test checks that they agree).

    >>> from chunkgraph.flow.plan import LevelSpec
    >>> from types import SimpleNamespace
    >>> two = SimpleNamespace(levels=(LevelSpec((256, 64), (0, 0), (0, 0), "linear"),
    ...                               LevelSpec((64, 64), (8, 8), (0, 0), "linear")))
    >>> superchunks_in_flight(two, 2), superchunks_in_flight(two, 8), superchunks_in_flight(two, 9)
    (1, 2, 3)
    >>> one = SimpleNamespace(levels=two.levels[:1])
    >>> superchunks_in_flight(one, 8), superchunks_in_flight(one, 8, memory_limit=30, top_bytes=10)
    (8, 3)
    """
    levels = spec.levels
    bottom_chunks = bottom_chunks_per_top(
        [lv.chunk for lv in levels], [lv.crop for lv in levels], [lv.blend for lv in levels]
    )
    fit = memory_limit // top_bytes if memory_limit is not None and top_bytes > 0 else None
    if device is None:
        return _superchunks_rule(cores, bottom_chunks, fit=fit, io_waits=io_waits)
    return _superchunks_rule(
        cores,
        bottom_chunks,
        fit=fit,
        devices=device.count,
        per_device=device.per_device,
        io_waits=io_waits,
    )


# Per flow (keyed by its directory) and process: the read lock (see read_inputs). Kept out
# of TopJob so that jobs stay picklable for process executors.
_READ_LOCKS: dict[str, threading.Lock] = {}
_FLOW_STATE_GUARD = threading.Lock()


def _read_lock(flow: str) -> threading.Lock:
    with _FLOW_STATE_GUARD:
        return _READ_LOCKS.setdefault(flow, threading.Lock())


def forget_flow(flow: str) -> None:
    """Drop this process's read lock of a finished flow."""
    with _FLOW_STATE_GUARD:
        _READ_LOCKS.pop(flow, None)
