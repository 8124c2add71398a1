"""``FlowRun``: the lifecycle of one flow call, top to bottom, in one place.

Policy. ``apply`` plans and validates; ``FlowRun.run`` does everything that
touches the world, in this order::

    executor ──(dst=None)──> collect fn's values ──> report
        │
        v
    device fit ──> flow id ──> FlowDir writable? ──(dry_run)──> estimate ──> report
        │
        v
    lock ──> claim dst's region ──> no input being written by another flow (or lock_wait)
        │
        v
    resume or start over ──> in-place rules ──(finished)──> report
        │     (dst re-created: start over; not resuming: clear markers,
        v      layers removed and made anew)
    reader counts to apply's own input caches (_reader_counts) ──> probe
        │
        v
    open: record removed, .where note, in-place mark
        │
        v
    run the graph (_flow_graph) ──> record ──> unmark in place ──> discard ──> report

The flow's state is ``FlowDir``'s (``_flow_dir``): this module asks it to
lock, record and discard, and never spells a path of it. The lock is per flow
id; the claim (``_dst_lock``) keeps any other flow off the region of dst this
one writes, for the whole run, and a flow refuses to read an input another flow
is writing (``refuse_if_written``). ``reduce_deferred``
shares the executor and the ``held`` → record → discard steps.

The plan ``apply`` made is the one-process plan; ``_into_dst`` first adjusts it to the
executor (``_on_executor``): on worker processes or a cluster each process reads
through its own cache, one contiguous stream of top tasks each, so the report's plan
counts the halo read again at the streams' boundaries and a cache per process.

State. A ``FlowRun`` holds what ``apply`` decided (spec, plan, options, the
device) and creates nothing until ``run``; the executor it resolves is closed
when ``run`` returns if ``run`` made it (a Client opened for an address).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph._util import usable_cores
from chunkgraph.execute import ChecksPaths, ClusterSpec, DaskExecutor, resolve_executor
from chunkgraph.execute._cluster_spec import ClusterStandIn
from chunkgraph.execute._executor import close_resolved, is_dask_client, is_scheduler_address
from chunkgraph.execute._failures import describe, innermost
from chunkgraph.flow.plan import (
    DEFAULT_RETRIES,
    DEVICE_TASKS_IN_FLIGHT,
    FlowPlan,
    FlowSpec,
    RunOptions,
    estimate_flow,
    for_executor,
    needed_input_bytes,
    owned_inputs,
    resumed_plan,
    same_storage,
    scaled,
    top_task_memory,
    warn_if_saturated,
    with_cache,
)
from chunkgraph.flow.run._device import FlowDevice, resolve_device
from chunkgraph.flow.run._flow_graph import FlowGraph, InputReads, call_streams
from chunkgraph.flow.run._probe import fn_calls, probe_fn, probe_read_box
from chunkgraph.flow.run._probe_output import drop_probe_output, keep_probe_output
from chunkgraph.flow.run._reader_counts import plan_input_reads
from chunkgraph.flow.run._report import ApplyReport
from chunkgraph.flow.run._top_task import superchunks_in_flight
from chunkgraph.flow.run._values import chunks_per_level, real_region, run_values
from chunkgraph.flow.state import (
    TOP,
    FlowDir,
    claimed,
    dst_of_state_root,
    flow_id_of,
    flow_id_parts,
    in_place_conflict,
    in_place_mark,
    kept_state_note,
    layers_place,
    lost_in_place_state,
    reach,
    refuse_if_written,
    state_root,
    warn_if_resume_mismatch,
    warn_if_stale,
)
from chunkgraph.volume._remote import check_credentials_shipped

if TYPE_CHECKING:
    from chunkgraph.execute import Executor
    from chunkgraph.geometry import Box
    from chunkgraph.volume import Volume


@dataclass(frozen=True)
class DeviceUse:
    """The device a flow computes on: ``flow`` (None: the CPU), ``fell_back`` (a GPU was
    asked for and the CPU stands in), ``missing`` (a dry run asked for a GPU, none here)."""

    flow: FlowDevice | None
    fell_back: bool
    missing: bool

    @classmethod
    def of(cls, options: RunOptions) -> DeviceUse:
        """Looks for the GPU ``options`` asks for (ConfigError when none and no fallback)."""
        choice = options.device
        flow, fell_back = resolve_device(choice.device, choice.gpu_fallback, options.dry_run)
        return cls(flow, fell_back, choice.device == "gpu" and flow is None and not fell_back)

    def reported(self, report: ApplyReport) -> ApplyReport:
        """``report`` with where the flow computed and what crossed to and from the device."""
        if self.missing:
            return dataclasses.replace(report, device="gpu", gpu_missing=True)
        if self.flow is None:
            return dataclasses.replace(report, gpu_fallback=self.fell_back)
        d = self.flow
        return dataclasses.replace(
            report,
            device="gpu",
            bytes_to_device=d.bytes_uploaded,
            bytes_from_device=d.bytes_downloaded,
            device_copies=(d.uploads, d.downloads),
        )


class FlowRun:
    """One flow call after planning: ``run()`` does it and reports (see the module)."""

    def __init__(
        self,
        spec: FlowSpec,
        plan: FlowPlan | None,
        fn: Callable[..., Any],
        run_fn: Callable[..., Any],
        inputs: dict[str, Volume],
        dst: Volume | None,
        options: RunOptions,
        device: DeviceUse,
        *,
        cores: int,
        memory_limit: int | None,
        t0: float,
    ) -> None:
        """``fn`` names the flow (its id); ``run_fn`` is what runs (``fn`` under its
        ``fn_resources`` limits); ``cores``: the cores the flow plans for; ``memory_limit``:
        bytes the top-level tasks in flight together may not exceed (at least one runs)."""
        self.spec, self.plan, self.fn, self.run_fn = spec, plan, fn, run_fn
        self.inputs, self.dst, self.options, self.device = inputs, dst, options, device
        self.cores, self.memory_limit, self.t0 = cores, memory_limit, t0

    def run(self) -> ApplyReport:
        executor = flow_executor(
            self.options, self.inputs, self.dst, self.fn, self._executor_size()
        )

        try:
            if self.dst is None:
                return self._collect(executor)
            return self.device.reported(self._into_dst(self.dst, executor))
        finally:
            close_resolved(executor, self.options.executor)  # a Client opened for an address

    def _into_dst(self, dst: Volume, executor: Executor) -> ApplyReport:
        spec, options, device = self.spec, self.options, self.device.flow
        plan = (
            self.plan if self.plan is None else _on_executor(self.plan, spec, self.inputs, executor)
        )
        top = top_task_memory(spec, self.inputs, dst)  # once: the device, the graph's budget
        if device is not None and plan is not None:
            device.fit(top)
            more = superchunks_in_flight(spec, self.cores, device=device)
            plan = _on_device(plan, more, top)
        flow_id = flow_id_of(self.fn, self.inputs, dst, spec)
        state = self._state(dst, flow_id, executor)
        state.check_writable(dst)
        if options.dry_run:
            return _dry_report(spec, self.inputs, dst, state, plan, self.t0)
        fingerprint = flow_id_parts(self.fn, self.inputs, dst, spec)  # for the state
        # dst is this input too (allowed without pads, _spec._check_in_place); None: not so.
        in_place = next((n for n, v in self.inputs.items() if same_storage(v, dst)), None)
        # Reads go through the cache the plan sized (the caller's handles stay as they were).
        inputs = owned_inputs(self.inputs, plan) if plan is not None else self.inputs
        stamp = dst.stamp()  # a dst deleted and made again: other work than the records'
        # One wait for both locks: this flow's own (same id), then dst's region (any flow).
        deadline = time.monotonic() + options.lock_wait
        with (
            state.held(options.lock_wait),
            claimed(dst, spec.writes, _about(flow_id, self.fn), deadline - time.monotonic()),
        ):
            # After both locks: of two flows each reading what the other writes, one sees.
            refuse_if_written(reads_of(spec, self.inputs, dst), deadline - time.monotonic())
            resume = self._resume_or_start_over(state, stamp)
            finished = state.record.read() if resume else None
            if in_place is not None and finished is None:
                _check_in_place_start(state, fingerprint, stamp, resume, in_place, dst)
            if resume and finished is None and not state.exists():
                warn_if_resume_mismatch(state.root, flow_id, fingerprint, stamp)
            if finished is not None:
                state.discard()  # what a run killed while cleaning up left
                return _finished_report(spec, flow_id, finished, self.t0)
            opening = functools.partial(
                self._open, state, inputs, dst, resume, stamp, in_place, fingerprint, top
            )
            # Top tasks a resumed run skips: no reads of theirs (_reader_counts, the plan).
            done = state.markers().done_keys(TOP) if resume else set()
            flow, report = self._probe_and_execute(
                state, inputs, dst, executor, done, in_place is not None, opening
            )
            predicted = self._predicted(plan, report, done, executor.in_process)
            report = dataclasses.replace(report, plan=predicted)
            warn_if_saturated(report.saturated_voxels, dst, spec.cast)
            if not flow.deferred:
                # Finished first, then delete: a kill while deleting must never leave done
                # markers whose layers are gone (a resume would reduce missing data).
                state.record.write(report, stamp, fingerprint=fingerprint)
                if in_place is not None:
                    state.unmark_in_place(dst)
                state.discard()
            return report

    def _probe_and_execute(
        self,
        state: FlowDir,
        inputs: dict[str, Volume],
        dst: Volume,
        executor: Executor,
        done: set[str],
        in_place: bool,
        opening: Callable[[], FlowGraph],
    ) -> tuple[FlowGraph, ApplyReport]:
        """Plan the caches' reads, probe fn, open the graph (``opening``) and run it."""
        before = InputReads.of(inputs)  # the probe's reads are the run's
        probe = self._probes()
        # apply's own caches keep each shared chunk until its last reader (_reader_counts).
        unplan = plan_input_reads(
            self.spec, inputs, self.inputs, done=done, probe=probe, in_process=executor.in_process
        )
        token = ""
        try:
            probed = self._probe(inputs, dst) if probe else None
            flow = opening()
            # Where tasks share this process's memory, the probe's output is the first
            # chunk's (_probe_output); in place, a task may read what another wrote since.
            if probed is not None and executor.in_process and not in_place:
                token = flow.job.run_token
                keep_probe_output(token, *probed)
            return flow, self._execute(flow, state, executor, before)
        finally:
            drop_probe_output(token)
            unplan()

    def _probes(self) -> bool:
        """Whether the run probes fn: asked for, and more than one call (one is its own)."""
        return self.options.probe and fn_calls(self.spec) > 1

    def _predicted(
        self, plan: FlowPlan | None, report: ApplyReport, done: set[str], in_process: bool
    ) -> FlowPlan | None:
        """The plan the report carries: a resumed run that skipped top tasks predicts the
        reads of its pending ones (``resumed_plan``), as it measures them: the probe's
        read counts only where the report counts it (in process; elsewhere the probe
        reads through the driver's volumes, and the workers' reads are the report's)."""
        if plan is None or not report.top_tasks_skipped or not done:
            return plan
        indices = [tuple(int(i) for i in key.split("_")) for key in done]  # grid_key's
        probe = probe_read_box(self.spec) if self._probes() and in_process else None
        return resumed_plan(plan, self.spec, self.inputs, indices, probe)

    def _probe(self, inputs: dict[str, Volume], dst: Volume) -> tuple[Box, Any] | None:
        """fn once on the first bottom chunk (``_probe``); its chunk and output on the
        host, None on a device (a device array is not kept for the run)."""
        device, options = self.device.flow, self.options
        retries = _retries(options)
        probed = probe_fn(self.spec, self.run_fn, inputs, dst, device, options.timeout, retries)
        return probed if device is None else None

    def _state(self, dst: Volume, flow_id: str, executor: Executor) -> FlowDir:
        """Where this flow's state and top-level layers live, reachable as dst is."""
        root = state_root(self.options.intermediates, dst)
        layers = layers_place(
            root,
            flow_id,
            # A root named as the default one (.<dst>.chunkgraph, e.g. by the command line's
            # dry run, whose stand-in dst is elsewhere) is the default: layers where its are.
            given=self.options.intermediates is not None and dst_of_state_root(root) is None,
            remote_workers=isinstance(executor, ChecksPaths),  # a cluster's: no shared disk
        )
        reach(root)  # state in an object store: reached as dst is (its endpoint, say)
        return FlowDir(root, flow_id, layers)

    def _resume_or_start_over(self, state: FlowDir, stamp: str | None) -> bool:
        """Whether this run resumes: asked for, and its state is of this very dst (one
        deleted and created again since starts over, with a warning)."""
        if not self.options.resume:
            return False
        if not state.written_for_other(stamp):
            return True
        warnings.warn(
            f"flow {state.flow_id}: the destination was created anew since this flow last "
            "ran (its markers describe writes to a destination that is gone), so resume "
            "starts it over",
            stacklevel=5,
        )
        state.record.remove()
        state.discard()
        return False

    def _open(
        self,
        state: FlowDir,
        inputs: dict[str, Volume],
        dst: Volume,
        resume: bool,
        stamp: str | None,
        in_place: str | None,
        fingerprint: dict[str, str],
        top_memory: int,
    ) -> FlowGraph:
        """The run begins: the record goes (not complete until it ends), the state is noted
        beside dst and in an in-place dst, and a fresh run starts from clean markers and
        layers; then the graph's owner."""
        state.record.remove()
        state.clear_failure()
        state.note_beside(dst)  # `chunkgraph status DST` finds state kept elsewhere
        if in_place is not None:
            state.mark_in_place(dst)
        markers = state.markers()
        if not resume:
            markers.clear()
            warn_if_stale(state.root, state.flow_id)
        return FlowGraph.open(
            self.spec,
            self.run_fn,
            inputs,
            dst,
            state,
            fresh=not resume,
            top_memory=top_memory,
            stamp=stamp,
            device=self.device.flow,
            cores=self.cores,
            own_pool=self.options.workers is not None,
            memory_limit=self.memory_limit,
            fingerprint=fingerprint,
            sizes=None if self.plan is None else _jsonable(self.plan.arguments()),
        )

    def _execute(
        self, flow: FlowGraph, state: FlowDir, executor: Executor, before: InputReads
    ) -> ApplyReport:
        """Run the graph; a failure (or a Ctrl-C) gets a note of the state it leaves."""
        options, device = self.options, self.device.flow
        try:
            return flow.run(executor, options.progress, self.t0, before, options.subscribers)
        except BaseException as error:
            if isinstance(error, Exception):  # not a Ctrl-C: that run is interrupted
                _record_failure(state, error)
            damaged = state.layer_corrupt(error)
            error.add_note(kept_state_note(state.root, state.flow_id, damaged=damaged))
            raise
        finally:
            if device is not None:
                device.trim()

    def _collect(self, executor: Executor) -> ApplyReport:
        """``dst=None``: fn's value per bottom chunk (``_values``), nothing kept on disk."""
        spec, options = self.spec, self.options
        # An expanded bbox may leave the volume: chunks are clipped to it (fn sees real voxels).
        edge = real_region(spec, self.inputs)
        per_level = chunks_per_level(spec, edge)
        flow_id = flow_id_of(self.fn, self.inputs, None, spec)
        if options.dry_run:
            return no_io_report(
                flow_id, spec.bbox, self.t0, dry_run=True, tasks_per_level=per_level, reductions=0
            )
        refuse_if_written(reads_of(spec, self.inputs, None), options.lock_wait)
        values, read = run_values(
            spec, self.run_fn, self.inputs, executor, options.progress, options.subscribers, edge
        )
        needed = needed_input_bytes(spec, self.inputs)
        return dataclasses.replace(
            no_io_report(
                flow_id, spec.bbox, self.t0, dry_run=False, tasks_per_level=per_level, reductions=0
            ),
            bytes_read=read,
            read_amplification=read / needed if needed else 0.0,
            values=values,
        )

    def _executor_size(self) -> int | None:
        """The executor's workers: ``workers``; for a GPU flow without them, enough threads
        for every device's tasks in flight however few the cores (they wait on the GPU)."""
        device = self.device.flow
        if device is None or self.options.workers is not None:
            return self.options.workers
        return max(usable_cores(), device.count * DEVICE_TASKS_IN_FLIGHT)


