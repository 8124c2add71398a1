"""``apply``: run a subchunkable flow over a volume and say what it did.

Pipeline of one call::

    validate_flow ──> FlowSpec ──> flow_id ──(dry_run)──> estimate_flow ──> ApplyReport
                                      │
                                      v
    Graph:  top[i] (one per top-level chunk, C order)  ──>  reduce[r] (one per reduction box,
            read inputs once over chunk + all pads          after the top tasks meeting it)
            levels below in memory (_subchunk)              weighted sum of layers -> dst
            write unweighted output -> layer(i parity)
                                      │
                                      v
    chunkgraph.execute.run(graph)  ──>  delete temporaries  ──>  ApplyReport

State on disk, under ``<intermediates>/<flow_id>/`` (``intermediates`` defaults
to ``.<dst name>.chunkgraph`` beside a file-backed dst, so a rerun finds it):
``layers/layer_<k>.zarr`` (the checkerboard, ``_checkerboard``) and
``markers/`` (done markers, ``_markers``). A successful run deletes it, except
with ``defer``, whose layers are the result. A run without ``resume=True``
starts from a clean flow directory.

Locality. Top-level tasks enter the graph in C order of the top grid and the
executor's priorities keep that order among equals, so consecutive tasks are
neighbours and share halo storage chunks: with a chunk cache on the inputs
(``volume.open(..., cache_bytes=...)``) a halo read by one task is still
cached when its neighbour needs it (``_top_task`` orders the reads so that an
LRU cache sees one sweep). ``ApplyReport.read_amplification`` measures the
result at the storage level.

Memory. A run holds the input caches, the superchunks of the top-level tasks
in flight (bounded by the memory budget of the flow's plan, admitted by the
executor: ``_top_task.superchunks_in_flight`` tasks' worth), the
buffers of the chunks being processed below them, and what the allocator
keeps. glibc gives each allocating thread its own arena, each holding on to
freed buffers; ``apply`` leaves that process-wide setting to the user
(``MALLOC_ARENA_MAX=1`` or ``2`` lowers a flow's peak RSS by ~40 MiB on the
volume_flow benchmark at no measurable cost in time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph._errors import ConfigError, CorruptChunkError
from chunkgraph._util import usable_cores, write_problem
from chunkgraph.flow._auto_sizes import (
    FlowPlan,
    ReadAmplificationWarning,
    amplification_warning,
    owned_inputs,
    plan_automatic,
    plan_given,
    resolve_memory_limit,
)
from chunkgraph.flow._cast import DEFAULT_CAST, warn_if_saturated
from chunkgraph.flow._checkerboard import LayerPlan, plan_layers
from chunkgraph.flow._deferred import GEOMETRY_KEY, DeferredGeometry
from chunkgraph.flow._device import (
    DEVICE_TASKS_IN_FLIGHT,
    FlowDevice,
    check_executor,
    device_tasks_in_flight,
    gpu_missing,
    resolve_device,
)
from chunkgraph.flow._estimate import needed_input_bytes, top_task_memory
from chunkgraph.flow._fingerprint import flow_id_of, flow_id_parts
from chunkgraph.flow._fn_kwargs import with_fn_kwargs
from chunkgraph.flow._fn_limits import limit_calls
from chunkgraph.flow._late_writes import end_run
from chunkgraph.flow._lock import flow_lock
from chunkgraph.flow._markers import (
    REDUCE,
    TOP,
    CompletionRecord,
    MarkerStore,
    discard_flow_dir,
    dst_stamp,
    grid_key,
)
from chunkgraph.flow._probe import probe_fn
from chunkgraph.flow._reduce import (
    ReductionStats,
    reduce_box,
    reduction_boxes,
    top_indices_meeting,
)
from chunkgraph.flow._report import ApplyReport as ApplyReport  # re-exported (see __init__)
from chunkgraph.flow._resolution import bbox_in_voxels
from chunkgraph.flow._spec import (
    FlowSpec,
    check_bools,
    normalize_inputs,
    same_storage,
    validate_flow,
    wants_auto_sizes,
)
from chunkgraph.flow._state import (
    in_place_conflict,
    in_place_mark,
    kept_state_note,
    lost_in_place_state,
    mark_in_place,
    read_flow_info,
    unmark_in_place,
    warn_if_resume_mismatch,
    warn_if_stale,
    write_flow_info,
)
from chunkgraph.flow._top_task import (
    TopJob,
    TopStats,
    forget_flow,
    run_top_task,
    superchunks_in_flight,
)
from chunkgraph.flow._where import note_state
from chunkgraph.geometry import Box

# Flow tasks are idempotent: a try lost to a dead worker or a transient I/O error
# simply runs again.
DEFAULT_RETRIES = 2

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber
    from chunkgraph.graph import Graph, TaskRef
    from chunkgraph.planning import Plan
    from chunkgraph.volume import Volume


def apply(
    fn: Callable[..., Any],
    inputs: Volume | Mapping[str, Volume],
    dst: Volume | None,
    *,
    fn_kwargs: Mapping[str, Any] | None = None,
    fn_resources: Mapping[str, int] | None = None,
    chunk_sizes: Any = "auto",
    crop_pads: Any = 0,
    blend_pads: Any = 0,
    blend_modes: Any = "quadratic",
    bbox: Box | None = None,
    bbox_units: str = "voxels",
    auto_divisibility: bool = False,
    expand_bbox: bool | str = False,
    max_reduction_chunk_size: Any = None,
    intermediates: str | os.PathLike[str] | None = None,
    skip_intermediates: bool | None = None,
    memory_limit: int | None = None,
    executor: ExecutorKind | Executor | None = None,
    workers: int | None = None,
    retries: int = DEFAULT_RETRIES,
    timeout: float | None = None,
    resume: bool = False,
    lock_wait: float = 0.0,
    probe: bool = True,
    progress: bool = False,
    dry_run: bool = False,
    subscribers: Sequence[Subscriber] = (),
    device: str = "cpu",
    gpu_fallback: bool = False,
    cast: str = DEFAULT_CAST,
) -> ApplyReport:
    """Apply ``fn`` to ``inputs`` chunk by chunk, writing ``dst``; see the README section.

    ``fn_kwargs``: more keyword arguments of ``fn`` (not volumes), part of the flow's
    id. ``fn_resources``: ``{name: k}``, at most ``k`` calls of ``fn`` at once holding
    ``name`` (per process; not part of the id). ``dst=None`` collects ``fn``'s value
    per bottom chunk into ``report.values``; ``inputs={}`` makes ``fn`` a generator.
    ``chunk_sizes`` lists one processing chunk per level, top first; pads and
    modes are one value for all levels or one per level. Omitted (or
    ``"auto"``), the flow plans the levels itself from the pads (then the
    bottom level's), the storage chunks, the cores and ``memory_limit`` (bytes;
    default half the memory available), and reads through a chunk cache it
    sizes when the inputs have none; ``report.plan`` says what it chose and why.
    ``skip_intermediates`` (None: decided, direct where nothing overlaps with
    automatic sizes, else False). Given sizes that will read storage chunks
    several times draw a ``ReadAmplificationWarning`` with the figures. ``fn`` gets arrays
    of chunk + 2*crop + 2*blend at the bottom level (and, if it has a ``box``
    parameter, the box they cover) and returns that shape or chunk + 2*blend.
    ``workers`` is the number of cores the flow plans for (the executor's size, the
    top-level tasks admitted at once, the threads of the levels below the top; None:
    the usable cores); ``retries`` and ``timeout`` (seconds per task try) go to the
    executor (flow tasks are idempotent, so a task whose worker died or hung
    is simply run again). ``probe`` calls ``fn``
    once on the first bottom chunk before anything is written, to catch a
    wrong shape or dtype early. ``lock_wait``: seconds to wait when the same
    flow is already running (0 refuses at once). Raises ``ConfigError``
    before anything is written when the configuration is invalid,
    ``FlowLockedError`` when the flow is running elsewhere, ``ExceptionGroup``
    of ``TaskError`` when ``fn`` fails (the note names the chunk's box).
    ``subscribers`` receive the run's events (see ``chunkgraph.run``).
    Inputs may have other resolutions than dst (``Volume.resolution``): each is read
    over the chunk's physical box at its own resolution (``_resolution``), and ``bbox``
    is in dst voxels, or with ``bbox_units="physical"`` in dst.resolution's units.
    ``device="gpu"`` gives ``fn`` device arrays (CuPy) and keeps the levels below the
    top on the GPU (``_device``); without one it is a ``ConfigError`` unless
    ``gpu_fallback=True``, which runs on the CPU and says so in the report.
    ``cast``: which dtypes ``fn`` may return for dst's dtype (``_cast``, numpy's names):
    ``"safe"`` (the default; also a float into a narrower float), ``"same_kind"``
    (narrower integers) or ``"unsafe"`` (floats into integers); a refused one is a
    ``ConfigError`` from the probe, and voxels that saturate are counted and warned of
    (``SaturationWarning``, ``report.saturated_voxels``).
    """
    t0 = time.perf_counter()
    check_bools(resume=resume, probe=probe, progress=progress, dry_run=dry_run)
    check_executor(device, executor)
    flow_device, fell_back = resolve_device(device, gpu_fallback, dry_run)
    no_gpu = gpu_missing(device, flow_device, fell_back)  # dry run, GPU asked for, none here
    named_inputs = normalize_inputs(inputs)
    fn = with_fn_kwargs(fn, fn_kwargs, named_inputs)
    # dst's voxels are the flow's grid (without dst, the first input stands in, as in _spec).
    grid = dst if dst is not None else next(iter(named_inputs.values()), None)
    bbox = bbox_in_voxels(bbox, bbox_units, grid)
    # What runs; ``fn`` itself names the flow (a concurrency limit changes no result).
    run_fn = limit_calls(fn, fn_resources)
    if dst is None:
        if flow_device is not None or no_gpu:
            raise ConfigError(
                "device='gpu' needs a dst: a flow without dst collects fn's values on the "
                "CPU; give a dst volume, or use device='cpu'"
            )
        return _apply_collecting(
            fn,
            run_fn,
            inputs,
            chunk_sizes=chunk_sizes,
            crop_pads=crop_pads,
            blend_pads=blend_pads,
            bbox=bbox,
            auto_divisibility=auto_divisibility,
            expand_bbox=expand_bbox,
            executor=executor,
            workers=workers,
            retries=retries,
            timeout=timeout,
            resume=resume,
            progress=progress,
            dry_run=dry_run,
            subscribers=tuple(subscribers),
            t0=t0,
            cast=cast,
        )
    limit, limit_source = resolve_memory_limit(memory_limit)
    cores = workers if isinstance(workers, int) and workers > 0 else usable_cores()
    plan: FlowPlan | None = None
    if wants_auto_sizes(chunk_sizes):
        plan = plan_automatic(
            inputs,
            dst,
            crop_pads=crop_pads,
            blend_pads=blend_pads,
            bbox=bbox,
            cores=cores,
            memory_limit=limit,
            memory_limit_source=limit_source,
            skip_intermediates=skip_intermediates,
        )
        chunk_sizes = list(plan.chunk_sizes)
        crop_pads, blend_pads = list(plan.crop_pads), list(plan.blend_pads)
        if isinstance(blend_modes, list) and len(blend_modes) == 1:
            blend_modes = blend_modes * len(chunk_sizes)
        skip_intermediates = plan.direct_writes
        expand_bbox = expand_bbox or plan.expand_bbox
    spec = validate_flow(
        fn,
        inputs,
        dst,
        chunk_sizes=chunk_sizes,
        crop_pads=crop_pads,
        blend_pads=blend_pads,
        blend_modes=blend_modes,
        bbox=bbox,
        auto_divisibility=auto_divisibility,
        expand_bbox=expand_bbox,
        max_reduction_chunk_size=max_reduction_chunk_size,
        skip_intermediates=bool(skip_intermediates),
        cast=cast,
    )
    named = normalize_inputs(inputs)
    if plan is None:
        plan = plan_given(
            spec, named, dst, cores=cores, memory_limit=limit, memory_limit_source=limit_source
        )
        message = amplification_warning(plan, named)
        if message:
            warnings.warn(message, ReadAmplificationWarning, stacklevel=2)
    chosen = _resolve_executor(
        executor, _executor_size(workers, flow_device), retries, timeout, named, dst, fn,
        intermediates,
    )  # fmt: skip
    from chunkgraph.execute._executor import close_resolved

    try:
        _check_run_options(workers, retries, lock_wait)
        if flow_device is not None:
            flow_device.fit(top_task_memory(spec, named, dst))
            plan = _on_device(plan, flow_device, top_task_memory(spec, named, dst))
        flow_id = flow_id_of(fn, named, dst, spec)
        root = _intermediates_root(intermediates, dst)
        _check_writable(root, dst)
        if dry_run:
            report = _dry_report(spec, named, dst, flow_id, root, plan, time.perf_counter() - t0)
            if no_gpu:
                return dataclasses.replace(report, device="gpu", gpu_missing=True)
            return _with_device(report, flow_device, fell_back)
        fingerprint = flow_id_parts(fn, named, dst, spec)  # flow_id's parts, for the state
        # dst is this input too (allowed without pads, _spec._check_in_place); None: not so.
        in_place = next((n for n, v in named.items() if dst and same_storage(v, dst)), None)
        # Reads go through the cache the plan sized (the caller's handles stay as they were).
        named = owned_inputs(named, plan)
        made_root = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        try:
            with flow_lock(root / f"{flow_id}.lock", lock_wait):
                record = CompletionRecord(root, flow_id)
                stamp = dst_stamp(dst)
                if resume and _dst_replaced(record, root / flow_id, stamp):
                    warnings.warn(
                        f"flow {flow_id}: the destination was created anew since this flow last "
                        "ran (its markers describe writes to a destination that is gone), so "
                        "resume starts it over",
                        stacklevel=2,
                    )
                    record.remove()
                    discard_flow_dir(root / flow_id)
                    resume = False
                finished = record.read() if resume else None
                if in_place is not None and finished is None:
                    _check_in_place_start(root, flow_id, fingerprint, stamp, resume, in_place, dst)
                if resume and finished is None and not (root / flow_id).exists():
                    warn_if_resume_mismatch(root, flow_id, fingerprint, stamp)
                if finished is not None:
                    discard_flow_dir(root / flow_id)  # what a run killed while cleaning up left
                    report = _finished_report(
                        spec, dst, flow_id, finished, time.perf_counter() - t0
                    )
                    return _with_device(report, flow_device, fell_back)
                before = _read_bytes(named)
                if probe:
                    probe_fn(spec, run_fn, named, dst, flow_device, timeout, retries)
                record.remove()  # a fresh (or unfinished) run is not complete until it ends
                if (
                    dst.location.local_dir is not None
                ):  # `chunkgraph status DST` finds state kept elsewhere
                    note_state(dst.path, root, flow_id)
                if in_place is not None:
                    mark_in_place(dst, root, flow_id)
                flow = _Flow(
                    spec,
                    run_fn,
                    named,
                    dst,
                    root / flow_id,
                    resume,
                    stamp,
                    flow_device,
                    cores=cores,
                    own_pool=workers is not None,
                    memory_limit=limit,
                    fingerprint=fingerprint,
                )
                try:
                    report = flow.run(chosen, progress, t0, before, tuple(subscribers))
                except BaseException as error:  # a Ctrl-C leaves the same state behind
                    damaged = _layer_corrupt(error, root / flow_id)
                    error.add_note(kept_state_note(root, flow_id, damaged=damaged))
                    raise
                finally:
                    if flow_device is not None:
                        flow_device.trim()
                report = _with_device(
                    dataclasses.replace(report, plan=plan), flow_device, fell_back
                )
                warn_if_saturated(report.saturated_voxels, dst, spec.cast)
                if not flow.deferred:
                    # Finished first, then delete: a kill while deleting must never leave done
                    # markers whose layers are gone (a resume would reduce missing data).
                    record.write(report, stamp, fingerprint=fingerprint)
                    if in_place is not None:
                        unmark_in_place(dst)
                    discard_flow_dir(root / flow_id)
                return report
        finally:
            if made_root:
                with contextlib.suppress(OSError):
                    root.rmdir()  # only when empty: a completion record is worth keeping
    finally:
        close_resolved(chosen, executor)  # a Client opened for executor='tcp://...'


def _layer_corrupt(error: BaseException, flow_dir: Path) -> bool:
    """Whether ``error`` (a group of task errors, or one) is a corrupt chunk of one of the
    flow's own layers (``_reduce.damaged_layer_error``)."""
    seen: list[BaseException] = [error]
    layers = (flow_dir / "layers").resolve()
    while seen:
        e = seen.pop()
        if isinstance(e, CorruptChunkError) and Path(e.volume).resolve().is_relative_to(layers):
            return True
        if isinstance(e, BaseExceptionGroup):
            seen.extend(e.exceptions)
        if e.__cause__ is not None:
            seen.append(e.__cause__)
    return False


