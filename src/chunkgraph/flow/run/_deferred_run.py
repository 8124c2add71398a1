"""``reduce_deferred``: the reduction a ``defer`` flow left for later, run into a dst.

Policy. A flow applied with ``blend_modes="defer"`` stops after its top-level
tasks: the layers under ``<intermediates>/<flow id>/layers`` and the geometry
in ``flow.json`` (``_deferred``) are its result. This pass is apply's own
reduction (``_reduce.reduce_box``) with the blend mode given now, so reducing
a deferred flow gives the bytes the same flow without ``defer`` would have::

    flow.json ──> DeferredGeometry ──check dst (shape, chunks, dtype, offset)──┐
    layers/layer_<k>.zarr ──> reduce[r] (one graph task per reduction box) ────┴─> dst
                                    └──> markers/reduce/<key>  (after its dst chunks)

State. The flow keeps apply's lock (``FlowDir.held``) while reducing. ``flow.json``
gains ``"reducing"`` = ``{dst path, dst stamp, blend mode}`` before any write:
the reduce markers belong to that target, so a call with the same target skips
marked boxes (a killed or failed reduction resumes by calling again) and a call
with another clears them first. When every box is done it writes the flow's
completion record (``<flow id>.done``, as apply does, with ``"reduced"`` = the
target), sets ``deferred`` to false and ``"reduced"`` to the target in
``flow.json``, then deletes the flow directory (``discard_flow_dir``), in that
order: a kill before the deletion leaves a finished flow whose leftovers the
next call (or ``chunkgraph clean --stale``) removes. ``chunkgraph status`` then
shows the flow finished. A second call with the same target finds the record
and does nothing and says so (``finished_before``); another target needs the
layers, so the flow applied again.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph._util import usable_cores
from chunkgraph.execute import run
from chunkgraph.execute._breakdown import RunMeter
from chunkgraph.execute._executor import close_resolved
from chunkgraph.flow.plan import FlowSpec, RunOptions, check_dst, warn_if_saturated
from chunkgraph.flow.run._checkerboard import LayerPlan
from chunkgraph.flow.run._deferred import GEOMETRY_KEY, DeferredGeometry
from chunkgraph.flow.run._flow_graph import LAYERS_KEY
from chunkgraph.flow.run._flow_run import flow_executor, no_io_report
from chunkgraph.flow.run._late_writes import end_run
from chunkgraph.flow.run._reduce import ReductionStats, reduce_box, reduction_boxes
from chunkgraph.flow.run._report import ApplyReport
from chunkgraph.flow.state import (
    REDUCE,
    TOP,
    FlowDir,
    MarkerStore,
    StateRoot,
    claimed,
    grid_key,
    reach,
)
from chunkgraph.geometry import Box
from chunkgraph.graph import Graph

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class _ReduceJob:
    """What every reduction task of one call shares (pickled once per process worker)."""

    spec: FlowSpec
    layers: LayerPlan
    layer_vols: tuple[Volume, ...]
    dst: Volume
    markers: MarkerStore
    run_token: str


def run_deferred_reduction(job: _ReduceJob, key: str, box: Box) -> ReductionStats:
    """Graph task: one reduction box into dst, then its done marker."""
    stats = reduce_box(job.spec, job.layers, list(job.layer_vols), job.dst, box, job.run_token)
    job.markers.mark_done(REDUCE, key)
    return stats


# The run options a reduction has no use for, and why: set in a ``run``, they are refused.
UNUSED = {
    "resume": "calling it again resumes",
    "probe": "it runs no fn",
    "dry_run": "it plans nothing",
    "memory_limit": "each task holds one reduction box",
    "intermediates": "the flow's state is where the flow is",
    "device": "reductions run on the CPU",
}


def reduce_deferred(
    flow: ApplyReport | str | os.PathLike[str],
    dst: Volume,
    *,
    blend_mode: str = "quadratic",
    executor: ExecutorKind | Executor | None = None,
    workers: int | None = None,
    retries: int | None = None,
    timeout: float | None = None,
    lock_wait: float = 0.0,
    progress: bool = False,
    subscribers: Sequence[Subscriber] = (),
    run: RunOptions | None = None,
) -> ApplyReport:
    """Reduce the layers of a flow applied with ``blend_modes="defer"`` into ``dst``.

    Each dst chunk is written once; calling again after a failure resumes. Success
    deletes the layers and markers (the completion record stays), and a second call
    into the same dst with the same mode does nothing (``finished_before``).

    Args:
        flow: That apply's report, or its flow directory (``report.intermediates``,
            ``<intermediates>/<flow id>``).
        dst: The volume written; it must have the shape, chunks, dtype, offset and
            resolution of the dst given to apply.
        blend_mode: How the top level's overlaps combine: ``"linear"``,
            ``"quadratic"`` (the default), ``"bump"`` or ``"max"``; the result is what
            apply with that mode would have written.
        executor: An executor kind, a Dask scheduler address or an Executor, as for
            ``apply``; None: threads.
        workers: Cores the reduction runs on, as for ``apply``; None: the usable cores.
        retries: Tries after the first of a failed reduction; None: 2 for an executor
            kind, an Executor's own.
        timeout: Seconds one try of a reduction may run; None: no limit.
        lock_wait: Seconds to wait for another flow writing dst; 0 (the default)
            refuses at once with ``FlowLockedError``.
        progress: Show a progress bar on the terminal.
        subscribers: Callables that receive every ``Event`` of the run.
        run: The options above as one ``RunOptions``; those a reduction has no use for
            (resume, probe, dry_run, memory_limit, intermediates, device) must be left
            at their defaults.

    Returns:
        An ``ApplyReport`` of the reduction (``finished_before`` when there was
            nothing left to do).

    Raises:
        ConfigError: Before anything is written, when the directory holds no finished
            deferred flow or dst does not match.
        FlowLockedError: When another flow holds dst.
    """
    t0 = time.perf_counter()
    options = RunOptions.of(
        run=run, executor=executor, workers=workers, retries=retries, timeout=timeout,
        lock_wait=lock_wait, progress=progress, subscribers=subscribers,
    )  # fmt: skip
    options.refuse_unused("reduce_deferred", UNUSED)
    given = _flow_dir_of(flow)
    check_dst(dst, {})
    # State in an object store: reached as dst is, as apply reached it.
    state = FlowDir.of(StateRoot.of(given, dst.storage_options))
    reach(state.root)
    chosen = flow_executor(options, {}, dst, run_deferred_reduction, options.workers)

    try:
        if not state.store.exists(""):
            _geometry(state, {}, None)  # raises: nothing there
        with state.held(options.lock_wait):
            return _reduce(state, dst, blend_mode, chosen, options, t0)
    finally:
        close_resolved(chosen, options.executor)  # a Client opened for 'tcp://...'


def _reduce(
    state: FlowDir,
    dst: Volume,
    blend_mode: str,
    executor: Executor,
    options: RunOptions,
    t0: float,
) -> ApplyReport:
    """Under the flow's lock: nothing when done into this target, else reduce, record,
    discard."""
    target = {"dst": dst.path, "stamp": dst.stamp(), "blend_mode": blend_mode}
    info = state.read_info()
    finished = state.record.read()
    # The record says what the flow was reduced into (its flow.json said it too
    # before the flow directory was removed on success).
    reduced = finished.get("reduced", info.get("reduced", target)) if finished else None
    if finished is not None and reduced == target and finished.get("dst") == target["stamp"]:
        state.discard()  # what a call killed while cleaning up left
        return no_io_report(
            state.flow_id,
            _geometry_bbox(info, finished),
            t0,
            dry_run=False,
            tasks_per_level=(),
            reductions=0,
            reductions_skipped=int(finished.get("reductions", 0)),
            finished_before=str(finished.get("finished", "")),
        )
    geometry = _geometry(state, info, finished)
    geometry.check_blend_mode(blend_mode)
    geometry.check_dst(dst)
    _check_top_done(state, info)
    markers = state.markers()
    if info.get("reducing") != target:
        markers.clear((REDUCE,))  # markers of writes into another target
    spec = geometry.spec(blend_mode)
    totals = {**_kept(info), "reductions": len(reduction_boxes(spec, dst)[0])}
    # The target first: a marker written from here on is a write into it.
    state.record.remove()
    state.write_info(**totals, reducing=target)
    # dst's region is this call's alone while it writes (_dst_lock), as in apply.
    with claimed(
        dst, spec.bbox, {"flow": state.flow_id, "fn": "reduce_deferred"}, options.lock_wait
    ):
        report = _run(spec, geometry, state, dst, markers, executor, options, t0)
    warn_if_saturated(report.saturated_voxels, dst)
    # Finished first (with its target, which a second call compares), then delete
    # the layers and markers, as apply does: a kill in between leaves a finished
    # flow whose leftovers the next call (or `chunkgraph clean --stale`) removes.
    state.record.write(report, target["stamp"], reduced=target, **_kept_fingerprint(info))
    state.write_info(**{**totals, "deferred": False}, reduced=target)
    state.discard()
    return dataclasses.replace(report, intermediates=None)


def _run(
    spec: FlowSpec,
    geometry: DeferredGeometry,
    state: FlowDir,
    dst: Volume,
    markers: MarkerStore,
    executor: Executor,
    options: RunOptions,
    t0: float,
) -> ApplyReport:
    """Build the graph of the reductions not yet marked, run it, report."""
    # where apply put them (flow.json), else where they go by default
    recorded = state.read_info().get(LAYERS_KEY)
    where = state.layers_dir
    if isinstance(recorded, str):
        where = StateRoot.of(recorded, state.options)
    layers = geometry.layers(where)
    job = _ReduceJob(
        spec=spec,
        layers=layers,
        layer_vols=tuple(volume.open(p, storage_options=state.options) for p in layers.paths()),
        dst=dst,
        markers=markers,
        run_token=uuid.uuid4().hex,
    )
    boxes, grid = reduction_boxes(spec, dst)
    done = markers.done_keys(REDUCE)
    graph = Graph()
    refs = []
    indices = np.indices(grid).reshape(len(grid), -1).T.tolist()
    for index, box in zip(indices, boxes, strict=True):
        key = grid_key(tuple(index))
        if key not in done:
            refs.append(graph.add(run_deferred_reduction, job, key, box, name=f"reduce{box}"))
    meter = RunMeter().start()  # where the time goes (_breakdown)
    try:
        stats: list[ReductionStats] = (
            run(graph, refs, executor, progress=options.progress, subscribers=options.subscribers)
            if refs
            else []
        )
    finally:
        meter.stop()
        end_run(job.run_token)
    slots = options.workers if options.workers is not None else usable_cores()
    if getattr(executor, "kind", None) == "sync":  # one task at a time
        slots = 1
    breakdown = meter.breakdown(
        [s.times for s in stats], slots=slots, needed_voxels=0, in_process=executor.in_process
    )
    # What it read is the layers: amplification against the layer bytes over the bbox
    # (above 1 where the top level's blend margins overlap, read once per meeting box).
    read = sum(s.temporary_bytes_read for s in stats)
    once = (
        int(np.prod(spec.bbox.shape))
        * int(np.prod(geometry.layer_channel_shape, dtype=np.int64))
        * geometry.layer_dtype.itemsize
    )
    wall = time.perf_counter() - t0
    return ApplyReport(
        flow_id=state.flow_id,
        dry_run=False,
        tasks_per_level=(),
        reductions=len(refs),
        bytes_read=read,
        bytes_written=sum(s.bytes_written for s in stats),
        temporary_bytes=0,
        read_amplification=read / once if read and once else 0.0,
        wall_seconds=wall,
        bbox=spec.bbox,
        reductions_skipped=len(boxes) - len(refs),
        intermediates=state.location,
        task_bytes=tuple(
            (graph.name(ref.id), s.temporary_bytes_read, s.bytes_written)
            for ref, s in zip(refs, stats, strict=True)
        ),
        saturated_voxels=sum(s.saturated for s in stats),
        breakdown=dataclasses.replace(breakdown, setup_seconds=wall - meter.wall),
    )


def _geometry_bbox(info: dict[str, Any], finished: dict[str, Any]) -> Box:
    """The flow's bbox, from its geometry or (layers removed) its completion record."""
    raw = info.get(GEOMETRY_KEY) or {}
    start, stop = raw.get("bbox") or finished["bbox"]
    return Box(tuple(start), tuple(stop))