def _jsonable(sizes: Mapping[str, object]) -> dict[str, Any]:
    """``FlowPlan.arguments()`` as JSON keeps them: each level's tuples as lists.

    >>> _jsonable({"chunk_sizes": [(8, 8)], "skip_intermediates": True})
    {'chunk_sizes': [[8, 8]], 'skip_intermediates': True}
    """
    return {
        k: [list(v) for v in value] if isinstance(value, list) else value
        for k, value in sizes.items()
    }


def _record_failure(state: FlowDir, error: Exception) -> None:
    """Record for ``chunkgraph status`` that the run failed, with its error's first line;
    a record that cannot be written is said in a note, never in place of the error."""
    try:
        state.record_failure(failure_line(error))
    except Exception as unrecorded:
        error.add_note(f"(the failure could not be recorded for `chunkgraph status`: "
                       f"{type(unrecorded).__name__}: {unrecorded})")  # fmt: skip


def failure_line(error: BaseException) -> str:
    """The first line of what failed: the first failed task's own error (under the loops'
    groups; ``TaskError.detail``, which crosses processes), its task, and how many other
    errors there were.

    >>> failure_line(ExceptionGroup("2 task(s) failed", [ValueError("bad\\nmore"), KeyError(1)]))
    'ValueError: bad (and 1 other error)'
    >>> failure_line(TaskError("top-3", detail="OSError: disk full"))
    'OSError: disk full (task top-3)'
    """
    leaf, others = innermost(error)
    if isinstance(leaf, TaskError) and leaf.detail:
        line = f"{(leaf.detail.splitlines() or [''])[0]} (task {leaf.task})"
    else:
        line = (describe(leaf).splitlines() or [""])[0]
    if others:
        line += f" (and {others} other error{'s' if others > 1 else ''})"
    return line


