"""One batch of a flow's top-level tasks or reductions, as a Dask worker runs it.

Policy. A batch (``Batch``: grid indices of one kind, and an id unique to the run)
runs on its worker with chunkgraph's own thread executor over the worker's
threads, under the flow's memory budget there (``superchunks_in_flight``); the
job is unpickled once per process (``_shared_job``), so the tasks of a worker
share their input caches. It returns sums (``BatchStats``), never a row per task::

    record_keys(kind, id) ──> skip those ──> Graph of the others ──> LocalExecutor
                                                                        │ each task:
        mark_done_many(kind, keys, record=id) <── every RECORD_EVERY_S ─┤ cancelled? stop
                                              <── at the end, failure or not

A batch run again (Dask reruns it when its worker died) first reads its record
and skips those keys: a killed worker costs only what its batches did since their
last record. A batch that its client cancelled (a failure, Ctrl-C) stops before
its next task: Dask cannot stop a running call, so it asks (``cancel_check``).
``_batches`` cuts the batches and streams them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from chunkgraph import planning
from chunkgraph._errors import RunEndedError
from chunkgraph.execute import Event, EventKind, LocalExecutor
from chunkgraph.execute._breakdown import NO_TIMES, TaskTimes
from chunkgraph.execute._dask_stream import cancel_check, worker_name, worker_threads
from chunkgraph.flow.run._late_writes import check_run_live
from chunkgraph.flow.run._reduce import (
    ReductionStats,
    reduce_box,
    reduction_region,
    top_chunk_box,
)
from chunkgraph.flow.run._top_task import TopJob, TopStats, _run_top_task, superchunks_in_flight
from chunkgraph.flow.state import REDUCE, TOP, MarkerJournal, MarkerStore, grid_key
from chunkgraph.geometry import Box
from chunkgraph.graph import Cost, Graph

if TYPE_CHECKING:
    from chunkgraph.flow.plan import FlowSpec
    from chunkgraph.volume import Volume

IntArray = npt.NDArray[np.int64]

# Seconds between a running batch's records of its done keys: a killed worker redoes at
# most this much of each of its batches, and `chunkgraph status` lags this much. Each
# record rewrites one object of the batch's keys so far (a few bytes a key, gzipped):
# one PUT a second per running batch is far below what a bucket takes.
RECORD_EVERY_S = 1.0


@dataclass(frozen=True)
class Batch:
    """``indices``: grid indices ``(n, ndim)`` of ``kind``'s tasks (top-level chunks or
    reduction boxes), in C order; ``id``: unique to the run, names its marker record;
    ``stream``: the stream of the top grid it was cut from (``_batches.TopStreams``), -1
    for none (a reduction)."""

    id: str
    kind: str
    indices: IntArray
    stream: int = -1

    @property
    def name(self) -> str:
        return f"apply-batch-{self.id}"


@dataclass(frozen=True)
class BatchSettings:
    """What every batch of a flow run needs besides its job: a top task's bytes, the
    flow's memory limit, whether it waits on an object store, retries per task, and the
    threads a batch runs its tasks on (None: its Dask worker's; a local process pool's
    workers share the flow's cores)."""

    top_memory: int
    memory_limit: int | None
    io_waits: bool
    retries: int
    threads: int | None = None


@dataclass(frozen=True)
class BatchStats:
    """What a batch (or many, summed) of one ``kind`` did: ``done`` tasks now done (run
    here, or recorded by an earlier try), ``ran`` of them here in ``seconds`` of wall;
    the tasks' levels, bytes (a top task reads inputs and writes a layer or dst, a
    reduction reads layers and writes dst), saturated voxels and times, summed;
    ``retried`` tasks were tried again after failing, ``retries`` times in all (the
    batch's own executor's retries, which the run's report counts)."""

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
    worker: str = ""  # the Dask worker that ran the batch ("" in sums)
    retried: int = 0
    retries: int = 0

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
            retried=self.retried + other.retried,
            retries=self.retries + other.retries,
        )


def run_batch(job: TopJob, batch: Batch, settings: BatchSettings) -> BatchStats:
    """In a Dask worker (or a local pool's worker process): the batch's tasks not in its
    record, on a thread executor over the worker's threads (or ``settings.threads``);
    their done keys recorded as they finish (module doc)."""
    start = time.perf_counter()
    markers = job.markers
    recorded = markers.record_keys(batch.kind, batch.id)
    recorder = _Recorder(markers, batch.kind, batch.id, recorded, cancel_check())
    graph = Graph()
    cost = Cost(memory=settings.top_memory if batch.kind == TOP else 0)
    redo = ReductionBoxes(job.spec, job.dst) if batch.kind == REDUCE else None
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
    retries: Counter[int] = Counter()  # failed tries retried, per task of the graph
    try:
        if len(graph):
            threads = settings.threads or worker_threads()
            executor = LocalExecutor("threads", workers=threads, retries=settings.retries)
            results = executor.run(
                graph, plan=_plan(graph, job, threads, settings),
                subscribers=[functools.partial(_count_retry, retries)],
            )  # fmt: skip
    finally:
        recorder.close()  # what finished written, failure or not: a resume skips it
    stats = BatchStats.of(batch.kind, results.values())
    done = len(recorded.intersection(grid_key(tuple(r)) for r in batch.indices.tolist()))
    return dataclasses.replace(
        stats, batch=batch.id, done=stats.ran + done, seconds=time.perf_counter() - start,
        worker=worker_name() or f"process {os.getpid()}", retried=len(retries),
        retries=retries.total(),
    )  # fmt: skip


def _count_retry(retries: Counter[int], event: Event) -> None:
    """Count a task's try that failed and is tried again (the run's report counts them)."""
    if event.kind is EventKind.RETRIED:
        retries[event.task] += 1


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
    """One batch's done keys, in its one marker record (a growing ``MarkerJournal``:
    rewritten at most every ``RECORD_EVERY_S`` and at ``close``, starting with the keys
    an earlier try recorded); safe from the executor's threads. ``check_wanted`` stops a
    batch that the client cancelled (a failure, Ctrl-C) before its next task."""

    def __init__(
        self,
        markers: MarkerStore,
        kind: str,
        record: str,
        before: set[str],
        cancelled: Callable[[], bool],
    ) -> None:
        self.record = record
        self.cancelled = cancelled
        self.journal = MarkerJournal(
            markers, kind, record, RECORD_EVERY_S, grow=True, before=sorted(before)
        )

    def check_wanted(self) -> None:
        if self.cancelled():
            raise RunEndedError(
                f"batch {self.record} was cancelled by its client (the run failed or was "
                "interrupted); its tasks not yet started are dropped"
            )

    def done(self, key: str) -> None:
        if not self.journal.closed:  # a task abandoned after its batch ended: it reruns
            self.journal.add(key)

    def close(self) -> None:
        self.journal.close()


class ReductionBoxes:
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