def _flow_dir_of(flow: object) -> str | os.PathLike[str]:
    if isinstance(flow, ApplyReport):
        if not flow.deferred_layers or flow.intermediates is None:
            raise ConfigError(
                f"the report of flow {flow.flow_id} has no deferred layers: only a flow applied "
                "with blend_modes='defer' (and not a dry run) leaves a reduction for later",
                field="flow",
            )
        return flow.intermediates
    if isinstance(flow, str | os.PathLike):
        return flow
    raise ConfigError(
        f"flow must be a deferred apply's report or its flow directory "
        f"(<intermediates>/<flow id>), got {flow!r}",
        field="flow",
    )


def _geometry(
    state: FlowDir, info: dict[str, Any], finished: dict[str, Any] | None
) -> DeferredGeometry:
    raw = info.get(GEOMETRY_KEY)
    if isinstance(raw, dict):
        return DeferredGeometry.from_json(raw)
    if finished is not None and not state.exists():
        raise ConfigError(
            f"flow {state.flow_id} finished into another dst (or another blend mode) and its "
            f"layers were removed since; apply it again with blend_modes='defer' to reduce anew",
            field="flow",
        )
    raise ConfigError(
        f"{state.location!r} holds no deferred flow (no flow.json with its geometry): give the "
        "directory a flow applied with blend_modes='defer' left, <intermediates>/<flow id>, "
        "as its report's .intermediates names it",
        field="flow",
    )


def _check_top_done(state: FlowDir, info: dict[str, Any]) -> None:
    """Every top-level task must have written its layer: else apply has not finished."""
    total = info.get("top_tasks")
    done = len(state.markers().done_keys(TOP))
    if not isinstance(total, int) or done < total:
        raise ConfigError(
            f"flow {state.flow_id} is unfinished: {done} of {total} top-level tasks wrote their "
            "layers; finish it with apply(..., resume=True) before reducing it",
            field="flow",
        )


def _kept(info: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``flow.json`` that a reduction keeps as they are."""
    kept = ("top_tasks", "reductions", "deferred", "dst", "fingerprint", GEOMETRY_KEY, LAYERS_KEY)
    return {k: info[k] for k in kept if k in info}


def _kept_fingerprint(info: dict[str, Any]) -> dict[str, Any]:
    """``flow.json``'s ``fingerprint`` (state's ``_status.resume_mismatch`` reads it), if any."""
    return {"fingerprint": info["fingerprint"]} if "fingerprint" in info else {}
