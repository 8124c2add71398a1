"""Benchmark: chunkgraph on a Dask cluster, next to plain Dask on the same cluster, in one run.

Every case runs in its own subprocess with its own ``LocalCluster`` (2 worker
processes x 1 thread; ``--workers``), so peak memory is the case's alone, and
the cluster's start is not timed.

Fine-grained graph (default 2,000 chains x 9 = 19,999 tasks): ``--width`` chains
of ``--length`` small numpy steps (``np.full(100)``, then ``x * 1.0001``), their
tails summed by a pairwise tree of ``np.add``. (At 50,000 tasks, ``--width 5000``,
plain Dask's wall time grows faster than its task count on a 2-core machine:
10,000 tasks took 21 s, 20,000 took 66 s, 50,000 did not finish in 7 minutes.)

1. plain Dask: the same graph as a dask dict graph, ``client.get(dsk, root)``
2. chunkgraph: ``run(graph, root, executor=DaskExecutor(client))``, planned on
   ``dask_contexts(client)`` (strategy "merge") and fused: one Dask task per subgraph
3. chunkgraph on this machine, ``executor="threads"`` (no cluster; for scale)

Tasks the scheduler saw = tasks that reached memory on the Dask scheduler (a
scheduler plugin counts them). Wall = graph construction + run + result back.
Peak memory = peak RSS of the process holding client and scheduler, and the
sum of the workers' peak RSS.

Volume flow: a 3-point box filter (crop 1 at the bottom level) over a float32
Zarr v3 volume (default 256^3, top chunks 128^3 over bottom chunks 64^3), with

4. ``apply(..., executor="threads")`` on this machine
5. ``apply(..., executor=DaskExecutor(client))`` on the LocalCluster

each run once untimed (it imports zarr and starts thread pools in every process,
which a long-lived cluster has done once), then timed ``FLOW_REPEATS`` times
(median), and the outputs compared.

Many small top-level tasks (a flow on a cluster goes in batches, ``flow/run/_batches``):

6. 2,048 one-chunk top tasks (identity fn, uint8 8x64x64 chunks of a (256, 512, 512)
   volume, a temporary layer and a copying reduction each), ``executor="threads"``
7. the same on the LocalCluster: scheduler tasks, wall against (6), output identical
8. a simulated flow of ``--top-tasks`` (default 100,000) one-voxel top tasks over a
   Zarr v3 input that was never written (every read is fill), identity fn, written
   straight to dst (all fill: nothing stored), on the LocalCluster: the real task
   count with no data. Measured: scheduler tasks, the peak RSS of the process that
   holds client and scheduler, seconds from ``apply`` to the first Dask task
   processing, and that process's CPU per top task (client + scheduler).

Each is run once untimed first (imports, pools), then timed once.

``--only flow`` runs (4) and (5) alone, alternately ``--rounds`` times, and prints each
round's ratio and the read amplification of both (the input bytes decoded, summed over
the workers, over the input's bytes).

Faults, each only on its own (``--only kill``, ``--only status``; not in the default run):

9. ``--top-tasks`` one-voxel top tasks as in (8), but ``fn`` adds 1 and appends its
   grid key and time to its process's call log (every call counted, a SIGKILL loses
   none), once whole and once with one worker *process* (not its nanny) stopped
   halfway (SIGSTOP: it writes nothing more), the records of the batches the
   scheduler has on it read, then SIGKILLed (the nanny starts a new one). Printed:
   those batches and their tasks, how many were recorded at the kill and how many
   had run unrecorded, the tasks run twice (the call logs), wall against the whole
   run, output identical. Target: redone <= those batches' unrecorded tasks.
10. ``--status-tasks`` (default 10,000) such tasks with the flow's state on moto's S3
   (``chunkgraph.testing.s3_server``), ``read_flows`` (what ``chunkgraph status``
   shows) polled meanwhile: how far each answer's count of done top tasks is behind
   the call logs (seconds), and the most objects under the state's prefix. Target:
   within seconds.

Targets: (2) >= 3x fewer scheduler tasks and >= 2x faster than (1); (5) within
1.2x of (4); (7) scheduler tasks <= 1/10 of the top tasks and wall <= 1.3x (6);
(8) scheduler tasks <= 10^4 (at 10^6 top tasks), peak <= 1 GiB, first task
<= 10 s, CPU <= 50 us per top task.

    PYTHONPATH=src python benchmarks/dask_backend.py [--width 2000 --length 9] [--quick]
        [--top-tasks 100000] [--only flow|kill|status] [--rounds 3] [--status-tasks 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import SchedulerPlugin

from _memory import peak_rss_bytes

ARRAY_LEN = 100  # elements per task's array: small, so scheduling dominates
FULL_SHAPE = (256, 256, 256)
QUICK_SHAPE = (128, 128, 128)
# Timed runs of each flow case after its warm-up (the median is shown): a run is
# about a second, where a neighbour's burst on a shared machine shows.
FLOW_REPEATS = 3


# --- the fine-grained graph ------------------------------------------------------------


def dask_graph(width: int, length: int) -> tuple[dict[str, Any], str]:
    """The benchmark graph as a dask dict graph; returns (graph, root key)."""
    dsk: dict[str, Any] = {}
    tails = []
    for i in range(width):
        dsk[f"c{i}-0"] = (np.full, ARRAY_LEN, float(i))
        for k in range(1, length):
            dsk[f"c{i}-{k}"] = (np.multiply, f"c{i}-{k - 1}", 1.0001)
        tails.append(f"c{i}-{length - 1}")
    level = 0
    while len(tails) > 1:
        nxt = []
        for j in range(0, len(tails) - 1, 2):
            key = f"s{level}-{j}"
            dsk[key] = (np.add, tails[j], tails[j + 1])
            nxt.append(key)
        if len(tails) % 2:
            nxt.append(tails[-1])
        tails, level = nxt, level + 1
    return dsk, tails[0]


def chunkgraph_graph(width: int, length: int) -> tuple[Any, Any]:
    """The same graph as a chunkgraph Graph; returns (graph, root ref)."""
    import chunkgraph as cg

    g = cg.Graph()
    tails = []
    for i in range(width):
        x = g.add(np.full, ARRAY_LEN, float(i))
        for _ in range(1, length):
            x = g.add(np.multiply, x, 1.0001)
        tails.append(x)
    while len(tails) > 1:
        nxt = [g.add(np.add, tails[j], tails[j + 1]) for j in range(0, len(tails) - 1, 2)]
        if len(tails) % 2:
            nxt.append(tails[-1])
        tails = nxt
    return g, tails[0]


class TaskCounter(SchedulerPlugin):  # type: ignore[misc]
    """A scheduler plugin: how many tasks reached memory, and when (``time.time()``) the
    first task started processing."""

    name = "benchmark-task-counter"

    def __init__(self) -> None:
        self.done = 0
        self.first = 0.0

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "memory":
            self.done += 1
        elif finish == "processing" and not self.first:
            self.first = time.time()


def _tasks_done(dask_scheduler: Any) -> int:
    return int(dask_scheduler.plugins[TaskCounter.name].done)


def _first_processing(dask_scheduler: Any) -> float:
    return float(dask_scheduler.plugins[TaskCounter.name].first)


def _worker_peak() -> int:
    return peak_rss_bytes()


def run_graph_case(name: str, width: int, length: int, workers: int) -> dict[str, float]:
    """Child process: one graph case; the numbers of the table."""
    if name == "local":
        import chunkgraph as cg

        t0 = time.perf_counter()
        g, root = chunkgraph_graph(width, length)
        value = cg.run(g, root, executor="threads")
        wall = time.perf_counter() - t0
        return dict(wall=wall, tasks=0, peak=_worker_peak(), workers_peak=0, check=float(value[0]))

    with _cluster(workers) as client:
        client.register_plugin(TaskCounter())
        t0 = time.perf_counter()
        if name == "dask":
            dsk, key = dask_graph(width, length)
            value = client.get(dsk, key)
        else:
            import chunkgraph as cg
            from chunkgraph.execute import DaskExecutor

            g, root = chunkgraph_graph(width, length)
            value = cg.run(g, root, executor=DaskExecutor(client))
        wall = time.perf_counter() - t0
        tasks = client.run_on_scheduler(_tasks_done)
        peaks = client.run(_worker_peak)
    return dict(
        wall=wall,
        tasks=tasks,
        peak=_worker_peak(),
        workers_peak=sum(peaks.values()),
        check=float(value[0]),
    )


# --- the volume flow -------------------------------------------------------------------


def box3(x: np.ndarray) -> np.ndarray:
    """Mean of each voxel's 3x3x3 neighbourhood (the output is 1 voxel smaller per side)."""
    out = np.zeros(tuple(s - 2 for s in x.shape), np.float32)
    for dz in range(3):
        for dy in range(3):
            for dx in range(3):
                out += x[dz : dz + out.shape[0], dy : dy + out.shape[1], dx : dx + out.shape[2]]
    return out / 27


