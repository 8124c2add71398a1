"""A flow on a Dask cluster: its top-level tasks and reductions in batches, streamed.

Policy. On a cluster a flow never hands the scheduler one task per top-level
chunk (a million chunks would cost Dask's scheduler half an hour before any
work, and the client a future each). ``BatchedRun`` cuts batches lazily, in the
plan's order, and streams them through ``DaskExecutor.stream`` (a window of a
few per worker thread, ``_dask_stream``)::

    top grid, C order, done keys skipped ──> Batch(TOP, grid indices) ───┐
                                                                         ├─> stream ─> worker:
    reduction r, once every top task meeting it is done ─> Batch(REDUCE) ┘    run_batch
                                                                               │
    progress events, report  <──── BatchStats (sums, no row per task) <────────┘

Sizes (``BatchSizer``). A batch should run seconds (``TARGET_BATCH_SECONDS``):
long enough that Dask's millisecond per task is noise, short enough that a
lost worker costs little and the tail stays balanced. The flow's estimate has
no time, so the first batches are the smallest allowed and later ones are sized
from the measured seconds per task of the batches back so far (their wall on
their worker over their tasks). That size is capped by ``remaining //
(BATCHES_PER_THREAD * threads)``, so that the tail splits finer and every worker
thread has work to the end, and raised to ``MIN_TASKS_PER_BATCH``, so that the
Dask tasks stay fewer than a 25th of the tasks however long each runs (the
scheduler's cost is per task, whatever the batch holds). E.g. 2,048 tasks of
6 ms on 2 threads: 4 first batches of 25, then 2 s / 6 ms = 333, capped at
1,948 // 4 = 487, so 333, 333, ... until the cap shrinks below them, and 25 at
the end: 18 batches.

On the worker (``run_batch``) a batch runs its tasks with chunkgraph's own
thread executor over the worker's threads, under the flow's memory budget per
process (``superchunks_in_flight``); its job is unpickled once per process
(``_shared_job``), so the batch's tasks share their input caches. It records its
done keys as one marker record (``MarkerStore.mark_done_many``, named by the
batch's id) every ``RECORD_EVERY_S`` and at its end, failure included. A batch
run again (Dask reruns it when its worker died) first reads its record and
skips those keys: a killed worker costs only its batches' unrecorded tasks.

Reductions. Each pending reduction box counts the pending top-level tasks that
meet it (``_ReductionCounts``: one int32 per box, from the per-axis index ranges
that ``top_indices_meeting`` computes); a finished top batch counts its tasks
down, and a box at zero is ready. Ready reductions go out in batches of their own
size, first when enough are ready or when no top batch is left.

Client memory. The done-key set (dropped once the top grid is cut), one
counter per reduction, the batches in the window and the sums: nothing per
top-level task outlives its batch.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from chunkgraph import planning
from chunkgraph._errors import RunEndedError
from chunkgraph.execute import DaskExecutor, EventKind, LocalExecutor, ProgressBar, Subscriber
from chunkgraph.execute._breakdown import NO_TIMES, TaskTimes
from chunkgraph.execute._dask_stream import Call, cancel_check, worker_threads
from chunkgraph.execute._events import EventQueue
from chunkgraph.flow.run._late_writes import check_run_live
from chunkgraph.flow.run._reduce import (
    ReductionStats,
    reduce_box,
    reduction_region,
    top_chunk_box,
)
from chunkgraph.flow.run._top_task import TopJob, TopStats, _run_top_task, superchunks_in_flight
from chunkgraph.flow.state import REDUCE, TOP, MarkerStore, grid_key
from chunkgraph.geometry import Box
from chunkgraph.graph import Cost, Graph

if TYPE_CHECKING:
    from chunkgraph.flow.plan import FlowSpec
    from chunkgraph.volume import Volume

IntArray = npt.NDArray[np.int64]

# Seconds a batch should run: 100x Dask's per-task cost, yet a lost worker redoes little.
TARGET_BATCH_SECONDS = 2.0
# Fewest tasks in a batch (but what is left): Dask tasks <= 1/25 of the flow's tasks.
MIN_TASKS_PER_BATCH = 25
# A batch holds at most 1 / (this x threads) of the tasks left: the tail splits finer,
# so the last batches end together (one running and one queued per thread).
BATCHES_PER_THREAD = 2
# Seconds between a running batch's records of its done keys (one object rewritten):
# a killed worker redoes at most this much of each of its batches.
RECORD_EVERY_S = 2.0


@dataclass(frozen=True)
class Batch:
    """``indices``: grid indices ``(n, ndim)`` of ``kind``'s tasks (top-level chunks or
    reduction boxes), in C order; ``id``: unique to the run, names its marker record."""

    id: str
    kind: str
    indices: IntArray

    @property
    def name(self) -> str:
        return f"apply-batch-{self.id}"


@dataclass(frozen=True)
class BatchSettings:
    """What every batch of a flow run needs besides its job: a top task's bytes, the
    flow's memory limit, whether it waits on an object store, retries per task."""

    top_memory: int
    memory_limit: int | None
    io_waits: bool
    retries: int


