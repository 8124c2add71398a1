"""The subchunkable apply flow: ``apply(fn, inputs, dst, chunk_sizes=...)`` over volumes.

Applies a function to a huge chunked volume with context padding (crop) and
blended overlaps, recursively subchunked so that reads are not amplified,
writes never race, memory stays bounded and the driver enumerates only the
top level; resumable after a crash. ``reduce_deferred`` finishes a flow applied
with ``blend_modes="defer"`` later, into a dst. ``downsample`` (pyramid levels) and
``transfer`` (copy, rechunk, convert) are apply flows with a fixed function.
``chunkgraph.volume.apply`` is the same function. Design notes: ``flow/README.md``.
"""

from chunkgraph._errors import (
    FlowLockedError,
    FlowOutputError,
    RunEndedError,
)
from chunkgraph.flow._apply import apply
from chunkgraph.flow._auto_sizes import FlowPlan, ReadAmplificationWarning
from chunkgraph.flow._cast import SaturationWarning
from chunkgraph.flow._estimate import FlowEstimate
from chunkgraph.flow._pyramid import DownsampleReport, downsample
from chunkgraph.flow._reduce_deferred import reduce_deferred
from chunkgraph.flow._report import ApplyReport
from chunkgraph.flow._transfer import transfer

__all__ = [
    "ApplyReport",
    "DownsampleReport",
    "FlowEstimate",
    "FlowLockedError",
    "FlowOutputError",
    "FlowPlan",
    "ReadAmplificationWarning",
    "RunEndedError",
    "SaturationWarning",
    "apply",
    "downsample",
    "reduce_deferred",
    "transfer",
]