def make_source(path: Path, shape: tuple[int, ...]) -> None:
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    if path.exists():
        shutil.rmtree(path)
    src = volume.create(str(path), shape, (64, 64, 64), "float32")
    rng = np.random.default_rng(0)
    for z in range(0, shape[0], 64):
        slab = rng.standard_normal((64, *shape[1:]), dtype=np.float32)
        src.write(Box((z, 0, 0), (z + 64, *shape[1:])), slab)


def _flow(name: str, workdir: Path, executor: Any) -> tuple[float, float]:
    """Seconds of one run of the box-filter flow into ``<name>.zarr``, and its read
    amplification (the input bytes its tasks decoded, summed over processes, over the
    input's bytes)."""
    import chunkgraph as cg
    from chunkgraph import volume

    src = volume.open(str(workdir / "src.zarr"))
    dst_path = workdir / f"{name}.zarr"
    shutil.rmtree(dst_path, ignore_errors=True)
    dst = volume.create(str(dst_path), src.shape, src.chunks, "float32")
    t0 = time.perf_counter()
    report = cg.apply(
        box3,
        src,
        dst,
        chunk_sizes=[(128, 128, 128), (64, 64, 64)],
        crop_pads=[(0, 0, 0), (1, 1, 1)],
        intermediates=str(workdir / f"{name}-tmp"),
        executor=executor,
    )
    return time.perf_counter() - t0, report.read_amplification


