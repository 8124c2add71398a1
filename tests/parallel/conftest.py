"""Fixtures for the parallel loops: a process-wide pool of a chosen size."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from chunkgraph.parallel import WorkStealingPool, set_workers


@pytest.fixture
def use_pool() -> Iterator[Callable[[int], WorkStealingPool]]:
    """Call with a worker count to replace the process-wide pool for one test."""

    def make(workers: int) -> WorkStealingPool:
        return set_workers(workers)

    yield make
    set_workers(None)
