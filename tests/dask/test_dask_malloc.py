"""On a real LocalCluster, a worker's allocator is changed only while a flow's batch runs
on it (``_dask_malloc``): a plain graph run, and whatever the worker runs after a flow,
find it as Dask's nanny set it (freed buffers over 128 KiB unmapped at once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.dask._batch_tasks import faults_per_buffer

import chunkgraph as cg
from chunkgraph.execute import DaskExecutor
from chunkgraph.execute._dask_stream import Call
from chunkgraph.graph import Graph

distributed = pytest.importorskip("distributed")

# A 1 MiB buffer mapped afresh takes one page fault per 4 KiB page; one reused, few.
MIB = 1 << 20
FRESH = 256
ROOT = Path(__file__).resolve().parents[2]


def test_a_plain_graph_run_leaves_the_workers_allocator_as_dask_set_it(healthy: Any) -> None:
    executor = DaskExecutor(healthy)
    # A flow's batches: freed buffers are reused while they run.
    batches = [Call(f"flow-batch-{i}", faults_per_buffer, (MIB, 20), slot=i) for i in (0, 1)]
    assert max(executor.stream(batches)) < FRESH / 4
    # A plain graph on the same workers (by the scheduler's address, as a user runs it):
    # Dask's rule in its tasks, and after it.
    graph = Graph()
    tasks = [graph.add(faults_per_buffer, MIB, 20 + i, name=f"plain-{i}") for i in (0, 1)]
    during = cg.run(graph, tasks, executor=healthy.scheduler.address)
    assert min(during) > FRESH * 3 / 4
    after = healthy.run(faults_per_buffer, MIB, 20)  # no chunkgraph call at all
    assert len(after) == 2 and min(after.values()) > FRESH * 3 / 4


# In a process started as a nanny starts a worker: faults per fresh 1 MiB buffer inside
# two overlapping flow calls, after the first ends, and after the last.
NESTED = """
import sys
sys.path[:0] = {paths!r}
from tests.dask._batch_tasks import faults_per_buffer
from chunkgraph.execute._dask_malloc import large_buffers_reused

first = large_buffers_reused()
assert first.__enter__()
with large_buffers_reused() as second:
    assert second
    both = faults_per_buffer(1 << 20, 20)
one = faults_per_buffer(1 << 20, 20)
first.__exit__(None, None, None)
print(both, one, faults_per_buffer(1 << 20, 20))
"""


def test_overlapping_flow_calls_put_the_thresholds_back_when_the_last_ends() -> None:
    script = NESTED.format(paths=[str(ROOT / "src"), str(ROOT)])
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ["MALLOC_TRIM_THRESHOLD_"] = "65536"  # as Dask's nanny starts a worker
    out = subprocess.run(
        [sys.executable, "-c", script], env=environ, capture_output=True, text=True, check=True
    ).stdout
    both, one, none = map(float, out.split())
    assert both < FRESH / 4 and one < FRESH / 4  # one call still runs: still reused
    assert none > FRESH * 3 / 4  # none runs: as the nanny set it
