"""``apply``: run a subchunkable flow over a volume and say what it did.

Pipeline of one call, each step in its own module::

    RunOptions.of (_options) ──> plan sizes (_auto_sizes) ──> validate_flow (_spec)
        ──> FlowRun(...).run() (_flow_run: lock, resume, probe, run, record, discard)

    Graph (_flow_graph):
            top[i] (one per top-level chunk, C order)  ──>  reduce[r] (one per reduction box,
            read inputs once over chunk + all pads          after the top tasks meeting it)
            levels below in memory (_subchunk)              weighted sum of layers -> dst
            write unweighted output -> layer(i parity)

``dst=None`` is a branch of the same pipeline: the values are collected
(``_values``) and nothing is kept on disk.

State on disk (``FlowDir``, ``_flow_dir``), under ``<intermediates>/<flow_id>/``
(``intermediates`` defaults to ``.<dst name>.chunkgraph`` beside a file-backed
dst, so a rerun finds it): ``layers/layer_<k>.zarr`` (the checkerboard,
``_checkerboard``) and ``markers/`` (done markers, ``_markers``). A successful
run deletes it, except with ``defer``, whose layers are the result. A run
without ``resume=True`` starts from a clean flow directory.

Locality. Top-level tasks enter the graph in C order of the top grid and the
executor's priorities keep that order among equals, so consecutive tasks are
neighbours and share halo storage chunks: with a chunk cache on the inputs
(``volume.open(..., cache_bytes=...)``) a halo read by one task is still
cached when its neighbour needs it (``_top_task`` orders the reads so that an
LRU cache sees one sweep; the cache apply owns keeps each shared chunk until its
last reader, ``_reader_counts``). ``ApplyReport.read_amplification`` measures the
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

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError
from chunkgraph._util import format_bytes, usable_cores
from chunkgraph.flow.plan import (
    DEFAULT_CAST,
    FlowPlan,
    FlowSpec,
    ReadAmplificationWarning,
    RunOptions,
    amplification_warning,
    bbox_in_voxels,
    check_optional_bool,
    normalize_inputs,
    plan_automatic,
    plan_given,
    reduction_chunk,
    resolve_memory_limit,
    validate_flow,
    wants_auto_sizes,
    with_fn_kwargs,
)
from chunkgraph.flow.run import ApplyReport, DeviceUse, FlowRun, limit_calls, resolve_device
from chunkgraph.flow.state import earlier_sizes, flow_id_of, flow_id_parts, reach, state_root
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

if TYPE_CHECKING:
    from chunkgraph.execute import Executor, ExecutorKind, Subscriber


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
    retries: int | None = None,
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
    run: RunOptions | None = None,
) -> ApplyReport:
    """Apply ``fn`` to ``inputs`` chunk by chunk, writing ``dst``.

    ``chunk_sizes`` omitted (``"auto"``): the flow plans the levels and a chunk cache
    from the pads, the storage chunks, the cores and ``memory_limit``; ``report.plan``
    says what it chose and why. The run options (``executor`` to ``gpu_fallback``,
    with ``memory_limit`` and ``intermediates``) are checked once, by ``RunOptions.of``.
    Pads and blend modes are one value for all levels or one per level: a tuple is per
    axis, a list is per level (top first). The page on the apply flow (``docs/flow.md``)
    shows each rule at work.

    Args:
        fn: The function called at the bottom level, on arrays covering its chunk plus
            twice the crop and blend pads; it returns that shape or the cropped one. A
            single Volume input is passed positionally, a mapping of inputs as keyword
            arrays; a parameter named ``box`` also gets the ``Box`` (global voxels) the
            arrays cover.
        inputs: A Volume, or ``{name: Volume}`` (``{}``: ``fn`` is a generator, given
            only ``box``). An input at another ``resolution`` is read over the same
            physical box at its own resolution.
        dst: The Volume written, whose voxels are the flow's grid (chunks, pads and
            ``bbox`` count them). None writes nothing and collects ``fn``'s value per
            bottom chunk into ``report.values``; ``chunk_sizes`` must then be given,
            no level may blend and only the bottom may crop.
        fn_kwargs: More keyword arguments for ``fn`` (not volumes); part of the flow
            id, so other values run again and the same ones resume.
        fn_resources: ``{name: count}`` limits on calls of ``fn`` running at once, per
            resource name and process (``{"gpu": 1}``: one at a time); not part of
            the flow id.
        chunk_sizes: ``"auto"`` (the default: planned), or one chunk shape per level,
            top first; each level's chunk must divide the padded chunk above it and
            the top chunk the bbox (the divisibility rule).
        crop_pads: Voxels of context ``fn`` reads and the flow drops, per side: an int,
            a tuple per axis, or a list per level.
        blend_pads: Voxels by which neighbouring chunks overlap and are blended, per
            side, in the same forms as ``crop_pads``.
        blend_modes: How overlaps combine: ``"linear"``, ``"quadratic"`` (the default),
            ``"bump"``, ``"max"`` (labels), or ``"defer"`` (top level only: the layers
            are kept for ``reduce_deferred``); one value or a list per level.
        bbox: The region to compute, a Box in ``bbox_units``; None: all of dst (or of
            the first input when dst is None).
        bbox_units: ``"voxels"`` (dst's voxels, the default) or ``"physical"`` (dst's
            resolution units; the box must fall on dst's voxel grid).
        auto_divisibility: Keep the bottom chunk size, shrink each upper one to the
            nearest size the divisibility rule allows (the given sizes are upper
            bounds), and grow the bbox's end to whole top chunks.
        expand_bbox: True grows the bbox's end to whole top chunks (reads past an
            input give its fill value, writes are clipped to dst); ``"snap"`` also moves
            its start down onto the top grid from dst's corner; False (the default)
            refuses a bbox the top chunk does not divide.
        max_reduction_chunk_size: An upper bound on the region one reduction task
            writes, rounded down to whole dst chunks; None: the flow chooses.
        intermediates: Where the temporary layers and markers go; None: beside a
            file-backed dst (``.<dst name>.chunkgraph/<flow id>/``), the system's
            temporary folder for a memory dst. A folder given is never deleted.
        skip_intermediates: True writes the top level straight to dst (refused where
            chunks overlap or crop); False always goes through the layers; None (the
            default) writes directly wherever nothing overlaps.
        memory_limit: Bytes the flow may hold at once, which automatic sizes plan for;
            None: half of the memory available, rounded down to a power of two.
        executor: An executor kind (``"threads"``, ``"adaptive"``, ``"processes"``,
            ``"sync"``), a Dask scheduler address or ``distributed.Client``, or an
            Executor (which carries its own settings); None: threads.
        workers: Cores the flow plans for: the executor's size, how many top tasks
            run at once and the threads of the levels below; None: the usable cores.
        retries: Tries after the first of a failed top task or reduction; None: 2 for
            an executor kind, an Executor's own (a value beside one is a ConfigError).
        timeout: Seconds one try of a top task or reduction may run before it fails
            (and is retried); None: no limit.
        resume: Skip the top tasks and reductions a previous run of the same flow
            (same flow id) finished; refused with ``dst=None``.
        lock_wait: Seconds to wait for another flow writing what this one reads or
            writes; 0 (the default) refuses at once with ``FlowLockedError``.
        probe: Call ``fn`` once on the first bottom chunk before anything is written,
            so a wrong shape, channel count or dtype fails at once; False skips it.
        progress: Show a progress bar on the terminal.
        dry_run: Plan and estimate only: nothing is read, written or created; the
            report says what a run would do.
        subscribers: Callables that receive every ``Event`` of the run.
        device: ``"cpu"`` (numpy arrays) or ``"gpu"`` (``fn`` gets device arrays, CuPy);
            a GPU asked for and not found is a ConfigError.
        gpu_fallback: With ``device="gpu"``, run on the CPU where no GPU is found
            (the report says so) instead of refusing.
        cast: Which casts of ``fn``'s dtype into dst's are allowed, with numpy's
            names: ``"safe"`` (the default; a float into a narrower float too),
            ``"same_kind"`` or ``"unsafe"``.
        run: The run options (``executor`` to ``gpu_fallback``, ``memory_limit``,
            ``intermediates``) as one ``RunOptions``; a run keyword given beside it must
            agree with it or be left at its default, else a ConfigError naming both.

    Returns:
        An ``ApplyReport``: the flow id, tasks per level, bytes read and written, the
            plan, and ``values`` when dst is None.

    Raises:
        ConfigError: Before anything is written, when the configuration is invalid
            (its ``field`` names the parameter).
        FlowLockedError: When another flow holds what this one reads or writes.
        ExceptionGroup: Of ``TaskError``, when ``fn`` fails.
    """
    t0 = time.perf_counter()
    options = RunOptions.of(
        run=run, executor=executor, workers=workers, retries=retries, timeout=timeout,
        resume=resume, lock_wait=lock_wait, probe=probe, progress=progress, dry_run=dry_run,
        subscribers=subscribers, memory_limit=memory_limit, intermediates=intermediates,
        device=device, gpu_fallback=gpu_fallback,
    )  # fmt: skip
    check_optional_bool("skip_intermediates", skip_intermediates)
    on = DeviceUse.of(options)  # looks for the GPU asked for: refused here when none
    named = normalize_inputs(inputs)
    fn = with_fn_kwargs(fn, fn_kwargs, named, isinstance(inputs, Volume))
    # dst's voxels are the flow's grid (without dst, the first input stands in, as in _spec).
    grid = dst if dst is not None else next(iter(named.values()), None)
    shape = FlowShape(
        chunk_sizes=chunk_sizes, crop_pads=crop_pads, blend_pads=blend_pads,
        blend_modes=blend_modes, bbox=bbox_in_voxels(bbox, bbox_units, grid),
        auto_divisibility=auto_divisibility, expand_bbox=expand_bbox, cast=cast,
        max_reduction_chunk_size=max_reduction_chunk_size, skip_intermediates=skip_intermediates,
    )  # fmt: skip
    cores = options.workers or usable_cores()
    if dst is None:
        spec, plan, limit = _values_spec(fn, inputs, options, on, shape)
    else:
        spec, plan, limit = _dst_spec(fn, inputs, named, dst, options, shape, cores)
        if options.resume and options.memory_limit is None and wants_auto_sizes(chunk_sizes):
            # The default budget may have moved since the run this one resumes (_resume).
            earlier = _earlier_plan(fn, inputs, named, dst, options, shape, cores, limit, spec)
            spec, plan = earlier or (spec, plan)
    # What runs; ``fn`` itself names the flow (a concurrency limit changes no result).
    run_fn = limit_calls(fn, fn_resources)
    flow = FlowRun(spec, plan, fn, run_fn, named, dst, options, on, cores=cores,
                   memory_limit=limit, t0=t0)  # fmt: skip
    return flow.run()


@dataclass(frozen=True)
class FlowShape:
    """apply's arguments that shape the flow, as given (``bbox`` in the grid's voxels):
    the levels' sizes, the bbox, the reductions, the cast; ``validate_flow`` checks them.
    ``skip_intermediates`` None: decided by the plan of automatic sizes (else False)."""

    chunk_sizes: Any
    crop_pads: Any
    blend_pads: Any
    blend_modes: Any
    bbox: Box | None
    auto_divisibility: bool
    expand_bbox: bool | str
    cast: str
    max_reduction_chunk_size: Any
    skip_intermediates: bool | None
    # The region automatic sizes tile for a bbox off dst's grid (writes clipped to bbox).
    grown_bbox: Box | None = None

    def validate(
        self, fn: Callable[..., Any], inputs: Volume | Mapping[str, Volume], dst: Volume | None
    ) -> FlowSpec:
        """The flow's ``FlowSpec`` (``validate_flow``), or ``ConfigError`` naming the argument."""
        return validate_flow(
            fn,
            inputs,
            dst,
            chunk_sizes=self.chunk_sizes,
            crop_pads=self.crop_pads,
            blend_pads=self.blend_pads,
            blend_modes=self.blend_modes,
            bbox=self.bbox,
            auto_divisibility=self.auto_divisibility,
            expand_bbox=self.expand_bbox,
            max_reduction_chunk_size=self.max_reduction_chunk_size,
            skip_intermediates=bool(self.skip_intermediates),
            cast=self.cast,
            grown_bbox=self.grown_bbox,
        )


