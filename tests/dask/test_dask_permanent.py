"""On a Dask cluster, as locally: an error that fails every try is not tried again.

Dask's own retries would run it again (and the whole subgraph with it); the subgraph
tries a failed task again itself, by the rule every executor keeps
(``chunkgraph._errors.is_permanent``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.execute._tasks import fail_counted, mix

import chunkgraph as cg
from chunkgraph.execute import DaskExecutor
from chunkgraph.graph import Graph


@pytest.mark.parametrize(("error", "tries"), [("corrupt", 1), ("user", 1), ("transient", 3)])
def test_an_error_that_fails_every_try_is_not_retried_on_the_cluster(
    healthy: Any, tmp_path: Path, error: str, tries: int
) -> None:
    """input -> read-chunk: the input's result stays on the worker while the task that
    reads it is tried again."""
    counter = tmp_path / "calls"
    g = Graph()
    first = g.add(mix, 0, name="input")
    g.add(fail_counted, str(counter), error, first, name="read-chunk")
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, executor=DaskExecutor(healthy, retries=2))
    (failed,) = caught.value.exceptions
    assert isinstance(failed, cg.TaskError)
    assert (failed.task, failed.attempts) == ("read-chunk", tries)
    assert counter.read_text() == str(tries)