def _about(flow_id: str, fn: Callable[..., Any]) -> dict[str, str]:
    """What a claim on dst says of this flow: its id and its function's name."""
    named = getattr(fn, "func", fn)  # a partial (fn_kwargs): the function it binds
    name = getattr(named, "__qualname__", None) or type(named).__qualname__
    return {"flow": flow_id, "fn": f"{getattr(named, '__module__', '?')}.{name}"}


def reads_of(
    spec: FlowSpec, inputs: Mapping[str, Volume], dst: Volume | None
) -> dict[str, tuple[Volume, Box]]:
    """What the flow reads of each input: its bbox padded by the pads, at the input's
    resolution; not an input that is dst itself (in place: this flow's own claim)."""
    read = spec.bbox.padded(spec.context_pad)
    return {
        name: (vol, scaled(read, spec.scale_of(name)))
        for name, vol in inputs.items()
        if dst is None or not same_storage(vol, dst)
    }


def _retries(options: RunOptions) -> int:
    """The tries the probe may retry: as given, else the flow's default."""
    return DEFAULT_RETRIES if options.retries is None else options.retries


def flow_executor(
    options: RunOptions,
    inputs: Mapping[str, Volume],
    dst: Volume | None,
    fn: Callable[..., Any],
    workers: int | None,
) -> Executor:
    """The executor to run on; outside this process, no memory volumes and an fn that pickles;
    on workers that may not see this machine's files (``ChecksPaths``), paths they reach.

    A kind ("threads", the default, "processes", "sync") takes ``workers``, ``retries``
    (``DEFAULT_RETRIES`` when not given) and ``timeout``; an Executor carries its own
    settings, and one given beside it is refused (never dropped). A ``ClusterSpec`` is
    started here (closed by ``close_resolved``), an address connected to; a dry run plans
    with a stand-in for either (``ClusterStandIn``) and starts or connects to nothing.
    """
    given = options.executor
    retries = options.retries
    if retries is None and (given is None or isinstance(given, str | ClusterSpec)):
        retries = DEFAULT_RETRIES  # a kind, an address, a cluster; an Executor: its own
    if options.dry_run and isinstance(given, ClusterSpec):
        chosen: Executor = given.stand_in()  # a dry run starts no cluster
    elif options.dry_run and (is_scheduler_address(given) or is_dask_client(given)):
        chosen = ClusterStandIn(given)  # nor asks a scheduler anything
    else:
        chosen = resolve_executor(
            given or "threads", workers=workers, retries=retries, timeout=options.timeout
        )
    if chosen.in_process:
        return chosen
    try:
        _check_out_of_process(chosen, options, inputs, dst, fn)
    except BaseException:
        close_resolved(chosen, given)
        raise
    return chosen