def _with_device(report: ApplyReport, device: FlowDevice | None, fell_back: bool) -> ApplyReport:
    """``report`` with where the flow computed and what crossed to and from the device."""
    if device is None:
        return dataclasses.replace(report, gpu_fallback=fell_back)
    return dataclasses.replace(
        report,
        device="gpu",
        bytes_to_device=device.bytes_uploaded,
        bytes_from_device=device.bytes_downloaded,
        device_copies=(device.uploads, device.downloads),
    )


def _dst_replaced(record: CompletionRecord, flow_dir: Path, stamp: str | None) -> bool:
    """True when the flow's record or markers were written for a destination that has
    since been deleted and created again (see ``_markers.dst_stamp``)."""
    if stamp is None:
        return False
    finished = record.read()
    before = finished.get("dst") if finished else read_flow_info(flow_dir).get("dst")
    return before is not None and before != stamp


def _check_in_place_start(
    root: Path,
    flow_id: str,
    fingerprint: dict[str, str],
    stamp: str | None,
    resume: bool,
    input_name: str,
    dst: Volume,
) -> None:
    """ConfigError when an in-place flow may not start: an interrupted in-place flow has
    rewritten part of dst (its state under ``root``, or under the intermediates the mark in
    dst names), so dst no longer holds the input; only that flow's resume may go on."""
    conflict = lost_in_place_state(dst) or in_place_conflict(
        root, flow_id, fingerprint, stamp, resuming=resume, input_name=input_name
    )
    mark = in_place_mark(dst)
    marked = mark[0] if mark is not None else None
    if conflict is None and marked is not None and marked != root.resolve():
        # Its state lies elsewhere: no run from here can resume it, whatever its id.
        conflict = in_place_conflict(
            marked, "", fingerprint, stamp, resuming=False, input_name=input_name
        )
        if conflict:
            conflict += f" (that flow keeps its state under intermediates={str(marked)!r})"
    if conflict:
        raise ConfigError(conflict)