@dataclass(frozen=True)
class BatchStats:
    """What a batch (or many, summed) of one ``kind`` did: ``done`` tasks now done (run
    here, or recorded by an earlier try), ``ran`` of them here in ``seconds`` of wall;
    the tasks' levels, bytes (a top task reads inputs and writes a layer or dst, a
    reduction reads layers and writes dst), saturated voxels and times, summed."""

    kind: str = TOP
    batch: str = ""
    done: int = 0
    ran: int = 0
    seconds: float = 0.0
    tasks_per_level: tuple[int, ...] = ()
    bytes_read: int = 0
    bytes_written: int = 0
    saturated: int = 0
    times: TaskTimes = NO_TIMES

    @classmethod
    def of(cls, kind: str, stats: Iterable[TopStats | ReductionStats]) -> BatchStats:
        """The sums of tasks' ``stats`` of ``kind``."""
        ran = read = written = saturated = 0
        levels: list[int] = []
        times = TaskTimes()
        for s in stats:
            ran += 1
            written += s.bytes_written
            saturated += s.saturated
            times = times + s.times
            if isinstance(s, TopStats):
                read += s.bytes_read
                levels = [a + b for a, b in zip(levels or [0] * len(s.tasks_per_level),
                                                 s.tasks_per_level, strict=True)]  # fmt: skip
            else:
                read += s.temporary_bytes_read
        return cls(kind, "", ran, ran, 0.0, tuple(levels), read, written, saturated, times)

    def __add__(self, other: BatchStats) -> BatchStats:
        a, b = self.tasks_per_level, other.tasks_per_level
        levels = tuple(x + y for x, y in zip(a, b, strict=True)) if a and b else a or b
        return BatchStats(
            self.kind,
            "",
            self.done + other.done,
            self.ran + other.ran,
            self.seconds + other.seconds,
            levels,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
            self.saturated + other.saturated,
            self.times + other.times,
        )


# -- on the worker ----------------------------------------------------------------------


def run_batch(job: TopJob, batch: Batch, settings: BatchSettings) -> BatchStats:
    """In a Dask worker: the batch's tasks not in its record, on a thread executor over
    the worker's threads; their done keys recorded as they finish (module doc)."""
    start = time.perf_counter()
    markers = job.markers
    recorded = markers.record_keys(batch.kind, batch.id)
    recorder = _Recorder(markers, batch.kind, batch.id, recorded, cancel_check())
    graph = Graph()
    cost = Cost(memory=settings.top_memory if batch.kind == TOP else 0)
    redo = _ReductionBoxes(job.spec, job.dst) if batch.kind == REDUCE else None
    for row in batch.indices.tolist():
        index = tuple(row)
        key = grid_key(index)
        if key in recorded:
            continue
        if redo is None:
            box = top_chunk_box(job.spec, index)
            graph.add(_top_item, job, index, box, recorder, name=f"apply-top{box}", cost=cost)
        else:
            box = redo.box(index)
            graph.add(_reduce_item, job, key, box, recorder, name=f"apply-reduce{box}")
    results: dict[int, TopStats | ReductionStats] = {}
    try:
        if len(graph):
            threads = worker_threads()
            executor = LocalExecutor("threads", workers=threads, retries=settings.retries)
            results = executor.run(graph, plan=_plan(graph, job, threads, settings))
    finally:
        recorder.flush()  # what finished, failure or not: a resume skips it
    stats = BatchStats.of(batch.kind, results.values())
    done = len(recorded.intersection(grid_key(tuple(r)) for r in batch.indices.tolist()))
    return dataclasses.replace(
        stats, batch=batch.id, done=stats.ran + done, seconds=time.perf_counter() - start
    )


def _plan(graph: Graph, job: TopJob, threads: int, settings: BatchSettings) -> planning.Plan:
    """The batch's plan on this worker's threads, with the flow's memory budget there."""
    worker = planning.Context("worker", slots=threads)
    in_flight = superchunks_in_flight(
        job.spec, threads, memory_limit=settings.memory_limit, top_bytes=settings.top_memory,
        device=job.device, io_waits=settings.io_waits,
    )  # fmt: skip
    budget = float(in_flight * settings.top_memory) if settings.top_memory > 0 else None
    return planning.plan(graph, [worker], memory=budget, strategy="merge")