@contextlib.contextmanager
def _cluster(workers: int) -> Iterator[Any]:
    """A Client of a fresh LocalCluster of ``workers`` processes x 1 thread (every case's)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _cluster_result(client: Any, wall: float) -> dict[str, float]:
    """A case's figures on the cluster: its wall, the scheduler's tasks, peak memories."""
    tasks = client.run_on_scheduler(_tasks_done)
    peaks = client.run(_worker_peak)
    return dict(
        wall=wall, tasks=tasks, peak=_worker_peak(), workers_peak=sum(peaks.values()), check=0.0
    )


def run_flow_case(name: str, workdir: Path, workers: int) -> dict[str, float]:
    """Child process: the flow with one executor, the median of ``FLOW_REPEATS`` runs after
    one untimed (which pays for imports, thread pools and grain measurements)."""
    if name == "flow_local":
        _flow(name, workdir, "threads")
        runs = [_flow(name, workdir, "threads") for _ in range(FLOW_REPEATS)]
        wall = statistics.median(w for w, _ in runs)
        amp = max(a for _, a in runs)
        return dict(wall=wall, tasks=0, peak=_worker_peak(), workers_peak=0, check=0.0, amp=amp)

    from chunkgraph.execute import DaskExecutor

    with _cluster(workers) as client:
        _flow(name, workdir, DaskExecutor(client))
        runs = [_flow(name, workdir, DaskExecutor(client)) for _ in range(FLOW_REPEATS - 1)]
        client.register_plugin(TaskCounter())  # counts the last run only
        runs.append(_flow(name, workdir, DaskExecutor(client)))
        result = _cluster_result(client, statistics.median(w for w, _ in runs))
        return dict(result, amp=max(a for _, a in runs))


# --- many small top-level tasks --------------------------------------------------------

BATCH_SHAPE = (256, 512, 512)  # 32 x 8 x 8 = 2,048 top tasks
BATCH_CHUNK = (8, 64, 64)
DEFAULT_TOP_TASKS = 100_000


def identity(x: np.ndarray) -> np.ndarray:
    return x


def make_batch_source(path: Path) -> None:
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    if path.exists():
        shutil.rmtree(path)
    src = volume.create(str(path), BATCH_SHAPE, BATCH_CHUNK, "uint8")
    rng = np.random.default_rng(0)
    for z in range(0, BATCH_SHAPE[0], 64):
        slab = rng.integers(0, 256, (64, *BATCH_SHAPE[1:]), dtype=np.uint8)
        src.write(Box((z, 0, 0), (z + 64, *BATCH_SHAPE[1:])), slab)


def _batch_flow(name: str, workdir: Path, executor: Any) -> float:
    """Seconds of one run of the one-chunk identity flow into ``<name>.zarr``."""
    import chunkgraph as cg
    from chunkgraph import volume

    src = volume.open(str(workdir / "batch-src.zarr"))
    dst_path = workdir / f"{name}.zarr"
    shutil.rmtree(dst_path, ignore_errors=True)
    dst = volume.create(str(dst_path), BATCH_SHAPE, BATCH_CHUNK, "uint8")
    t0 = time.perf_counter()
    cg.apply(
        identity, src, dst, chunk_sizes=[BATCH_CHUNK], intermediates=str(workdir / f"{name}-tmp"),
        executor=executor,
    )  # fmt: skip
    return time.perf_counter() - t0


def run_batch_case(name: str, workdir: Path, workers: int) -> dict[str, float]:
    """Child process: the 2,048-task flow with one executor, once untimed, once timed."""
    if name == "batch_local":
        _batch_flow(name, workdir, "threads")
        wall = _batch_flow(name, workdir, "threads")
        return dict(wall=wall, tasks=0, peak=_worker_peak(), workers_peak=0, check=0.0)

    from chunkgraph.execute import DaskExecutor

    with _cluster(workers) as client:
        _batch_flow(name, workdir, DaskExecutor(client))
        client.register_plugin(TaskCounter())  # counts the timed run only
        wall = _batch_flow(name, workdir, DaskExecutor(client))
        return _cluster_result(client, wall)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _many_flow(workdir: Path, top_tasks: int, executor: Any, tag: str) -> None:
    """One-voxel top tasks over a never-written input, written straight to dst (all fill)."""
    import chunkgraph as cg
    from chunkgraph import volume

    shape = (top_tasks // 1000, 1000)
    src = volume.create(str(workdir / f"many-src-{tag}.zarr"), shape, (1, 1), "uint8")
    dst = volume.create(str(workdir / f"many-dst-{tag}.zarr"), shape, (1, 1), "uint8")
    cg.apply(
        identity, src, dst, chunk_sizes=[(1, 1)], skip_intermediates=True,
        intermediates=str(workdir / f"many-tmp-{tag}"), executor=executor,
    )  # fmt: skip


def run_many_case(workdir: Path, workers: int, top_tasks: int) -> dict[str, float]:
    """Child process: the simulated flow of ``top_tasks`` tasks on the cluster, after an
    untimed one of 2,000 (imports, pools)."""

    from chunkgraph.execute import DaskExecutor

    for old in workdir.glob("many-*"):
        shutil.rmtree(old)
    with _cluster(workers) as client:
        _many_flow(workdir, 2000, DaskExecutor(client), "warm")
        client.register_plugin(TaskCounter())
        cpu0, t0, w0 = _cpu_seconds(), time.time(), time.perf_counter()
        _many_flow(workdir, top_tasks, DaskExecutor(client), "timed")
        wall, cpu = time.perf_counter() - w0, _cpu_seconds() - cpu0
        tasks = client.run_on_scheduler(_tasks_done)
        first = client.run_on_scheduler(_first_processing) - t0
    return dict(
        wall=wall, tasks=tasks, peak=_worker_peak(), first=first, cpu_us=cpu / top_tasks * 1e6,
        top_tasks=top_tasks, workers_peak=0, check=0.0,
    )  # fmt: skip


# --- a worker killed mid-run, and status on a bucket ----------------------------------

KILL_STATUS_TASKS = 10_000  # top tasks of the status case (its state on moto's S3)
STATUS_POLL_S = 0.25


def logged_plus_one(x: np.ndarray, box: Any, log_dir: str) -> np.ndarray:
    """``x + 1``, after appending ``"<grid key> <time>"`` to this process's call log (one
    ``O_APPEND`` write per call: a SIGKILL loses none, and every call is counted)."""
    key = "_".join(str(s) for s in box.start)  # a (1, 1) chunk: its start is its grid index
    path = os.path.join(log_dir, f"calls-{os.getpid()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, f"{key} {time.time():.4f}\n".encode())
    finally:
        os.close(fd)
    return x + 1


def _calls(log_dir: Path) -> list[tuple[str, float, int]]:
    """Every call of ``logged_plus_one`` on a worker logged under ``log_dir``: (grid key,
    time, process id). The client's own call (``apply`` probes ``fn`` on one chunk) is
    left out."""
    calls = []
    for path in log_dir.glob("calls-*"):
        pid = int(path.name.removeprefix("calls-"))
        if pid == os.getpid():
            continue
        for line in path.read_text().splitlines():
            key, _, t = line.partition(" ")
            if t:
                calls.append((key, float(t), pid))
    return calls


class _BatchLog:
    """Every batch the run cuts (id -> its grid keys) and the run's marker store: an
    observer wrapped around ``BatchedRun._batch``, which the run calls for each batch."""

    def __init__(self) -> None:
        from chunkgraph.flow.run import _batches

        self.keys: dict[str, list[str]] = {}
        self.markers: Any = None
        self._cls = _batches.BatchedRun
        self._orig = self._cls._batch
        log = self

        def batch(run: Any, kind: str, indices: Any) -> Any:
            made = log._orig(run, kind, indices)
            log.markers = run.job.markers
            log.keys[made.id] = ["_".join(map(str, r)) for r in indices.tolist()]
            return made

        self._cls._batch = batch  # type: ignore[method-assign]

    def close(self) -> None:
        self._cls._batch = self._orig  # type: ignore[method-assign]


def _plus_one_flow(
    workdir: Path, top_tasks: int, executor: Any, tag: str, state: str | None = None
) -> float:
    """Seconds of one run of ``logged_plus_one`` over ``top_tasks`` one-voxel top tasks
    (a never-written input, each output voxel 1), its state under ``state`` (default:
    ``<tag>-state`` in ``workdir``)."""
    state = state or str(workdir / f"{tag}-state")
    import chunkgraph as cg
    from chunkgraph import volume

    shape = (top_tasks // 1000, 1000)
    log_dir = workdir / f"{tag}-log"
    log_dir.mkdir()
    src = volume.create(str(workdir / f"{tag}-src.zarr"), shape, (1, 1), "uint8")
    dst = volume.create(str(workdir / f"{tag}-dst.zarr"), shape, (1, 1), "uint8")
    t0 = time.perf_counter()
    cg.apply(
        logged_plus_one, src, dst, chunk_sizes=[(1, 1)], skip_intermediates=True,
        fn_kwargs={"log_dir": str(log_dir.resolve())}, intermediates=state, executor=executor,
    )  # fmt: skip
    return time.perf_counter() - t0


def _processing(dask_scheduler: Any) -> dict[str, list[str]]:
    return {a: [str(ts.key) for ts in ws.processing] for a, ws in dask_scheduler.workers.items()}


def _kill_mid_run(
    client: Any, log_dir: Path, batches: _BatchLog, at: int, out: dict[str, Any]
) -> None:
    """Once about ``at`` calls are logged: stop one worker process (SIGSTOP: it writes nothing
    more), read the records of the batches the scheduler has on it, SIGKILL it."""
    import signal

    from chunkgraph.flow.state import TOP

    line = len(f"{at // 1000}_500 {time.time():.4f}\n")  # a log line's bytes, about
    # Sizes, not lines: reading the logs over and over would take the workers' cores.
    while sum(p.stat().st_size for p in log_dir.glob("calls-*")) < at * line:
        time.sleep(0.1)
    addr, pid = sorted(client.run(os.getpid).items())[0]
    os.kill(pid, signal.SIGSTOP)
    out["pid"] = pid
    keys = client.run_on_scheduler(_processing)[addr]
    # A batch's Dask key: "chunkgraph-<its name, apply-batch-<id>>-<stream token>-<n>".
    prefixes = {b: f"chunkgraph-apply-batch-{b}-" for b in batches.keys}
    ids = [b for b, p in prefixes.items() if any(k.startswith(p) for k in keys)]
    out["in_flight"] = {b: batches.keys[b] for b in ids}
    out["recorded"] = {b: sorted(batches.markers.record_keys(TOP, b)) for b in ids}
    os.kill(pid, signal.SIGKILL)


def run_kill_case(workdir: Path, workers: int, top_tasks: int) -> dict[str, Any]:
    """Child process: the simulated flow once whole, once with a worker process SIGKILLed
    halfway (nanny restarts it); the calls made, the records at the kill, the outputs."""
    import threading

    from chunkgraph import volume
    from chunkgraph.execute import DaskExecutor
    from chunkgraph.geometry import Box

    for old in workdir.glob("kill-*"):
        shutil.rmtree(old)
    with _cluster(workers) as client:
        _plus_one_flow(workdir, 2000, DaskExecutor(client), "kill-warm")
        whole = _plus_one_flow(workdir, top_tasks, DaskExecutor(client), "kill-whole")
        batches, found = _BatchLog(), {}
        killer = threading.Thread(
            target=_kill_mid_run,
            args=(client, workdir / "kill-killed-log", batches, top_tasks // 2, found),
        )
        killer.start()
        try:
            killed = _plus_one_flow(workdir, top_tasks, DaskExecutor(client), "kill-killed")
        finally:
            killer.join()
            batches.close()
        # Again after: a neighbour's burst on a shared machine shows in one run's wall.
        again = _plus_one_flow(workdir, top_tasks, DaskExecutor(client), "kill-again")
    calls = _calls(workdir / "kill-killed-log")
    seen: dict[str, int] = {}
    for key, *_ in calls:
        seen[key] = seen.get(key, 0) + 1
    redone = {k for k, n in seen.items() if n > 1}
    unrecorded = {
        k for b, ks in found["in_flight"].items() for k in set(ks) - set(found["recorded"][b])
    }
    # Tasks of the killed worker's batches that it ran but had not recorded.
    lost = {k for k, _, pid in calls if pid == found["pid"] and k in unrecorded}
    shape = (top_tasks // 1000, 1000)
    a = volume.open(str(workdir / "kill-whole-dst.zarr")).read(Box.from_shape(shape))
    b = volume.open(str(workdir / "kill-killed-dst.zarr")).read(Box.from_shape(shape))
    return dict(
        top_tasks=top_tasks, whole=whole, again=again, killed=killed,
        batches=len(found["in_flight"]),
        batch_tasks=sum(len(v) for v in found["in_flight"].values()),
        recorded=sum(len(v) for v in found["recorded"].values()),
        unrecorded=len(unrecorded), ran_unrecorded=len(lost),
        calls=len(calls), distinct=len(seen), redone=sum(n - 1 for n in seen.values()),
        redone_outside=len(redone - unrecorded),
        identical=bool(np.array_equal(a, b)), all_one=bool((b == 1).all()),
    )  # fmt: skip


def _poll_status(root: str, stop: Any, samples: list[tuple[float, float, int, int, str]]) -> None:
    """``read_flows`` (what ``chunkgraph status`` shows) every ``STATUS_POLL_S`` until
    ``stop``: (time asked, time answered, top tasks done, objects under ``root``, the
    flows' statuses) each. A finished flow counts as all done (its markers are gone)."""
    import obstore

    from chunkgraph.flow.state import FlowStatus, StateRoot
    from chunkgraph.flow.state._status import read_flows
    from chunkgraph.flow.state._store import state_store

    state = StateRoot.of(root)
    while not stop.is_set():
        t0 = time.time()
        flows = read_flows(state, sizes=False)
        end = time.time()
        done = sum(
            (f.top_total or 0) if f.status is FlowStatus.FINISHED else f.top_done for f in flows
        )
        objects = sum(len(b) for b in obstore.list(state_store(state).store))
        samples.append((t0, end, done, objects, ",".join(f.status.value for f in flows)))
        stop.wait(STATUS_POLL_S)


def run_status_case(workdir: Path, workers: int, top_tasks: int) -> dict[str, Any]:
    """Child process: the flow with its state on moto's S3, ``status`` polled meanwhile;
    each answer's lag: when it came back, less when the calls had reached its count."""
    import threading

    from chunkgraph.execute import DaskExecutor
    from chunkgraph.testing import s3_server

    for old in workdir.glob("status-*"):
        shutil.rmtree(old)
    root = "s3://status-bench/state"
    with (
        s3_server(("status-bench",)),
        _cluster(workers) as client,
    ):
        _plus_one_flow(workdir, 2000, DaskExecutor(client), "status-warm", "s3://status-bench/warm")
        samples: list[tuple[float, float, int, int, str]] = []
        stop = threading.Event()
        poller = threading.Thread(target=_poll_status, args=(root, stop, samples))
        poller.start()
        try:
            wall = _plus_one_flow(workdir, top_tasks, DaskExecutor(client), "status-run", root)
        finally:
            stop.set()
            poller.join()
    times = sorted(t for _, t, _ in _calls(workdir / "status-run-log"))
    # An answer of n done is behind since the (n+1)-th call was made (0 if not yet made).
    # Answers that list no flow (its state not yet made) have no count to lag.
    lags = [
        max(0.0, end - times[n]) if n < len(times) else 0.0
        for _, end, n, _, flows in samples
        if flows
    ]
    asked = [end - t0 for t0, end, *_ in samples]
    objects = max((s[3] for s in samples), default=0)
    return dict(
        top_tasks=top_tasks, wall=wall, samples=len(samples), objects=objects,
        lag_median=statistics.median(lags) if lags else -1.0, lag_max=max(lags, default=-1.0),
        read_s=statistics.median(asked) if asked else -1.0,
        statuses=sorted({s for *_, s in samples}),
    )  # fmt: skip


# --- the driver ------------------------------------------------------------------------

CASES = {
    "dask": "(1) plain Dask, client.get of the dict graph",
    "chunkgraph": "(2) chunkgraph DaskExecutor (planned, fused)",
    "local": "(3) chunkgraph threads, this machine",
    "flow_local": "(4) flow, executor='threads'",
    "flow_dask": "(5) flow, DaskExecutor on the cluster",
    "batch_local": "(6) 2,048 one-chunk top tasks, executor='threads'",
    "batch_dask": "(7) 2,048 one-chunk top tasks, DaskExecutor (batched)",
}


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}" if n else "-"


