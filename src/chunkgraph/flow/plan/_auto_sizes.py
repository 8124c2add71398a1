"""Automatic planning of a flow: levels, chunk sizes and the input cache, from the data's layout.

``plan_sizes`` is pure: it sees numbers only (the bbox, every input's bounds,
storage chunks and voxel bytes, dst's, the bottom pads, cores, a memory
budget) and returns a ``FlowPlan``. ``read_plan`` applies the same read model
to sizes a user gave, so that ``apply`` can size its own cache for them and
warn when they will amplify reads. Neither reads data.

Goals, in order, and how each is met (``P`` = crop + blend per axis, ``s``
an input's storage chunk, ``E`` the bbox extent)::

    every storage chunk read ~once  top chunks aligned to every input's and dst's
                                    storage chunks (the "grain", their lcm); tasks
                                    follow each other along one "sweep" axis, and a
                                    cache that apply owns keeps the halo layers two
                                    neighbours share (2 * ceil(P / s) storage chunks)
                                    until their last reader (_reader_counts)
    little redundant compute        bottom chunk >= 2P / MAX_CROP_SHARE per axis:
                                    the crop margin is <= 1/8 of it (2 * 8 / 128)
    bounded memory                  cache + superchunks in flight + bottom chunks
                                    being computed <= memory_limit, else the
                                    cross-section is cut into bands (reads grow)
    the divisibility rule           bottom | top on every axis, pads only at the bottom

Shape of the plan. The top chunk spans the whole bbox on every axis but the
sweep axis (the longest: its cross-section, and so the cache and the
superchunk, is the smallest), and is one bottom chunk thick along it. So the
top grid moves along one axis only, tasks run as one sweep, and each top task
shares halo storage chunks with its successor alone. The cache apply owns keeps a
chunk from its first reader to its last, by the plan's count of readers (the tasks
whose padded read covers it, and the probe): it holds the layers a task shares with
its successor and the probe's region, never a whole task's read, whatever order the
reads' parallel pieces arrive in, and of a shared chunk it keeps only the part the
readers still to come take. Worked:
256 x 512 x 512 float32 in 64^3 storage chunks, crop 8: bottom >= 16 * 8 = 128,
so the levels are (256, 512, 128) over (128, 256, 128). Task k reads [128k - 8,
128k + 136) along the sweep: 4 layers of chunks, of which its successor takes the
last 8 voxels of one and the whole of the next. The cache is sized for the two whole
layers, 2 x 64 x 256 x 512 x 4 B = 64 MiB (x MAX_CACHE_SLACK = 80, see _read_model),
what an LRU needs (a worker process's cache); apply's own cache in this process keeps
of them only (8 + 64) x 256 x 512 x 4 B = 36 MiB, and every storage chunk is read once.

Memory bound. The flow holds the cache, the superchunks in flight (the top chunk padded:
the cross-section, one bottom chunk thick along the sweep) and the bottom chunks'
buffers. Each is a cross-section's or a bottom chunk's worth: none grows with the bbox's
length along the sweep, the longest axis, so a volume 4x as long plans the same memory
(``FlowPlan.memory_words`` says so in the plan's summary).

Reuse model (also for user-given sizes). The top grid runs in C order; the
sweep is its fastest-moving axis. A halo chunk shared along the sweep is
reused one task later (needs the two halo layers above); along a slower
moving axis ``a`` it is reused after every task of the faster axes has run,
so the layers shared along ``a`` wait across the whole row of those tasks. The cache is the
largest of these needs that fits the budget; on axes whose need does not fit,
each task's halo is read again, and the predicted amplification says so.

Odd extents. Sizes divide the bbox and sit on the grain, so an extent the grain does not
divide (1000 voxels in chunks of 128) would leave the whole bbox as the only size on its
axis: one task holding all of it. Where the bbox ends at dst's edge, ``plan_automatic``
grows it to whole grains (1024) when that adds less than one of dst's chunks, as
``expand_bbox=True`` grows it: reads past the edge give fill values, writes are clipped.

A bbox off the grid. A bbox whose start, or stop inside dst, is off dst's storage grid
(4073 voxels from 16, chunks of 16) has the same trouble inside dst, where growing it
would write voxels the caller did not ask for. ``plan_automatic`` plans over it grown out
to the grid (``out_to_grid``: along the sweep to whole grains, 4080 = 16 x 255) or, where
that splits badly and within 1/8 more, on to a length with a power-of-two factor
(``grown_off_grid``, 4096), and the flow clips every write to the caller's bbox
(``FlowSpec.write_box``), merging the storage chunks it cuts as at any unaligned edge: a
sweep whose memory does not grow with the length. A short bbox stays on its grid (7..153
in chunks of 16 computes 0..160, not 0..192).

A prime multiple of the grain. A bbox on the grid whose length is 16 x 251 in chunks of
16 has the same trouble: its only sizes on the grain are 16 (margins of crop 2 a quarter
of the bottom chunk, and bands of 16 across the sweep re-read their halo) and the whole
length (one task spanning the sweep). ``plan_automatic`` plans it grown the same way
(along the sweep, and across it too, past dst's edge where the bbox ends there) where that
plan is better (``_best_region``: no task spanning the sweep, fewer reads, or less compute
where the bbox's own plan breaks the margin rule) and adds at most ``MAX_GROWTH``; writes
are clipped to the bbox as above. A bbox whose own plan keeps to the rules stays as it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import divisors, format_bytes
from chunkgraph.flow.plan._args import per_level
from chunkgraph.flow.plan._read_model import (
    FN_BUFFERS,
    Evaluation,
    bottom_chunks_per_top,
    evaluate,
    stream_boundary_bytes,
)
from chunkgraph.flow.plan._resolution import Scale, scale_of, step_of
from chunkgraph.flow.plan._spec import resolve_region, same_storage
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.flow.plan._spec import FlowSpec
    from chunkgraph.volume import Volume

# The crop (and blend) margins' share of a bottom chunk, per axis: a bottom chunk is at
# least 2 * pad / MAX_CROP_SHARE. 1/8 keeps redundant compute <= 1.125^3 = 1.42x in 3-d
# while a 128^3 float32 bottom chunk (8 MiB) still fits a core's share of memory; 1/16
# would take 256^3 (64 MiB per core, three buffers each) for 1.19x.
MAX_CROP_SHARE = 1 / 8

# What the buffers of one bottom chunk being computed may take (FN_BUFFERS over its
# padded region, in the accumulation dtype: the read model's figure), at most: the
# shape with the least redundant compute under it is chosen. 128 MiB lets 64^3-chunked
# float32 data with crop 8 take 256 x 128 x 128 (1.34x redundant compute) instead of
# 128^3 (1.42x) for about 20 MiB more per core in real buffers (fn's float32 output and
# one temporary); 256^2 x 128 (1.27x) would take 170 MiB. An eighth of memory_limit
# when that is less, so that a small budget is not spent on margins.
BOTTOM_BYTES = 128 * 2**20
BOTTOM_SHARE = 1 / 8
# Sizes tried per axis, smallest first: enough for a 3-d shape search (6^3 shapes).
BOTTOM_CANDIDATES = 6
# A larger bottom chunk never leaves the bbox fewer pieces than this (or than the
# smallest sizes leave): the cores share bottom chunks, and sizes must not depend on the
# cores (a resumed run plans the same flow id), so 16 covers a 16-core machine.
MIN_BOTTOM_CHUNKS = 16


class ReadAmplificationWarning(UserWarning):
    """Given flow sizes will read storage chunks several times (the message has the figures)."""


ReadAmplificationWarning.__module__ = "chunkgraph.flow"


@dataclass(frozen=True)
class StorageLayout:
    """One volume as the planner sees it: spatial bounds, storage chunks, bytes per voxel,
    and whether each of its requests waits on an object store (tens of milliseconds)."""

    name: str
    bounds: Box
    chunks: tuple[int, ...]
    voxel_bytes: int  # all channels
    remote: bool = False


@dataclass(frozen=True)
class FlowPlan:
    """The chosen (or given) sizes of a flow, the cache ``apply`` owns, and why.

    Sizes and pads are in the spelling ``apply`` takes, so
    ``apply(..., **plan.arguments())`` reruns it as given.

    Attributes:
        automatic: Whether the sizes were chosen here (else given).
        chunk_sizes: The chunk of each level, top first.
        crop_pads: The crop pad of each level, top first.
        blend_pads: The blend pad of each level, top first.
        direct_writes: The top level writes dst directly (``skip_intermediates``).
        sweep_axis: The axis the top tasks follow each other along.
        cache_bytes: The cache ``apply`` owns, over all inputs (0: none, or the
            user's own).
        cache_per_input: That cache's bytes per input name.
        read_amplification: The predicted read amplification with ``cache_bytes``.
        amplification_without_cache: What the same sizes' tasks read with no cache (the
            probe's read not counted, as in the dry run's estimate).
        memory_limit: The memory budget planned for, in bytes.
        memory_limit_source: Where the budget came from (``"given"``, or the default
            and the memory available).
        memory_bytes: The predicted peak: cache + superchunks in flight + bottom
            buffers.
        superchunks_in_flight: Top tasks' reads held at once (one reads ahead while
            another computes).
        reasons: Why each size was chosen, in words.
        expand_bbox: The bbox grows past its stop to whole top chunks (``apply``'s
            ``expand_bbox=True``): an extent that is no multiple of what an input at
            another resolution needs.
        inputs_cache: The bytes of the cache the caller's inputs carry (0: none). Apply
            then owns none, and the prediction counts no cache: the caller's is an LRU
            of a size the plan did not choose.
        superchunk_bytes: One top task's padded read, with its accumulation buffer below
            the top: ``memory_bytes`` holds ``superchunks_in_flight`` of them.
        bottom_bytes: The buffers of the bottom chunks computing at once.
        sweep_tasks: Top tasks along the sweep axis (1: one task spans the bbox there, so
            its superchunk grows with that length; 0: not known).
        grown_bbox: The region the tasks tile when the caller's bbox is off dst's storage
            grid, or its length has no good tiling on it (a prime multiple of the grain):
            the bbox grown (``plan_automatic``), past dst's edge where it ends there; every
            write is clipped to the caller's bbox. None: the tasks tile the bbox itself. Such sizes
            need not tile the bbox, so ``arguments()`` reruns them through automatic sizes
            (or over the grown bbox), not as given sizes over the caller's bbox.
        streams: Contiguous streams of top tasks, each read through its own process's
            cache (``executor="processes"``: one per worker process; a Dask cluster: one
            per worker thread); 1: one cache serves every task. ``read_amplification``
            counts the halo layers read on both sides of each boundary between streams.
        worker_processes: Processes that each hold their own cache, superchunks and
            bottom buffers: ``executor="processes"``'s workers (``memory_bytes`` counts
            them all); on a Dask cluster its workers, and ``memory_bytes`` is each one's.
        on_cluster: The executor is a Dask cluster: ``memory_bytes`` is each worker's.
        cache_axes: The axes along which the cache serves the halo neighbours share (the
            read model's; a resumed run's prediction counts by them).
    """

    automatic: bool
    chunk_sizes: tuple[tuple[int, ...], ...]
    crop_pads: tuple[tuple[int, ...], ...]
    blend_pads: tuple[tuple[int, ...], ...]
    direct_writes: bool
    sweep_axis: int
    cache_bytes: int  # the cache apply owns, over all inputs (0: none, or the user's own)
    cache_per_input: tuple[tuple[str, int], ...]
    read_amplification: float
    amplification_without_cache: float
    memory_limit: int
    memory_limit_source: str
    memory_bytes: int  # predicted peak: cache + superchunks in flight + bottom buffers
    superchunks_in_flight: int
    reasons: tuple[str, ...] = field(default=())
    # The bbox grows past its stop to whole top chunks (apply's expand_bbox=True): an
    # extent that is no multiple of what an input at another resolution needs.
    expand_bbox: bool = False
    inputs_cache: int = 0  # the caller's inputs' own cache, bytes (0: none)
    superchunk_bytes: int = 0  # one top task's read (+ its accumulation buffer), bytes
    bottom_bytes: int = 0  # the buffers of the bottom chunks computing at once, bytes
    sweep_tasks: int = 0  # top tasks along the sweep axis (0: not known)
    grown_bbox: Box | None = None  # the region tiled when the bbox is off dst's grid
    streams: int = 1  # streams of top tasks, each through its own process's cache
    worker_processes: int = 1  # processes holding a cache (and superchunks) each
    on_cluster: bool = False  # memory_bytes is each Dask worker's
    cache_axes: tuple[int, ...] = ()  # the axes whose halo reuse apply's cache serves

    def arguments(self) -> dict[str, object]:
        """``chunk_sizes``, pads and ``skip_intermediates`` (and ``expand_bbox`` when the
        plan grew the bbox) as ``apply`` takes them."""
        args: dict[str, object] = {
            "chunk_sizes": list(self.chunk_sizes),
            "crop_pads": list(self.crop_pads),
            "blend_pads": list(self.blend_pads),
            "skip_intermediates": self.direct_writes,
        }
        if self.expand_bbox:
            args["expand_bbox"] = True
        return args

    def summary(self) -> str:
        """A few human-readable lines: the sizes, the cache, the memory, the reasons."""
        how = "automatic" if self.automatic else "given"
        levels = " over ".join("x".join(map(str, c)) for c in self.chunk_sizes)
        lines = [
            f"plan ({how}): {len(self.chunk_sizes)} level(s) {levels}, crop "
            f"{list(self.crop_pads)}, blend {list(self.blend_pads)}, "
            f"{'direct writes' if self.direct_writes else 'temporary layers'}, "
            f"sweep along axis {self.sweep_axis}",
            f"  {self._cache_words()}; predicted read amplification "
            f"{self.read_amplification:.2f} ({self.amplification_without_cache:.2f} without a "
            "cache)",
            f"  memory {format_bytes(self.memory_bytes)} predicted of "
            f"{format_bytes(self.memory_limit)} ({self.memory_limit_source}); "
            f"{self.superchunks_in_flight} superchunk(s) in flight",
        ]
        if self.superchunk_bytes:
            lines.append(f"  {self.memory_words()}")
        if self.streams > 1 or self.worker_processes > 1:
            lines.append(f"  {self.executor_words()}")
        lines += [f"  - {reason}" for reason in self.reasons]
        return "\n".join(lines)

    def memory_words(self) -> str:
        """What the predicted memory is made of, and whether it grows with the bbox's
        length along the sweep: with tasks following each other along it, every term is a
        cross-section's worth or a bottom chunk's; with one task spanning it, the top chunk
        is the bbox's whole length there (sizes tile the bbox exactly, and an extent off
        the storage grid, or a prime multiple of the grain, may leave no smaller tiling:
        ``plan_automatic`` grows such a bbox, but not one the caller grows, nor a deferred
        flow's, nor a short one)."""
        top = self.chunk_sizes[0]
        axis = self.sweep_axis
        cross = "x".join(str(t) for a, t in enumerate(top) if a != axis)
        terms = (
            f"memory bound: cache {format_bytes(self.cache_bytes)} (the halo layers tasks "
            f"share, or the probe's region; apply's own keeps only their parts) + "
            f"{self.superchunks_in_flight} x superchunk {format_bytes(self.superchunk_bytes)}"
        )
        tail = f" + bottom buffers {format_bytes(self.bottom_bytes)}; "
        if self.sweep_tasks == 1:
            return (
                f"{terms} (the top chunk padded: one task spans the bbox's {top[axis]} "
                f"along axis {axis}){tail}the superchunk grows with that length (the sizes "
                "tile the bbox exactly: a bbox on the storage grid plans a sweep, and so does "
                "one off it or of a prime multiple of the grain, grown, without expand_bbox "
                "or blend_modes='defer')"
            )
        return (
            f"{terms} (the top chunk padded: the {cross} cross-section, one bottom chunk "
            f"thick along axis {axis}){tail}none grows with the bbox's length along axis {axis}"
        )

    def executor_words(self) -> str:
        """What the executor's processes change in the prediction: a cache per process,
        the halo read again at each boundary between streams, the memory of each."""
        n = self.worker_processes
        where = f"each of {n} {'Dask workers' if self.on_cluster else 'worker processes'}"
        words = f"{where} holds its own cache, superchunks and bottom buffers"
        if self.on_cluster:
            words += " (the memory above is each one's)"
        elif n > 1:
            words += f" (the memory above counts all {n})"
        if self.streams > 1:
            words += (
                f"; the top tasks go out as {self.streams} contiguous streams, one per "
                f"{'worker thread' if self.on_cluster else 'process'}, and the two tasks "
                f"astride each of the {self.streams - 1} boundaries both read the halo "
                "layers they share (counted in the predicted read amplification)"
            )
        return words

    def headline(self) -> str:
        """The plan in one line (``summary`` adds the memory budget and the reasons)."""
        how = "automatic" if self.automatic else "given"
        levels = " over ".join("x".join(map(str, c)) for c in self.chunk_sizes)
        return (
            f"plan ({how}): {levels}, "
            f"{'direct writes' if self.direct_writes else 'temporary layers'}, "
            f"{self._cache_words()}, predicted read amplification {self.read_amplification:.2f}"
        )

    def _cache_words(self) -> str:
        """Whose cache the reads go through, for the summary and the headline."""
        if self.inputs_cache:
            return (
                f"the inputs' own cache ({format_bytes(self.inputs_cache)}, not counted in "
                "the prediction)"
            )
        if self.cache_bytes:
            return f"cache {format_bytes(self.cache_bytes)} owned by apply"
        return "no cache"