def _top_item(job: TopJob, index: tuple[int, ...], box: Box, recorder: _Recorder) -> TopStats:
    recorder.check_wanted()
    stats = _run_top_task(job, index, box)
    check_run_live(job.run_token)
    recorder.done(grid_key(index))
    return stats


def _reduce_item(job: TopJob, key: str, box: Box, recorder: _Recorder) -> ReductionStats:
    if job.layers is None:
        raise AssertionError("a reduction needs temporary layers; this flow writes directly")
    recorder.check_wanted()
    stats = reduce_box(job.spec, job.layers, list(job.layer_vols), job.dst, box, job.run_token)
    recorder.done(key)
    return stats


class _Recorder:
    """One batch's done keys, written as its marker record every ``RECORD_EVERY_S`` and
    at ``flush``; safe from the executor's threads. A record is rewritten whole, so it
    starts with the keys an earlier try recorded. ``check_wanted`` stops a batch that the
    client cancelled (a failure, Ctrl-C) before its next task."""

    def __init__(
        self,
        markers: MarkerStore,
        kind: str,
        record: str,
        before: set[str],
        cancelled: Callable[[], bool],
    ) -> None:
        self.markers, self.kind, self.record = markers, kind, record
        self.cancelled = cancelled
        self.keys = list(before)
        self.written = len(self.keys)
        self.last = time.monotonic()
        self.lock = threading.Lock()  # guards keys and last
        self.writing = threading.Lock()  # one write at a time, each of more keys

    def check_wanted(self) -> None:
        if self.cancelled():
            raise RunEndedError(
                f"batch {self.record} was cancelled by its client (the run failed or was "
                "interrupted); its tasks not yet started are dropped"
            )

    def done(self, key: str) -> None:
        with self.lock:
            self.keys.append(key)
            due = time.monotonic() - self.last >= RECORD_EVERY_S
            if due:
                self.last = time.monotonic()
        if due:
            self.flush()

    def flush(self) -> None:
        with self.writing:
            with self.lock:
                keys = list(self.keys)
            if len(keys) > self.written:
                self.markers.mark_done_many(self.kind, keys, record=self.record)
                self.written = len(keys)