def table(results: dict[str, dict[str, float]]) -> str:
    lines = [
        "| case | scheduler tasks | wall s | client+scheduler peak MiB | workers peak MiB |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in CASES.items():
        r = results[name]
        tasks = f"{int(r['tasks']):,}" if r["tasks"] else "-"
        lines.append(
            f"| {label} | {tasks} | {r['wall']:.2f} | {_mib(r['peak'])} | "
            f"{_mib(r['workers_peak'])} |"
        )
    return "\n".join(lines)


def targets(results: dict[str, dict[str, float]]) -> str:
    d, c = results["dask"], results["chunkgraph"]
    fewer = d["tasks"] / max(c["tasks"], 1)
    faster = d["wall"] / c["wall"]
    flow = results["flow_dask"]["wall"] / results["flow_local"]["wall"]
    batch = results["batch_dask"]["wall"] / results["batch_local"]["wall"]
    batch_tasks = results["batch_dask"]["tasks"]
    many = results["many"]
    n = int(many["top_tasks"])
    rows = [
        ("scheduler tasks, (1) / (2)", f"{fewer:.1f}x", ">= 3x", fewer >= 3),
        ("wall, (1) / (2)", f"{faster:.1f}x", ">= 2x", faster >= 2),
        ("flow wall, (5) / (4)", f"{flow:.2f}x", "<= 1.2x", flow <= 1.2),
        ("2,048 top tasks: scheduler tasks (7)", f"{batch_tasks:,.0f}", "<= 204",
         batch_tasks <= 2048 / 10),
        ("2,048 top tasks: wall, (7) / (6)", f"{batch:.2f}x", "<= 1.3x", batch <= 1.3),
        (f"{n:,} top tasks: scheduler tasks (8)", f"{many['tasks']:,.0f}",
         f"<= {max(1, n // 100):,}", many["tasks"] <= n / 100),
        (f"{n:,} top tasks: client + scheduler peak", f"{_mib(many['peak'])} MiB", "<= 1,024 MiB",
         many["peak"] <= 2**30),
        (f"{n:,} top tasks: first task processing", f"{many['first']:.1f} s", "<= 10 s",
         many["first"] <= 10),
        (f"{n:,} top tasks: client + scheduler CPU per top task", f"{many['cpu_us']:.1f} us",
         "<= 50 us", many["cpu_us"] <= 50),
    ]  # fmt: skip
    lines = ["| target | measured | wanted | |", "|---|---:|---:|---|"]
    lines += [f"| {a} | {b} | {c} | {'met' if ok else 'missed'} |" for a, b, c, ok in rows]
    return "\n".join(lines)


def kill_report(r: dict[str, Any]) -> str:
    n, target = int(r["top_tasks"]), int(r["unrecorded"])
    return "\n".join([
        f"(9) {n:,} one-voxel top tasks, one of 2 worker processes SIGKILLed at half way:",
        f"  batches in flight on it: {r['batches']} ({r['batch_tasks']:,} tasks), "
        f"{r['recorded']:,} of them recorded at the kill, {r['ran_unrecorded']:,} run "
        "but not yet recorded",
        f"  fn calls {r['calls']:,} for {r['distinct']:,} tasks: redone {r['redone']:,} "
        f"(target <= {target:,}, the unrecorded tasks of those batches: "
        f"{'met' if r['redone'] <= target else 'missed'}); redone outside them: "
        f"{r['redone_outside']}",
        f"  wall {r['killed']:.1f} s against {r['whole']:.1f} s and {r['again']:.1f} s "
        f"unkilled, before and after ({r['killed'] / min(r['whole'], r['again']):.2f}x the "
        f"faster); output identical: {r['identical']} "
        f"(every voxel written: {r['all_one']})",
    ])  # fmt: skip


def status_report(r: dict[str, Any]) -> str:
    n = int(r["top_tasks"])
    return "\n".join([
        f"(10) {n:,} one-voxel top tasks, state on moto's S3, status read every "
        f"{STATUS_POLL_S} s: {r['samples']} reads, {r['read_s']:.2f} s each (median)",
        f"  progress behind the truth (the fn calls): median {r['lag_median']:.1f} s, "
        f"max {r['lag_max']:.1f} s (target: seconds: "
        f"{'met' if 0 <= r['lag_max'] <= 5 else 'missed'}); wall {r['wall']:.1f} s",
        f"  objects under the state's prefix during the run: at most {r['objects']:,}; "
        f"statuses seen: {', '.join(r['statuses'])}",
    ])  # fmt: skip


KILL_REPORTS = {"kill": kill_report, "status": status_report}


def flow_only(args: argparse.Namespace, width: int, workdir: Path) -> None:
    """``--only flow``: (4) and (5) alone, interleaved ``--rounds`` times, each round's
    ratio, read amplifications and the load average printed, outputs compared."""
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    make_source(workdir / "src.zarr", shape)
    print(f"flow: {shape} float32; LocalCluster {args.workers} processes x 1 thread")
    print("| round | (4) threads s | (5) Dask s | (5) / (4) | read amp. (4) | (5) | load avg |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in range(1, args.rounds + 1):
        local = _run_case("flow_local", args, width)
        dask = _run_case("flow_dask", args, width)
        load = os.getloadavg()[0]
        print(
            f"| {n} | {local['wall']:.2f} | {dask['wall']:.2f} | "
            f"{dask['wall'] / local['wall']:.2f}x | {local['amp']:.2f} | {dask['amp']:.2f} | "
            f"{load:.1f} |",
            flush=True,
        )
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    a = volume.open(str(workdir / "flow_local.zarr")).read(Box.from_shape(shape))
    b = volume.open(str(workdir / "flow_dask.zarr")).read(Box.from_shape(shape))
    print(f"flow outputs identical: {bool(np.array_equal(a, b))}")


def _run_case(name: str, args: argparse.Namespace, width: int) -> dict[str, Any]:
    """Case ``name`` in a subprocess of its own; its figures."""
    cmd = [sys.executable, __file__, "--case", name, "--workdir", args.workdir]
    cmd += ["--width", str(width), "--length", str(args.length)]
    cmd += ["--workers", str(args.workers), "--top-tasks", str(args.top_tasks)]
    cmd += ["--status-tasks", str(args.status_tasks)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"case {name} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2000, help="chains in the graph")
    parser.add_argument("--length", type=int, default=9, help="tasks per chain")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    parser.add_argument("--quick", action="store_true", help="500 chains, a 128^3 volume")
    parser.add_argument("--workdir", default="bench-out/dask_backend")
    parser.add_argument(
        "--top-tasks", type=int, default=DEFAULT_TOP_TASKS,
        help="top tasks of the simulated flow (8), a multiple of 1,000",
    )  # fmt: skip
    parser.add_argument(
        "--only", choices=["flow", "kill", "status"],
        help="only (4) and (5) the volume flow, interleaved --rounds times, or (9) a worker "
        "killed mid-run or (10) status on a bucket (these two not in the default run)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="rounds of --only flow")
    parser.add_argument(
        "--status-tasks", type=int, default=KILL_STATUS_TASKS,
        help="top tasks of (10), a multiple of 1,000",
    )  # fmt: skip
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    width = 500 if args.quick else args.width
    workdir = Path(args.workdir)
    if args.case:
        if args.case == "kill":
            result = run_kill_case(workdir, args.workers, args.top_tasks)
        elif args.case == "status":
            result = run_status_case(workdir, args.workers, args.status_tasks)
        elif args.case.startswith("flow"):
            result = run_flow_case(args.case, workdir, args.workers)
        elif args.case.startswith("batch"):
            result = run_batch_case(args.case, workdir, args.workers)
        elif args.case == "many":
            result = run_many_case(workdir, args.workers, args.top_tasks)
        else:
            result = run_graph_case(args.case, width, args.length, args.workers)
        print(json.dumps(result))
        return
    workdir.mkdir(parents=True, exist_ok=True)
    if args.only == "flow":
        flow_only(args, width, workdir)
        return
    if args.only:
        print(KILL_REPORTS[args.only](_run_case(args.only, args, width)))
        return
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    make_source(workdir / "src.zarr", shape)
    make_batch_source(workdir / "batch-src.zarr")
    tasks = width * args.length + width - 1
    print(
        f"graph: {width} chains x {args.length} numpy tasks + {width - 1} sums = {tasks:,} "
        f"tasks; flow: {shape} float32; LocalCluster {args.workers} processes x 1 thread; "
        f"{os.cpu_count()} cores"
    )
    results = {}
    for name in [*CASES, "many"]:
        results[name] = _run_case(name, args, width)
    graph_checks = {results[n]["check"] for n in ("dask", "chunkgraph", "local")}
    print(table(results))
    print()
    print(targets(results))
    print(f"\ngraph results agree: {len(graph_checks) == 1}", end="; ")
    from chunkgraph import volume
    from chunkgraph.geometry import Box

    a = volume.open(str(workdir / "flow_local.zarr")).read(Box.from_shape(shape))
    b = volume.open(str(workdir / "flow_dask.zarr")).read(Box.from_shape(shape))
    print(f"flow outputs identical: {bool(np.array_equal(a, b))}", end="; ")
    a = volume.open(str(workdir / "batch_local.zarr")).read(Box.from_shape(BATCH_SHAPE))
    b = volume.open(str(workdir / "batch_dask.zarr")).read(Box.from_shape(BATCH_SHAPE))
    print(f"2,048-task outputs identical: {bool(np.array_equal(a, b))}")
    many = results["many"]
    print(
        f"(8) {int(many['top_tasks']):,} top tasks: {many['wall']:.1f} s wall, "
        f"{many['tasks']:,.0f} scheduler tasks"
    )


if __name__ == "__main__":
    main()
