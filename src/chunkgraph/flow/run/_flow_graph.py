"""``FlowGraph``: the graph of one run of a flow into a dst, and its report.

Policy. One task per top-level chunk not yet marked done, in C order of the top
grid, then (unless the flow writes directly or defers) one reduction per
reduction box not yet done, after the pending top tasks that meet it::

    top[i]  (reads inputs over chunk + pads, levels below in memory)
       └──> layer(i parity) ──> reduce[r] (weighted sum of the layers) ──> dst

The plan given to the executor bounds the top-level tasks in flight by the
flow's memory budget (``_plan``). On a ``DaskExecutor`` there is no graph: the
same tasks, in the same order, go in batches streamed to the cluster
(``_batches``), so that neither the client nor Dask's scheduler holds an object
per task; on ``executor="processes"`` too (``call_streams``), so that each worker
process takes a contiguous stream of neighbouring tasks and its own cache keeps the
halo they share. Building the graph reads the done markers; the lifecycle around it
(lock, record, discard) is ``_flow_run``'s, and the state it reads and records is
``FlowDir``'s. The constructor makes nothing:
``open`` makes the temporary layers.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import planning
from chunkgraph.execute import DaskExecutor, LocalExecutor, run
from chunkgraph.execute._breakdown import Breakdown, RunMeter, TaskTimes
from chunkgraph.execute._process_stream import ProcessStreams
from chunkgraph.flow.plan import FlowSpec, io_pool_threads, needed_input_bytes, sweep_axis
from chunkgraph.flow.run._batch_run import BatchSettings, BatchStats
from chunkgraph.flow.run._batches import BatchedRun, CallStreams, stream_batches
from chunkgraph.flow.run._checkerboard import LayerPlan, plan_layers
from chunkgraph.flow.run._deferred import GEOMETRY_KEY, DeferredGeometry
from chunkgraph.flow.run._device import FlowDevice
from chunkgraph.flow.run._late_writes import end_run
from chunkgraph.flow.run._reduce import (
    ReductionStats,
    reduce_box,
    reduction_boxes,
    top_indices_meeting,
)
from chunkgraph.flow.run._report import ApplyReport
from chunkgraph.flow.run._top_task import (
    TopJob,
    TopStats,
    forget_flow,
    mark_done,
    run_top_task,
    superchunks_in_flight,
)
from chunkgraph.flow.state import (
    REDUCE,
    SIZES_KEY,
    TOP,
    close_journal,
    grid_key,
    open_journal,
)
from chunkgraph.geometry import Box
from chunkgraph.graph import Cost, Graph

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, Subscriber
    from chunkgraph.flow.state import FlowDir
    from chunkgraph.graph import Graph, TaskRef
    from chunkgraph.planning import Plan
    from chunkgraph.volume import Volume


# flow.json's record of where the layers are: a resume finds them there, or redoes the
# top-level work (layers_lost).
LAYERS_KEY = "layers"


def layers_lost(state: FlowDir, layers: LayerPlan) -> bool:
    """Whether the layers that ``state``'s done top-level markers vouch for are not at
    ``layers``: recorded elsewhere, or missing. State written before the record counts
    as in place when the folder is there."""
    if not state.markers().done_keys(TOP):
        return False
    recorded = state.read_info().get(LAYERS_KEY)
    return (recorded is not None and recorded != str(layers.root)) or not layers.present()


class FlowGraph:
    """One non-dry run's graph: builds it, runs it, reports (no state of its own)."""

    def __init__(
        self,
        spec: FlowSpec,
        fn: Callable[..., Any],
        inputs: dict[str, Volume],
        dst: Volume,
        state: FlowDir,
        layers: LayerPlan | None,
        layer_vols: tuple[Volume, ...],
        *,
        top_memory: int,
        stamp: str | None = None,
        device: FlowDevice | None = None,
        cores: int,
        own_pool: bool = False,
        memory_limit: int | None = None,
        fingerprint: dict[str, str] | None = None,
        sizes: dict[str, Any] | None = None,
    ) -> None:
        """``layers``/``layer_vols``: the checkerboard (None, (): direct writes);
        ``top_memory``: bytes one top-level task holds (``top_task_memory``);
        ``cores``: the cores the flow plans for (``workers``, else the usable ones);
        ``own_pool``: the levels below the top run on a pool of ``cores`` threads rather
        than the process-wide one (``workers`` was given; over an object store the pool
        is always the flow's own, of ``io_pool_threads(cores)``); ``memory_limit``: bytes that
        the top-level tasks in flight together may not exceed (at least one runs);
        ``fingerprint``: ``flow_id_parts``, and ``sizes``: the plan's sizes as apply takes
        them (``FlowPlan.arguments()``), both recorded in ``flow.json``."""
        self.spec = spec
        self.sizes = sizes
        self.top_memory = top_memory
        self.cores = cores
        self.memory_limit = memory_limit
        self.fingerprint = fingerprint
        self.dst_stamp = stamp
        self.in_process = True  # set by run(): where the tasks read
        self.slots = self.cores  # set by run(): how many tasks can run at once
        self.pending_voxels = 0  # set by run(): the bbox's voxels its pending top tasks cover
        # of those, the voxels the flow writes (spec.writes: a grown bbox's growth is not)
        self.pending_written = 0
        self.stream_splits = 0  # set by run(): streams of top tasks split (_batches)
        self.inputs = inputs
        self.dst = dst
        # Requests to an object store wait: one more top-level task in flight hides that.
        self.io_waits = any(v.location.kind == "remote" for v in (*inputs.values(), dst))
        self.state = state
        self.markers = state.markers()
        self.direct = spec.skip_intermediates
        self.layers = layers
        self.deferred = spec.deferred
        self.job = TopJob(
            spec=spec,
            fn=fn,
            inputs=inputs,
            dst=dst,
            layers=layers,
            layer_vols=layer_vols,
            marker_root=state.location,
            markers=self.markers,
            run_token=uuid.uuid4().hex,
            sweep_axis=sweep_axis(spec.top_grid),
            device=device,
            pool_workers=io_pool_threads(cores) if self.io_waits else cores if own_pool else None,
        )

    @classmethod
    def open(
        cls,
        spec: FlowSpec,
        fn: Callable[..., Any],
        inputs: dict[str, Volume],
        dst: Volume,
        state: FlowDir,
        *,
        fresh: bool,
        **options: Any,
    ) -> FlowGraph:
        """The graph's owner with its temporary layers made (a ``fresh`` run's removed
        first: a resumed one keeps what its done markers vouch for)."""
        layers = None if spec.skip_intermediates else plan_layers(spec, dst, state.layers_dir)
        layer_vols: list[Volume] = []
        if layers is not None:
            if fresh:
                layers.remove()
            elif layers_lost(state, layers):
                # Done top-level tasks vouch for layers that are not here (state in an
                # object store resumed on another machine, or scratch wiped): redo them
                # rather than reduce fill values.
                state.markers().clear((TOP,))
            layer_vols = layers.create()
        return cls(spec, fn, inputs, dst, state, layers, tuple(layer_vols), **options)

    def run(
        self,
        executor: Executor,
        progress: bool,
        t0: float,
        before: InputReads,
        subscribers: tuple[Subscriber, ...] = (),
    ) -> ApplyReport:
        """Record the totals in ``flow.json``, run the tasks not yet done, report.

        On a ``DaskExecutor`` the tasks go in batches (``_batches``), and the report has
        no row per task (``task_bytes`` is empty)."""
        self.in_process = executor.in_process
        # A sync executor runs one task at a time, whatever the cores: one slot.
        self.slots = 1 if getattr(executor, "kind", None) == "sync" else self.cores
        reductions = not self.direct and not self.deferred
        graph = Graph()
        refs: list[TaskRef] = []
        batched = None
        streams = call_streams(executor)
        if streams is not None:
            self.slots = streams.threads()  # the cluster's threads, or the pool's processes
            batched = BatchedRun(
                self.spec, self.dst, self.job, self._batch_settings(executor),
                threads=self.slots, reductions=reductions,
            )  # fmt: skip
            tops, skipped_top = batched.top_total, batched.skipped_top
            reds, skipped_red = batched.reduction_total, batched.skipped_red
        else:
            top_refs, skipped_top = self._add_top_tasks(graph)
            red_refs: list[TaskRef] = []
            skipped_red = 0
            if reductions:
                red_refs, skipped_red = self._add_reductions(graph, top_refs)
            refs = list(top_refs.values()) + red_refs
            tops, reds = len(top_refs) + skipped_top, len(red_refs) + skipped_red
        self._write_info(tops, reds)
        # Where the tasks' time and memory go (_breakdown): the process's RSS and CPU over them.
        meter = RunMeter().start()
        per_task: tuple[tuple[str, int, int], ...] = ()
        # Tasks on the driver's threads mark done in bulk (_journal): opened here,
        # written out however the run ends.
        kinds = (TOP, REDUCE) if self.in_process else ()
        for kind in kinds:
            open_journal(self.markers, kind, self.job.run_token)
        try:
            if batched is not None:
                assert streams is not None
                subs = (*getattr(executor, "subscribers", ()), *subscribers)
                stream_batches(batched, streams, progress, subs)
                top, red = batched.totals[TOP], batched.totals[REDUCE]
                self.pending_voxels = batched.pending_voxels
                self.pending_written = batched.pending_written
                self.stream_splits = batched.streams.splits
            else:
                results = self._run_graph(graph, refs, executor, progress, subscribers)
                top = BatchStats.of(TOP, (r for r in results if isinstance(r, TopStats)))
                red = BatchStats.of(REDUCE, (r for r in results if isinstance(r, ReductionStats)))
                per_task = tuple(
                    (graph.name(ref.id), *_bytes_of(stats))
                    for ref, stats in zip(refs, results, strict=True)
                )
        except BaseException:
            for kind in kinds:
                close_journal(self.job.run_token, kind, quiet=True)
            raise
        finally:
            meter.stop()
            for kind in kinds:  # a run that returned: a write's error is raised here
                close_journal(self.job.run_token, kind)
            forget_flow(self.job.marker_root)
            end_run(self.job.run_token)
        report = self._report(top, red, before.bytes, t0, skipped_top, skipped_red)
        if self.in_process:
            # Inputs' GETs and chunks since ``before`` (the probe's included, as in the
            # bytes): exact under threads, which share the driver's volumes; other
            # executors count on copies.
            now = InputReads.of(self.inputs)
            report = dataclasses.replace(
                report,
                input_requests=now.requests - before.requests,
                input_chunks_read=now.chunks - before.chunks,
            )
        breakdown = self._breakdown([top.times, red.times], meter)
        breakdown = dataclasses.replace(breakdown, setup_seconds=report.wall_seconds - meter.wall)
        return dataclasses.replace(report, task_bytes=per_task, breakdown=breakdown)

    def _write_info(self, tops: int, reductions: int) -> None:
        """What `chunkgraph status` shows as progress, and what keeps `clean` away from a
        deferred flow's layers (they are its result, not temporaries). A deferred flow
        also records what reduce_deferred needs to finish it later."""
        extra: dict[str, Any] = {}
        if self.fingerprint is not None:
            extra["fingerprint"] = self.fingerprint
        if self.sizes is not None:
            extra[SIZES_KEY] = self.sizes  # a resume under another budget finds them (_resume)
        if self.layers is not None:
            extra[LAYERS_KEY] = str(self.layers.root)
        if self.deferred and self.layers is not None:
            geometry = DeferredGeometry.of(self.spec, self.dst, self.layers)
            extra[GEOMETRY_KEY] = geometry.as_json()
        self.state.write_info(
            top_tasks=tops, reductions=reductions, deferred=self.deferred, dst=self.dst_stamp,
            **extra,
        )  # fmt: skip

    def _run_graph(
        self,
        graph: Graph,
        refs: list[TaskRef],
        executor: Executor,
        progress: bool,
        subscribers: tuple[Subscriber, ...],
    ) -> list[Any]:
        """The graph's tasks on a local executor (or any but Dask's), results in refs' order."""
        if not refs:
            return []
        return list(
            run(
                graph, refs, executor, progress=progress, subscribers=subscribers,
                plan=self._plan(graph, refs),
            )
        )  # fmt: skip

    def _batch_settings(self, executor: Executor) -> BatchSettings:
        """A batch's settings; on worker processes, each runs its tasks on its share of
        the flow's cores (the processes together use them all, no more)."""
        threads = None
        if isinstance(executor, LocalExecutor):
            threads = max(1, self.cores // self.slots)
        return BatchSettings(
            top_memory=self.top_memory,
            memory_limit=self.memory_limit,
            io_waits=self.io_waits,
            retries=int(getattr(executor, "retries", 0)),
            threads=threads,
        )

    def _breakdown(self, times: list[TaskTimes], meter: RunMeter) -> Breakdown:
        """The run's time and memory terms from its tasks' timings (``_breakdown``)."""
        cores = self.cores
        in_flight = superchunks_in_flight(
            self.spec, cores, memory_limit=self.memory_limit, top_bytes=self.top_memory,
            device=self.job.device, io_waits=self.io_waits,
        )  # fmt: skip
        return meter.breakdown(
            times,
            slots=self.slots,
            needed_voxels=self.pending_written,  # fn on the growth is redundant compute
            in_process=self.in_process,
            cache_bytes=sum(int(getattr(v, "cache_bytes", 0) or 0) for v in self.inputs.values()),
            in_flight_bytes=in_flight * self.top_memory,
        )

    def _plan(self, graph: Graph, refs: list[TaskRef]) -> Plan:
        """The plan of this flow's graph on this machine, with the flow's memory budget:
        ``superchunks_in_flight`` top-level tasks per CPU context for the cores the flow
        plans for (``workers`` when given), no more than ``memory_limit`` holds."""
        contexts = planning.local_contexts(gpus=False)
        top = self.top_memory
        budget: dict[str, float] = {}
        for ctx in contexts:
            cores = self.cores
            if len(contexts) > 1:
                cores = min(cores, ctx.slots)
            in_flight = superchunks_in_flight(
                self.spec, cores, memory_limit=self.memory_limit, top_bytes=top,
                device=self.job.device, io_waits=self.io_waits,
            )  # fmt: skip
            if top > 0:
                budget[ctx.name] = float(in_flight * top)
        # planning.plan, looked up at the call: a test stands in for it
        return planning.plan(graph, contexts, memory=budget or None, targets=refs)

    def _add_top_tasks(self, graph: Graph) -> tuple[dict[tuple[int, ...], TaskRef], int]:
        """One task per top-level chunk not yet marked done, in C order of the top grid."""
        spec = self.spec
        starts, stops, grid = spec.bbox.split_arrays(spec.levels[0].chunk)
        done = self.markers.done_keys(TOP)
        cost = Cost(memory=self.top_memory)
        indices = np.indices(grid).reshape(len(grid), -1).T.tolist()
        refs: dict[tuple[int, ...], TaskRef] = {}
        for index, a, b in zip(indices, starts.tolist(), stops.tolist(), strict=True):
            key = grid_key(tuple(index))
            if key in done:
                continue
            box = Box(a, b)
            self.pending_voxels += box.intersection(spec.bbox).size
            self.pending_written += box.intersection(spec.writes).size
            refs[tuple(index)] = graph.add(
                run_top_task, self.job, tuple(index), box, name=f"apply-top{box}", cost=cost
            )
        return refs, len(indices) - len(refs)

    def _add_reductions(
        self, graph: Graph, top_refs: dict[tuple[int, ...], TaskRef]
    ) -> tuple[list[TaskRef], int]:
        """One task per reduction box not yet done, after the pending top tasks it reads."""
        boxes, grid = reduction_boxes(self.spec, self.dst)
        done = self.markers.done_keys(REDUCE)
        indices = np.indices(grid).reshape(len(grid), -1).T.tolist()
        refs = []
        for index, box in zip(indices, boxes, strict=True):
            key = grid_key(tuple(index))
            if key in done:
                continue
            compute = box.intersection(self.spec.writes)
            deps = [top_refs[i] for i in top_indices_meeting(self.spec, compute) if i in top_refs]
            refs.append(
                graph.add(run_reduction, self.job, key, box, deps, name=f"apply-reduce{box}")
            )
        return refs, len(boxes) - len(refs)

    def _report(
        self,
        top: BatchStats,
        red: BatchStats,
        before: int,
        t0: float,
        skipped_top: int,
        skipped_red: int,
    ) -> ApplyReport:
        """The report of the run from its tasks' sums, ``top`` and ``red`` (reductions)."""
        spec = self.spec
        counts = list(top.tasks_per_level) or [0] * len(spec.levels)
        # A batch run again (its worker died) skipped the keys its earlier try recorded:
        # done by this run, so counted as its own (their levels below are not known).
        counts[0] += top.done - top.ran
        # Threads share the driver's Volume objects: their counters are exact. Other
        # executors read through their own copies, which report per task (the driver's
        # counters then hold only the probe's read).
        bytes_read = (
            InputReads.of(self.inputs).bytes - before if self.in_process else top.bytes_read
        )
        needed = needed_input_bytes(spec, self.inputs)
        if skipped_top and spec.bbox.size:
            # A resumed run reads for its pending top tasks only: amplification over those.
            needed = needed * self.pending_voxels // spec.bbox.size
        if self.direct:
            written, temporary = top.bytes_written, 0
        else:
            written, temporary = red.bytes_written, top.bytes_written
        return ApplyReport(
            flow_id=self.state.flow_id,
            dry_run=False,
            tasks_per_level=tuple(counts),
            reductions=red.done,
            bytes_read=bytes_read,
            bytes_written=written,
            temporary_bytes=temporary,
            read_amplification=bytes_read / needed if needed else 0.0,
            wall_seconds=time.perf_counter() - t0,
            bbox=spec.bbox,
            dst_bounds=self.dst.bounds,
            top_tasks_skipped=skipped_top,
            reductions_skipped=skipped_red,
            intermediates=self.state.location if self.deferred else None,
            layers=str(self.layers.root) if self.layers is not None else None,
            deferred_layers=self.layers.paths() if self.deferred and self.layers else (),
            saturated_voxels=top.saturated + red.saturated,
            write_box=spec.write_box,
            stream_splits=self.stream_splits,
        )


def call_streams(executor: Executor) -> CallStreams | None:
    """What streams the flow's batches on ``executor``: a ``DaskExecutor`` itself; for
    ``"processes"`` without a time limit, a pool of its workers (``_process_stream``),
    each taking a contiguous stream of top tasks (``_batches``: its cache keeps the halo
    they share); None: the graph runs as it is (one call per task, so a task past its
    time limit has its worker killed)."""
    if isinstance(executor, DaskExecutor):
        return executor
    if not isinstance(executor, LocalExecutor):
        return None
    if executor.kind == "processes" and executor.timeout is None:
        return ProcessStreams(executor.workers, retries=executor.retries)
    return None


def run_reduction(job: TopJob, key: str, box: Box, _deps: list[Any]) -> ReductionStats:
    """Graph task: one reduction box, then its done marker."""
    if job.layers is None:
        raise AssertionError("a reduction needs temporary layers; this flow writes directly")
    stats = reduce_box(job.spec, job.layers, list(job.layer_vols), job.dst, box, job.run_token)
    mark_done(job, REDUCE, key)
    return stats


def _bytes_of(stats: TopStats | ReductionStats) -> tuple[int, int]:
    """(bytes read, bytes written) of one task's stats."""
    if isinstance(stats, TopStats):
        return stats.bytes_read, stats.bytes_written
    return stats.temporary_bytes_read, stats.bytes_written


@dataclasses.dataclass(frozen=True)
class InputReads:
    """The inputs' read counters at one moment (taken before the probe, so that the
    report counts its reads in bytes, requests and chunks alike)."""

    bytes: int
    requests: int  # object-store GETs
    chunks: int  # storage chunks fetched

    @classmethod
    def of(cls, inputs: Mapping[str, Volume]) -> InputReads:
        stats = [v.stats for v in inputs.values()]
        return cls(
            sum(s.bytes_read for s in stats),
            sum(s.requests_get for s in stats),
            sum(s.chunks_read for s in stats),
        )
