"""What a flow is, before it runs: the validated spec and the numbers derived from it.

Policy. Pure rules over a flow's arguments and its volumes' metadata: no I/O of
chunks, no threads, no state. ``_spec`` validates a flow into a ``FlowSpec`` (with
``_args``, ``_divisibility``, ``_resolution``, ``_mergeable``, ``_blend``'s modes and ``_cast``'s
rules); ``_auto_sizes`` chooses sizes that were not given (with ``_read_model``'s
read costs; ``_pending_reads`` predicts a resumed run's); ``_estimate`` counts what a
run will cost; ``_options`` checks the run's options (``RunOptions``); ``_fn_kwargs``
binds and checks fn's arguments.

The run (``chunkgraph.flow.run``) and the faces above import these names from
here; nothing here imports the run or the flow's state.
"""

from __future__ import annotations

from chunkgraph.flow.plan._auto_sizes import (
    FlowPlan,
    ReadAmplificationWarning,
    amplification_warning,
    for_executor,
    job_memory_refusal,
    owned_inputs,
    plan_automatic,
    plan_given,
    resolve_memory_limit,
)
from chunkgraph.flow.plan._blend import ALL_MODES, WEIGHTED_MODES, axis_weights
from chunkgraph.flow.plan._cast import (
    CAST_RULES,
    DEFAULT_CAST,
    CastRule,
    SaturationWarning,
    can_saturate,
    cast_allowed,
    cast_refusal,
    conversion_refusal,
    count_saturated,
    warn_if_saturated,
)
from chunkgraph.flow.plan._estimate import (
    FlowEstimate,
    estimate_flow,
    needed_input_bytes,
    top_task_memory,
    with_cache,
)
from chunkgraph.flow.plan._fn_kwargs import with_fn_kwargs
from chunkgraph.flow.plan._mergeable import check_edges_mergeable, unmergeable
from chunkgraph.flow.plan._options import (
    DEFAULT_RETRIES,
    DeviceChoice,
    RunOptions,
    check_optional_bool,
)
from chunkgraph.flow.plan._pending_reads import resumed_plan
from chunkgraph.flow.plan._read_model import (
    DEVICE_TASKS_IN_FLIGHT,
    bottom_chunks_per_top,
    io_pool_threads,
    superchunks_in_flight,
    sweep_axis,
)
from chunkgraph.flow.plan._resolution import bbox_in_voxels, resolution_hint, scaled, step_of
from chunkgraph.flow.plan._spec import (
    BOX_KEYWORD,
    BlendMode,
    FlowSpec,
    LevelSpec,
    check_dst,
    layer_dtype,
    normalize_inputs,
    reduction_chunk,
    same_storage,
    validate_flow,
    wants_auto_sizes,
)

__all__ = [
    "ALL_MODES",
    "BOX_KEYWORD",
    "CAST_RULES",
    "DEFAULT_CAST",
    "DEFAULT_RETRIES",
    "DEVICE_TASKS_IN_FLIGHT",
    "WEIGHTED_MODES",
    "BlendMode",
    "CastRule",
    "DeviceChoice",
    "FlowEstimate",
    "FlowPlan",
    "FlowSpec",
    "LevelSpec",
    "ReadAmplificationWarning",
    "RunOptions",
    "SaturationWarning",
    "amplification_warning",
    "axis_weights",
    "bbox_in_voxels",
    "bottom_chunks_per_top",
    "can_saturate",
    "cast_allowed",
    "cast_refusal",
    "check_dst",
    "check_edges_mergeable",
    "check_optional_bool",
    "conversion_refusal",
    "count_saturated",
    "estimate_flow",
    "for_executor",
    "io_pool_threads",
    "job_memory_refusal",
    "layer_dtype",
    "needed_input_bytes",
    "normalize_inputs",
    "owned_inputs",
    "plan_automatic",
    "plan_given",
    "reduction_chunk",
    "resolution_hint",
    "resolve_memory_limit",
    "resumed_plan",
    "same_storage",
    "scaled",
    "step_of",
    "superchunks_in_flight",
    "sweep_axis",
    "top_task_memory",
    "unmergeable",
    "validate_flow",
    "wants_auto_sizes",
    "warn_if_saturated",
    "with_cache",
    "with_fn_kwargs",
]