def _check_secrets_reach_pool(where: str, volumes: list[Volume]) -> None:
    """A pool's processes get this process's environment but never the secret
    ``storage_options`` (they are not pickled, ``_object_store``): a secret with no
    environment variable here would fail every task there, so it is refused before the run."""
    for v in volumes:
        names = v.storage_options.secret_names()
        if names and v.location.kind == "remote":
            try:
                check_credentials_shipped(v.path, names)
            except ConfigError as err:
                raise ConfigError(f"{where}, {err}", field="executor") from None


def _check_out_of_process(
    chosen: Executor,
    options: RunOptions,
    inputs: Mapping[str, Volume],
    dst: Volume | None,
    fn: Callable[..., Any],
) -> None:
    """ConfigError when ``chosen`` (not in this process) cannot run this flow: memory
    volumes, an fn that does not pickle, paths its workers cannot see."""
    where = f"executor={options.executor!r} runs tasks in other processes"
    local = [n for n, v in inputs.items() if v.location.in_process]
    local += ["dst"] if dst is not None and dst.location.in_process else []
    if local:
        raise ConfigError(
            f"{where} and cannot use memory volumes ({', '.join(local)}): they exist only in "
            "this process; store them with backend='zarr' or use executor='threads'",
            field="executor",
        )
    if options.executor == "processes":
        _check_secrets_reach_pool(where, [*inputs.values(), *([dst] if dst else [])])
    import cloudpickle  # type: ignore[import-untyped]

    try:
        cloudpickle.dumps(fn)
    except Exception as err:  # pickling raises many types (TypeError, PicklingError, ...)
        raise ConfigError(
            f"{where} and must send fn {getattr(fn, '__name__', fn)!r} there, but it cannot be "
            f"pickled: {type(err).__name__}: {err}. Make fn a module-level function (or a "
            "callable object) that holds no locks, open files or connections, or use "
            "executor='threads'",
            field="executor",
        ) from err
    if isinstance(chosen, ChecksPaths):
        # Only what lives on this machine's disk: a URL is the store's to serve.
        named = {f"input {n!r}": v for n, v in inputs.items()}
        named |= {"dst": dst} if dst is not None else {}
        paths = {
            what: str(v.location.local_dir) for what, v in named.items() if v.location.local_dir
        }
        if dst is not None:  # dst=None flows keep nothing on disk
            folder = state_root(options.intermediates, dst).local
            if folder is not None:  # an object store serves every worker alike
                paths["intermediates"] = str(
                    next(p for p in (folder, *folder.parents) if p.exists())
                )
        chosen.check_paths(paths)


