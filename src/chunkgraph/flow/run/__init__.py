"""The flow's engine: a validated flow run into a destination, its tasks and its report.

Policy. ``FlowRun`` is one ``apply`` from its options to its report: it locks the
flow's state (``chunkgraph.flow.state``), probes fn, builds the ``FlowGraph`` of
top-level tasks (``_top_task``, whose levels below run in-process: ``_subchunk``,
blending and the checkerboard's layers, ``_checkerboard``), reductions
(``_reduce``, with ``_edge_locks``) and deferred geometry (``_deferred``), runs it
on an executor and writes the ``ApplyReport`` (``_report``). ``reduce_deferred``
(``_deferred_run``) finishes a deferred flow later. ``_device`` is where the levels
below compute, ``_fn_limits`` and ``_values`` bound fn's calls and collect a
values-only flow's output, ``_probe_output`` hands the probe's output to the first
bottom chunk's call, ``_late_writes`` stops writes after a run ends,
``_reader_counts`` tells the input caches apply owns how often each chunk is read,
``chunkgraph.execute``'s ``Breakdown`` (and its timers) measures fn, reads and writes.

The run imports the plan's and the state's faces; the faces above
(``chunkgraph.flow``) import these names.
"""

from __future__ import annotations

from chunkgraph.execute import Breakdown
from chunkgraph.flow.run._deferred_run import reduce_deferred
from chunkgraph.flow.run._device import resolve_device
from chunkgraph.flow.run._flow_run import DeviceUse, FlowRun
from chunkgraph.flow.run._fn_limits import limit_calls
from chunkgraph.flow.run._probe import ProbeFailure
from chunkgraph.flow.run._report import ApplyReport

__all__ = [
    "ApplyReport",
    "Breakdown",
    "DeviceUse",
    "FlowRun",
    "ProbeFailure",
    "limit_calls",
    "reduce_deferred",
    "resolve_device",
]
