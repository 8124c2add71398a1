"""The residency's bookkeeping on its own: device numbering, limits, spills.

A ``FakeBackend`` stands for CuPy (no GPU runs here; ``test_real_gpu.py`` runs
on one where CuPy sees a device).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError
from chunkgraph.gpu import FakeBackend, FakeDeviceArray
from chunkgraph.gpu._residency import Residency, device_indices, residency_limits


def test_gpu_contexts_drive_the_device_their_name_says_else_the_next() -> None:
    kinds = ["cpu", "gpu", "gpu", "cpu"]
    assert device_indices(["a", "gpu1", "gpu0", "b"], kinds, 2) == [-1, 1, 0, -1]
    assert device_indices(["a", "big", "small", "b"], kinds, 2) == [-1, 0, 1, -1]
    with pytest.raises(ConfigError, match="sees 1 device"):
        device_indices(["a", "gpu1", "gpu0", "b"], kinds, 1)


def test_a_device_keeps_its_budget_less_its_largest_planned_task() -> None:
    devices = [-1, 0, 1]
    budgets = [100.0, 1000.0, math.inf]
    limits = residency_limits(devices, budgets, context=[0, 1, 1, 2], memory=[90, 300, 100, 5])
    assert limits == [math.inf, 700.0, math.inf]


def _residency(limit: float) -> tuple[FakeBackend, Residency, list[Any]]:
    backend = FakeBackend(1)
    results: list[Any] = [None] * 4
    return backend, Residency(backend, [-1, 0], [math.inf, limit], results), results


def _on_device(backend: FakeBackend, values: int) -> Any:
    return backend.to_device(np.zeros(values, np.float64), 0)  # 8 bytes a value


def test_released_results_are_forgotten_before_anything_spills() -> None:
    backend, res, results = _residency(1000)
    results[0] = _on_device(backend, 75)  # 600 bytes
    res.kept(0, 0, 600)
    results[0] = None  # the scheduler released it
    results[1] = _on_device(backend, 75)
    res.kept(1, 0, 600)
    assert res.spills == 0 and isinstance(results[1], FakeDeviceArray)


def test_the_oldest_results_kept_spill_to_host_and_the_new_one_stays() -> None:
    backend, res, results = _residency(1000)
    for t in range(3):
        results[t] = _on_device(backend, 50)  # 400 bytes each
        res.kept(t, 0, 400)
    assert res.spills == 1
    assert type(results[0]) is np.ndarray  # the oldest, now on host
    assert all(isinstance(results[t], FakeDeviceArray) for t in (1, 2))
    assert res.downloads == 1 and res.bytes_moved == 400


def test_a_tuple_of_device_arrays_counts_and_spills_as_one_result() -> None:
    backend, res, results = _residency(500)
    results[0] = (_on_device(backend, 25), _on_device(backend, 25), "label")
    assert res.device_bytes(results[0]) == (0, 400)
    res.kept(0, 0, 400)
    results[1] = _on_device(backend, 25)
    res.kept(1, 0, 200)
    assert res.spills == 1
    assert [type(x) for x in results[0]] == [np.ndarray, np.ndarray, str]


def test_results_the_caller_gets_are_host_arrays() -> None:
    backend, res, _ = _residency(math.inf)
    value = {"a": _on_device(backend, 3), "b": 1}
    got = res.to_host(value)
    assert type(got["a"]) is np.ndarray and got["b"] == 1
    assert res.summary() == "gpu: 0 upload(s), 1 download(s), 24 bytes moved, 0 spill(s)"
