"""The read and memory model of a flow's sizes, and the rules the run shares with it.

Pure arithmetic over ``StorageLayout``s (numbers: bounds, storage chunks, bytes per
voxel): ``evaluate`` answers, for top chunks over bottom chunks, what a run holds and
reads. ``_auto_sizes`` calls it for every size it tries and for sizes a user gave::

    top, bottom, pads, cores ──> _memory        superchunks in flight x superchunk + bottoms
                                      │ room = memory_limit - that
                                      v
    top grid (C order)      ──> _reuse_needs    per moving axis, fastest first: the cache
                                      │         its reuse needs (_reuse_need)
                                      v
                                _fit_cache      the needs that fit the room, in that order
                                      v
                                _amplification  bytes fetched (union of snapped reads where
                                                reused, their sum where not) / bytes inside

Two rules are stated here once and used by the run too: ``superchunks_in_flight`` (the
top-level tasks that may hold their superchunk at once; ``_top_task``) and
``sweep_axis`` (the axis tasks follow each other along; the top task's slab reads).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chunkgraph._util import format_bytes

# Top-level tasks in flight beyond those the cores need, when requests wait on an object
# store (``superchunks_in_flight``, step 2): one reads ahead while another computes.
IO_TASKS_IN_FLIGHT = 1
# Threads per core of the pool that runs the levels below the top, for the same flows:
# a bottom chunk's reads and writes wait on requests, and another thread computes then.
IO_THREADS_PER_CORE = 2


# Top-level tasks that may hold their superchunk at once in a GPU flow. Its levels below
# run in the task's own thread, so the CPU rule (enough tasks for their bottom chunks to
# cover the cores) says nothing about the device; two let one task read, upload, download
# and write while the other computes. More would overlap more I/O but hold more host and
# device memory; a CPU flow's own count is kept when it is larger (the same host memory).
DEVICE_TASKS_IN_FLIGHT = 2


def device_tasks_in_flight(cpu_in_flight: int, devices: int = 1, per_device: int = 2) -> int:
    """Top-level tasks in flight in a GPU flow on ``devices`` GPUs that each hold
    ``per_device`` tasks' data at once, given the CPU flow's count (0: unbounded).

    >>> device_tasks_in_flight(1), device_tasks_in_flight(4), device_tasks_in_flight(0)
    (2, 4, 0)
    >>> device_tasks_in_flight(4, devices=4), device_tasks_in_flight(4, 4, per_device=1)
    (8, 4)
    """
    if cpu_in_flight == 0:
        return 0
    return max(cpu_in_flight, per_device * max(devices, 1))


def io_pool_threads(cores: int) -> int:
    """The threads of a flow's local pool when its requests wait on an object store."""
    return IO_THREADS_PER_CORE * max(1, cores)


if TYPE_CHECKING:
    from chunkgraph.flow.plan._auto_sizes import StorageLayout
    from chunkgraph.geometry import Box

# Head-room of the cache's budget above the shared halo layers and the probe's region it
# must hold: the model's spans are the widest read's, and a scaled input's chunks are
# rounded to whole dst voxels. What the cache holds is the pinned chunks alone (never
# more than the plan's reads keep), so the slack costs memory only if the model errs.
MAX_CACHE_SLACK = 1.25

# Buffers per bottom chunk being computed, in units of its padded region: the input view
# is free (a slice of the superchunk), fn's output and one temporary of fn are not.
FN_BUFFERS = 2


# --- shared rules: the sweep and the superchunks in flight --------------------------------


def sweep_axis(grid: tuple[int, ...]) -> int:
    """The axis along which top-level tasks follow each other: the fastest-varying axis of
    the top grid (tasks run in its C order) with more than one task; the last axis when
    there is only one task. The planner's reuse model and the top task's slab reads
    (``TopJob.sweep_axis``) both use it.

    >>> sweep_axis((4, 8, 1)), sweep_axis((1, 1, 1)), sweep_axis((2, 1, 3))
    (1, 2, 2)
    """
    moving = [a for a, n in enumerate(grid) if n > 1]
    return moving[-1] if moving else len(grid) - 1