def _dst_spec(
    fn: Callable[..., Any],
    inputs: Volume | Mapping[str, Volume],
    named: dict[str, Volume],
    dst: Volume,
    options: RunOptions,
    shape: FlowShape,
    cores: int,
) -> tuple[FlowSpec, FlowPlan, int]:
    """The spec of a flow into ``dst``, its plan (automatic sizes, or given sizes' read
    model) and the memory budget in bytes."""
    limit, source = resolve_memory_limit(options.memory_limit)
    plan, shape = _planned(inputs, dst, shape, cores, limit, source, options.probe)
    spec = shape.validate(fn, inputs, dst)
    return spec, plan or _given_plan(spec, named, dst, cores, limit, source, options.probe), limit


def _earlier_plan(
    fn: Callable[..., Any],
    inputs: Volume | Mapping[str, Volume],
    named: dict[str, Volume],
    dst: Volume,
    options: RunOptions,
    shape: FlowShape,
    cores: int,
    limit: int,
    planned: FlowSpec,
) -> tuple[FlowSpec, FlowPlan] | None:
    """The spec and plan of the unfinished flow of this very work that an earlier run
    planned with other automatic sizes (``chunkgraph.flow.state._resume``): its sizes,
    checked by giving its flow id again, its plan sized by today's ``limit``; None when
    there is none (or this flow, ``planned`` now, has state of its own). Sizes that need
    more than ``limit`` are not reused: a warning says so, with the memory_limit that would."""
    root = state_root(options.intermediates, dst)
    reach(root)  # state in an object store: reached as dst is
    fingerprint = flow_id_parts(fn, named, dst, planned)
    for flow_id, sizes in earlier_sizes(root, flow_id_of(fn, named, dst, planned), fingerprint):
        if not _keeps_the_callers_choices(sizes, planned, shape):
            continue  # other pads (or writes) than asked for: other work, same fn and data
        # The grown bbox depends on the bbox and the layouts only: the earlier plan's too.
        grown = planned.bbox if planned.write_box is not None else None
        try:
            spec = _with_sizes(dataclasses.replace(shape, grown_bbox=grown), sizes).validate(
                fn, inputs, dst
            )
        except (ValueError, TypeError, KeyError):  # a record this code cannot use
            continue
        if flow_id_of(fn, named, dst, spec) != flow_id:
            continue  # recorded sizes that no longer give that flow: not the same work
        source = f"default; the sizes of unfinished flow {flow_id}, resumed"
        plan = plan_given(spec, named, dst, cores=cores, memory_limit=limit,
                          memory_limit_source=source, probe=options.probe)  # fmt: skip
        if plan.memory_bytes > limit:
            given = _with_sizes(shape, sizes)
            warnings.warn(
                f"resume: flow {flow_id} is this work, left unfinished with automatic sizes "
                f"planned under another memory_limit; its sizes need "
                f"{format_bytes(plan.memory_bytes)}, more than the default memory_limit now "
                f"({format_bytes(limit)}: half the memory available, rounded down to a power "
                f"of two), so it is not resumed. To resume it anyway, give its sizes and a "
                f"budget that holds them: chunk_sizes={given.chunk_sizes}, crop_pads="
                f"{given.crop_pads}, blend_pads={given.blend_pads}, skip_intermediates="
                f"{given.skip_intermediates}, memory_limit={plan.memory_bytes}",
                UserWarning,
                stacklevel=3,
            )
            return None
        return spec, plan
    return None