def _executor_size(workers: int | None, device: FlowDevice | None) -> int | None:
    """The executor's workers: ``workers``; for a GPU flow without them, enough threads
    for every device's tasks in flight however few the cores (they wait on the GPU)."""
    if device is None or workers is not None:
        return workers
    return max(usable_cores(), device.count * DEVICE_TASKS_IN_FLIGHT)


def _on_device(plan: FlowPlan, device: FlowDevice, top_bytes: int) -> FlowPlan:
    """``plan`` with the superchunks a GPU flow holds in flight (two per device, or as
    many as fit; see ``_device``) and the host memory they take."""
    cpu = plan.superchunks_in_flight
    more = device_tasks_in_flight(cpu, device.count, device.per_device)
    if cpu <= 0 or more <= cpu:
        return plan
    return dataclasses.replace(
        plan, superchunks_in_flight=more, memory_bytes=plan.memory_bytes + (more - cpu) * top_bytes
    )


def _resolve_executor(
    executor: ExecutorKind | Executor | None,
    workers: int | None,
    retries: int,
    timeout: float | None,
    inputs: Mapping[str, Volume],
    dst: Volume | None,
    fn: Callable[..., Any],
    intermediates: str | os.PathLike[str] | None = None,
) -> Executor:
    """The executor to run on; outside this process, no memory volumes and an fn that pickles;
    on workers that may not see this machine's files (``ChecksPaths``), paths they reach.

    A kind ("threads", the default, "processes", "sync") takes ``workers``,
    ``retries`` and ``timeout``; an Executor carries its own settings, so only
    apply's default ``retries`` may stand beside it.
    """
    from chunkgraph.execute import resolve_executor
    from chunkgraph.execute._executor import close_resolved

    if executor is None or isinstance(executor, str):
        chosen = resolve_executor(
            executor or "threads", workers=workers, retries=retries, timeout=timeout
        )
    else:
        own = 0 if retries == DEFAULT_RETRIES else retries
        chosen = resolve_executor(executor, workers=workers, retries=own, timeout=timeout)
    if chosen.in_process:
        return chosen
    try:
        _check_out_of_process(chosen, executor, inputs, dst, fn, intermediates)
    except BaseException:
        close_resolved(chosen, executor)
        raise
    return chosen


