"""The volume flow (``apply``) on a real LocalCluster: byte-identical output, the
checks on what workers can reach, and resuming after the client was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.dask._cluster import START_DEADLINE_S
from tests.dask._tasks import identity, slow_identity

import chunkgraph as cg
from chunkgraph import volume
from chunkgraph.execute import DaskExecutor
from chunkgraph.execute._dask_contexts import remote_workers
from chunkgraph.geometry import Box

distributed = pytest.importorskip("distributed")

SHAPE = (48, 40)
STORAGE = (8, 8)


def source(root: Path, name: str = "src", seed: int = 0) -> tuple[Any, np.ndarray]:
    data = np.random.default_rng(seed).integers(0, 2**31, SHAPE, dtype=np.int64).astype(np.int32)
    vol = volume.create(str(root / f"{name}.zarr"), SHAPE, STORAGE, data.dtype)
    vol.write(Box.from_shape(SHAPE), data)
    return vol, data


def stored_bytes(path: Path) -> dict[str, bytes]:
    """Every chunk file of a zarr array, by its path inside it (metadata aside)."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


def test_identity_flow_reproduces_its_source_byte_for_byte(healthy: Any, tmp_path: Path) -> None:
    src, data = source(tmp_path)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, STORAGE, data.dtype)
    report = cg.apply(
        identity,
        src,
        dst,
        chunk_sizes=[(24, 20), (8, 7)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(2, 2), (0, 0)],
        blend_modes="linear",
        intermediates=tmp_path / "tmp",
        executor=DaskExecutor(healthy),
    )
    assert report.tasks_per_level[0] == 4 and report.reductions > 0
    np.testing.assert_array_equal(dst.read(Box.from_shape(SHAPE)), data)
    assert stored_bytes(tmp_path / "dst.zarr") == stored_bytes(tmp_path / "src.zarr")
    assert report.bytes_read > 0  # counted by the workers' copies of the volumes


def test_the_tasks_of_a_worker_share_its_input_cache(healthy: Any, tmp_path: Path) -> None:
    # Each 8x8 task reads its 2-voxel halo from the 8 neighbouring storage chunks: 6.7x its
    # input without a cache. Tasks that share their worker's cache read each storage
    # chunk at most once per worker: at most 2x on 2 workers.
    vol, data = source(tmp_path)
    src = volume.open(vol.path, cache_bytes=1 << 20)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, STORAGE, data.dtype)
    report = cg.apply(
        identity,
        src,
        dst,
        chunk_sizes=[STORAGE],
        crop_pads=[(2, 2)],
        intermediates=tmp_path / "tmp",
        executor=DaskExecutor(healthy),
    )
    np.testing.assert_array_equal(dst.read(Box.from_shape(SHAPE)), data)
    assert report.read_amplification <= 2.0


def test_memory_volumes_are_refused_before_anything_runs(healthy: Any) -> None:
    src = volume.create("dask-flow-memory-src", SHAPE, STORAGE, "uint8", backend="memory")
    dst = volume.create("dask-flow-memory-dst", SHAPE, STORAGE, "uint8", backend="memory")
    try:
        with pytest.raises(cg.ConfigError, match=r"cannot use memory volumes \(src, dst\)"):
            cg.apply(identity, src, dst, chunk_sizes=[(24, 20)], executor=DaskExecutor(healthy))
    finally:
        volume.remove("dask-flow-memory-src")
        volume.remove("dask-flow-memory-dst")


def test_a_local_cluster_may_use_local_paths(healthy: Any, tmp_path: Path) -> None:
    assert remote_workers(healthy) == []
    # nothing to check on this machine's workers, even a path that does not exist
    DaskExecutor(healthy).check_paths({"dst": str(tmp_path / "nowhere"), "url": "s3://b/k"})


def test_a_worker_at_an_address_of_no_local_interface_counts_as_remote(
    own_cluster: Any, tmp_path: Path
) -> None:
    """127.0.0.2 reaches this machine through loopback, but no interface lists it: a
    worker there is treated as remote, and is asked whether it sees the paths."""
    _, client = own_cluster(here={}, there={"host": "127.0.0.2"})
    workers = client.scheduler_info()["workers"]
    (there,) = [a for a, info in workers.items() if info["name"] == "there"]
    assert remote_workers(client) == [there]
    DaskExecutor(client).check_paths({"dst": str(tmp_path)})  # it does see this one


# The client: a separate process (it imports the same task function, so its flow has
# the same id as the rerun's).
SCRIPT = """
import sys
import chunkgraph as cg
from chunkgraph import volume
from tests.dask._tasks import slow_identity

cg.apply(slow_identity, volume.open(sys.argv[2]), volume.open(sys.argv[3], mode="r+"),
         chunk_sizes=[(8, 20)], intermediates=sys.argv[4], executor=sys.argv[1])
"""


def test_a_rerun_after_the_client_was_killed_skips_finished_top_tasks(
    healthy: Any, cluster: Any, tmp_path: Path
) -> None:
    """A client process runs a 12-task flow and is SIGKILLed once some tasks are marked
    done; a rerun with resume=True (same fn, volumes, settings) skips those. (Twelve
    0.3-second tasks on 2 workers: the kill lands long before the last is done.)"""
    src, data = source(tmp_path)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, STORAGE, data.dtype)
    inter = tmp_path / "tmp"
    client_proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), cluster.scheduler_address,
         src.path, dst.path, str(inter)],
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not list(inter.glob("*/markers/top*/*")) and time.monotonic() < deadline:
            if client_proc.poll() is not None:
                raise AssertionError(f"the client ended first:\n{client_proc.stderr.read()}")
            time.sleep(0.05)
        os.kill(client_proc.pid, signal.SIGKILL)
    finally:
        client_proc.wait(timeout=30)
    assert list(inter.glob("*/markers/top*/*")), "no top-level task finished in time"
    report = cg.apply(
        slow_identity, src, dst, chunk_sizes=[(8, 20)], intermediates=inter,
        executor=DaskExecutor(healthy), resume=True,
    )  # fmt: skip
    assert 1 <= report.top_tasks_skipped < 12
    assert report.tasks_per_level[0] == 12 - report.top_tasks_skipped
    np.testing.assert_array_equal(dst.read(Box.from_shape(SHAPE)), data)