def superchunks_in_flight(
    cores: int,
    bottom_chunks: int,
    *,
    fit: int | None = None,
    devices: int | None = None,
    per_device: int = DEVICE_TASKS_IN_FLIGHT,
    io_waits: bool = False,
) -> int:
    """How many top-level tasks of one process may hold their superchunk at once.

    The rule, in four steps:

    1. **Cores.** A top-level task runs the levels below on the local pool, so one task
       with at least ``cores`` bottom chunks keeps every core busy by itself; a second
       in flight would only add a second superchunk (a flow's largest buffer) and compete
       for the same cores. So: the fewest tasks whose bottom chunks cover the cores,
       ``ceil(cores / bottom_chunks)``, at least 1. A one-level flow's task is its own
       bottom chunk (``bottom_chunks = 1``): one task per core.
    2. **Latency** (``io_waits``: an input or dst on an object store, where each request
       waits tens of milliseconds): a task's read and its write leave the cores idle, and
       the local pool cannot hide that. One more task in flight reads the next superchunk
       (or writes its output) while one computes, so requests are in flight whatever the
       number of CPU workers; the memory step still bounds it.
    3. **Memory** (the run, given ``fit`` = how many superchunks the memory budget holds):
       no more than that, and at least one. The planner passes none: it cuts the top
       chunk into bands instead, until its superchunks fit.
    4. **Devices** (a GPU flow, ``devices`` GPUs of ``per_device`` tasks each; see
       ``_device``): the levels below run in the task's thread on its GPU, so at least
       ``per_device`` tasks per GPU, or the count above if it is larger.

    Worked: 8 cores, top tasks of 4 x 4 bottom chunks: 1; of 4 bottom chunks: 2 (9 cores:
    3); one level: 8, or 3 when memory holds 3 superchunks; one GPU lifts 1 to 2.

    >>> superchunks_in_flight(8, 16), superchunks_in_flight(8, 4), superchunks_in_flight(9, 4)
    (1, 2, 3)
    >>> one_level = 1
    >>> [superchunks_in_flight(8, one_level, fit=f) for f in (None, 3, 0)]
    [8, 3, 1]
    >>> superchunks_in_flight(8, 16, devices=1), superchunks_in_flight(8, 1, devices=2)
    (2, 8)
    >>> on_s3 = dict(io_waits=True)
    >>> superchunks_in_flight(8, 16, **on_s3), superchunks_in_flight(8, 16, fit=1, **on_s3)
    (2, 1)
    """
    in_flight = max(1, -(-cores // max(1, bottom_chunks)))
    if io_waits:
        in_flight += IO_TASKS_IN_FLIGHT
    if fit is not None:
        in_flight = min(in_flight, max(1, fit))
    if devices is not None:
        in_flight = device_tasks_in_flight(in_flight, devices, per_device)
    return in_flight


def bottom_chunks_per_top(
    chunk_sizes: Sequence[tuple[int, ...]],
    crop_pads: Sequence[tuple[int, ...]],
    blend_pads: Sequence[tuple[int, ...]],
) -> int:
    """Bottom chunks in one top-level task: the product over the levels below the top of
    how many of their chunks tile the parent's region ``C + 2c + 2b`` (1 for one level).

    >>> bottom_chunks_per_top([(256, 64), (64, 64)], [(0, 0), (8, 8)], [(0, 0), (0, 0)])
    4
    >>> bottom_chunks_per_top([(256, 256), (68, 68)], [(8, 8), (2, 2)], [(0, 0), (0, 0)])
    16
    """
    count = 1
    for i in range(1, len(chunk_sizes)):
        region = (
            c + 2 * p + 2 * b
            for c, p, b in zip(chunk_sizes[i - 1], crop_pads[i - 1], blend_pads[i - 1], strict=True)
        )
        count *= math.prod(r // c for r, c in zip(region, chunk_sizes[i], strict=True))
    return count


# --- the read and memory model -----------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    sweep: int
    cache: int
    cache_per_input: tuple[tuple[str, int], ...]
    cache_reason: str
    amplification: float
    amplification_uncached: float
    superchunk: int
    in_flight: int
    bottoms: int
    sweep_reused: bool  # the halo shared along the sweep comes from the cache (or no halo)
    sweep_tasks: int = 1  # top tasks along the sweep axis (1: one task spans the bbox there)
    reused: tuple[int, ...] = ()  # the axes whose halo reuse the cache serves

    @property
    def memory(self) -> int:
        return self.cache + self.in_flight * self.superchunk + self.bottoms


@dataclass(frozen=True)
class _Memory:
    """What a plan holds besides the cache: ``in_flight`` superchunks (each the padded read
    of every input, plus one accumulation buffer below the top) and the bottom buffers."""

    superchunk: int
    in_flight: int
    bottoms: int

    @property
    def held(self) -> int:
        return self.in_flight * self.superchunk + self.bottoms


# Per moving axis, fastest first: (axis, cache bytes over all inputs, per input).
_Needs = list[tuple[int, int, list[int]]]


def evaluate(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    dst: StorageLayout,
    top: tuple[int, ...],
    bottom: tuple[int, ...],
    crop: tuple[int, ...],
    blend: tuple[int, ...],
    cores: int,
    memory_limit: int,
    accumulate_bytes: int,
    *,
    top_pad: tuple[int, ...] | None = None,
    levels: int = 2,
    owned: bool = True,
    per_top: int | None = None,
    probe: bool = False,
) -> Evaluation:
    """Cache, amplification and memory of top chunks ``top`` over bottom chunks ``bottom``.

    Steps: the memory held outside the cache (``_memory``); what the cache needs for the
    reuse along each moving axis (``_reuse_needs``); the needs that fit the room left
    (``_fit_cache``); bytes fetched with and without that cache (``_amplification``).

    ``probe``: apply calls ``fn`` once on the first bottom chunk before the tasks (a flow
    of more than one call): its read is one more reader of the storage chunks there. The
    cache keeps them for the first task (one top task, or no halo, plans a cache of the
    probe's region alone); where no cache holds them, the first task reads them again and
    the predicted amplification counts it. The sizes never depend on it: the cache takes
    only the room the budget leaves, so a flow id is the same with the probe on or off.
    """
    low = tuple(c + b for c, b in zip(crop, blend, strict=True))
    context = tuple(p + q for p, q in zip(low, top_pad or (0,) * bbox.ndim, strict=True))
    grid = tuple(-(-e // t) for e, t in zip(bbox.shape, top, strict=True))
    moving = [a for a in range(bbox.ndim) if grid[a] > 1]
    if per_top is None:  # bottom chunks per top chunk, pads only at the bottom
        per_top = math.prod(t // b for t, b in zip(top, bottom, strict=True))
    probe = probe and math.prod(grid) * per_top > 1  # one call of fn in all is its own probe
    held = _memory(
        top, bottom, low, context, sum(v.voxel_bytes for v in inputs), cores, per_top,
        levels > 1, max(accumulate_bytes, dst.voxel_bytes), accumulate_bytes,
        io_waits=any(v.remote for v in (*inputs, dst)),
    )  # fmt: skip
    room = max(0, memory_limit - held.held)
    sweep = sweep_axis(grid)
    needs = _cache_needs(bbox, inputs, top, bottom, low, context, moving, held.in_flight, probe)
    wanted = owned and (any(context) or probe)
    reused, cache, per_input_cache = _fit_cache(needs, room, len(inputs), wanted)
    # The probe's chunks are read again unless the cache keeps them (the first need's).
    again = _probe_bytes(bbox, inputs, bottom, low, context) if probe else 0
    why = _cache_reason(needs, reused, cache, room, context, owned, moving, probe)
    return Evaluation(
        sweep=sweep,
        cache=cache,
        cache_per_input=tuple((v.name, c) for v, c in zip(inputs, per_input_cache, strict=True)),
        cache_reason=why,
        amplification=_amplification(bbox, inputs, top, context, reused, 0 if cache else again),
        # The tasks' reads alone, as the dry run's estimate counts them (_estimate).
        amplification_uncached=_amplification(bbox, inputs, top, context, set()),
        superchunk=held.superchunk,
        in_flight=held.in_flight,
        bottoms=held.bottoms,
        sweep_reused=not any(context) or not moving or sweep in reused,
        sweep_tasks=grid[sweep],
        reused=tuple(sorted(reused)),
    )


def _memory(
    top: tuple[int, ...],
    bottom: tuple[int, ...],
    low: tuple[int, ...],
    context: tuple[int, ...],
    in_bytes: int,
    cores: int,
    per_top: int,
    below_top: bool,
    buffer_bytes: int,
    accumulate_bytes: int,
    *,
    io_waits: bool = False,
) -> _Memory:
    """Superchunks in flight (``superchunks_in_flight``) and the bottom chunks computing:
    ``in_bytes`` per voxel over the top chunk padded by ``context``, plus one accumulation
    buffer over a bottom region when there are levels ``below_top``; ``FN_BUFFERS`` of
    ``buffer_bytes`` per voxel over the padded bottom region per core at work.

    >>> _memory((64,), (16,), (2,), (2,), 4, 2, 4, True, 8, 8)
    _Memory(superchunk=432, in_flight=1, bottoms=640)
    """
    bottom_region = math.prod(b + 2 * p for b, p in zip(bottom, low, strict=True))
    superchunk = math.prod(t + 2 * p for t, p in zip(top, context, strict=True)) * in_bytes
    superchunk += bottom_region * accumulate_bytes if below_top else 0
    in_flight = superchunks_in_flight(cores, per_top, io_waits=io_waits)
    threads = io_pool_threads(cores) if io_waits else cores  # bottom chunks at work at once
    bottoms = min(threads, per_top * in_flight) * bottom_region * FN_BUFFERS * buffer_bytes
    return _Memory(superchunk, in_flight, bottoms)


def _reuse_needs(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    top: tuple[int, ...],
    bottom: tuple[int, ...],
    low: tuple[int, ...],
    context: tuple[int, ...],
    moving: list[int],
    in_flight: int,
) -> _Needs:
    """Per moving axis, fastest first: the cache bytes its reuse needs, on top of the
    faster axes' (``_reuse_need``), with ``MAX_CACHE_SLACK``, at most all the chunks the
    flow reads. The fastest axis's need is at least the probe's region (``_probe_need``):
    the probe's chunks lie in the first task's read, which takes those of the layers it
    does not share before it keeps the shared ones, so the two do not add up."""
    needs: _Needs = []
    so_far = [0] * len(inputs)
    for rank, a in enumerate(reversed(moving)):
        so_far = [
            n + _reuse_need(bbox, v, top, context, moving, a, in_flight)
            for n, v in zip(so_far, inputs, strict=True)
        ]
        if rank == 0:
            so_far = [
                max(n, _probe_need(bbox, v, bottom, low, context))
                for n, v in zip(so_far, inputs, strict=True)
            ]
        per_input = [
            min(int(n * MAX_CACHE_SLACK), _whole(bbox, v, top, context))
            for n, v in zip(so_far, inputs, strict=True)
        ]
        needs.append((a, sum(per_input), per_input))
    return needs


def _cache_needs(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    top: tuple[int, ...],
    bottom: tuple[int, ...],
    low: tuple[int, ...],
    context: tuple[int, ...],
    moving: list[int],
    in_flight: int,
    probe: bool,
) -> _Needs:
    """What the cache needs: the reuse along each moving axis (``_reuse_needs``); for one
    top task with the probe on, the probe's region alone (``_probe_need``, with
    ``MAX_CACHE_SLACK``), kept from the probe to the task, as a need along the sweep."""
    if moving or not probe:
        return _reuse_needs(bbox, inputs, top, bottom, low, context, moving, in_flight)
    per_input = [
        min(int(_probe_need(bbox, v, bottom, low, context) * MAX_CACHE_SLACK),
            _whole(bbox, v, top, context))
        for v in inputs
    ]  # fmt: skip
    return [(bbox.ndim - 1, sum(per_input), per_input)]  # one task: sweep_axis is the last


def _whole(bbox: Box, vol: StorageLayout, top: tuple[int, ...], pad: tuple[int, ...]) -> int:
    """Bytes of every storage chunk of ``vol`` the flow reads."""
    spans = (read_spans(bbox, vol, top, pad, a) for a in range(bbox.ndim))
    return math.prod(_union_length(s) for s in spans) * vol.voxel_bytes


def _fit_cache(
    needs: _Needs, room: int, n_inputs: int, wanted: bool
) -> tuple[set[int], int, list[int]]:
    """The axes whose reuse the cache serves, fastest first while their need fits ``room``,
    with the cache (total, per input); none unless ``wanted`` (apply owns it, and there is
    a halo).

    >>> _fit_cache([(2, 10, [10]), (1, 50, [50])], 20, 1, True)
    ({2}, 10, [10])
    >>> _fit_cache([(2, 10, [10])], 20, 1, False)
    (set(), 0, [0])
    """
    reused: set[int] = set()
    cache, per_input = 0, [0] * n_inputs
    if not wanted:
        return reused, cache, per_input
    for a, need, split in needs:
        if need > room:
            break
        reused.add(a)
        cache, per_input = need, split
    return reused, cache, per_input


def _amplification(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    top: tuple[int, ...],
    context: tuple[int, ...],
    reused: set[int],
    again: int = 0,
) -> float:
    """Bytes fetched (``_fetched``, the cache serving the reuse along ``reused``, plus
    ``again`` bytes read a second time: the probe's, where no cache keeps them) over the
    input bytes inside the bbox and each input's bounds (a bbox expanded past them reads
    nothing there); 0.0 without inputs."""
    total = sum(v.voxel_bytes * bbox.intersection(v.bounds).size for v in inputs)
    fetched = sum(_fetched(bbox, v, top, context, reused) for v in inputs) + again
    return fetched / total if total else 0.0


def _cache_reason(
    needs: _Needs,
    reused: set[int],
    cache: int,
    room: int,
    context: tuple[int, ...],
    owned: bool,
    moving: list[int],
    probe: bool = False,
) -> str:
    """Why the cache is what it is: none needed or none owned, or which reuse it keeps
    (the probe's region among it when ``probe``)."""
    if not owned and (probe or any(context)):
        return "the inputs carry their own cache, so apply adds none" + (
            "; the first task reads the probe's region again unless that cache keeps it"
            if probe
            else ""
        )
    if not moving or not any(context):
        alone = (
            "no halo: tasks read disjoint regions"
            if not any(context)
            else "one top task: nothing is read twice"
        )
        if not probe:
            return f"{alone}, so no cache"
        if cache:
            return (
                f"{alone} but the probe's region: cache {format_bytes(cache)} keeps the "
                "storage chunks of its read of the first bottom chunk until the first task "
                "reads them"
            )
        return (
            f"{alone} but the probe's region, whose cache (needs "
            f"{format_bytes(needs[0][1] if needs else 0)}) does not fit the "
            f"{format_bytes(room)} left of the budget, so the first task reads it again"
        )
    kept = [a for a, _, _ in needs if a in reused]
    missed = [(a, n) for a, n, _ in needs if a not in reused]
    reason = (
        f"cache {format_bytes(cache)}: keeps the halo chunks neighbours share along "
        f"{'axes ' + str(kept) if kept else 'no axis'}"
    )
    if missed:
        reason += (
            "; along "
            + ", ".join(f"axis {a} (needs {format_bytes(n)})" for a, n in missed)
            + f" it does not fit the {format_bytes(room)} left of the budget, so halos are "
            "read again"
        )
    if probe:
        reason += (
            " and the probe's region, until the first task reads it"
            if cache
            else "; the first task reads the probe's region again"
        )
    return reason


def read_spans(
    bbox: Box, vol: StorageLayout, top: tuple[int, ...], pad: tuple[int, ...], axis: int
) -> list[tuple[int, int]]:
    """Per top task along ``axis``: its read, clipped to the input, snapped to storage."""
    spans = []
    for start in range(bbox.start[axis], bbox.stop[axis], top[axis]):
        span = snap_span(start - pad[axis], start + top[axis] + pad[axis], vol, axis)
        clipped = max(start - pad[axis], vol.bounds.start[axis])
        spans.append((clipped, clipped) if span is None else span)
    return spans


def snap_span(lo: int, hi: int, vol: StorageLayout, axis: int) -> tuple[int, int] | None:
    """``[lo, hi)`` clipped to ``vol``'s bounds along ``axis`` and snapped out to its
    storage chunks (what a read of it fetches); None when it reads nothing there.

    >>> from types import SimpleNamespace as Layout
    >>> from chunkgraph.geometry import Box
    >>> vol = Layout(bounds=Box((-8,), (300,)), chunks=(28,), voxel_bytes=4)
    >>> snap_span(0, 70, vol, 0), snap_span(290, 320, vol, 0), snap_span(300, 320, vol, 0)
    ((-8, 76), (272, 300), None)
    """
    origin, size, bound = vol.bounds.start[axis], vol.chunks[axis], vol.bounds.stop[axis]
    lo, hi = max(lo, origin), min(hi, bound)
    if hi <= lo:
        return None
    return origin + (lo - origin) // size * size, min(origin - (origin - hi) // size * size, bound)


def _fetched(
    bbox: Box, vol: StorageLayout, top: tuple[int, ...], pad: tuple[int, ...], reused: set[int]
) -> int:
    """Bytes fetched from ``vol``: per axis, the union of the tasks' reads where the cache
    serves the reuse along it, else their sum (each task reads its halo again)."""
    total = vol.voxel_bytes
    for a in range(bbox.ndim):
        spans = read_spans(bbox, vol, top, pad, a)
        if a in reused:
            total *= _union_length(spans)
        else:
            total *= sum(hi - lo for lo, hi in spans)
    return total


def _union_length(spans: list[tuple[int, int]]) -> int:
    """Length of the union of sorted, overlapping-or-touching spans."""
    length, reach = 0, None
    for lo, hi in spans:
        if reach is None or lo >= reach:
            length += hi - lo
        elif hi > reach:
            length += hi - reach
        reach = hi if reach is None else max(reach, hi)
    return length


def _reuse_need(
    bbox: Box,
    vol: StorageLayout,
    top: tuple[int, ...],
    pad: tuple[int, ...],
    moving: list[int],
    axis: int,
    in_flight: int = 1,
) -> int:
    """Cache bytes of ``vol`` that the halo chunks shared along ``axis`` hold at most,
    without slack: whole storage chunks, from a chunk's first reader to its last, so only
    the shared layers wait, never a whole read. That is what an LRU needs (the caches of
    worker processes, and a caller's own); the cache apply owns in this process keeps of
    those chunks only the parts the readers still to come take (``_reader_counts``), and
    so holds less than this budget.

    Along the fastest-moving axis a task's shared chunks wait one task: the overlap of
    two successive reads (snapped to storage chunks) across the task's whole read on the
    other axes, for each of the ``in_flight`` tasks whose reads may come out of order.
    Along a slower axis they wait for a whole row of the faster axes' tasks: the overlap
    across the union of those tasks' reads on the faster axes.

    >>> from types import SimpleNamespace as Layout
    >>> from chunkgraph.geometry import Box
    >>> vol = Layout(bounds=Box((0, 0), (64, 256)), chunks=(16, 16), voxel_bytes=4)
    >>> _reuse_need(vol.bounds, vol, (64, 64), (2, 2), [1], 1)  # 2 layers of 16 x 64 x 4 B
    8192
    """
    spans = [read_spans(bbox, vol, top, pad, a) for a in range(bbox.ndim)]
    shared = max((max(0, p[1] - q[0]) for p, q in itertools.pairwise(spans[axis])), default=0)
    widest = [max((hi - lo for lo, hi in s), default=0) for s in spans]
    faster = [a for a in moving if a > axis]
    across = math.prod(
        _union_length(spans[a]) if a in faster else widest[a] for a in range(bbox.ndim) if a != axis
    )
    waiting = in_flight if not faster else 1
    return shared * across * waiting * vol.voxel_bytes


def _probe_bytes(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    bottom: tuple[int, ...],
    low: tuple[int, ...],
    context: tuple[int, ...],
) -> int:
    """Bytes the probe fetches over all inputs (``_probe_need``'s storage chunks)."""
    return sum(_probe_need(bbox, v, bottom, low, context) for v in inputs)


def _probe_need(
    bbox: Box,
    vol: StorageLayout,
    bottom: tuple[int, ...],
    low: tuple[int, ...],
    context: tuple[int, ...],
) -> int:
    """Bytes of ``vol``'s storage chunks under the probe's read (the first bottom chunk
    padded by ``low``, at the bbox corner less the pads above the bottom): the cache
    keeps them from the probe to the first tasks.

    >>> from types import SimpleNamespace as Layout
    >>> from chunkgraph.geometry import Box
    >>> vol = Layout(bounds=Box((0,), (256,)), chunks=(64,), voxel_bytes=4)
    >>> _probe_need(vol.bounds, vol, (128,), (8,), (8,)) // 4  # [-8, 136) -> chunks 0..2
    192
    """
    total = vol.voxel_bytes
    for a in range(bbox.ndim):
        lo = bbox.start[a] - context[a]
        span = snap_span(lo, lo + bottom[a] + 2 * low[a], vol, a)
        if span is None:
            return 0
        total *= span[1] - span[0]
    return total


def stream_boundary_bytes(
    bbox: Box, inputs: Sequence[StorageLayout], top: tuple[int, ...], pad: tuple[int, ...]
) -> tuple[int, int]:
    """(bytes, input bytes inside the bbox) of one boundary between two streams of top
    tasks along the sweep, each stream in a process with its own cache: the two tasks
    astride it both fetch the storage chunks their snapped reads share (the halo layer on
    each side), across one task's read on the other axes. ``_reuse_need`` of the sweep
    with one task in flight.

    >>> from types import SimpleNamespace as Layout
    >>> from chunkgraph.geometry import Box
    >>> vol = Layout(bounds=Box((0, 0), (64, 256)), chunks=(16, 16), voxel_bytes=4)
    >>> extra, total = stream_boundary_bytes(vol.bounds, [vol], (64, 32), (2, 2))
    >>> extra / total  # 2 layers of 16 of the 256 along the sweep
    0.125
    """
    grid = tuple(-(-e // t) for e, t in zip(bbox.shape, top, strict=True))
    moving = [a for a in range(bbox.ndim) if grid[a] > 1]
    total = sum(v.voxel_bytes * bbox.intersection(v.bounds).size for v in inputs)
    if not moving or not any(pad):
        return 0, total
    sweep = sweep_axis(grid)
    extra = sum(_reuse_need(bbox, v, top, pad, [sweep], sweep) for v in inputs)
    return extra, total