def _check_out_of_process(
    chosen: Executor,
    executor: ExecutorKind | Executor | None,
    inputs: Mapping[str, Volume],
    dst: Volume | None,
    fn: Callable[..., Any],
    intermediates: str | os.PathLike[str] | None,
) -> None:
    """ConfigError when ``chosen`` (not in this process) cannot run this flow: memory
    volumes, an fn that does not pickle, paths its workers cannot see."""
    from chunkgraph.execute import ChecksPaths

    where = f"executor={executor!r} runs tasks in other processes"
    local = [n for n, v in inputs.items() if v.location.in_process]
    local += ["dst"] if dst is not None and dst.location.in_process else []
    if local:
        raise ConfigError(
            f"{where} and cannot use memory volumes ({', '.join(local)}): they exist only in "
            "this process; store them with backend='zarr' or use executor='threads'"
        )
    import cloudpickle  # type: ignore[import-untyped]

    try:
        cloudpickle.dumps(fn)
    except Exception as err:  # pickling raises many types (TypeError, PicklingError, ...)
        raise ConfigError(
            f"{where} and must send fn {getattr(fn, '__name__', fn)!r} there, but it cannot be "
            f"pickled: {type(err).__name__}: {err}. Make fn a module-level function (or a "
            "callable object) that holds no locks, open files or connections, or use "
            "executor='threads'"
        ) from err
    if isinstance(chosen, ChecksPaths):
        # Only what lives on this machine's disk: a URL is the store's to serve.
        named = {f"input {n!r}": v for n, v in inputs.items()}
        named |= {"dst": dst} if dst is not None else {}
        paths = {
            what: str(v.location.local_dir) for what, v in named.items() if v.location.local_dir
        }
        if dst is not None:  # dst=None flows keep nothing on disk
            root = _intermediates_root(intermediates, dst)
            paths["intermediates"] = str(next(p for p in (root, *root.parents) if p.exists()))
        chosen.check_paths(paths)


