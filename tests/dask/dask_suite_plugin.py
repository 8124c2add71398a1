"""A pytest plugin for running dask's own test modules under a chosen scheduler.

Loaded with ``-p dask_suite_plugin`` by ``test_dask_suite.py``. It wraps every
test in ``dask.config.set(scheduler=...)``: ``sync`` or
``chunkgraph.dask_scheduler``, named by ``CHUNKGRAPH_DASK_SUITE_SCHEDULER``,
and writes each test's outcome to the JSON file named by
``CHUNKGRAPH_DASK_SUITE_OUTCOMES``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

_outcomes: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _dask_scheduler_under_test() -> Iterator[None]:
    import dask

    import chunkgraph

    name = os.environ["CHUNKGRAPH_DASK_SUITE_SCHEDULER"]
    scheduler: Any = chunkgraph.dask_scheduler if name == "chunkgraph" else name
    with dask.config.set(scheduler=scheduler):
        yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
    elif report.skipped:
        outcome = "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    path, _, name = report.location  # --pyargs node ids lack the module
    test = f"{os.path.basename(path)}::{name}"
    if _outcomes.get(test) in (None, "passed"):  # a teardown error overrides a pass
        _outcomes[test] = outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    with open(os.environ["CHUNKGRAPH_DASK_SUITE_OUTCOMES"], "w") as f:
        json.dump(_outcomes, f, indent=0, sort_keys=True)
