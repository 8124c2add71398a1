"""A Dask cluster whose workers share no disk with the client runs an s3-to-s3 flow.

Each worker is a real ``dask worker`` process started in a mount namespace of
its own (``unshare -m``, root) where a fresh tmpfs covers the client's test
directory: the files the client writes there do not exist for the workers.
They listen on 127.0.0.2, so chunkgraph counts them as workers of another host.
The S3 server (moto, on 127.0.0.1) is all the two sides share, as on a cloud
cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.dask._cluster import START_DEADLINE_S, running_workers, wait_until, worker_pythonpath

import chunkgraph as cg
from chunkgraph import cli, volume
from chunkgraph.testing import S3Server

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs a private mount namespace (unshare -m, root) to hide the client's files",
)

SHAPE, CHUNKS = (32, 48, 48), (16, 16, 16)


@dataclass(frozen=True)
class Diskless:
    """A scheduler here, the session's S3 server with this test's bucket, and
    ``start_worker(name)``: a worker that cannot see this test's files (its process)."""

    client: Any
    server: S3Server
    bucket: str
    start_worker: Callable[[str], subprocess.Popen[bytes]]

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"


def _sees(path: str) -> bool:
    return os.path.exists(path)


@pytest.fixture
def diskless(
    tmp_path_factory: pytest.TempPathFactory, server: S3Server, bucket: str
) -> Iterator[Diskless]:
    """See ``Diskless``. The workers inherit this process's environment: the server's
    endpoint and test credentials (``tests/conftest.py``)."""
    hidden = str(tmp_path_factory.getbasetemp())
    with contextlib.ExitStack() as stack:
        cluster = distributed.LocalCluster(
            n_workers=0, host="127.0.0.1", dashboard_address=":0", scheduler_port=0
        )
        stack.callback(cluster.close, timeout=30)
        client = distributed.Client(cluster, set_as_default=False)
        stack.callback(client.close, timeout=30)
        processes: list[subprocess.Popen[bytes]] = []

        def start_worker(name: str) -> subprocess.Popen[bytes]:
            command = (
                'mount -t tmpfs tmpfs "$HIDE" && exec "$PY" -m distributed.cli.dask_worker '
                '"$ADDR" --nthreads 1 --no-nanny --host 127.0.0.2 --name "$NAME" '
                "--no-dashboard"
            )
            env = {
                **os.environ,
                "HIDE": hidden,
                "PY": sys.executable,
                "ADDR": cluster.scheduler_address,
                "NAME": name,
                "PYTHONPATH": worker_pythonpath(),
            }
            proc = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "sh", "-c", command],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            processes.append(proc)
            return proc

        def stop_all() -> None:
            for proc in processes:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)

        stack.callback(stop_all)
        yield Diskless(client, server, bucket, start_worker)


def _source(url: str) -> np.ndarray:
    data = np.random.default_rng(11).random(SHAPE, dtype="float32")
    src = volume.create(url, SHAPE, CHUNKS, "float32")
    src.write(src.bounds, data)
    return data


def _local_result(data: np.ndarray, fn: Any, tmp_path: Path, **kwargs: Any) -> np.ndarray:
    src = volume.create(tmp_path / "local-src.zarr", SHAPE, CHUNKS, "float32")
    src.write(src.bounds, data)
    dst = volume.create(tmp_path / "local-dst.zarr", SHAPE, CHUNKS, "float32")
    cg.apply(fn, src, dst, executor="threads", **kwargs)
    return dst.read(dst.bounds)


def test_an_s3_flow_runs_exactly_on_workers_that_cannot_see_the_clients_files(
    diskless: Diskless, tmp_path: Path
) -> None:
    from scipy.ndimage import gaussian_filter

    client, server, start_worker = diskless.client, diskless.server, diskless.start_worker
    url = diskless.url
    for name in ("w0", "w1"):
        start_worker(name)
    client.wait_for_workers(2, timeout=START_DEADLINE_S)
    (tmp_path / "here.txt").write_text("only the client sees this")
    seen = client.run(_sees, str(tmp_path / "here.txt"))
    assert seen and not any(seen.values()), seen  # the workers really share no disk

    data = _source(url("raw.zarr"))
    settings: dict[str, Any] = {
        "chunk_sizes": [(16, 24, 24), (12, 16, 16)],
        "crop_pads": [0, 3],
        "blend_pads": [4, 0],
        "fn_kwargs": {"sigma": 1.0},
    }
    expected = _local_result(data, gaussian_filter, tmp_path, **settings)
    dst = volume.create(url("smooth.zarr"), SHAPE, CHUNKS, "float32")
    report = cg.apply(
        gaussian_filter,
        volume.open(url("raw.zarr")),
        dst,
        executor=cg.DaskExecutor(client),
        **settings,
    )
    np.testing.assert_array_equal(volume.open(url("smooth.zarr")).read(dst.bounds), expected)
    # The top level's temporaries lived in the bucket, where the workers could reach them,
    # and are gone once the flow finished; nothing of the flow was written on the client.
    assert report.layers is not None and report.layers.startswith(url("")), report.layers
    assert report.temporary_bytes > 0  # there were top-level layers, and they were there
    assert not [k for k in server.keys(diskless.bucket) if "/layers/" in k]


def test_killing_a_worker_mid_flow_loses_nothing(diskless: Diskless, tmp_path: Path) -> None:
    from tests.dask._tasks import slow_identity

    client, server, start_worker = diskless.client, diskless.server, diskless.start_worker
    url = diskless.url
    victim = start_worker("w0")
    start_worker("w1")
    client.wait_for_workers(2, timeout=START_DEADLINE_S)
    data = _source(url("raw.zarr"))
    dst = volume.create(url("copy.zarr"), SHAPE, CHUNKS, "float32")

    def markers() -> list[str]:
        return [k for k in server.keys(diskless.bucket) if "/markers/" in k]

    def some_done() -> bool:
        return bool(markers())

    errors: list[BaseException] = []

    def run() -> None:
        try:
            cg.apply(
                slow_identity,
                volume.open(url("raw.zarr")),
                dst,
                chunk_sizes=[(16, 16, 16)],
                executor=cg.DaskExecutor(client),
            )
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    runner = threading.Thread(target=run)
    runner.start()
    wait_until(some_done, 120, "a first top-level task finished")
    done_at_kill = len(markers())
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    wait_until(lambda: len(running_workers(client)) == 1, 60, "the scheduler saw the kill")
    runner.join(timeout=110)
    assert not runner.is_alive(), "the flow did not finish on the surviving worker"
    assert not errors, errors
    np.testing.assert_array_equal(volume.open(url("copy.zarr")).read(dst.bounds), data)
    # 18 tasks of 0.3 s on two workers: most were still to run when one worker died.
    assert done_at_kill < 18


def test_chunkgraph_run_with_a_spec_on_s3_and_a_cluster_address(
    diskless: Diskless, tmp_path: Path
) -> None:
    client, start_worker, url = diskless.client, diskless.start_worker, diskless.url
    start_worker("w0")
    client.wait_for_workers(1, timeout=START_DEADLINE_S)
    data = _source(url("raw.zarr"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "function: numpy:negative\n"
        f"input: {url('raw.zarr')}\n"
        f"output: {{path: {url('neg.zarr')}, dtype: float32, chunks: [16, 16, 16]}}\n"
        "chunk_sizes: [[16, 48, 48]]\n"
    )
    scheduler = client.scheduler.address
    assert cli.main(["run", "--quiet", str(spec), "--executor", scheduler]) == 0
    out = volume.open(url("neg.zarr"))
    np.testing.assert_array_equal(out.read(out.bounds), -data)
