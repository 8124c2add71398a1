"""GPU tasks on a real device through CuPy; skipped unless CuPy sees a GPU.

The logic (placement, residency, spills, errors) is tested on a fake backend
in ``test_gpu_execution.py``; here a small graph of CuPy tasks runs on the
real thing: its arrays stay on the device between tasks, and the results equal
numpy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph.gpu import CupyBackend, active_backend

pytestmark = pytest.mark.skipif(
    not isinstance(active_backend(), CupyBackend), reason="needs CuPy and a visible GPU"
)

GPU = {"gpu": 1}


def test_local_contexts_have_a_gpu_per_cuda_device() -> None:
    import cupy  # type: ignore[import-not-found]

    gpus = [c for c in cg.local_contexts() if c.kind == "gpu"]
    assert len(gpus) == cupy.cuda.runtime.getDeviceCount()
    assert all(0 < c.memory < float("inf") for c in gpus)


def test_a_graph_of_cupy_tasks_stays_on_the_device_and_matches_numpy() -> None:
    """
    x (numpy) -> scaled (gpu) -> rooted (gpu) -> total (gpu)
                                         \\-> on_cpu (cpu)
    """
    import cupy

    seen: list[tuple[str, bool, int]] = []

    def scale(x: Any) -> Any:
        seen.append(("scale", isinstance(x, cupy.ndarray), cupy.cuda.runtime.getDevice()))
        return x * 3.0

    def root(x: Any) -> Any:
        seen.append(("root", isinstance(x, cupy.ndarray), cupy.cuda.runtime.getDevice()))
        return cupy.sqrt(x)

    def total(x: Any) -> Any:
        seen.append(("total", isinstance(x, cupy.ndarray), cupy.cuda.runtime.getDevice()))
        return x.sum()

    def on_cpu(x: Any) -> Any:
        seen.append(("on_cpu", isinstance(x, cupy.ndarray), -1))
        return np.sqrt(x).max()

    x = np.arange(1 << 16, dtype=np.float64)
    g = cg.Graph()
    scaled = g.add(scale, x, resources=GPU, cost=cg.Cost({"gpu0": 1.0}))
    rooted = g.add(root, scaled, resources=GPU, cost=cg.Cost({"gpu0": 1.0}))
    g.add(total, rooted, resources=GPU, cost=cg.Cost({"gpu0": 1.0}), name="total")
    g.add(on_cpu, rooted, name="on_cpu")
    events: list[cg.Event] = []
    got = cg.run(g, ["total", "on_cpu"], subscribers=[events.append])
    expected = np.sqrt(x * 3.0)
    assert isinstance(got[0], np.ndarray)  # the caller gets host arrays
    np.testing.assert_allclose(got[0], expected.sum())
    np.testing.assert_allclose(got[1], np.sqrt(expected).max())
    by_name = {name: (on_device, device) for name, on_device, device in seen}
    assert by_name["scale"] == (True, 0) and by_name["root"] == (True, 0)
    assert by_name["total"] == (True, 0)
    assert by_name["on_cpu"][0] is False  # a CPU task gets a host copy
    (summary,) = [e.name for e in events if e.kind is cg.EventKind.TRANSFERS]
    assert summary.startswith("gpu: 1 upload(s), 2 download(s)")  # x up; on_cpu, total down


def test_results_of_queued_kernels_are_complete_where_they_are_read() -> None:
    """Kernels are asynchronous and each GPU worker has its own stream: a CPU task, the
    caller and a spill must each read a result only after its kernels are done."""
    import cupy

    def slow(x: Any) -> Any:
        assert cupy.cuda.get_current_stream() != cupy.cuda.Stream.null  # its own stream
        for _ in range(200):  # queued, not done, when the task returns
            x = cupy.sqrt(x * x + 1.0)
        return x

    x = np.zeros(1 << 22, dtype=np.float64)
    g = cg.Graph()
    parts = [g.add(slow, x + i, resources=GPU, name=f"p{i}") for i in range(3)]
    g.add(lambda *ys: [float(np.asarray(y)[-1]) for y in ys], *parts, name="read")
    expected = [float(np.sqrt(i * i + 200.0)) for i in range(3)]
    got = cg.run(g, ["read", "p2"])
    np.testing.assert_allclose(got[0], expected)
    np.testing.assert_allclose(got[1][-1], expected[2])