class _ReductionBoxes:
    """Reduction box ``index`` of a flow: the reduction region tiled from its start by
    ``max_reduction_chunk_size``, the last box on an axis clipped (``reduction_boxes``)."""

    def __init__(self, spec: FlowSpec, dst: Volume) -> None:
        self.region = reduction_region(spec, dst)
        self.chunk = tuple(int(c) for c in spec.max_reduction_chunk_size)
        self.grid = tuple(-(-s // c) for s, c in zip(self.region.shape, self.chunk, strict=True))

    def box(self, index: tuple[int, ...]) -> Box:
        start = [s + i * c for s, i, c in zip(self.region.start, index, self.chunk, strict=True)]
        stop = [min(a + c, e) for a, c, e in zip(start, self.chunk, self.region.stop, strict=True)]
        return Box(start, stop)


# -- on the client ----------------------------------------------------------------------


class BatchSizer:
    """Tasks in the next batch of one kind (module doc: ``lo``, ``hi``, by time).

    >>> sizer = BatchSizer(threads=2)
    >>> sizer.size(2048), sizer.size(100), sizer.size(10)
    (25, 25, 10)
    >>> sizer.took(ran=25, seconds=0.15)  # 6 ms a task
    >>> sizer.size(1948), sizer.size(100_000), sizer.size(400), sizer.size(60)
    (333, 333, 100, 25)
    """

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self.ran = 0
        self.seconds = 0.0

    def took(self, ran: int, seconds: float) -> None:
        """A batch of ``ran`` tasks ran ``seconds`` on its worker."""
        self.ran += ran
        self.seconds += seconds

    def size(self, remaining: int) -> int:
        by_time = MIN_TASKS_PER_BATCH
        if self.ran and self.seconds > 0:
            by_time = round(TARGET_BATCH_SECONDS * self.ran / self.seconds)
        hi = remaining // (BATCHES_PER_THREAD * self.threads)
        return min(remaining, max(MIN_TASKS_PER_BATCH, min(by_time, hi)))


class _ReductionCounts:
    """Per pending reduction box, how many pending top-level tasks meet it (-1: done
    before this run); ``ready``: boxes at zero, not yet handed out (module doc)."""

    def __init__(self, spec: FlowSpec, dst: Volume, done_tops: set[str], done: set[str]) -> None:
        boxes = _ReductionBoxes(spec, dst)
        top = spec.levels[0]
        grid = spec.top_grid
        lo_hi = []  # per axis: the top indices [lo, hi) meeting each reduction index
        self.ranges = []  # per axis: the reduction indices [lo, hi) each top index meets
        for a, n in enumerate(grid):
            r = np.arange(boxes.grid[a])
            start = boxes.region.start[a] + r * boxes.chunk[a]
            stop = np.minimum(start + boxes.chunk[a], boxes.region.stop[a])
            # top_indices_meeting(spec, box & bbox), along this axis
            q0, q1 = np.maximum(start, spec.bbox.start[a]), np.minimum(stop, spec.bbox.stop[a])
            b, c, p = spec.bbox.start[a], top.chunk[a], top.blend[a]
            lo = np.maximum(0, (q0 - b - p) // c)
            hi = np.minimum(n, -((b - p - q1) // c))
            lo_hi.append((lo, hi))
            i = np.arange(n)
            self.ranges.append(
                (np.searchsorted(hi, i, side="right"), np.searchsorted(lo, i, side="right"))
            )
        counts = np.ones(boxes.grid, dtype=np.int32)
        for a, (lo, hi) in enumerate(lo_hi):
            shape = [1] * len(grid)
            shape[a] = -1
            counts *= (hi - lo).astype(np.int32).reshape(shape)
        self.counts = counts
        for key in done_tops:
            self._count_down(tuple(int(x) for x in key.split("_")))
        for key in done:
            self.counts[tuple(int(x) for x in key.split("_"))] = -1
        self.done = int((counts < 0).sum())
        self.pending = counts.size - self.done
        self.ready: deque[int] = deque(np.flatnonzero(counts.ravel() == 0).tolist())

    def _count_down(self, index: tuple[int, ...]) -> npt.NDArray[np.intp]:
        """Count top task ``index`` done; the flat indices of the boxes it brought to zero."""
        where = tuple(slice(lo[i], hi[i]) for (lo, hi), i in zip(self.ranges, index, strict=True))
        view = self.counts[where]
        view -= 1
        zero = np.argwhere(view == 0)
        if not len(zero):
            return np.empty(0, np.intp)
        zero += np.array([s.start for s in where])
        return np.asarray(np.ravel_multi_index(tuple(zero.T), self.counts.shape), np.intp)

    def top_done(self, indices: IntArray) -> None:
        """Count a finished top batch's tasks down; boxes at zero become ready."""
        for row in indices.tolist():
            self.ready.extend(self._count_down(tuple(row)).tolist())

    def take(self, n: int) -> IntArray:
        """Up to ``n`` ready boxes, as grid indices in C order."""
        flat = sorted(self.ready.popleft() for _ in range(min(n, len(self.ready))))
        return np.stack(np.unravel_index(flat, self.counts.shape), axis=1).astype(np.int64)


class BatchedRun:
    """The client's side of a batched flow run: cuts batches (``calls``), takes their
    results (``took``), sums them. Reads the done markers when made."""

    def __init__(
        self,
        spec: FlowSpec,
        dst: Volume,
        job: TopJob,
        settings: BatchSettings,
        *,
        threads: int,
        reductions: bool,
    ) -> None:
        self.spec, self.job, self.settings = spec, job, settings
        self.grid = spec.top_grid
        self.top_total = math.prod(self.grid)
        done_tops: set[str] | None = job.markers.done_keys(TOP)
        assert done_tops is not None
        self.skipped_top = len(done_tops)
        self.pending_top = self.top_total - self.skipped_top
        self.reductions: _ReductionCounts | None = None
        self.reduction_total = self.skipped_red = self.pending_red = 0
        if reductions:
            counts = _ReductionCounts(spec, dst, done_tops, job.markers.done_keys(REDUCE))
            self.reductions = counts
            self.reduction_total = counts.counts.size
            self.skipped_red, self.pending_red = counts.done, counts.pending
        self._done_tops = done_tops or None  # dropped once the grid is cut
        self._next_flat = 0  # the next flat index of the top grid to look at
        self._tops_out = self._reds_out = 0  # tasks handed out in batches
        self.sizers = {TOP: BatchSizer(threads), REDUCE: BatchSizer(threads)}
        self.in_flight: dict[str, Batch] = {}
        self.totals = {TOP: BatchStats(TOP), REDUCE: BatchStats(REDUCE)}
        self.pending_voxels = 0  # of the bbox, covered by the top tasks handed out
        self._ids = 0
        self._token = job.run_token[:8]

    def calls(self) -> Iterator[Call | None]:
        """The batches, cut when the stream asks; None: none ready until a result comes."""
        while True:
            batch = self._next()
            if batch is None:
                if self._tops_out == self.pending_top and self._reds_out == self.pending_red:
                    return
                yield None
                continue
            self.in_flight[batch.id] = batch
            yield Call(batch.name, run_batch, (self.job, batch, self.settings))

    def took(self, stats: BatchStats) -> None:
        """A batch's result: summed, its tasks counted toward ready reductions."""
        batch = self.in_flight.pop(stats.batch)
        self.totals[batch.kind] = self.totals[batch.kind] + stats
        self.sizers[batch.kind].took(stats.ran, stats.seconds)
        if batch.kind == TOP and self.reductions is not None:
            self.reductions.top_done(batch.indices)

    def _next(self) -> Batch | None:
        reds = self.reductions
        tops_left = self._tops_out < self.pending_top
        if reds is not None and reds.ready:
            size = self.sizers[REDUCE].size(self.pending_red - self._reds_out)
            if len(reds.ready) >= size or not tops_left:
                indices = reds.take(size)
                self._reds_out += len(indices)
                return self._batch(REDUCE, indices)
        if tops_left:
            size = self.sizers[TOP].size(self.pending_top - self._tops_out)
            indices = self._cut_tops(size)
            self._tops_out += len(indices)
            return self._batch(TOP, indices)
        return None

    def _batch(self, kind: str, indices: IntArray) -> Batch:
        self._ids += 1
        return Batch(f"{self._token}-{kind}-{self._ids}", kind, indices)

    def _cut_tops(self, size: int) -> IntArray:
        """The next ``size`` top-level grid indices not done, in C order."""
        parts: list[IntArray] = []
        taken = 0
        while taken < size and self._next_flat < self.top_total:
            stop = min(self.top_total, self._next_flat + size - taken)
            flat = np.arange(self._next_flat, stop)
            self._next_flat = stop
            rows = np.stack(np.unravel_index(flat, self.grid), axis=1).astype(np.int64)
            if self._done_tops is not None:
                done = self._done_tops
                rows = rows[[grid_key(tuple(r)) not in done for r in rows.tolist()]]
            parts.append(rows)
            taken += len(rows)
        if self._next_flat >= self.top_total:
            self._done_tops = None  # the only per-task structure: gone once the grid is cut
        indices = np.concatenate(parts) if parts else np.empty((0, len(self.grid)), np.int64)
        self.pending_voxels += self._voxels(indices)
        return indices

    def _voxels(self, indices: IntArray) -> int:
        """Voxels of the bbox that the top-level chunks at ``indices`` cover."""
        bbox, chunk = self.spec.bbox, np.array(self.spec.levels[0].chunk)
        start = np.array(bbox.start) + indices * chunk
        lo = np.maximum(start, bbox.start)
        hi = np.minimum(start + chunk, bbox.stop)
        return int(np.prod(np.maximum(hi - lo, 0), axis=1).sum())


def stream_batches(
    batched: BatchedRun,
    executor: DaskExecutor,
    progress: bool,
    subscribers: Iterable[Subscriber] = (),
) -> None:
    """Run ``batched``'s batches on the cluster, summing their results into it; events
    count top-level tasks and reductions (a FINISHED event per task, named by its batch)."""
    subs = list(subscribers)
    bar = ProgressBar() if progress else None
    if bar is not None:
        subs.append(bar)
    events = EventQueue(subs) if subs else None
    finished = 0
    if events is not None:
        events.emit(EventKind.RUN_STARTED, total=batched.pending_top + batched.pending_red)
    try:
        # Each task is tried again inside its batch (run_batch's executor): a batch is not.
        for stats in executor.stream(batched.calls(), retries=0):
            batched.took(stats)
            finished += stats.done
            if events is not None:
                name = f"apply-batch-{stats.batch}"
                for _ in range(stats.done):
                    events.emit(EventKind.FINISHED, name=name, attempt=1)
                events.drain()
    except BaseExceptionGroup as group:
        if events is not None:
            for error in group.exceptions:
                task = getattr(error, "task", "")
                events.emit(EventKind.FAILED, name=str(task), attempt=1, error=error)
        raise
    finally:
        if events is not None:
            events.emit(EventKind.RUN_FINISHED, total=finished)
            events.drain()
        if bar is not None:
            bar.close()