# --- the planner --------------------------------------------------------------------------


def plan_sizes(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    dst: StorageLayout,
    *,
    crop: tuple[int, ...],
    blend: tuple[int, ...],
    cores: int,
    memory_limit: int,
    memory_limit_source: str = "given",
    accumulate_bytes: int = 8,
    direct_allowed: bool = False,
    step: tuple[int, ...] | None = None,
    inputs_cache: int = 0,
    probe: bool = False,
) -> FlowPlan:
    """Levels, sizes and cache for a flow over ``bbox`` with bottom pads ``crop`` + ``blend``.

    ``probe``: apply's probe reads the first bottom chunk before the tasks; the cache keeps
    its region for them (``evaluate``; the sizes do not depend on it).

    ``step``: per axis, what chunk sizes must be multiples of so that inputs at another
    resolution are read over whole voxels (``_resolution.step_of``; default 1s).

    ``accumulate_bytes``: bytes per dst voxel of the accumulation dtype (all channels).
    ``inputs_cache``: bytes of the cache the caller's inputs carry (0: none); apply then
    owns none, and the prediction counts none (``FlowPlan.inputs_cache``).
    ``direct_allowed``: the caller found nothing that forbids writing bottom outputs
    straight to dst (no blend, bbox on the dst grid, dst not an input); the plan then
    writes directly if its bottom chunks cover whole dst chunks. Raises ``ConfigError``
    when even the smallest plan does not fit ``memory_limit``.

    Steps: the grain and the axis to sweep along; the first sizes (bottom chunk, top
    chunk across the sweep); bands cut across the sweep until memory fits; direct writes.

    >>> vol = StorageLayout("src", Box((0, 0, 0), (256, 512, 512)), (64, 64, 64), 4)
    >>> plan = plan_sizes(vol.bounds, [vol], vol, crop=(8, 8, 8), blend=(0, 0, 0), cores=2,
    ...                   memory_limit=2**30, direct_allowed=True)
    >>> plan.chunk_sizes, plan.sweep_axis, plan.cache_bytes // 2**20, plan.read_amplification
    (((256, 512, 128), (128, 256, 128)), 2, 80, 1.0)
    """
    pad = tuple(c + b for c, b in zip(crop, blend, strict=True))
    step = step or (1,) * bbox.ndim
    grain = _grain(inputs, dst, step)
    sweep = _longest_axis(bbox.shape)
    budget = min(BOTTOM_BYTES, int(memory_limit * BOTTOM_SHARE))
    buffer = FN_BUFFERS * max(accumulate_bytes, dst.voxel_bytes)
    top, bottom, reasons = _first_sizes(
        bbox.shape, pad, dst, step, grain, sweep, _BottomBudget(budget, buffer)
    )

    def sizes_evaluated(top: list[int], bottom: list[int]) -> Evaluation:
        return evaluate(
            bbox, inputs, dst, tuple(top), tuple(bottom), crop, blend, cores, memory_limit,
            accumulate_bytes, probe=probe,
        )  # fmt: skip

    plan = _fit_memory(
        sizes_evaluated, top, bottom, bbox.shape, pad, grain, sweep, memory_limit, reasons
    )
    if inputs_cache:
        plan = _without_owned_cache(plan, inputs_cache)
    direct = direct_allowed and _covers_dst_chunks(bottom, dst.chunks, bbox.shape)
    if direct:
        reasons.append(
            "direct writes: nothing blends and bottom chunks cover whole dst chunks, so no "
            "temporary layers and no reduction pass"
        )
    reasons.append(plan.cache_reason)
    levels: tuple[tuple[int, ...], ...] = (tuple(top), tuple(bottom))
    if levels[0] == levels[1]:
        levels = (levels[0],)
    zero = (0,) * bbox.ndim
    return _flow_plan(
        plan,
        automatic=True,
        chunk_sizes=levels,
        crop_pads=(*([zero] * (len(levels) - 1)), crop),
        blend_pads=(*([zero] * (len(levels) - 1)), blend),
        direct_writes=direct,
        memory_limit=memory_limit,
        memory_limit_source=memory_limit_source,
        reasons=reasons,
        inputs_cache=inputs_cache,
    )


