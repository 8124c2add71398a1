"""``ApplyReport``: what one ``apply`` (or ``reduce_deferred``) call did, and its summary.

A frozen record filled at the end of a run (``_apply``, ``_deferred_run``) or by a
dry run from ``estimate_flow``; ``summary`` prints it as a few lines, each block from
one small function below, in the order they appear::

    flow <id> over <bbox>            the header
      tasks per level / reductions   _tasks_line
      read ... / would read ...      _work_lines (_estimate_lines for a dry run)
      time on N slots / memory       _breakdown_lines (a run's Breakdown)
      device: ...                    _device_lines
      resumed / deferred / values    _outcome_lines
      plan (automatic): ...          FlowPlan.headline, or .summary after a dry run
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkgraph._util import format_bytes
from chunkgraph.execute._breakdown import Breakdown
from chunkgraph.flow.plan import FlowPlan
from chunkgraph.geometry import Box
from chunkgraph.volume import is_url

if TYPE_CHECKING:
    from chunkgraph.flow.plan import FlowEstimate


NO_GPU_HERE = "no GPU here: the run needs one (or gpu_fallback=True to run on the CPU)"


@dataclass(frozen=True)
class ApplyReport:
    """What one ``apply`` call did (or, for a dry run, would do).

    Attributes:
        flow_id: The flow's id (16 hex digits), from what the arguments mean.
        dry_run: Whether this is a dry run's answer.
        tasks_per_level: Chunks processed at each level, top first.
        reductions: Reduction tasks (one per group of dst chunks).
        bytes_read: Decoded bytes of whole storage chunks fetched from the inputs.
        bytes_written: Bytes written to dst.
        temporary_bytes: Bytes written to temporary layers.
        read_amplification: ``bytes_read`` over the input bytes inside ``bbox`` (1.0:
            every needed chunk read once).
        wall_seconds: How long the call took.
        bbox: The region computed, in dst's voxels (expanded where asked).
        top_tasks_skipped: Top tasks a resumed run found done.
        reductions_skipped: Reductions a resumed run found done.
        intermediates: Where the temporaries are (dry runs: would be; ``defer``: are
            left); None where there are none.
        layers: Where the top-level layers are (would be); None where there are none.
        deferred_layers: Layer paths left for a later pass (``defer`` only).
        estimate: A dry run's ``FlowEstimate`` (its counts come from it); None otherwise.
        finished_before: When a resumed flow had already finished (then nothing ran);
            "" otherwise.
        task_bytes: ``(task name, bytes read, bytes written)`` of each task that ran,
            for run reports; empty for a run on a Dask cluster, whose top-level tasks
            run in batches that return sums, so that the client keeps nothing per task.
        plan: The sizes (chosen, or given), the cache ``apply`` owned, the memory
            budget and the predicted read amplification, with the reasons.
        values: With ``dst=None``, ``fn``'s value per bottom chunk, ``{bottom box:
            value}`` in C order; None otherwise.
        device: Where the levels below the top ran, ``"cpu"`` or ``"gpu"``.
        gpu_fallback: A GPU was asked for and none found, so the CPU ran it.
        bytes_to_device: Bytes copied from host to device, the probe's included.
        bytes_from_device: Bytes copied from device to host.
        device_copies: ``(uploads, downloads)``.
        gpu_missing: A dry run with ``device="gpu"`` on a machine without one: the run
            needs one.
        saturated_voxels: Voxels written at the limits of dst's dtype because ``fn``'s
            value there did not fit (a cast ``cast=`` allowed), in this call.
        input_requests: Object-store GETs the inputs made in the run, the probe's
            included (threads only; 0 otherwise and for inputs not on an object store).
        input_chunks_read: The storage chunks those GETs read: about 1 GET per chunk is
            the floor.
        dst_bounds: dst's bounds when the bbox was expanded past them (only the voxels
            inside were written); None otherwise.
        write_box: The caller's bbox when the tasks tiled it grown (out to dst's storage
            grid, or to a length that splits into tasks; ``bbox`` then is that grown
            region): the only voxels written; None otherwise. ``voxels`` counts it.
        stream_splits: On worker processes or a cluster, how many times a worker that
            ran dry took the back half of another's stream of top tasks (``_batches``):
            each split reads the halo it cuts on both sides, beyond the plan's prediction.
        breakdown: Where the run's time and memory went (compute, redundant compute,
            decode, waits, encode, idle; peak RSS), see ``chunkgraph.flow.Breakdown``;
            None for a dry run, a flow finished before, and ``dst=None``.
    """

    flow_id: str
    dry_run: bool
    tasks_per_level: tuple[int, ...]
    reductions: int
    bytes_read: int
    bytes_written: int
    temporary_bytes: int
    read_amplification: float
    wall_seconds: float
    bbox: Box
    top_tasks_skipped: int = 0
    reductions_skipped: int = 0
    intermediates: str | None = None
    # where the top-level layers are (would be): under intermediates, on local scratch,
    # or in an object store (state's ``_layout.layers_place``); None where there are none
    layers: str | None = None
    deferred_layers: tuple[str, ...] = ()
    estimate: FlowEstimate | None = None
    finished_before: str = ""
    # (task name, bytes read, bytes written) of each task that ran, for run reports; a
    # reduction reads temporary layers. Under threads a task's reads are counted on the
    # volumes it shares, so tasks in flight together may count each other's.
    task_bytes: tuple[tuple[str, int, int], ...] = ()
    plan: FlowPlan | None = None
    # dst=None: fn's return value per bottom chunk, {bottom box: value} in C order.
    values: Mapping[Box, Any] | None = None
    # Where the levels below the top ran ("cpu" or "gpu", see _device); gpu_fallback: a
    # GPU was asked for, none was found, the CPU ran it. Bytes copied to and from the
    # device (the probe's included) and how many copies that took.
    device: str = "cpu"
    gpu_fallback: bool = False
    bytes_to_device: int = 0
    bytes_from_device: int = 0
    device_copies: tuple[int, int] = (0, 0)
    # A dry run with device="gpu" on a machine without one: answered, but the run needs one.
    gpu_missing: bool = False
    saturated_voxels: int = 0
    input_requests: int = 0
    input_chunks_read: int = 0
    # dst's bounds, when the bbox was expanded past them: the summary says which voxels
    # were written (only those inside)
    dst_bounds: Box | None = None
    # Where the tasks' time and memory went (_breakdown); None where no task graph ran
    breakdown: Breakdown | None = None
    # The caller's bbox, when the tasks tiled it grown: what was written
    write_box: Box | None = None
    stream_splits: int = 0

    @property
    def written_box(self) -> Box:
        """The region the caller asked for and the run wrote: ``write_box`` when the tasks
        tiled it grown, else ``bbox`` inside dst (an expanded bbox is written up to dst's
        edge only). ``bbox`` is the region computed, which reads are measured over."""
        if self.write_box is not None:
            return self.write_box
        if self.dst_bounds is not None:
            return self.bbox.intersection(self.dst_bounds)
        return self.bbox

    @property
    def voxels(self) -> int:
        """The work's size: the voxels of ``written_box`` (``bbox.size`` is those computed)."""
        return self.written_box.size

    def summary(self, *, plan: bool = True) -> str:
        """A few human-readable lines.

        An automatic plan is one line after a run and, with its reasons, several after a
        dry run (which is for looking at it).

        Args:
            plan: Include the plan; False leaves it out (the command line's ``--quiet``).
        """
        lines = [
            f"flow {self.flow_id} over {self.bbox}{_inside_dst(self)}"
            f"{' (dry run)' if self.dry_run else ''}",
            _tasks_line(self),
            *_work_lines(self),
            *_breakdown_lines(self.breakdown),
            *_device_lines(self),
            *_outcome_lines(self),
        ]
        # The plan when it was chosen here; given sizes' read model stays in
        # ``report.plan`` (its budget line depends on the machine).
        if plan and self.plan is not None and self.plan.automatic:
            told = self.plan.summary() if self.dry_run else self.plan.headline()
            lines += ["  " + line for line in told.splitlines()]
        return "\n".join(lines)