def _keeps_the_callers_choices(
    sizes: Mapping[str, Any], planned: FlowSpec, shape: FlowShape
) -> bool:
    """Whether recorded automatic sizes hold what the caller chose now: automatic sizes
    put the caller's pads on the bottom level and none above it (``plan_automatic``), so
    the recorded bottom pads must be today's plan's and the levels above unpadded; and a
    ``skip_intermediates`` the caller gave must be the recorded one. The flow id check
    after cannot see this: it is computed from the recorded sizes themselves."""
    bottom = planned.levels[-1]
    try:
        crops = [tuple(p) for p in sizes["crop_pads"]]
        blends = [tuple(p) for p in sizes["blend_pads"]]
        skip = bool(sizes["skip_intermediates"])
    except (KeyError, TypeError):
        return False
    if not crops or not blends or crops[-1] != tuple(bottom.crop):
        return False
    if blends[-1] != tuple(bottom.blend):
        return False
    if any(any(p) for p in (*crops[:-1], *blends[:-1])):
        return False
    return shape.skip_intermediates is None or shape.skip_intermediates == skip


def _with_sizes(shape: FlowShape, sizes: Mapping[str, Any]) -> FlowShape:
    """``shape`` with the sizes a flow recorded (``FlowPlan.arguments()`` in JSON), as
    ``_planned`` gives automatic ones."""
    levels = [tuple(c) for c in sizes["chunk_sizes"]]
    modes = shape.blend_modes
    if isinstance(modes, list) and len(modes) == 1:
        modes = modes * len(levels)
    return dataclasses.replace(
        shape,
        chunk_sizes=levels,
        crop_pads=[tuple(p) for p in sizes["crop_pads"]],
        blend_pads=[tuple(p) for p in sizes["blend_pads"]],
        blend_modes=modes,
        skip_intermediates=bool(sizes["skip_intermediates"]),
        expand_bbox=shape.expand_bbox or bool(sizes.get("expand_bbox", False)),
    )


