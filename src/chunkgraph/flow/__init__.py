"""The subchunkable apply flow: ``apply(fn, inputs, dst, chunk_sizes=...)`` over volumes.

Applies a function to a huge chunked volume with context padding (crop) and
blended overlaps, recursively subchunked so that reads are not amplified,
writes never race, memory stays bounded and the driver enumerates only the
top level; resumable after a crash. ``reduce_deferred`` finishes a flow applied
with ``blend_modes="defer"`` later, into a dst. ``downsample`` (pyramid levels) and
``transfer`` (copy, rechunk, convert) are apply flows with a fixed function
(``chunkgraph.jobs``, re-exported here on first use).
``RunOptions`` holds how a flow runs (executor, workers, resume, ...) as one value that
each of them takes as ``run=``. ``chunkgraph.volume.apply`` is the same function.
Design notes: ``flow/README.md``.

Layout: this face and ``_apply`` sit on ``run`` (the engine), which sits on ``plan``
(the validated flow, pure) and ``state`` (what a flow keeps between runs); plan and
state never import each other.
"""

from typing import Any

from chunkgraph._errors import (
    FlowLockedError,
    FlowOutputError,
    RunEndedError,
)
from chunkgraph.flow._apply import apply, check_device
from chunkgraph.flow.plan import (
    DeviceChoice,
    FlowEstimate,
    FlowPlan,
    ReadAmplificationWarning,
    RunOptions,
    SaturationWarning,
)
from chunkgraph.flow.run import ApplyReport, Breakdown, ProbeFailure, reduce_deferred
from chunkgraph.flow.state import claimed, refuse_if_written

# The jobs built on the flow, reachable as ``chunkgraph.flow.<name>`` for user code
# written against that spelling; imported lazily, since the jobs sit above the flow.
_JOB_NAMES = ("DownsampleReport", "downsample", "transfer")


def __getattr__(name: str) -> Any:
    if name in _JOB_NAMES:
        from chunkgraph import jobs  # deferred: a re-export from the layer above

        return getattr(jobs, name)
    raise AttributeError(f"module 'chunkgraph.flow' has no attribute {name!r}")


__all__ = [
    "ApplyReport",
    "Breakdown",
    "DeviceChoice",
    "DownsampleReport",
    "FlowEstimate",
    "FlowLockedError",
    "FlowOutputError",
    "FlowPlan",
    "ProbeFailure",
    "ReadAmplificationWarning",
    "RunEndedError",
    "RunOptions",
    "SaturationWarning",
    "apply",
    "check_device",
    "claimed",
    "downsample",
    "reduce_deferred",
    "refuse_if_written",
    "transfer",
]