def _without_owned_cache(plan: Evaluation, inputs_cache: int) -> Evaluation:
    """``plan`` when the caller's inputs carry their own cache: apply owns none, and the
    prediction is the read without one (the caller's LRU may do better; the model does not
    know how it is sized against the halo)."""
    return dataclasses.replace(
        plan,
        cache=0,
        cache_per_input=(),
        reused=(),
        amplification=plan.amplification_uncached,
        cache_reason=(
            f"the inputs carry their own cache ({format_bytes(inputs_cache)}), so apply adds "
            f"none; the predicted read amplification, {plan.amplification_uncached:.2f}, "
            "counts no cache"
        ),
    )


def read_plan(
    bbox: Box,
    inputs: Sequence[StorageLayout],
    dst: StorageLayout,
    *,
    chunk_sizes: Sequence[tuple[int, ...]],
    crop_pads: Sequence[tuple[int, ...]],
    blend_pads: Sequence[tuple[int, ...]],
    cores: int,
    memory_limit: int,
    memory_limit_source: str = "given",
    accumulate_bytes: int = 8,
    direct_writes: bool = False,
    cached: int = 0,
    probe: bool = False,
) -> FlowPlan:
    """The read model of sizes a user gave: the cache apply would own, amplification, memory.

    ``cached``: bytes of the cache the user's inputs carry (0: none); apply then adds
    none and the prediction counts no cache (``FlowPlan.inputs_cache``). ``probe``: as
    ``plan_sizes``'s.
    """
    top, bottom = tuple(chunk_sizes[0]), tuple(chunk_sizes[-1])
    # Below the top, the levels' pads all come out of the top task's one read.
    crop, blend = _pads_below_top(crop_pads), _pads_below_top(blend_pads)
    top_pad = tuple(c + b for c, b in zip(crop_pads[0], blend_pads[0], strict=True))
    plan = evaluate(
        bbox,
        inputs,
        dst,
        top,
        bottom,
        crop,
        blend,
        cores,
        memory_limit,
        accumulate_bytes,
        top_pad=top_pad,
        levels=len(chunk_sizes),
        owned=not cached,
        per_top=bottom_chunks_per_top(chunk_sizes, crop_pads, blend_pads),
        probe=probe,
    )
    if cached:  # the user's cache serves the reuse: apply owns none
        plan = dataclasses.replace(plan, cache=0, cache_per_input=(), reused=())
    misaligned = _misaligned(bbox, top, inputs)
    return _flow_plan(
        plan,
        automatic=False,
        chunk_sizes=tuple(tuple(c) for c in chunk_sizes),
        crop_pads=tuple(tuple(c) for c in crop_pads),
        blend_pads=tuple(tuple(b) for b in blend_pads),
        direct_writes=direct_writes,
        memory_limit=memory_limit,
        memory_limit_source=memory_limit_source,
        reasons=[plan.cache_reason, *([misaligned] if misaligned else [])],
        inputs_cache=int(cached),
    )


def _flow_plan(
    plan: Evaluation,
    *,
    automatic: bool,
    chunk_sizes: tuple[tuple[int, ...], ...],
    crop_pads: tuple[tuple[int, ...], ...],
    blend_pads: tuple[tuple[int, ...], ...],
    direct_writes: bool,
    memory_limit: int,
    memory_limit_source: str,
    reasons: list[str],
    inputs_cache: int = 0,
) -> FlowPlan:
    """The ``FlowPlan`` of sizes and their evaluation (the cache, reads and memory)."""
    return FlowPlan(
        automatic=automatic,
        chunk_sizes=chunk_sizes,
        crop_pads=crop_pads,
        blend_pads=blend_pads,
        direct_writes=direct_writes,
        sweep_axis=plan.sweep,
        cache_bytes=plan.cache,
        cache_per_input=plan.cache_per_input,
        read_amplification=plan.amplification,
        amplification_without_cache=plan.amplification_uncached,
        memory_limit=memory_limit,
        memory_limit_source=memory_limit_source,
        memory_bytes=plan.memory,
        superchunks_in_flight=plan.in_flight,
        superchunk_bytes=plan.superchunk,
        bottom_bytes=plan.bottoms,
        sweep_tasks=plan.sweep_tasks,
        cache_axes=plan.reused,
        reasons=tuple(reasons),
        inputs_cache=inputs_cache,
    )