def _values_spec(
    fn: Callable[..., Any],
    inputs: Volume | Mapping[str, Volume],
    options: RunOptions,
    on: DeviceUse,
    shape: FlowShape,
) -> tuple[FlowSpec, None, None]:
    """The spec of a flow without dst (fn's values collected, ``_values``): given sizes,
    no state to resume, on the CPU."""
    if on.flow is not None or on.missing:
        raise ConfigError(
            "device='gpu' needs a dst: a flow without dst collects fn's values on the "
            "CPU; give a dst volume, or use device='cpu'",
            field="device",
        )
    if wants_auto_sizes(shape.chunk_sizes):
        raise ConfigError(
            "dst=None needs chunk_sizes: automatic sizes are planned from dst's storage "
            "chunks; give the chunks fn should see, e.g. chunk_sizes=[(256, 256, 256), (64,) * 3]",
            field="chunk_sizes",
        )
    if options.resume:
        raise ConfigError(
            "resume=True with dst=None: a flow without dst keeps no state (its values come "
            "back in the report), so there is nothing to resume; run it without resume",
            field="resume",
        )
    # No intermediates without a dst: skip_intermediates has nothing to skip.
    values = dataclasses.replace(shape, skip_intermediates=None)
    spec = values.validate(fn, inputs, None)  # blend pads refused: _check_values_levels
    # No reduction without a dst, but the option is checked as on every path.
    top = spec.levels[0].chunk
    reduction_chunk(shape.max_reduction_chunk_size, top, top)
    return spec, None, None  # no plan, no memory budget: nothing is kept