def _check_in_place_start(
    state: FlowDir,
    fingerprint: dict[str, str],
    stamp: str | None,
    resume: bool,
    input_name: str,
    dst: Volume,
) -> None:
    """ConfigError when an in-place flow may not start: an interrupted in-place flow has
    rewritten part of dst (its state under ``root``, or under the intermediates the mark in
    dst names), so dst no longer holds the input; only that flow's resume may go on."""
    root = state.root
    conflict = lost_in_place_state(dst) or in_place_conflict(
        root, state.flow_id, fingerprint, stamp, resuming=resume, input_name=input_name
    )
    mark = in_place_mark(dst)
    marked = mark[0] if mark is not None else None
    if conflict is None and marked is not None and not marked.same_place(root):
        # Its state lies elsewhere: no run from here can resume it, whatever its id.
        conflict = in_place_conflict(
            marked, "", fingerprint, stamp, resuming=False, input_name=input_name
        )
        if conflict:
            conflict += f" (that flow keeps its state under intermediates={str(marked)!r})"
    if conflict:
        raise ConfigError(conflict, field="dst")


def _on_executor(
    plan: FlowPlan, spec: FlowSpec, named: Mapping[str, Volume], executor: Executor
) -> FlowPlan:
    """``plan`` as ``executor`` runs it (``for_executor``): where the top tasks go out as
    one contiguous stream per worker process or Dask worker thread (``call_streams``),
    each process's cache is its own, so the halo at each boundary between streams is read
    on both sides, and each process holds its own cache and superchunks."""
    streams = call_streams(executor)
    if streams is None:
        return plan
    threads = streams.threads()
    if isinstance(executor, DaskExecutor):
        workers = len(executor.client.nthreads())
        return for_executor(plan, spec, named, streams=threads, processes=workers, on_cluster=True)
    return for_executor(plan, spec, named, streams=threads, processes=threads)


