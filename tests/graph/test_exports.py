"""The public surface of the graph, planning and execute subpackages."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("package", "names"),
    [
        (
            "chunkgraph.graph",
            {"Graph", "TaskRef", "Cost", "Resources", "task", "from_dask", "DaskGraph"},
        ),
        ("chunkgraph.planning", {"order", "bottom_level", "top_level", "path_length"}),
        (
            "chunkgraph.execute",
            {
                "run",
                "LocalExecutor",
                "Event",
                "EventKind",
                "ProgressBar",
                "Executor",
                "EXECUTOR_KINDS",
                "resolve_executor",
                "ProcessPool",
                "dask_scheduler",
            },
        ),
        ("chunkgraph.execute.pool", {"ProcessPool", "CallTimeoutError", "PoolState"}),
    ],
)
def test_public_names_are_exported(package: str, names: set[str]) -> None:
    module = importlib.import_module(package)
    assert names <= set(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None
        assert not name.startswith("_")