def _apply_collecting(
    fn: Callable[..., Any],
    run_fn: Callable[..., Any],
    inputs: Volume | Mapping[str, Volume],
    *,
    chunk_sizes: Any,
    crop_pads: Any,
    blend_pads: Any,
    bbox: Box | None,
    auto_divisibility: bool,
    expand_bbox: bool | str,
    executor: ExecutorKind | Executor | None,
    workers: int | None,
    retries: int,
    timeout: float | None,
    resume: bool,
    progress: bool,
    dry_run: bool,
    subscribers: tuple[Subscriber, ...],
    t0: float,
    cast: str,
) -> ApplyReport:
    """``apply`` with ``dst=None``: fn's value per bottom chunk (``_values``)."""
    from chunkgraph.flow._values import chunks_per_level, real_region, run_values

    if wants_auto_sizes(chunk_sizes):
        raise ConfigError(
            "dst=None needs chunk_sizes: automatic sizes are planned from dst's storage "
            "chunks; give the chunks fn should see, e.g. chunk_sizes=[(256, 256, 256), (64,) * 3]"
        )
    if resume:
        raise ConfigError(
            "resume=True with dst=None: a flow without dst keeps no state (its values come "
            "back in the report), so there is nothing to resume; run it without resume"
        )
    spec = validate_flow(
        fn,
        inputs,
        None,
        chunk_sizes=chunk_sizes,
        crop_pads=crop_pads,
        blend_pads=blend_pads,  # refused: see _spec._check_values_levels
        bbox=bbox,
        auto_divisibility=auto_divisibility,
        expand_bbox=expand_bbox,
        cast=cast,  # checked, and unused: nothing is cast without a dst
    )
    named = normalize_inputs(inputs)
    # An expanded bbox may leave the volume: chunks are clipped to it (fn sees real voxels).
    edge = real_region(spec, named)
    per_level = chunks_per_level(spec, edge)
    flow_id = flow_id_of(fn, named, None, spec)
    chosen = _resolve_executor(executor, workers, retries, timeout, named, None, fn)
    from chunkgraph.execute._executor import close_resolved

    try:
        _check_run_options(workers, retries, 0.0)
        if dry_run:
            return _no_io_report(
                spec,
                flow_id,
                time.perf_counter() - t0,
                dry_run=True,
                tasks_per_level=per_level,
                reductions=0,
            )
        values, read = run_values(spec, run_fn, named, chosen, progress, subscribers, edge)
    finally:
        close_resolved(chosen, executor)  # a Client opened for executor='tcp://...'
    needed = needed_input_bytes(spec, named)
    return ApplyReport(
        flow_id=flow_id,
        dry_run=False,
        tasks_per_level=per_level,
        reductions=0,
        bytes_read=read,
        bytes_written=0,
        temporary_bytes=0,
        read_amplification=read / needed if needed else 0.0,
        wall_seconds=time.perf_counter() - t0,
        bbox=spec.bbox,
        values=values,
    )