# --- sizes --------------------------------------------------------------------------------


def _grain(
    inputs: Sequence[StorageLayout], dst: StorageLayout, step: tuple[int, ...]
) -> tuple[int, ...]:
    """Per axis, the lcm of every input's and dst's storage chunk and the resolution step."""
    return tuple(
        math.lcm(dst.chunks[a], step[a], *(v.chunks[a] for v in inputs)) for a in range(len(step))
    )


def _longest_axis(extent: tuple[int, ...]) -> int:
    """The axis to sweep along: the longest (the last of equals), so that the cross-section,
    and with it the cache and the superchunk, is the smallest.

    >>> _longest_axis((256, 512, 512)), _longest_axis((512, 256, 128))
    (2, 0)
    """
    return max(range(len(extent)), key=lambda a: (extent[a], a))


@dataclass(frozen=True)
class _BottomBudget:
    """What one bottom chunk's buffers may take: ``bytes`` over its padded region at
    ``per_voxel`` bytes a voxel."""

    bytes: int
    per_voxel: int


def _first_sizes(
    extent: tuple[int, ...],
    pad: tuple[int, ...],
    dst: StorageLayout,
    step: tuple[int, ...],
    grain: tuple[int, ...],
    sweep: int,
    budget: _BottomBudget,
) -> tuple[list[int], list[int], list[str]]:
    """The bottom chunk (``_bottom_shape``), and the top chunk: the whole bbox across
    ``sweep``, one bottom chunk thick along it; with the reasons."""
    bottom, reason = _bottom_shape(extent, pad, dst, step, grain, sweep, budget)
    top = list(extent)
    top[sweep] = bottom[sweep]
    reasons = [
        reason,
        f"top chunk {tuple(top)}: the whole bbox (one top task)"
        if tuple(top) == tuple(extent)
        else f"top chunk {tuple(top)}: the whole bbox across axis {sweep} (the longest, so "
        f"the smallest cross-section) and one bottom chunk thick along it, a multiple of the "
        f"storage grain {grain[sweep]}: tasks sweep along axis {sweep} and each shares halo "
        "chunks with its successor only",
    ]
    return top, bottom, reasons


