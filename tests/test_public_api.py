"""The curated top-level surface: exactly these names, each importable and documented."""

from __future__ import annotations

import chunkgraph

EXPECTED = {
    # errors
    "ChunkgraphError", "ConfigError", "AlignmentError", "GraphError", "PlanError",
    "TaskError", "WorkerDiedError", "CorruptChunkError", "VolumeNotFoundError", "UsageError",
    "FlowOutputError", "FlowLockedError", "RunEndedError", "CallTimeoutError", "RemoteError",
    "RemoteTraceback", "StoreError",
    # task graphs
    "Graph", "TaskRef", "Cost", "Resources", "task", "run", "LocalExecutor", "Event", "EventKind",
    "dask_scheduler",
    # on a Dask cluster
    "DaskExecutor", "dask_contexts",
    # planning
    "plan", "Plan", "Context", "Link", "local_contexts",
    # volumes
    "Box", "Volume", "IOStats", "ApplyReport", "apply", "RunOptions",
    "downsample", "transfer", "label",
    # looking at volumes
    "view",
    # loops
    "parallel_for", "parallel_map", "parallel_reduce", "parallel_sort",
    # subpackages and version
    "geometry", "graph", "planning", "parallel", "execute", "volume", "flow", "lowlevel",
    "__version__",
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


def test_every_error_is_under_the_root_shows_its_public_module_and_pickles() -> None:
    import pickle

    import chunkgraph._errors as errors

    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert len(classes) >= 13
    for cls in classes:
        assert issubclass(cls, chunkgraph.ChunkgraphError)
        assert cls.__module__ == "chunkgraph" and getattr(chunkgraph, cls.__name__) is cls
        # each leaf is also the built-in a user would catch
        assert cls is chunkgraph.ChunkgraphError or len(cls.__mro__) > 3
    assert issubclass(chunkgraph.VolumeNotFoundError, FileNotFoundError)
    error = chunkgraph.FlowLockedError("busy")
    assert type(pickle.loads(pickle.dumps(error))) is chunkgraph.FlowLockedError
    held = pickle.loads(pickle.dumps(chunkgraph.FlowLockedError("busy", "/x.lock", "process 7")))
    assert (str(held), held.lock, held.holder) == ("busy", "/x.lock", "process 7")
    assert repr(chunkgraph.ConfigError("x")).startswith("ConfigError(")


def test_import_is_lazy_and_graphs_never_import_storage() -> None:
    """``import chunkgraph`` loads no numpy-heavy parts; running a graph loads no zarr, and
    nothing short of using the Dask executor loads Dask."""
    import subprocess
    import sys

    script = (
        "import sys, chunkgraph as cg\n"
        "assert 'zarr' not in sys.modules and 'chunkgraph.volume' not in sys.modules\n"
        "with cg.Graph() as g:\n"
        "    t = cg.task(sum)([1, 2])\n"
        "assert cg.run(g, t, executor='processes') == 3\n"
        "assert cg.DaskExecutor and cg.dask_contexts\n"
        "print(sorted(m for m in ('zarr', 'tensorstore', 'scipy', 'dask', 'distributed')\n"
        "             if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_volume_apply_is_still_the_flow() -> None:
    from chunkgraph import flow, volume

    assert volume.apply is flow.apply is chunkgraph.apply
    assert volume.ApplyReport is chunkgraph.ApplyReport