def _check_run_options(workers: object, retries: object, lock_wait: object) -> None:
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ConfigError(f"workers must be a positive int or None (all cores), got {workers!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be an int >= 0, got {retries!r}")
    if isinstance(lock_wait, bool) or not isinstance(lock_wait, int | float) or not lock_wait >= 0:
        raise ConfigError(
            f"lock_wait must be a number of seconds >= 0 (0 refuses a busy flow at once, "
            f"math.inf waits for it), got {lock_wait!r}"
        )


def _dry_report(
    spec: FlowSpec,
    named: dict[str, Volume],
    dst: Volume,
    flow_id: str,
    root: Path,
    plan: FlowPlan,
    seconds: float,
) -> ApplyReport:
    """A dry run's report: the estimate, its reads through the cache ``plan`` sizes too."""
    from chunkgraph.flow._estimate import estimate_flow, with_cache

    est = with_cache(estimate_flow(spec, named, dst), plan)
    return _no_io_report(
        spec,
        flow_id,
        seconds,
        dry_run=True,
        tasks_per_level=tuple(est.tasks_per_level),
        reductions=est.reductions,
        intermediates=str(root / flow_id),
        estimate=est,
        plan=plan,
    )


def _no_io_report(spec: FlowSpec, flow_id: str, seconds: float, **fields: Any) -> ApplyReport:
    """A report of a call that read and wrote nothing (a dry run, a finished flow)."""
    return ApplyReport(
        flow_id=flow_id,
        bytes_read=0,
        bytes_written=0,
        temporary_bytes=0,
        read_amplification=0.0,
        wall_seconds=seconds,
        bbox=spec.bbox,
        **fields,
    )


def _finished_report(
    spec: FlowSpec, dst: Volume, flow_id: str, finished: Mapping[str, Any], seconds: float
) -> ApplyReport:
    """The report of a resumed run whose flow had already finished: nothing was done."""
    return _no_io_report(
        spec,
        flow_id,
        seconds,
        dry_run=False,
        tasks_per_level=(0,) * len(spec.levels),
        reductions=0,
        top_tasks_skipped=int(np.prod(spec.top_grid)),
        reductions_skipped=int(finished.get("reductions", 0)),
        finished_before=str(finished.get("finished", "")),
    )


