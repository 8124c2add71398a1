"""dask's own array tests pass with ``chunkgraph.dask_scheduler`` exactly where they pass with sync.

The modules ship inside the dask package. Each runs twice in a subprocess,
side by side: once with ``scheduler="sync"`` and once with
``chunkgraph.dask_scheduler`` (``dask_suite_plugin`` sets it around every
test and records the outcomes); the sets of passing tests must be equal.

The subset, about 30 s per run under sync on a 2-core machine (1,041 of the
three modules' 1,326 test cases; 1,006 pass under both):

    dask.array.tests.test_overlap       every test
    dask.array.tests.test_reductions    every test but the slow parametrised
                                        sweeps ``SLOW`` names (48 s of 78 s)
    dask.array.tests.test_array_core    every test but zarr sharding, a
                                        multiprocessing lock and one
                                        11-second cumulative sweep
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import chunkgraph

MODULES = (
    "dask.array.tests.test_overlap",
    "dask.array.tests.test_reductions",
    "dask.array.tests.test_array_core",
)
# Parametrised sweeps that take most of the modules' time and add no new graph shape.
SLOW = (
    "chunk_structure_independence",
    "quantile_weights",
    "quantile_nd_q",
    "zarr_sharding_roundtrip",
    "store_multiprocessing_lock",
    "test_cumulative",
)


def _start(scheduler: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    outcomes = tmp_path / f"{scheduler}.json"
    here = Path(__file__).parent
    source = Path(chunkgraph.__file__).parent.parent  # this checkout's chunkgraph wins
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(source), os.environ.get("PYTHONPATH", "")]),
        "CHUNKGRAPH_DASK_SUITE_SCHEDULER": scheduler,
        "CHUNKGRAPH_DASK_SUITE_OUTCOMES": str(outcomes),
    }
    deselect = " and ".join(f"not {name}" for name in SLOW)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "dask_suite_plugin", "-p", "no:cacheprovider",
        "-k", deselect, "--pyargs", *MODULES,
    ]  # fmt: skip
    run_dir = tmp_path / scheduler
    run_dir.mkdir()  # outside this repository: its pytest settings must not apply
    process = subprocess.Popen(
        command, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return process, outcomes


@pytest.mark.slow
@pytest.mark.timeout(600)  # two runs of ~50 s side by side, slower on a loaded machine
def test_dask_array_tests_pass_under_chunkgraph_exactly_where_they_pass_under_sync(
    tmp_path: Path,
) -> None:
    pytest.importorskip("dask.array", reason="dask.array is not installed")
    for module in MODULES:  # found, not imported: their markers are not this suite's
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} does not ship with this dask")
    runs = {name: _start(name, tmp_path) for name in ("sync", "chunkgraph")}
    results = {}
    try:
        for name, (process, outcomes) in runs.items():
            log, _ = process.communicate(timeout=540)
            assert outcomes.exists(), f"the {name} run recorded nothing:\n{log[-3000:]}"
            results[name] = json.loads(outcomes.read_text())
    finally:
        for process, _ in runs.values():  # a hang or a failure leaves no run behind
            process.kill()
            process.wait()
    passed = {name: {t for t, o in r.items() if o == "passed"} for name, r in results.items()}
    assert len(passed["sync"]) > 900, "too few dask tests ran to compare"
    only_sync = sorted(passed["sync"] - passed["chunkgraph"])
    only_chunkgraph = sorted(passed["chunkgraph"] - passed["sync"])
    assert not only_sync, f"pass under sync, not under chunkgraph: {only_sync[:20]}"
    assert not only_chunkgraph, f"pass under chunkgraph, not under sync: {only_chunkgraph[:20]}"
