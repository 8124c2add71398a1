"""The curated top-level surface: exactly these names, each importable and documented."""

from __future__ import annotations

import chunkgraph

EXPECTED = {
    # errors
    "ChunkgraphError", "ConfigError", "AlignmentError", "GraphError", "PlanError",
    "TaskError", "WorkerDiedError", "CorruptChunkError",
    # task graphs
    "Graph", "TaskRef", "Cost", "Resources", "task", "run", "LocalExecutor", "Event", "EventKind",
    # volumes
    "Box", "Volume", "IOStats", "ApplyReport",
    # loops
    "parallel_for", "parallel_map", "parallel_reduce", "parallel_sort",
    # subpackages and version
    "geometry", "graph", "planning", "parallel", "execute", "volume", "__version__",
}  # fmt: skip


def test_all_is_exactly_the_curated_surface() -> None:
    assert set(chunkgraph.__all__) == EXPECTED
    assert len(chunkgraph.__all__) == len(set(chunkgraph.__all__))


def test_every_public_callable_has_a_docstring() -> None:
    for name in chunkgraph.__all__:
        value = getattr(chunkgraph, name)
        if callable(value):
            assert value.__doc__, f"chunkgraph.{name} has no docstring"


def test_errors_share_one_root_and_match_builtins() -> None:
    assert issubclass(chunkgraph.ConfigError, ValueError)
    assert issubclass(chunkgraph.AlignmentError, chunkgraph.ConfigError)
    for name in (
        "ConfigError",
        "CorruptChunkError",
        "GraphError",
        "PlanError",
        "TaskError",
        "WorkerDiedError",
    ):
        assert issubclass(getattr(chunkgraph, name), chunkgraph.ChunkgraphError)


def test_task_error_keeps_its_fields_across_pickling() -> None:
    import pickle

    error = chunkgraph.TaskError("blur-3", ["read-1", "read-2"], attempts=2, detail="boom")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.task, copy.inputs, copy.attempts, str(copy)) == (
        "blur-3",
        ("read-1", "read-2"),
        2,
        str(error),
    )