def _intermediates_root(intermediates: str | os.PathLike[str] | None, dst: Volume) -> Path:
    """Where temporaries live: as given, else beside a file-backed dst, else the temp dir.

    The default is deterministic so that a resumed run finds the previous one's markers.
    """
    if intermediates is not None:
        if not isinstance(intermediates, str | os.PathLike):
            raise ConfigError(
                f"intermediates must be a directory path or None, got {intermediates!r}",
                field="intermediates",
            )
        root = Path(intermediates)
        # The nearest existing path decides: a file there (the path itself or a parent)
        # would fail only at mkdir, as a bare NotADirectoryError.
        existing = next((p for p in (root, *root.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            what = "is a file" if existing == root else f"is under {str(existing)!r}, a file"
            raise ConfigError(
                f"intermediates={str(root)!r} {what}; give a directory (created if missing) "
                "where the flow may keep its temporary layers and markers, or None for the "
                "default beside dst",
                field="intermediates",
            )
        return root
    where = dst.location.local_dir
    if where is not None:
        return where.parent / f".{where.name}.chunkgraph"
    return Path(tempfile.gettempdir()) / "chunkgraph-intermediates"


def _check_writable(root: Path, dst: Volume) -> None:
    """A ConfigError naming the path when the flow's state folder (``root``, or where it
    will be made) or an on-disk dst cannot be written: before anything runs, dry runs too.

    A run needs both: it locks the flow and records its progress under ``root``, and
    writes dst's chunks. Found later, this would be a bare ``OSError`` from a mkdir.
    """
    if dst.location.local_dir is not None:
        problem = write_problem(dst.path)
        if problem:
            raise ConfigError(
                f"dst {dst.path!r} cannot be written: {problem}, so nothing was run. Is it "
                "on a read-only mount, or without write permission? Make it writable, or "
                "write to a dst on a writable file system",
                field="dst",
            )
    problem = write_problem(root)
    if problem:
        raise ConfigError(
            f"intermediates {str(root)!r} cannot be written: {problem}. The flow keeps its "
            "lock, done markers and temporary layers there, so nothing was run. Is it on a "
            "read-only mount, or without write permission? Give intermediates= (a spec's "
            "intermediates:) a directory on a writable file system",
            field="intermediates",
        )


class _Flow:
    """One non-dry run: builds the graph, runs it, cleans up, reports."""

    def __init__(
        self,
        spec: FlowSpec,
        fn: Callable[..., Any],
        inputs: dict[str, Volume],
        dst: Volume,
        flow_dir: Path,
        resume: bool,
        dst_stamp: str | None = None,
        device: FlowDevice | None = None,
        *,
        cores: int | None = None,
        own_pool: bool = False,
        memory_limit: int | None = None,
        fingerprint: dict[str, str] | None = None,
    ) -> None:
        """``cores``: the cores the flow plans for (``workers``, else the usable ones);
        ``own_pool``: the levels below the top run on a pool of ``cores`` threads rather
        than the process-wide one (``workers`` was given); ``memory_limit``: bytes that
        the top-level tasks in flight together may not exceed (at least one runs);
        ``fingerprint``: ``flow_id_parts``, recorded in ``flow.json``."""
        self.spec = spec
        self.cores = cores
        self.memory_limit = memory_limit
        self.fingerprint = fingerprint
        self.dst_stamp = dst_stamp
        self.in_process = True  # set by run(): where the tasks read
        self.inputs = inputs
        self.dst = dst
        self.flow_dir = flow_dir
        self.markers = MarkerStore(flow_dir)
        if not resume:
            self.markers.clear()
            warn_if_stale(flow_dir.parent, flow_dir.name)
        self.direct = spec.skip_intermediates
        self.layers: LayerPlan | None = None
        layer_vols: list[Volume] = []
        if not self.direct:
            self.layers = plan_layers(spec, dst, flow_dir / "layers")
            if not resume:
                self.layers.remove()
            layer_vols = self.layers.create()
        self.deferred = spec.levels[0].blend_mode == "defer"
        self.job = TopJob(
            spec=spec,
            fn=fn,
            inputs=inputs,
            dst=dst,
            layers=self.layers,
            layer_vols=tuple(layer_vols),
            marker_root=str(flow_dir),
            run_token=uuid.uuid4().hex,
            sweep_axis=_sweep_axis(spec.top_grid),
            device=device,
            pool_workers=cores if own_pool else None,
        )

    def run(
        self,
        executor: Executor,
        progress: bool,
        t0: float,
        before: int,
        subscribers: tuple[Subscriber, ...] = (),
    ) -> ApplyReport:
        from chunkgraph.execute import run
        from chunkgraph.graph import Graph

        self.in_process = executor.in_process
        graph = Graph()
        top_refs, skipped_top = self._add_top_tasks(graph)
        red_refs: list[TaskRef] = []
        skipped_red = 0
        if not self.direct and not self.deferred:
            red_refs, skipped_red = self._add_reductions(graph, top_refs)
        refs = list(top_refs.values()) + red_refs
        # What `chunkgraph status` shows as progress, and what keeps `clean` away from a
        # deferred flow's layers (they are its result, not temporaries).
        # A deferred flow also records what reduce_deferred needs to finish it later.
        extra: dict[str, Any] = {}
        if self.fingerprint is not None:
            extra["fingerprint"] = self.fingerprint
        if self.deferred and self.layers is not None:
            geometry = DeferredGeometry.of(self.spec, self.dst, self.layers)
            extra[GEOMETRY_KEY] = geometry.as_json()
        write_flow_info(
            self.flow_dir,
            top_tasks=len(top_refs) + skipped_top,
            reductions=len(red_refs) + skipped_red,
            deferred=self.deferred,
            dst=self.dst_stamp,
            **extra,
        )
        try:
            results = (
                run(
                    graph,
                    refs,
                    executor,
                    progress=progress,
                    subscribers=subscribers,
                    plan=self._plan(graph, refs),
                )
                if refs
                else []
            )
        finally:
            forget_flow(self.job.marker_root)
            end_run(self.job.run_token)
        top_stats = [r for r in results if isinstance(r, TopStats)]
        red_stats = [r for r in results if isinstance(r, ReductionStats)]
        report = self._report(top_stats, red_stats, before, t0, skipped_top, skipped_red)
        per_task = tuple(
            (graph.name(ref.id), *_bytes_of(stats))
            for ref, stats in zip(refs, results, strict=True)
        )
        return dataclasses.replace(report, task_bytes=per_task)

    def _plan(self, graph: Graph, refs: list[TaskRef]) -> Plan:
        """The plan of this flow's graph on this machine, with the flow's memory budget:
        ``superchunks_in_flight`` top-level tasks per CPU context for the cores the flow
        plans for (``workers`` when given), no more than ``memory_limit`` holds (none for
        a one-level flow, whose tasks hold no superchunk over a pool)."""
        from chunkgraph.planning import local_contexts, plan

        contexts = local_contexts(gpus=False)
        top = top_task_memory(self.spec, self.inputs, self.dst)
        budget: dict[str, float] = {}
        for ctx in contexts:
            cores = self.cores if self.cores is not None else usable_cores()
            if len(contexts) > 1:
                cores = min(cores, ctx.slots)
            in_flight = superchunks_in_flight(self.spec, cores)
            if in_flight > 0 and top > 0 and self.memory_limit is not None:
                in_flight = min(in_flight, max(1, self.memory_limit // top))
            if self.job.device is not None:
                device = self.job.device
                in_flight = device_tasks_in_flight(in_flight, device.count, device.per_device)
            if in_flight > 0 and top > 0:
                budget[ctx.name] = float(in_flight * top)
        return plan(graph, contexts, memory=budget or None, targets=refs)

    def _add_top_tasks(self, graph: Graph) -> tuple[dict[tuple[int, ...], TaskRef], int]:
        """One task per top-level chunk not yet marked done, in C order of the top grid."""
        from chunkgraph.graph import Cost

        spec = self.spec
        starts, stops, grid = spec.bbox.split_arrays(spec.levels[0].chunk)
        done = self.markers.done_keys(TOP)
        cost = Cost(memory=top_task_memory(spec, self.inputs, self.dst))
        indices = np.indices(grid).reshape(len(grid), -1).T.tolist()
        refs: dict[tuple[int, ...], TaskRef] = {}
        for index, a, b in zip(indices, starts.tolist(), stops.tolist(), strict=True):
            key = grid_key(tuple(index))
            if key in done:
                continue
            box = Box(a, b)
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
            compute = box.intersection(self.spec.bbox)
            deps = [top_refs[i] for i in top_indices_meeting(self.spec, compute) if i in top_refs]
            refs.append(
                graph.add(run_reduction, self.job, key, box, deps, name=f"apply-reduce{box}")
            )
        return refs, len(boxes) - len(refs)

    def _report(
        self,
        tops: list[TopStats],
        reds: list[ReductionStats],
        before: int,
        t0: float,
        skipped_top: int,
        skipped_red: int,
    ) -> ApplyReport:
        spec = self.spec
        counts = [0] * len(spec.levels)
        for t in tops:
            for level, n in enumerate(t.tasks_per_level):
                counts[level] += n
        # Threads share the driver's Volume objects: their counters are exact. Other
        # executors read through their own copies, which report per task (the driver's
        # counters then hold only the probe's read).
        if self.in_process:
            bytes_read = _read_bytes(self.inputs) - before
        else:
            bytes_read = sum(t.bytes_read for t in tops)
        needed = needed_input_bytes(spec, self.inputs)
        if self.direct:
            written, temporary = sum(t.bytes_written for t in tops), 0
        else:
            written = sum(r.bytes_written for r in reds)
            temporary = sum(t.bytes_written for t in tops)
        return ApplyReport(
            flow_id=self.flow_dir.name,
            dry_run=False,
            tasks_per_level=tuple(counts),
            reductions=len(reds),
            bytes_read=bytes_read,
            bytes_written=written,
            temporary_bytes=temporary,
            read_amplification=bytes_read / needed if needed else 0.0,
            wall_seconds=time.perf_counter() - t0,
            bbox=spec.bbox,
            top_tasks_skipped=skipped_top,
            reductions_skipped=skipped_red,
            intermediates=str(self.flow_dir) if self.deferred else None,
            deferred_layers=self.layers.paths() if self.deferred and self.layers else (),
            saturated_voxels=sum(t.saturated for t in tops) + sum(r.saturated for r in reds),
        )


def run_reduction(job: TopJob, key: str, box: Box, _deps: list[Any]) -> ReductionStats:
    """Graph task: one reduction box, then its done marker."""
    if job.layers is None:
        raise AssertionError("a reduction needs temporary layers; this flow writes directly")
    stats = reduce_box(job.spec, job.layers, list(job.layer_vols), job.dst, box, job.run_token)
    MarkerStore(Path(job.marker_root)).mark_done(REDUCE, key)
    return stats


def _sweep_axis(grid: tuple[int, ...]) -> int:
    """The fastest-varying axis of the top grid along which tasks follow each other.

    >>> _sweep_axis((4, 8, 1)), _sweep_axis((1, 1, 1))
    (1, 2)
    """
    moving = [a for a, n in enumerate(grid) if n > 1]
    return moving[-1] if moving else len(grid) - 1


def _bytes_of(stats: TopStats | ReductionStats) -> tuple[int, int]:
    """(bytes read, bytes written) of one task's stats."""
    if isinstance(stats, TopStats):
        return stats.bytes_read, stats.bytes_written
    return stats.temporary_bytes_read, stats.bytes_written


def _read_bytes(inputs: Mapping[str, Volume]) -> int:
    return sum(v.stats.bytes_read for v in inputs.values())
