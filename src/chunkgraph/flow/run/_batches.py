"""A flow on a Dask cluster or on worker processes: its top-level tasks and reductions
in batches, streamed.

Policy. On a cluster a flow never hands the scheduler one task per top-level
chunk (a million chunks would cost Dask's scheduler half an hour before any
work, and the client a future each). ``BatchedRun`` cuts batches lazily, in the
plan's order, and streams them through ``DaskExecutor.stream`` (a window of a
few per worker thread, ``_dask_stream``)::

    top grid, C order, stream per thread ──> Batch(TOP, grid indices) ───┐
                                                                         ├─> stream ─> worker:
    reduction r, once every top task meeting it is done ─> Batch(REDUCE) ┘    run_batch
                                                                               │
    progress events, report  <──── BatchStats (sums, no row per task) <────────┘
                                                                  (_batch_run)

Locality (``TopStreams``). Neighbouring top tasks share the halo chunks between
them, which each worker process's input cache decodes once for its own tasks
only. So the grid's C order is cut into one contiguous stream per worker thread
(equal ranges: slabs along the slowest axis), each batch is cut from the stream
whose worker has room, and it prefers that worker (``Call.slot``: a loose
restriction, so a dead worker's batches still run elsewhere). Only the chunks
along a boundary between two streams are decoded twice: two streams of 16 rows
of top tasks with a one-voxel halo read 17 + 17 rows, 1.06x. A stream that runs
dry while its worker is idle takes the back half of the stream with the most
left (a steal while its last batch still runs would cut the range its own
worker is about to reach)::

    grid rows 0..31, 2 threads:  stream 0: rows 0-15 ──batches──> worker A (its cache)
                                 stream 1: rows 16-31 ─batches──> worker B
    A idle, 0 dry, 1 has rows 28-31 left:  stream 0 takes 30-31, stream 1 keeps 28-29

Worker processes (``executor="processes"``). The same batches go to a local pool
through ``ProcessStreams`` (``_process_stream``): a slot is a worker process, whose
input cache is its own, so each process takes one contiguous stream and the same
steal rule balances them. The flow's cores are shared among the processes (each
batch runs its tasks on ``cores // processes`` threads, ``BatchSettings.threads``).
With a ``timeout`` the flow keeps one call per top task instead (``_flow_graph``), so
that the pool can kill the worker of the one task that overran.

Sizes (``BatchSizer``). A batch should run seconds (``TARGET_BATCH_SECONDS``):
long enough that Dask's millisecond per task is noise, short enough that a
lost worker costs little and the tail stays balanced. The flow's estimate has
no time, so the first batches are the smallest allowed and later ones are sized
from the measured seconds per task of the batches back so far (their wall on
their worker over their tasks). That size is capped by ``remaining //
(BATCHES_PER_THREAD * threads)``, so that the tail splits finer and every worker
thread has work to the end, and raised to ``MIN_TASKS_PER_BATCH``, so that the
Dask tasks stay fewer than a 25th of the tasks however long each runs (the
scheduler's cost is per task, whatever the batch holds); a flow of fewer than
``MIN_BATCHES_PER_THREAD x 25`` tasks per thread is cut finer, into at least
that many batches per thread, so that a few long tasks still spread over all.
E.g. 2,048 tasks of 6 ms on 2 threads: 4 first batches of 25, then 2 s / 6 ms =
333, capped at 1,948 // 4 = 487, so 333, 333, ... until the cap shrinks below
them, and 25 at the end: 18 batches.

On the worker (``_batch_run``) a batch runs its tasks with chunkgraph's own
thread executor over the worker's threads, records its done keys as one marker
record every ``RECORD_EVERY_S`` and at its end, and returns sums; a batch run
again after its worker died skips what its record holds.

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

import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import TaskError
from chunkgraph.execute import EventKind, ProgressBar, Subscriber
from chunkgraph.execute._dask_stream import WINDOW_PER_THREAD, Call
from chunkgraph.execute._events import EventQueue
from chunkgraph.flow.run._batch_run import (
    Batch,
    BatchSettings,
    BatchStats,
    IntArray,
    ReductionBoxes,
    run_batch,
)
from chunkgraph.flow.state import REDUCE, TOP, grid_key

if TYPE_CHECKING:
    from chunkgraph.flow.plan import FlowSpec
    from chunkgraph.flow.run._top_task import TopJob
    from chunkgraph.geometry import Box
    from chunkgraph.volume import Volume

# Seconds a batch should run: 100x Dask's per-task cost, yet a lost worker redoes little.
TARGET_BATCH_SECONDS = 2.0
# Fewest tasks in a batch (but what is left): Dask tasks <= 1/25 of the flow's tasks.
MIN_TASKS_PER_BATCH = 25
# A batch holds at most 1 / (this x threads) of the tasks left: the tail splits finer,
# so the last batches end together (one running and one queued per thread).
BATCHES_PER_THREAD = 2
# A flow of few tasks makes at least this many batches per thread (smaller than
# MIN_TASKS_PER_BATCH): 8 long tasks on 2 threads are 4+ batches, never one.
MIN_BATCHES_PER_THREAD = 4


class BatchSizer:
    """Tasks in the next batch of one kind (module doc: ``lo``, ``hi``, by time).

    >>> sizer = BatchSizer(threads=2, total=2048)
    >>> sizer.size(2048), sizer.size(100), sizer.size(10)
    (25, 25, 10)
    >>> sizer.took(ran=25, seconds=0.15)  # 6 ms a task
    >>> sizer.size(1948), sizer.size(100_000), sizer.size(400), sizer.size(60)
    (333, 333, 100, 25)
    >>> few = BatchSizer(threads=2, total=40)  # few long tasks: every thread busy
    >>> few.size(40), few.size(3)
    (5, 3)
    >>> few.took(ran=5, seconds=10.0)
    >>> few.size(35), few.size(12)
    (5, 5)
    """

    def __init__(self, threads: int, total: int) -> None:
        self.threads = max(1, threads)
        # A flow of few tasks still gives every thread BATCHES_PER_THREAD batches or more.
        self.least = max(
            1, min(MIN_TASKS_PER_BATCH, total // (MIN_BATCHES_PER_THREAD * self.threads))
        )
        self.ran = 0
        self.seconds = 0.0

    def took(self, ran: int, seconds: float) -> None:
        """A batch of ``ran`` tasks ran ``seconds`` on its worker."""
        self.ran += ran
        self.seconds += seconds

    def size(self, remaining: int) -> int:
        by_time = self.least
        if self.ran and self.seconds > 0:
            by_time = round(TARGET_BATCH_SECONDS * self.ran / self.seconds)
        hi = remaining // (BATCHES_PER_THREAD * self.threads)
        return min(remaining, max(self.least, min(by_time, hi)))


class TopStreams:
    """The top grid's flat C-order indices as one contiguous range per worker thread,
    ``[next[s], stop[s])`` for stream ``s`` (module doc: locality); ``out[s]``: its
    batches in flight, at most ``room`` each (the stream window's share of a thread).
    The first ``anchored`` streams (one per thread when the run began) each prefer a
    worker; streams made later for workers that joined prefer none. A stream is split
    only where it has ``2 x least`` indices left (``least``: the smallest batch): each
    split costs one more halo decoded twice, and a tail of less is the victim's next
    batch anyway; but a flow of few long tasks (``least`` 1) splits down to its last
    one, since one task's time is then the imbalance.

    ``pick`` is asked when the window has room; it names the stream the next batch
    comes from: of those with indices left and room, the one with the fewest batches in
    flight (its worker freed a slot), the lowest of those first. When none has room:

    * a stream that is dry and idle (nothing left, nothing in flight: its worker waits)
      takes the back half of the stream with the most left, so that the tail balances
      and both halves stay contiguous;
    * one that is dry but still runs its last batch waits for it (None: a split sooner
      would cut a range that its own worker is about to reach, one more halo decoded
      twice);
    * with no dry stream at all, the room is a worker thread that joined: a new stream
      takes that back half.

    >>> streams = TopStreams(total=10, streams=2, room=2)
    >>> def cut(n):
    ...     s = streams.pick()
    ...     streams.out[s] += 1  # its batch goes out
    ...     return s, streams.take(s, n)
    >>> [cut(3) for _ in range(3)]
    [(0, range(0, 3)), (1, range(5, 8)), (0, range(3, 5))]
    >>> streams.out = [1, 2]  # stream 0 dry, its last batch running; 1 full: wait
    >>> streams.pick() is None
    True
    >>> streams.out = [0, 2]  # stream 0 dry and idle: it takes 8..10's back half
    >>> streams.pick(), streams.take(0, 9), streams.left(), streams.splits
    (0, range(9, 10), 1, 1)
    >>> joined = TopStreams(total=8, streams=1, room=1)
    >>> joined.out = [1]  # its one stream full, yet room: a thread joined
    >>> joined.pick(), joined.next, joined.stop, joined.anchored
    (1, [0, 4], [4, 8], 1)
    """

    def __init__(self, total: int, streams: int, room: int, least: int = 1) -> None:
        n = max(1, min(streams, total))
        bounds = [total * i // n for i in range(n + 1)]
        self.next, self.stop = bounds[:-1], bounds[1:]
        self.out = [0] * n
        self.room = room
        self.anchored = n
        self.least = max(1, least)
        self.splits = 0  # back halves taken: each cuts one more halo, read on both sides

    def left(self, stream: int | None = None) -> int:
        """Flat indices not yet cut, of ``stream`` or of all."""
        if stream is not None:
            return self.stop[stream] - self.next[stream]
        return sum(b - a for a, b in zip(self.next, self.stop, strict=True))

    def pick(self) -> int | None:
        """The stream of the next batch (see the class doc); None: none now."""
        every = range(len(self.out))
        ready = [s for s in every if self.left(s) and self.out[s] < self.room]
        if ready:
            return min(ready, key=lambda s: (self.out[s], s))
        victim = max(every, key=self.left)
        if self.left(victim) < (2 * self.least if self.least > 1 else 1):
            return None  # nothing worth a split: the victim's next batch takes it
        dry = [s for s in every if not self.left(s)]
        idle = [s for s in dry if not self.out[s]]
        if idle:
            stream = idle[0]
        elif dry:
            return None  # a dry stream's last batch still runs: the room is its own
        else:  # every stream full and none dry: a worker thread joined
            stream = len(self.out)
            self.next.append(0)
            self.stop.append(0)
            self.out.append(0)
        mid = self.next[victim] + self.left(victim) // 2  # the victim keeps the front
        self.splits += 1
        self.next[stream], self.stop[stream] = mid, self.stop[victim]
        self.stop[victim] = mid
        return stream

    def take(self, stream: int, n: int) -> range:
        """The next ``n`` flat indices of ``stream`` (fewer at its end)."""
        start = self.next[stream]
        self.next[stream] = min(self.stop[stream], start + n)
        return range(start, self.next[stream])


class _ReductionCounts:
    """Per pending reduction box, how many pending top-level tasks meet it (-1: done
    before this run); ``ready``: boxes at zero, not yet handed out (module doc)."""

    def __init__(self, spec: FlowSpec, dst: Volume, done_tops: set[str], done: set[str]) -> None:
        boxes = ReductionBoxes(spec, dst)
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
        done_tops = job.markers.done_keys(TOP)
        self.skipped_top = len(done_tops)
        self.pending_top = self.top_total - self.skipped_top
        self.reductions: _ReductionCounts | None = None
        self.reduction_total = self.skipped_red = self.pending_red = 0
        if reductions:
            counts = _ReductionCounts(spec, dst, done_tops, job.markers.done_keys(REDUCE))
            self.reductions = counts
            self.reduction_total = counts.counts.size
            self.skipped_red, self.pending_red = counts.done, counts.pending
        self._done_tops: set[str] | None = done_tops or None  # dropped once the grid is cut
        self._tops_out = self._reds_out = 0  # tasks handed out in batches
        self.sizers = {
            TOP: BatchSizer(threads, self.pending_top),
            REDUCE: BatchSizer(threads, self.pending_red),
        }
        least = self.sizers[TOP].least
        self.streams = TopStreams(self.top_total, threads, WINDOW_PER_THREAD, least=least)
        self.in_flight: dict[str, Batch] = {}
        self.totals = {TOP: BatchStats(TOP), REDUCE: BatchStats(REDUCE)}
        self.pending_voxels = 0  # of the bbox, covered by the top tasks handed out
        self.pending_written = 0  # of those, the voxels the flow writes (spec.writes)
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
            # A top batch prefers its stream's worker thread (``_dask_stream``: slots).
            slot = batch.stream if 0 <= batch.stream < self.streams.anchored else None
            yield Call(batch.name, run_batch, (self.job, batch, self.settings), slot)

    def took(self, stats: BatchStats) -> None:
        """A batch's result: summed, its tasks counted toward ready reductions."""
        batch = self.in_flight.pop(stats.batch)
        if batch.stream >= 0:
            self.streams.out[batch.stream] -= 1
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
        while tops_left:
            stream = self.streams.pick()
            if stream is None:
                break
            size = self.sizers[TOP].size(self.pending_top - self._tops_out)
            indices = self._cut_tops(stream, size)
            if not len(indices):
                continue  # a stretch of done tasks only
            self._tops_out += len(indices)
            self.streams.out[stream] += 1
            return self._batch(TOP, indices, stream)
        return None

    def _batch(self, kind: str, indices: IntArray, stream: int = -1) -> Batch:
        self._ids += 1
        return Batch(f"{self._token}-{kind}-{self._ids}", kind, indices, stream)

    def _cut_tops(self, stream: int, size: int) -> IntArray:
        """The next ``size`` top-level grid indices of ``stream`` not done, in C order."""
        parts: list[IntArray] = []
        taken = 0
        while taken < size and self.streams.left(stream):
            flat = np.asarray(self.streams.take(stream, size - taken))
            rows = np.stack(np.unravel_index(flat, self.grid), axis=1).astype(np.int64)
            if self._done_tops is not None:
                done = self._done_tops
                rows = rows[[grid_key(tuple(r)) not in done for r in rows.tolist()]]
            parts.append(rows)
            taken += len(rows)
        if not self.streams.left():
            self._done_tops = None  # the only per-task structure: gone once the grid is cut
        indices = np.concatenate(parts) if parts else np.empty((0, len(self.grid)), np.int64)
        self.pending_voxels += self._voxels(indices, self.spec.bbox)
        self.pending_written += self._voxels(indices, self.spec.writes)
        return indices

    def _voxels(self, indices: IntArray, bbox: Box) -> int:
        """Voxels of ``bbox`` that the top-level chunks at ``indices`` cover."""
        chunk = np.array(self.spec.levels[0].chunk)
        start = np.array(self.spec.bbox.start) + indices * chunk
        lo = np.maximum(start, bbox.start)
        hi = np.minimum(start + chunk, bbox.stop)
        return int(np.prod(np.maximum(hi - lo, 0), axis=1).sum())


class CallStreams(Protocol):
    """What streams a flow's batches: ``DaskExecutor`` on a cluster, ``ProcessStreams``
    on a local pool of worker processes (each a slot); ``threads``: its slots."""

    def threads(self) -> int: ...

    def stream(self, calls: Iterable[Call | None], *, retries: int = 0) -> Iterator[Any]: ...


def stream_batches(
    batched: BatchedRun,
    executor: CallStreams,
    progress: bool,
    subscribers: Iterable[Subscriber] = (),
) -> None:
    """Run ``batched``'s batches on the cluster, summing their results into it; events
    count top-level tasks and reductions (a FINISHED event per task when its batch comes
    back, named by the batch, numbered in the order they came back)."""
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
            if events is not None:
                _emit_batch(events, stats, finished)
            finished += stats.done
    except BaseExceptionGroup as group:
        if events is not None:
            for n, error in enumerate(group.exceptions, start=finished):
                failed = str(getattr(error, "task", ""))
                events.emit(EventKind.FAILED, n, failed, attempt=1, error=error)
        raise _run_failure(batched, group) from None
    finally:
        if events is not None:
            events.emit(EventKind.RUN_FINISHED, total=finished)
            events.drain()
        if bar is not None:
            bar.close()


def _run_failure(batched: BatchedRun, group: BaseExceptionGroup) -> BaseExceptionGroup:
    """The run's failure, counted over the whole run as a local executor counts it: the
    batch's group names only its own tasks, and the tasks that cancelled batches finished
    are known only from their records."""
    errors = [_named_batch(batched, e) for e in group.exceptions]
    markers = batched.job.markers
    done = len(markers.done_keys(TOP)) - batched.skipped_top
    done += len(markers.done_keys(REDUCE)) - batched.skipped_red
    left = max(0, batched.pending_top + batched.pending_red - done - len(errors))
    return BaseExceptionGroup(f"{len(errors)} task(s) failed; {left} task(s) did not run", errors)


def _emit_batch(events: EventQueue, stats: BatchStats, first: int) -> None:
    """A batch's tasks as a run report sees them: ids in the order they came back, named
    by the batch, on its Dask worker, spread evenly over the seconds the batch ran
    (ending now: the worker's clock is not this one's); tasks an earlier try recorded
    take no time. The batch's ``retried`` tasks (which ones it does not say: its first
    ones here) have their ``retries`` failed tries first, so the report counts both."""
    name = f"apply-batch-{stats.batch}"
    worker = stats.worker or "worker"
    end = time.perf_counter()
    step = stats.seconds / max(stats.ran, 1)
    start = end - stats.seconds
    for n, task in enumerate(range(first, first + stats.done)):
        began = min(start + n * step, end)
        attempt = 1
        for _ in range(_retries_of(n, stats)):
            events.emit(EventKind.STARTED, task, name, attempt=attempt, worker=worker, at=began)
            events.emit(EventKind.RETRIED, task, name, attempt=attempt, worker=worker, at=began)
            attempt += 1
        events.emit(EventKind.STARTED, task, name, attempt=attempt, worker=worker, at=began)
        ended = min(began + step, end) if n < stats.ran else began
        events.emit(EventKind.FINISHED, task, name, attempt=attempt, worker=worker, at=ended)
    events.drain()


def _retries_of(n: int, stats: BatchStats) -> int:
    """The failed tries of the batch's ``n``-th task: its ``retries`` spread over its first
    ``retried`` tasks, the remainder on the first of them.

    >>> [_retries_of(n, BatchStats(done=4, ran=4, retried=2, retries=5)) for n in range(4)]
    [3, 2, 0, 0]
    """
    if n >= stats.retried:
        return 0
    each, extra = divmod(stats.retries, stats.retried)
    return each + (1 if n < extra else 0)


def _named_batch(batched: BatchedRun, error: BaseException) -> BaseException:
    """A failure of a batch as a whole (its worker died on it) names the tasks it held:
    its grid indices from the first to the last, not only the batch's id."""
    task = getattr(error, "task", "")
    held = next((b for b in batched.in_flight.values() if b.name == task), None)
    if held is None or not isinstance(error, TaskError) or not len(held.indices):
        return error  # one task's own failure: it names itself
    first, last = (tuple(int(i) for i in held.indices[k]) for k in (0, -1))
    what = "top-level tasks" if held.kind == TOP else "reductions"
    detail = f"{error.detail}; the batch held {len(held.indices)} {what}, grid {first} to {last}"
    named = TaskError(error.task, error.inputs, error.attempts, detail)
    named.__cause__ = error.__cause__
    return named