def _bottom_shape(
    extent: tuple[int, ...],
    pad: tuple[int, ...],
    dst: StorageLayout,
    step: tuple[int, ...],
    grain: tuple[int, ...],
    sweep: int,
    budget: _BottomBudget,
) -> tuple[list[int], str]:
    """The bottom chunk with the least redundant compute ``prod((B + 2P) / B)`` whose
    buffers fit ``budget``, and why.

    Per axis the sizes tried are the divisors of the extent on the dst grid (and, along
    the sweep, on the storage grain: it is the top chunk's thickness there) with the
    margins ``2P`` at most ``MAX_CROP_SHARE`` of them (``_bottom_size``'s rule); a shape
    must leave the bbox ``MIN_BOTTOM_CHUNKS`` pieces, or as many as the smallest does.
    When no such shape fits (a large pad: crop 20 asks for 512 on a 64 grid, 2.5 GiB of
    buffers), the budget wins over the margin rule: the least redundant shape on the same
    grid, smaller than that, whose buffers fit; the smallest on the grid if none does, and
    the reason says it is over. Among equals in
    redundant compute, the shorter along the sweep (the superchunk is the bottom's length
    there times the whole cross-section, so length across the sweep costs less memory),
    then the smaller.

    >>> dst = StorageLayout("dst", Box((0, 0, 0), (256, 512, 512)), (64, 64, 64), 4)
    >>> shape, why = _bottom_shape((256, 512, 512), (8, 8, 8), dst, (1, 1, 1), (64, 64, 64),
    ...                            2, _BottomBudget(128 * 2**20, 16))
    >>> shape, why.split(":")[0]
    ([128, 256, 128], 'bottom chunk (128, 256, 128)')
    >>> shape, why = _bottom_shape((256, 512, 512), (20, 20, 20), dst, (1, 1, 1),
    ...                            (64, 64, 64), 2, _BottomBudget(128 * 2**20, 16))
    >>> shape, "fits that budget" in why
    ([128, 256, 128], True)
    """
    units = [
        math.lcm(dst.chunks[a], step[a], grain[a] if a == sweep else 1) for a in range(len(extent))
    ]
    options, below = [], []
    for a, unit in enumerate(units):
        least = _bottom_size(extent[a], pad[a], unit, 1)
        on_grid = [d for d in divisors(extent[a]) if d % unit == 0]
        sizes = [d for d in on_grid if d >= least]
        options.append((sizes or [least])[:BOTTOM_CANDIDATES])
        # Sizes the margin rule does not allow, largest first, for when none it allows fits.
        smaller = [d for d in on_grid if d < options[-1][0]]
        below.append(sorted({*smaller[-BOTTOM_CANDIDATES:], *smaller[:1], options[-1][0]}))
    smallest = [o[0] for o in options]

    def buffers(shape: Sequence[int]) -> int:
        padded = math.prod(b + 2 * p for b, p in zip(shape, pad, strict=True))
        return padded * budget.per_voxel

    def pieces(shape: Sequence[int]) -> int:
        return math.prod(e // b for e, b in zip(extent, shape, strict=True))

    enough = min(pieces(smallest), MIN_BOTTOM_CHUNKS)

    def order(shape: list[int]) -> tuple[float, int, int]:
        return round(_redundancy(tuple(shape), pad), 9), shape[sweep], math.prod(shape)

    def least_redundant(sizes: list[list[int]]) -> list[int] | None:
        fitting = [
            list(c)
            for c in itertools.product(*sizes)
            if buffers(c) <= budget.bytes and pieces(c) >= enough
        ]
        return min(fitting, key=order) if fitting else None

    chosen = least_redundant(options)
    if chosen is not None:
        return chosen, _bottom_reason(chosen, smallest, pad, dst, sweep, buffers, budget)
    # No shape within the margin rule fits: the least redundant that does, margins wider.
    chosen = least_redundant(below)
    over = chosen is None
    if chosen is None:  # not even the smallest on the grid: it, over the budget
        chosen = [b[0] for b in below]
    rule = (
        f"no shape with margins 2 * pad {tuple(2 * p for p in pad)} at most "
        f"{MAX_CROP_SHARE:.3g} of it fits that budget (the smallest such, {tuple(smallest)}, "
        f"needs {format_bytes(buffers(smallest))})"
    )
    redundancy = f"{_redundancy(tuple(chosen), pad):.2f}x"
    if over:
        why = (
            f"bottom chunk {tuple(chosen)}: the smallest on the dst grid {dst.chunks}, "
            f"{redundancy} redundant compute, and its buffers "
            f"({format_bytes(buffers(chosen))}) are over the budget of "
            f"{format_bytes(budget.bytes)}: {rule}, nor does any smaller"
        )
    else:
        why = (
            f"bottom chunk {tuple(chosen)}: the least redundant compute ({redundancy}) on "
            f"the dst grid {dst.chunks} whose buffers ({format_bytes(buffers(chosen))}) fit "
            f"{format_bytes(budget.bytes)}; {rule}, so its margins are wider"
        )
    return chosen, why


def _bottom_reason(
    chosen: list[int],
    smallest: list[int],
    pad: tuple[int, ...],
    dst: StorageLayout,
    sweep: int,
    buffers: Callable[[Sequence[int]], int],
    budget: _BottomBudget,
) -> str:
    """Why ``chosen``, a shape within the margin rule whose buffers fit ``budget``."""
    why = (
        f"bottom chunk {tuple(chosen)}: the least redundant compute "
        f"({_redundancy(tuple(chosen), pad):.2f}x) on the dst grid {dst.chunks} whose buffers "
        f"({format_bytes(buffers(chosen))}) fit {format_bytes(budget.bytes)}"
    )
    if chosen != smallest:
        why += (
            f"; the smallest with margins 2 * pad {tuple(2 * p for p in pad)} at most "
            f"{MAX_CROP_SHARE:.3g} of it, {tuple(smallest)}, computes "
            f"{_redundancy(tuple(smallest), pad):.2f}x"
        )
        longer = [a for a in range(len(chosen)) if chosen[a] > smallest[a]]
        if sweep not in longer:
            why += (
                f"; longer across the sweep (axis {', '.join(map(str, longer))}) than along "
                "it: the superchunk grows with the bottom's length along the sweep"
            )
    return why


def _fit_memory(
    evaluate: Callable[[list[int], list[int]], Evaluation],
    top: list[int],
    bottom: list[int],
    extent: tuple[int, ...],
    pad: tuple[int, ...],
    grain: tuple[int, ...],
    sweep: int,
    memory_limit: int,
    reasons: list[str],
) -> Evaluation:
    """Cut the widest axis across the sweep into bands (``top`` and ``bottom`` mutate; the
    reasons grow) until the plan fits ``memory_limit`` with the sweep's halo in the cache,
    or fits and nothing more can be cut; ``ConfigError`` when nothing fits."""
    while True:
        plan = evaluate(top, bottom)
        fits = plan.memory <= memory_limit
        if fits and plan.sweep_reused:
            return plan
        axis = _axis_to_cut(top, bottom, grain, sweep)
        if axis is None and fits:
            return plan  # halos along the sweep are read again: the amplification says how much
        if axis is None:
            raise _no_plan_fits(plan, top, bottom, memory_limit)
        top[axis] = _next_band(top[axis], extent[axis], grain[axis], bottom[axis])
        if bottom[axis] > top[axis]:
            bottom[axis] = top[axis]
            reasons.append(
                f"bottom chunk cut to {top[axis]} on axis {axis} with the band: the crop "
                f"margin is then {2 * pad[axis] / top[axis]:.2f} of it"
            )
        cross = tuple(extent[a] if a != sweep else top[a] for a in range(len(extent)))
        reasons.append(
            f"axis {axis} cut into bands of {top[axis]}: with the cross-section "
            f"{cross} the superchunk "
            f"and the sweep's cache need more than memory_limit {format_bytes(memory_limit)}; each "
            "band re-reads its halo"
        )


# The end of the error when no plan fits: apply's other way out. Jobs that take no chunk
# sizes (transfer, downsample) give their own instead (``job_memory_refusal``).
SIZES_BY_HAND = " or chunk_sizes by hand"


def _no_plan_fits(
    plan: Evaluation, top: list[int], bottom: list[int], memory_limit: int
) -> ConfigError:
    """The error when even the smallest plan needs more than ``memory_limit``, with its parts."""
    return ConfigError(
        f"no automatic plan fits memory_limit={memory_limit} bytes "
        f"({format_bytes(memory_limit)}): the smallest, top chunk {tuple(top)} over "
        f"{tuple(bottom)}, needs {format_bytes(plan.memory)} "
        f"(cache {format_bytes(plan.cache)}, {plan.in_flight} superchunk(s) of "
        f"{format_bytes(plan.superchunk)}, bottom buffers "
        f"{format_bytes(plan.bottoms)}); give a memory_limit of at least {plan.memory}"
        + SIZES_BY_HAND,
        field="memory_limit",
    )


def job_memory_refusal(err: ConfigError, advice: str) -> ConfigError:
    """``err`` as a job that takes no chunk sizes says it: ``advice`` in place of
    ``chunk_sizes``; any other error as it is."""
    text = str(err)
    if err.field != "memory_limit" or not text.endswith(SIZES_BY_HAND):
        return err
    return ConfigError(text.removesuffix(SIZES_BY_HAND) + advice, field="memory_limit")


def _covers_dst_chunks(
    bottom: list[int], dst_chunks: tuple[int, ...], extent: tuple[int, ...]
) -> bool:
    """Whether every bottom chunk covers whole dst chunks (or the whole bbox on an axis)."""
    return all(b % d == 0 or b == e for b, d, e in zip(bottom, dst_chunks, extent, strict=True))


def _pads_below_top(pads: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Per axis, the sum of the pads of every level below the top.

    >>> _pads_below_top([(8, 8), (2, 0), (1, 1)])
    (3, 1)
    """
    return tuple(sum(p[a] for p in pads[1:]) for a in range(len(pads[0])))


def _bottom_size(extent: int, pad: int, dst_chunk: int, grain: int) -> int:
    """The smallest divisor of ``extent`` that is a multiple of ``dst_chunk`` and ``grain``
    with the margins ``2 * pad`` at most ``MAX_CROP_SHARE`` of it; ``extent`` when none is.

    >>> _bottom_size(512, 8, 64, 1), _bottom_size(512, 8, 64, 64), _bottom_size(96, 8, 64, 1)
    (128, 128, 96)
    >>> _bottom_size(512, 0, 64, 1), _bottom_size(300, 8, 64, 1)
    (64, 300)
    """
    step = math.lcm(dst_chunk, grain)
    least = max(1, math.ceil(2 * pad / MAX_CROP_SHARE))
    fits = [d for d in divisors(extent) if d % step == 0 and d >= least]
    return fits[0] if fits else extent


def _next_band(size: int, extent: int, grain: int, bottom: int) -> int:
    """The next smaller band width below ``size``: a divisor of ``extent`` on the grain."""
    step = math.lcm(grain, 1)
    smaller = [d for d in divisors(extent) if d < size and d % step == 0]
    fitting = [d for d in smaller if d % bottom == 0] or smaller
    return fitting[-1]


def _axis_to_cut(
    top: list[int], bottom: list[int], grain: tuple[int, ...], sweep: int
) -> int | None:
    """The widest axis across the sweep that can still be cut into smaller bands.

    Axes before the sweep axis first: the top grid runs in C order, so bands on them
    keep the sweep the fastest-moving axis, whose reuse the smallest cache serves.
    """
    candidates = [
        a
        for a in range(len(top))
        if a != sweep and any(d < top[a] and d % grain[a] == 0 for d in divisors(top[a]))
    ]
    return max(candidates, key=lambda a: (a < sweep, top[a], -a)) if candidates else None


def _redundancy(bottom: tuple[int, ...], pad: tuple[int, ...]) -> float:
    """Voxels fn computes per voxel it keeps: ``prod((B + 2P) / B)``."""
    return math.prod((b + 2 * p) / b for b, p in zip(bottom, pad, strict=True))


def _misaligned(bbox: Box, top: tuple[int, ...], inputs: Sequence[StorageLayout]) -> str:
    """A reason line when top chunks split storage chunks of an input, else ``""``."""
    for vol in inputs:
        for a, (t, s) in enumerate(zip(top, vol.chunks, strict=True)):
            phase = (bbox.start[a] - vol.bounds.start[a]) % s
            if t < bbox.shape[a] and (t % s or phase):
                return (
                    f"top chunk {top} splits input {vol.name!r}'s storage chunks {vol.chunks} "
                    f"on axis {a} ({t} % {s} = {t % s}, bbox start off the grid by {phase}): "
                    "neighbouring tasks decode the chunks they share twice"
                )
    return ""


# --- from apply's arguments ---------------------------------------------------------------

# The share of the memory available when a flow starts that it may plan for by default:
# the rest stays for the caller's own arrays and the page cache that storage reads use.
# It is rounded down to a power of two (``default_memory_limit``): automatic sizes, and
# so the flow id, depend on the budget, and a resume on a machine whose free memory moved
# a little must plan the same flow.
DEFAULT_MEMORY_SHARE = 0.5

# Predicted read amplification above which sizes a user gave draw a warning.
WARN_AMPLIFICATION = 1.1


def default_memory_limit(available: int) -> int:
    """The budget planned for by default: ``DEFAULT_MEMORY_SHARE`` of ``available`` bytes,
    rounded down to a power of two, so that free memory moving between a run and its
    resume (within a factor of two) leaves the plan, and the flow id, as they were.

    >>> [default_memory_limit(g * 2**30) // 2**30 for g in (17, 20, 22.9, 31.9, 32)]
    [8, 8, 8, 8, 16]
    """
    share = max(1, int(available * DEFAULT_MEMORY_SHARE))
    return 1 << (share.bit_length() - 1)


def resolve_memory_limit(memory_limit: object) -> tuple[int, str]:
    """The flow's memory budget in bytes and where it came from (for the plan's summary)."""
    if memory_limit is None:
        try:
            import psutil

            available = int(psutil.virtual_memory().available)
        except (ImportError, OSError):  # no psutil or no /proc: what sysconf says
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return (
            default_memory_limit(available),
            f"default: {DEFAULT_MEMORY_SHARE:.0%} of the {format_bytes(available)} available, "
            "rounded down to a power of two",
        )
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit <= 0:
        raise ConfigError(
            f"memory_limit must be a positive number of bytes (e.g. 4 * 2**30) or None for "
            f"{DEFAULT_MEMORY_SHARE:.0%} of the memory available rounded down to a power of "
            f"two, got {memory_limit!r}",
            field="memory_limit",
        )
    return memory_limit, "given"


def layout_of(
    name: str, vol: Volume, scale: Scale | None = None, *, written: bool = False
) -> StorageLayout:
    """What the planner needs to know of a volume, in dst voxels: an input at another
    resolution (``scale`` input voxels per dst voxel) has its bounds and storage chunks
    divided by the scale (chunks rounded to whole dst voxels: a model) and its bytes per
    dst voxel multiplied by it (rounded up).

    The chunks are those a read decodes (``read_chunks``) for an input and those a write
    must cover whole for dst (``written``): they differ in a sharded format, whose
    shards an input need not be read by."""
    item = int(np.dtype(vol.dtype).itemsize) * math.prod(vol.channel_shape)
    remote = vol.location.kind == "remote"
    grid = tuple(vol.spatial_chunks if written else vol.read_chunks)
    if scale is None or all(s == 1 for s in scale):
        return StorageLayout(name, vol.bounds, grid, item, remote)
    bounds = Box(
        tuple(math.floor(a / s) for a, s in zip(vol.bounds.start, scale, strict=True)),
        tuple(math.ceil(b / s) for b, s in zip(vol.bounds.stop, scale, strict=True)),
    )
    chunks = tuple(max(1, round(c / s)) for c, s in zip(grid, scale, strict=True))
    return StorageLayout(name, bounds, chunks, math.ceil(item * math.prod(scale)), remote)


def accumulate_bytes_of(dst: Volume) -> int:
    """Bytes per dst voxel in the accumulation dtype (float64 up to 32-bit data, see _spec)."""
    item = np.dtype(dst.dtype).itemsize
    return (8 if item <= 4 else item) * math.prod(dst.channel_shape)


def direct_allowed(
    bbox: Box, named: Mapping[str, Volume], dst: Volume, blend: tuple[int, ...]
) -> bool:
    """Whether direct writes are possible whatever the bottom chunk: no blend, the bbox on
    the dst grid (its stop on the grid or at dst's edge) and dst not one of the inputs."""
    if any(blend) or any(same_storage(v, dst) for v in named.values()):
        return False
    bounds, chunks = dst.bounds, dst.spatial_chunks
    for a in range(bbox.ndim):
        origin = bounds.start[a]
        if (bbox.start[a] - origin) % chunks[a]:
            return False
        if (bbox.stop[a] - origin) % chunks[a] and bbox.stop[a] != bounds.stop[a]:
            return False
    return True


def plan_automatic(
    inputs: object,
    dst: object,
    *,
    crop_pads: object,
    blend_pads: object,
    bbox: object,
    cores: int,
    memory_limit: int,
    memory_limit_source: str,
    skip_intermediates: bool | None,
    grow_off_grid: bool = True,
    probe: bool = False,
) -> FlowPlan:
    """``plan_sizes`` for apply's arguments; pads are the bottom level's (one level's spelling).

    A bbox off dst's storage grid (``off_dst_grid``) is planned over ``grown_off_grid``'s
    region, the plan's ``grown_bbox``, with every write clipped to the bbox: sizes must
    tile what the tasks cover, and an off-grid length (4073 in chunks of 16) has no
    smaller tiling than itself. ``grow_off_grid=False`` (``expand_bbox``, or a deferred
    flow whose layers a later reduction writes whole) plans the bbox itself."""
    named, out, region = resolve_region(inputs, dst, bbox)
    pads = _bottom_pads(crop_pads, blend_pads, region.ndim)
    pad = tuple(c + b for c, b in zip(pads["crop_pads"], pads["blend_pads"], strict=True))
    scales = {n: scale_of(v, out) for n, v in named.items()}
    step = step_of(list(scales.values()), region.ndim)
    layouts = [layout_of(n, v, scales[n]) for n, v in named.items()]
    written = layout_of("dst", out, written=True)
    grain = _grain(layouts, written, step)
    caller = region
    off = grow_off_grid and off_dst_grid(region, written)
    if off:  # tasks tile the bbox grown out to the grid; writes are clipped to the bbox
        region = out_to_grid(region, written, grain, step)  # grown on where it splits badly
        grown = region.shape
    else:
        # Every size must be a multiple of the step (whole input voxels): an extent that is
        # not one (63 dst voxels over an input twice as coarse) is rounded up past the bbox's
        # stop, as expand_bbox=True does: reads there give fill values, writes are clipped.
        grown = tuple(-(-e // q) * q for e, q in zip(region.shape, step, strict=True))
        grown = _grown_to_grain(region, grown, out.bounds, grain, written)
    expand = not off and grown != region.shape
    if expand:
        region = Box(region.start, tuple(a + e for a, e in zip(region.start, grown, strict=True)))

    def sizes_over(region: Box) -> FlowPlan:
        allowed = direct_allowed(region, named, out, pads["blend_pads"])
        return plan_sizes(
            region,
            layouts,
            written,
            crop=pads["crop_pads"],
            blend=pads["blend_pads"],
            cores=cores,
            memory_limit=memory_limit,
            memory_limit_source=memory_limit_source,
            accumulate_bytes=accumulate_bytes_of(out),
            direct_allowed=allowed and skip_intermediates is not False,
            step=step,
            inputs_cache=sum(v.cache_bytes for v in named.values()),
            probe=probe,
        )

    if grow_off_grid and not expand:  # grown further where the region splits badly
        wider = [grown_off_grid(caller, written, grain, step, pad, across=x) for x in (False, True)]
        plan, region = _best_region(region, wider, sizes_over, pad)
    else:
        plan = sizes_over(region)
    plan = _with_growth(plan, caller, region, written, step, expanded=expand)
    if skip_intermediates and not plan.direct_writes:
        return dataclasses.replace(plan, direct_writes=True)  # validate_flow says why not
    return plan


def _bottom_pads(crop_pads: object, blend_pads: object, ndim: int) -> dict[str, tuple[int, ...]]:
    """The bottom level's crop and blend pads per axis, from automatic sizes' spelling (one
    level's: an int or a tuple per axis; a list of one)."""
    pads = {}
    for name, value in (("crop_pads", crop_pads), ("blend_pads", blend_pads)):
        if isinstance(value, list) and len(value) != 1:
            raise ConfigError(
                f"{name} = {value} lists {len(value)} levels, but with automatic chunk_sizes "
                f"the flow chooses the levels and {name} is the bottom level's pad: give one "
                f"int or a tuple of {ndim} (per axis), e.g. {name}=8, or give chunk_sizes",
                field=name,
            )
        pads[name] = per_level(name, value, 1, ndim)[0]
    return pads


def _with_growth(
    plan: FlowPlan,
    caller: Box,
    region: Box,
    dst: StorageLayout,
    step: tuple[int, ...],
    *,
    expanded: bool,
) -> FlowPlan:
    """``plan`` over ``region``, the caller's bbox grown: past its stop (``expanded``, as
    ``expand_bbox=True``: the plan says so and writes are clipped at dst's edge), or
    (``grown_bbox``) out to the grid or to a length that splits, writes clipped to it."""
    if expanded:
        return dataclasses.replace(
            plan,
            expand_bbox=True,
            reasons=(
                f"bbox grown past its stop to {region} (expand_bbox=True): every size must be "
                f"a multiple of {step} per axis so that inputs at another resolution are read "
                "over whole voxels; reads past dst give fill values, writes are clipped",
                *plan.reasons,
            ),
        )
    if region == caller:
        return plan
    why = (
        _off_grid_reason(caller, region, dst)
        if off_dst_grid(caller, dst)
        else _split_reason(caller, region, dst)
    )
    return dataclasses.replace(plan, grown_bbox=region, reasons=(why, *plan.reasons))


# How much an off-grid bbox may grow along the sweep past the grid, at most, so that its
# length has a power-of-two factor (4073 voxels in chunks of 16: 4080 = 16 x 255, whose
# only sizes on the grid are 16 x a divisor of 255; 4096 has every power of two): 1/16 of
# it, so at most about 6% more voxels computed, none of them written.
GROWTH_SHARE = 1 / 16


def off_dst_grid(bbox: Box, dst: StorageLayout) -> bool:
    """Whether ``bbox``'s start, or its stop inside dst, is off dst's storage grid.

    >>> dst = StorageLayout("dst", Box((0,), (100,)), (16,), 4)
    >>> [off_dst_grid(Box((a,), (b,)), dst) for a, b in ((0, 64), (0, 100), (0, 70), (3, 64))]
    [False, False, True, True]
    """
    for a in range(bbox.ndim):
        origin, chunk = dst.bounds.start[a], dst.chunks[a]
        if (bbox.start[a] - origin) % chunk:
            return True
        if (bbox.stop[a] - origin) % chunk and bbox.stop[a] < dst.bounds.stop[a]:
            return True
    return False


def grown_off_grid(
    bbox: Box,
    dst: StorageLayout,
    grain: tuple[int, ...],
    step: tuple[int, ...],
    pad: tuple[int, ...],
    *,
    across: bool = False,
) -> Box:
    """The region a bbox off dst's storage grid is planned over: out to dst's grid (and
    the resolution step) on every axis; along the sweep (the longest axis then), out to the
    storage grain and its length to a multiple of the smallest bottom chunk there (on the
    grain, with margins ``2 * pad``, crop + blend, at most ``MAX_CROP_SHARE`` of it: less
    than one such chunk more), then to a power-of-two multiple of that where this adds at most
    ``GROWTH_SHARE`` of the length (bottom chunks past the bbox then write nothing, and
    with direct writes fn skips them). ``across``: every axis grows so, the cross-section's
    too (a cross-section 16 x 251 wide is cut into bands of 16 only). Its stop may pass
    dst's edge (reads there give fill values); it depends on the bbox, the layouts and the
    pad only, never on the budget.

    >>> dst = StorageLayout("dst", Box((0, 0, 0), (64, 96, 4096)), (16, 16, 16), 4)
    >>> grown_off_grid(Box((3, 5, 7), (61, 90, 4089)), dst, (16, 16, 16), (1, 1, 1), (2,) * 3)
    Box(start=(0, 0, 0), stop=(64, 96, 4096))
    >>> grown_off_grid(Box((0, 0, 16), (64, 96, 4089)), dst, (16, 16, 16), (1, 1, 1), (2,) * 3)
    Box(start=(0, 0, 16), stop=(64, 96, 4112))
    >>> grown_off_grid(Box((0, 0, 3), (16, 16, 101)), dst, (8, 8, 8), (1, 1, 1), (2,) * 3).stop
    (16, 16, 128)
    >>> grown_off_grid(Box((0, 0, 0), (64, 4016, 4096)), dst, (16, 16, 16), (1, 1, 1), (2,) * 3,
    ...                across=True).stop
    (64, 4096, 4096)
    """
    origin = dst.bounds.start
    units = [math.lcm(c, q) for c, q in zip(dst.chunks, step, strict=True)]
    least_box = out_to_grid(bbox, dst, grain, step)
    start, stop = list(least_box.start), list(least_box.stop)
    sweep = _longest_axis(least_box.shape)
    for a in range(bbox.ndim) if across else (sweep,):
        unit = math.lcm(units[a], grain[a])
        start[a] = origin[a] + (bbox.start[a] - origin[a]) // unit * unit
        least = max(1, math.ceil(2 * pad[a] / MAX_CROP_SHARE))
        multiple = -(-least // unit) * unit  # the smallest bottom chunk along the axis
        length = -(-(bbox.stop[a] - start[a]) // multiple) * multiple
        while -(-length // (2 * multiple)) * 2 * multiple - length <= length * GROWTH_SHARE:
            multiple *= 2
        stop[a] = start[a] + -(-length // multiple) * multiple
    return Box(tuple(start), tuple(stop))


def out_to_grid(
    bbox: Box, dst: StorageLayout, grain: tuple[int, ...], step: tuple[int, ...]
) -> Box:
    """``bbox`` grown out to dst's storage grid (and the resolution step) on every axis, and
    to the storage grain along the sweep: the least region an off-grid bbox is planned over
    (``grown_off_grid`` grows on from it where the length splits badly).

    >>> dst = StorageLayout("dst", Box((0, 0, 0), (64, 96, 160)), (16, 16, 16), 4)
    >>> out_to_grid(Box((3, 5, 7), (61, 90, 153)), dst, (16, 16, 16), (1, 1, 1))
    Box(start=(0, 0, 0), stop=(64, 96, 160))
    """
    origin = dst.bounds.start
    units = [math.lcm(c, q) for c, q in zip(dst.chunks, step, strict=True)]
    start = [o + (s - o) // u * u for s, o, u in zip(bbox.start, origin, units, strict=True)]
    stop = [a + -(-(b - a) // u) * u for a, b, u in zip(start, bbox.stop, units, strict=True)]
    sweep = _longest_axis(tuple(b - a for a, b in zip(start, stop, strict=True)))
    unit = math.lcm(units[sweep], grain[sweep])
    start[sweep] = origin[sweep] + (bbox.start[sweep] - origin[sweep]) // unit * unit
    stop[sweep] = start[sweep] + -(-(bbox.stop[sweep] - start[sweep]) // unit) * unit
    return Box(tuple(start), tuple(stop))


def _off_grid_reason(bbox: Box, region: Box, dst: StorageLayout) -> str:
    """Why the tasks tile ``region`` rather than the caller's ``bbox``, and what it costs."""
    more = region.size / bbox.size - 1
    return (
        f"bbox {bbox} is off dst's storage grid {dst.chunks}: the tasks tile it grown out "
        f"to {region} (on the grid, along the sweep on whole storage grains, longer only "
        f"where that plans better; {more:.1%} more voxels computed) and writes are clipped "
        "to the bbox, so the storage chunks it cuts are read, merged and written back "
        "under their locks"
    )


# How much more a bbox whose plan works may be grown to plan better, at most: its length
# to whole smallest bottom chunks (< 1/16 of a length of 16 of them or more) and then to a
# power-of-two factor (<= GROWTH_SHARE). A short length (48 in chunks of 16, crop 2: one
# task) is left as it is: its one task is small.
MAX_GROWTH = 2 * GROWTH_SHARE


def _best_region(
    region: Box, wider: Sequence[Box], sizes_over: Callable[[Box], FlowPlan], pad: tuple[int, ...]
) -> tuple[FlowPlan, Box]:
    """The plan of ``region`` or of one of the ``wider`` regions holding it (``grown_off_grid``
    along the sweep, then across it too), whichever is better (``_grown_is_better``), and
    the region it tiles. A length that is a prime multiple of the grain (16 x 251) has no
    tiling on the grain but the grain and the whole length: along the sweep one task spans
    it (memory grows with the length) or bottom chunks of one grain compute their margins
    again and again; across it, bands of one grain read their halo again."""
    try:
        best: FlowPlan | None = sizes_over(region)
    except ConfigError as err:  # nothing fits over the region itself: perhaps a wider one
        best, refusal = None, err
    for other in dict.fromkeys(w for w in wider if w != region):
        if best is not None and other.size > region.size * (1 + MAX_GROWTH):
            continue  # a short length, where one task costs little: not worth the voxels
        try:
            plan = sizes_over(other)
        except ConfigError:
            continue
        if best is None or _grown_is_better(best, plan, region, other, pad):
            best, region = plan, other
    if best is None:
        raise refusal
    return best, region


# Where the plan over a grown region must do better than the plan over the bbox to be
# taken: read amplification lower by this much, or this share less compute (the growth's
# own voxels counted).
GROWTH_GAIN = 0.05


def _grown_is_better(
    plain: FlowPlan, grown: FlowPlan, region: Box, wider: Box, pad: tuple[int, ...]
) -> bool:
    """Whether the plan over ``wider`` beats the plan over ``region``: one top task spans
    the sweep in ``plain`` only (its memory grows with the length), or ``grown`` reads
    less, or ``plain``'s bottom chunk breaks the margin rule (``_bottom_size``: margins at
    most ``MAX_CROP_SHARE`` of it) and ``grown`` computes less (margins and the growth's
    voxels both counted). A plan within the rule that reads as little stays as it is.

    >>> a = FlowPlan(True, ((64, 96, 4016), (32, 32, 4016)), ((0,) * 3, (2,) * 3),
    ...              ((0,) * 3,) * 2, True, 2, 0, (), 1.0, 1.0, 2**30, "given", 300, 1,
    ...              sweep_tasks=1)
    >>> b = dataclasses.replace(a, chunk_sizes=((64, 96, 256), (32, 32, 256)), sweep_tasks=16)
    >>> box, wide = Box((0, 0, 0), (64, 96, 4016)), Box((0, 0, 0), (64, 96, 4096))
    >>> _grown_is_better(a, b, box, wide, (2,) * 3), _grown_is_better(b, a, wide, box, (2,) * 3)
    (True, False)
    """
    if plain.sweep_tasks == 1 and grown.sweep_tasks > 1:
        return True
    if grown.sweep_tasks == 1 and plain.sweep_tasks > 1:
        return False
    if grown.read_amplification < plain.read_amplification - GROWTH_GAIN:
        return True
    least = [max(1, math.ceil(2 * p / MAX_CROP_SHARE)) for p in pad]
    bottom = plain.chunk_sizes[-1]
    if all(b >= min(q, e) for b, q, e in zip(bottom, least, region.shape, strict=True)):
        return False
    computed = _redundancy(plain.chunk_sizes[-1], pad) * region.size
    return _redundancy(grown.chunk_sizes[-1], pad) * wider.size < computed * (1 - GROWTH_GAIN)


def _split_reason(bbox: Box, region: Box, dst: StorageLayout) -> str:
    """Why a bbox on dst's storage grid is tiled grown to ``region``, and what it costs.

    >>> dst = StorageLayout("dst", Box((0, 0, 0), (64, 96, 4016)), (16, 16, 16), 4)
    >>> _split_reason(dst.bounds, Box((0, 0, 0), (64, 96, 4096)), dst).split(":")[0]
    "bbox Box(start=(0, 0, 0), stop=(64, 96, 4016))'s length along axis 2 (4016 = 16 x 251) \
has no tiling on dst's storage grid into task sizes that keep memory and margins small"
    """
    axes = [a for a in range(bbox.ndim) if region.shape[a] != bbox.shape[a]]
    lengths = ", ".join(
        f"{bbox.shape[a]} = {dst.chunks[a]} x {bbox.shape[a] // dst.chunks[a]}" for a in axes
    )
    edge = " past dst's edge" if any(region.stop[a] > dst.bounds.stop[a] for a in axes) else ""
    more = region.size / bbox.size - 1
    return (
        f"bbox {bbox}'s length along {'axes' if len(axes) > 1 else 'axis'} "
        f"{', '.join(map(str, axes))} ({lengths}) has no "
        "tiling on dst's storage grid into task sizes that keep memory and margins small: "
        f"the tasks tile it grown to {region}{edge} "
        f"({more:.1%} more voxels computed, none of them written) and writes are clipped to "
        "the bbox"
    )


def _grown_to_grain(
    region: Box, extent: tuple[int, ...], bounds: Box, grain: tuple[int, ...], dst: StorageLayout
) -> tuple[int, ...]:
    """``extent`` grown to whole storage grains on the axes where the bbox ends at dst's
    edge, a grain fits in it more than once but does not divide it, and the growth is less
    than one of dst's chunks.

    Sizes divide the bbox and are multiples of the grain, so such an extent (1000 voxels in
    chunks of 128) has the whole bbox as its only size: one task holding all of it. Grown
    (to 1024), it has sizes on the grain; past dst's edge reads give fill values and writes
    are clipped, so nothing outside the bbox is written. A bbox ending inside dst stays.

    >>> dst = StorageLayout("dst", Box((0,), (1000,)), (128,), 1)
    >>> _grown_to_grain(Box((0,), (1000,)), (1000,), Box((0,), (1000,)), (128,), dst)
    (1024,)
    >>> _grown_to_grain(Box((0,), (1000,)), (1000,), Box((0,), (2000,)), (128,), dst)
    (1000,)
    >>> _grown_to_grain(Box((0,), (100,)), (100,), Box((0,), (100,)), (128,), dst)
    (100,)
    """
    out = []
    for a, (e, g) in enumerate(zip(extent, grain, strict=True)):
        more = -(-e // g) * g - e
        at_edge = region.stop[a] >= bounds.stop[a]
        out.append(e + more if at_edge and g < e and 0 < more < dst.chunks[a] else e)
    return tuple(out)


def plan_given(
    spec: FlowSpec,
    named: Mapping[str, Volume],
    dst: Volume,
    *,
    cores: int,
    memory_limit: int,
    memory_limit_source: str,
    probe: bool = False,
) -> FlowPlan:
    """The read model of the sizes a user gave (``read_plan``) for a validated flow."""
    cached = sum(v.cache_bytes for v in named.values())
    return read_plan(
        spec.bbox,
        [layout_of(n, v, spec.scale_of(n)) for n, v in named.items()],
        layout_of("dst", dst, written=True),
        chunk_sizes=[lv.chunk for lv in spec.levels],
        crop_pads=[lv.crop for lv in spec.levels],
        blend_pads=[lv.blend for lv in spec.levels],
        cores=cores,
        memory_limit=memory_limit,
        memory_limit_source=memory_limit_source,
        accumulate_bytes=accumulate_bytes_of(dst),
        direct_writes=spec.skip_intermediates,
        cached=cached,
        probe=probe,
    )


def amplification_warning(plan: FlowPlan, named: Mapping[str, Volume]) -> str:
    """The warning for given sizes that will amplify reads, with the figures; else ``""``.

    Only the amplification expected for this run counts, after the cache apply owns: a
    halo that cache absorbs costs nothing, and a warning ending "so it expects 1.00x"
    would only be noise.
    """
    if plan.read_amplification <= WARN_AMPLIFICATION:
        return ""
    cached = any(v.cache_bytes for v in named.values())
    halo = not cached and plan.amplification_without_cache > WARN_AMPLIFICATION
    split = [r for r in plan.reasons if "splits input" in r]
    if not halo and not split:
        return ""
    parts = []
    if split:
        parts.append(split[0])
    if halo:
        parts.append(
            f"a halo read without a chunk cache: each top task reads its neighbours' storage "
            f"chunks again, {plan.amplification_without_cache:.2f}x the input"
        )
    parts.append(
        f"even through the cache of {format_bytes(plan.cache_bytes)} that apply keeps for this "
        f"run, it expects {plan.read_amplification:.2f}x"
        if plan.cache_bytes
        else f"expected read amplification {plan.read_amplification:.2f}x"
    )
    return (
        "chunk sizes "
        + " over ".join("x".join(map(str, c)) for c in plan.chunk_sizes)
        + " will amplify reads: "
        + "; ".join(parts)
        + ". chunk_sizes='auto' (or omitting chunk_sizes) aligns top chunks to the storage "
        "chunks and sizes the cache so that each is read about once"
    )


def owned_inputs(named: Mapping[str, Volume], plan: FlowPlan) -> dict[str, Volume]:
    """The inputs to read through: with the plan's cache when the caller gave none."""
    if not plan.cache_bytes or any(v.cache_bytes for v in named.values()):
        return dict(named)
    sizes = dict(plan.cache_per_input)
    return {n: v.with_cache(sizes[n]) if sizes.get(n) else v for n, v in named.items()}


def for_executor(
    plan: FlowPlan,
    spec: FlowSpec,
    named: Mapping[str, Volume],
    *,
    streams: int,
    processes: int,
    on_cluster: bool = False,
) -> FlowPlan:
    """``plan`` as an executor of ``processes`` worker processes runs it, the top grid cut
    into ``streams`` contiguous streams (``_batches.TopStreams``): each stream's cache is
    its process's own, so at each of the ``streams - 1`` boundaries both neighbours fetch
    the halo layers they share (``stream_boundary_bytes``; never more than no cache at
    all); each process holds a cache, superchunks and bottom buffers of its own
    (``memory_bytes`` counts them all, or is each Dask worker's ``on_cluster``).
    """
    top = spec.levels[0].chunk
    streams = max(1, min(streams, math.prod(spec.top_grid)))
    amplification = plan.read_amplification
    if streams > 1 and not plan.inputs_cache:
        inputs = [layout_of(n, v, spec.scale_of(n)) for n, v in named.items()]
        extra, total = stream_boundary_bytes(spec.bbox, inputs, top, spec.context_pad)
        if total:
            amplification = min(
                plan.amplification_without_cache, amplification + (streams - 1) * extra / total
            )
    memory = plan.memory_bytes if on_cluster else plan.memory_bytes * max(1, processes)
    return dataclasses.replace(
        plan,
        read_amplification=amplification,
        memory_bytes=memory,
        streams=streams,
        worker_processes=max(1, processes),
        on_cluster=on_cluster,
    )