# --- the summary's lines, in the order it prints them --------------------------------------


def _inside_dst(r: ApplyReport) -> str:
    """For a bbox expanded past dst's edge (to whole top chunks), or one the tasks tiled
    grown (out to dst's grid, or to a length that splits into tasks): the part written,
    and its voxels beside those computed."""
    counts = f"{r.voxels:,} voxels written of {r.bbox.size:,} computed"
    if r.write_box is not None:
        return f" (the bbox grown so that the tasks tile it; {r.write_box} written, {counts})"
    if r.dst_bounds is None or r.dst_bounds.contains(r.bbox):
        return ""
    return f" (whole top chunks; dst's {r.written_box} written, {counts})"


def _tasks_line(r: ApplyReport) -> str:
    """Tasks per level and reductions (a deferred flow's reduction has no top-level task)."""
    if r.tasks_per_level or r.dry_run:
        levels = ", ".join(str(n) for n in r.tasks_per_level)
        return f"  tasks per level: [{levels}]; reductions: {r.reductions}"
    return f"  reductions of the deferred layers: {r.reductions}"


def _work_lines(r: ApplyReport) -> list[str]:
    """What was read and written: nothing (finished before), the estimate, or the counts."""
    if r.finished_before:
        return [f"  already finished at {r.finished_before}: nothing to do"]
    if r.estimate is not None:
        return _estimate_lines(r.estimate, r.intermediates, r.layers)
    what = "" if r.tasks_per_level else " of layers"
    lines = [
        f"  read {format_bytes(r.bytes_read)}{what} (amplification "
        f"{r.read_amplification:.2f}), wrote {format_bytes(r.bytes_written)} "
        f"(+{format_bytes(r.temporary_bytes)} temporary) in {r.wall_seconds:.2f} s"
    ]
    if r.stream_splits:
        lines.append(
            f"  {r.stream_splits} stream split(s): a worker that ran dry took the back half "
            "of another's top tasks, so the halo each split cuts was read on both sides (the "
            "prediction counts only the streams' first cuts)"
        )
    if r.input_requests and r.input_chunks_read:
        per_chunk = r.input_requests / r.input_chunks_read
        lines.append(
            f"  object store: {r.input_requests} requests for {r.input_chunks_read} input "
            f"chunks ({per_chunk:.2f} requests per input chunk)"
        )
    return lines