def _on_device(plan: FlowPlan, more: int, top_bytes: int) -> FlowPlan:
    """``plan`` with the ``more`` superchunks a GPU flow holds in flight (two per device,
    or as many as fit; ``_top_task.superchunks_in_flight``) and the host memory they take."""
    cpu = plan.superchunks_in_flight
    if more <= cpu:
        return plan
    return dataclasses.replace(
        plan, superchunks_in_flight=more, memory_bytes=plan.memory_bytes + (more - cpu) * top_bytes
    )


def _dry_report(
    spec: FlowSpec,
    named: dict[str, Volume],
    dst: Volume,
    state: FlowDir,
    plan: FlowPlan | None,
    t0: float,
) -> ApplyReport:
    """A dry run's report: the estimate, its reads through the cache ``plan`` sizes too."""
    est = estimate_flow(spec, named, dst)
    est = with_cache(est, plan) if plan is not None else est
    return no_io_report(
        state.flow_id,
        spec.bbox,
        t0,
        dry_run=True,
        tasks_per_level=tuple(est.tasks_per_level),
        reductions=est.reductions,
        intermediates=state.location,
        layers=None if spec.skip_intermediates else str(state.layers_dir),
        estimate=est,
        plan=plan,
        write_box=spec.write_box,
    )


def no_io_report(flow_id: str, bbox: Box, t0: float, **fields: Any) -> ApplyReport:
    """A report of a call that read and wrote nothing (a dry run, a finished flow, a
    deferred flow already reduced into this target)."""
    return ApplyReport(
        flow_id=flow_id,
        bytes_read=0,
        bytes_written=0,
        temporary_bytes=0,
        read_amplification=0.0,
        wall_seconds=time.perf_counter() - t0,
        bbox=bbox,
        **fields,
    )


def _finished_report(
    spec: FlowSpec, flow_id: str, finished: Mapping[str, Any], t0: float
) -> ApplyReport:
    """The report of a resumed run whose flow had already finished: nothing was done."""
    return no_io_report(
        flow_id,
        spec.bbox,
        t0,
        dry_run=False,
        tasks_per_level=(0,) * len(spec.levels),
        reductions=0,
        top_tasks_skipped=int(np.prod(spec.top_grid)),
        reductions_skipped=int(finished.get("reductions", 0)),
        finished_before=str(finished.get("finished", "")),
        write_box=spec.write_box,
    )