def _planned(
    inputs: Volume | Mapping[str, Volume],
    dst: Volume,
    shape: FlowShape,
    cores: int,
    limit: int,
    source: str,
    probe: bool = True,
) -> tuple[FlowPlan | None, FlowShape]:
    """Automatic sizes when ``chunk_sizes`` asks for them: the plan, and the shape with its
    sizes; given sizes: no plan yet (``_given_plan``, once validated), and the shape as
    given (``skip_intermediates`` None: False). ``probe``: apply's (the plan keeps the
    probe's region for the first task)."""
    if not wants_auto_sizes(shape.chunk_sizes):
        return None, shape
    plan = plan_automatic(
        inputs,
        dst,
        crop_pads=shape.crop_pads,
        blend_pads=shape.blend_pads,
        bbox=shape.bbox,
        cores=cores,
        memory_limit=limit,
        memory_limit_source=source,
        skip_intermediates=shape.skip_intermediates,
        # Growing writes nothing more only where the flow writes the clipped region itself:
        # not where the caller grows the bbox, nor into layers a later reduction writes.
        grow_off_grid=not shape.expand_bbox and not _defers(shape.blend_modes),
        probe=probe,
    )
    modes = shape.blend_modes
    if isinstance(modes, list) and len(modes) == 1:
        modes = modes * len(plan.chunk_sizes)
    return plan, dataclasses.replace(
        shape,
        chunk_sizes=list(plan.chunk_sizes),
        crop_pads=list(plan.crop_pads),
        blend_pads=list(plan.blend_pads),
        blend_modes=modes,
        skip_intermediates=plan.direct_writes,
        expand_bbox=shape.expand_bbox or plan.expand_bbox,
        grown_bbox=plan.grown_bbox,
    )


def _defers(modes: object) -> bool:
    """Whether ``blend_modes`` asks for ``"defer"`` (as one value or in a list)."""
    return modes == "defer" or (isinstance(modes, list | tuple) and "defer" in modes)


def _given_plan(
    spec: FlowSpec,
    named: dict[str, Volume],
    dst: Volume,
    cores: int,
    limit: int,
    source: str,
    probe: bool = True,
) -> FlowPlan:
    """The plan of given sizes (its read model, the budget), warning of read amplification."""
    plan = plan_given(spec, named, dst, cores=cores, memory_limit=limit,
                      memory_limit_source=source, probe=probe)  # fmt: skip
    message = amplification_warning(plan, named)
    if message:
        warnings.warn(message, ReadAmplificationWarning, stacklevel=4)
    return plan


def check_device(device: str) -> None:
    """Refuse ``device`` as ``apply(device=...)`` would, before anything is made.

    For a caller that must know before it makes anything (``chunkgraph run`` creates
    its output after this).

    Args:
        device: ``"cpu"`` (always here) or ``"gpu"``, as ``apply`` takes it.

    Raises:
        ConfigError: With ``field="device"``, for ``"gpu"`` when no GPU is found here.
    """
    resolve_device(device, False)