def _breakdown_lines(b: Breakdown | None) -> list[str]:
    """The time terms as shares of the slots' time, and the peak memory (what the plan
    allowed is the plan's line, or ``chunkgraph report``'s table)."""
    return [] if b is None else ["  " + b.line(), "  " + b.memory_line(planned=False)]


def _estimate_lines(
    e: FlowEstimate, intermediates: str | None, layers: str | None = None
) -> list[str]:
    """A dry run's figures: reads (through the chunk cache when it saves any), writes, memory."""
    reads = format_bytes(e.bytes_to_read)
    if e.expected_bytes_to_read is not None and e.expected_bytes_to_read < e.bytes_to_read:
        reads = (
            f"{format_bytes(e.expected_bytes_to_read)} through the chunk cache "
            f"({reads} without one)"
        )
    lines = [
        f"  would read {reads}, write {format_bytes(e.dst_bytes)} to dst "
        f"(+{format_bytes(e.temporary_bytes)} temporary); one top-level task needs "
        f"{format_bytes(e.top_task_memory_bytes)}"
    ]
    if e.temporary_bytes:
        lines.append(_temporaries_line(e.temporary_bytes, intermediates, layers))
    return lines


def _temporaries_line(size: int, intermediates: str | None, layers: str | None) -> str:
    """Where the temporary layers go and where the state is, when those differ.

    >>> _temporaries_line(2**30, "s3://b/.o.chunkgraph/f", "/tmp/chunkgraph-layers/9/f/layers")
    '  temporaries: 1.0 GiB on local scratch /tmp/chunkgraph-layers/9/f/layers; state in s3://b/.o.chunkgraph/f'
    """
    if layers is None or intermediates is None or layers.startswith(f"{intermediates}/"):
        return f"  temporaries under {intermediates}"
    place = "in the object store at" if is_url(layers) else "on local scratch"
    return f"  temporaries: {format_bytes(size)} {place} {layers}; state in {intermediates}"


def _device_lines(r: ApplyReport) -> list[str]:
    """Where the levels below the top ran, when it was not plainly the CPU, and the copies."""
    if r.gpu_fallback:
        return ["  device: cpu (gpu_fallback: no GPU was found)"]
    if r.gpu_missing:
        return [f"  device: {r.device} ({NO_GPU_HERE})"]
    if r.device == "cpu":
        return []
    if r.dry_run or r.finished_before:
        return [f"  device: {r.device}"]
    up, down = r.device_copies
    return [
        f"  device: {r.device}; copied {format_bytes(r.bytes_to_device)} to it "
        f"({up} uploads) and {format_bytes(r.bytes_from_device)} back ({down} downloads)"
    ]


def _outcome_lines(r: ApplyReport) -> list[str]:
    """Resumed work, deferred layers, collected values and saturated voxels, where any."""
    lines = []
    if r.top_tasks_skipped or r.reductions_skipped:
        lines.append(
            f"  resumed: skipped {r.top_tasks_skipped} top-level tasks and "
            f"{r.reductions_skipped} reductions already done"
        )
    if r.deferred_layers:
        lines.append(f"  deferred layers: {', '.join(r.deferred_layers)}")
    if r.values is not None:
        lines.append(f"  collected {len(r.values)} values of fn (no dst): report.values")
    if r.saturated_voxels:
        lines.append(
            f"  saturated: {r.saturated_voxels} voxels written at the limits of dst's "
            "dtype (values that did not fit it)"
        )
    return lines
