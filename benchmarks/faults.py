"""Benchmark: the apply flow under injected faults (kill -9, a killed worker, a full disk).

Why: the flow promises that ``resume=True`` after any crash, SIGKILL included, skips
finished work and gives identical output, and that a failed run fails cleanly. This
checks the promise on a real flow and prints what it measured.

A real flow: Zarr v3 on disk, a (128, 256, 256) float32 input with 64^3 storage chunks,
two levels (top 64^3 blended by 8, bottom 40^3 cropped by 4) and a scipy Gaussian as
``fn``, on ``executor="threads"`` and ``executor="processes"``. Every run happens in
a child process of this script. Faults:

1. **kill -9**: at a random moment between 10% and 90% of a clean run's time the whole
   process group of the run (driver, fork server, workers, resource tracker) gets
   SIGKILL; a new process reruns with ``resume=True``.
2. **a killed worker** (processes): one worker process gets SIGKILL once, mid-run. With
   ``retries`` (when ``apply`` has it, 1 is passed) the run should complete; without,
   it fails and a new process resumes.
3. **a full disk**: the intermediates, then dst, live on a tmpfs sized to ~40% of what
   they need (mounted in a user + mount namespace with ``unshare``); the run must fail
   with a clear error, every dst region it reported done must already be right, and a
   resume with enough space must finish it. Skipped, with the reason, where the
   machine does not allow the mount.
4. **kill -9 during the final cleanup**: a run that finished every task is killed while
   it deletes its intermediates (on a tmpfs), by strace injecting SIGKILL at the
   driver thread's Nth ``unlinkat``: N is the middle of each phase of the deletion
   (the layers, each markers folder), found from a traced clean run. The kept state is
   resumed from real disk. The deletion order is the filesystem's directory order
   (tmpfs: newest first; ext4: hash order), so other filesystems see other phases.
   Needs strace and the tmpfs mount; skipped with the reason otherwise.
5. **kill -9 of a process-mode task graph**: the flow's tasks exchange no array of
   256 KiB or more, so its runs make no ``/dev/shm/cg_*`` segment and faults 1-4 leave
   the shared-memory cleanup unexercised. Here a ``chunkgraph`` Graph of 47 tasks whose
   results are 8 MiB int64 arrays (16 leaves, a stage each, pairwise sums) runs with
   ``run(executor="processes")``, so every array travels through a segment; its process
   group gets SIGKILL at a random point of the task phase (after its pool's first
   segment appears), which leaves the segments behind ("left at the kill"). A fresh
   process then runs the same graph: its process pool sweeps, as it starts, the
   segments whose owner died ("swept by the rerun" counts the killed run's segments
   that sweep removed; another program's pool starting meanwhile may take some first).
   Its result must equal numpy's, computed here without chunkgraph.

Per run it measures, from what happened:

* identical: the final dst read whole equals a clean run's bytes for bytes;
* redone: tasks the resume executed minus tasks not done when the fault struck
  (done = a done marker under ``<intermediates>/<flow_id>/markers/{top,reduce}/``,
  counted once the faulted run's processes are gone; all tasks for a kill during the
  cleanup, which starts after every task finished), i.e. finished work done twice.
  Tasks running at the fault lose their partial work by design; there are at most as
  many as the executor has workers ("in flight" column, the bound);
* leftovers after the final successful run: files under the intermediates root
  (default ``.<dst name>.chunkgraph`` beside dst; a completion record
  ``<flow id>.done``, kept on purpose by versions that write one, does not count),
  ``/dev/shm/cg_*`` segments that did not exist before and were created by this
  benchmark's processes (segment names carry the creator's pid; segments of other
  programs running meanwhile are ignored), and processes of a killed run still alive
  after the kill. The "of made" count says how many segments the runs created at all
  (seen by polling /dev/shm every 20 ms, so short-lived ones may be missed).

    python benchmarks/faults.py [--runs 8] [--quick] [--seed 0] [--out bench-out/faults]

It exits 0 when targets are missed (it prints MISSED) and non-zero only on its own errors.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunkgraph import volume
from chunkgraph.geometry import Box

SHAPE = (128, 256, 256)
CHUNK = 64  # storage chunk of src and dst
TOP = (64, 64, 64)
BOTTOM = (40, 40, 40)  # divides TOP + 2 * BLEND = 80
BLEND = 8
CROP = 4
SIGMA = 1.0  # gaussian_filter's reach: int(4 * sigma + 0.5) = 4 = CROP
CACHE_BYTES = 16 << 20
EXECUTORS = ("threads", "processes")
SHM_DIR = Path("/dev/shm")
CHILD_TIMEOUT_S = 300.0
MAX_NOTES = 12  # notes listed under a table
FULL_SHARE = 0.4  # a full-disk tmpfs holds this share of what the run needs there


def smooth(x: np.ndarray) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    out: np.ndarray = gaussian_filter(x, sigma=SIGMA)
    return out


# --- the child: one apply call ------------------------------------------------------------------


def apply_extras(executor: str, retries: bool) -> dict[str, Any]:
    """Keywords this version of ``apply`` accepts beyond the flow's own (detected, not assumed)."""
    params = inspect.signature(volume.apply).parameters
    extra: dict[str, Any] = {}
    if "workers" in params:
        extra["workers"] = workers_of(executor)
    if retries and "retries" in params:
        extra["retries"] = 1
    if "timeout" in params:
        extra["timeout"] = CHILD_TIMEOUT_S  # a guard against hangs, far above any task
    return extra


def workers_of(executor: str) -> int:
    """Workers the executor runs at once: the bound on tasks in flight."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def run_child(cfg: dict[str, Any]) -> None:
    """Child process: create or open dst, announce the flow id, run apply, write its report."""
    if cfg.get("mode") == "graph":
        run_graph_child(cfg)
        return
    status = Path(cfg["status"])
    src = volume.open(cfg["src"], cache_bytes=CACHE_BYTES)
    dst = volume.create(cfg["dst"], SHAPE, (CHUNK,) * 3, "float32", exist_ok=True)
    kwargs: dict[str, Any] = dict(
        chunk_sizes=[TOP, BOTTOM],
        crop_pads=[0, CROP],
        blend_pads=[BLEND, 0],
        blend_modes="quadratic",
        executor=cfg["executor"],
        intermediates=cfg["intermediates"],
        resume=cfg["resume"],
    )
    kwargs.update(apply_extras(cfg["executor"], cfg["retries"]))
    dry = volume.apply(smooth, src, dst, dry_run=True, **kwargs)
    _write_json(status.with_suffix(".started"), {"flow_id": dry.flow_id, "pid": os.getpid()})
    report = volume.apply(smooth, src, dst, **kwargs)
    fields = (
        "flow_id",
        "tasks_per_level",
        "reductions",
        "top_tasks_skipped",
        "reductions_skipped",
        "wall_seconds",
        "temporary_bytes",
        "bytes_written",
    )
    _write_json(status.with_suffix(".done"), {k: getattr(report, k, None) for k in fields})


# --- the child: one process-mode task graph ----------------------------------------------------

# A fan-in of int64 arrays of GRAPH_ELEMS elements (8 MiB each, far above the process pool's
# 256 KiB shared-memory threshold): every result and every argument between the driver and
# the workers travels as a /dev/shm/cg_* segment. Integer arithmetic, so any evaluation
# order gives the same bytes.
GRAPH_LEAVES = 16
GRAPH_ELEMS = 1 << 20
GRAPH_ROUNDS = 6  # work of a stage task, so that a run lasts a few seconds
GRAPH_MOD = 65521
GRAPH_TASKS = 3 * GRAPH_LEAVES - 1  # leaves, stages, and the pairwise sums


def graph_leaf(i: int) -> np.ndarray:
    out: np.ndarray = (np.arange(GRAPH_ELEMS, dtype=np.int64) * (i + 1)) % GRAPH_MOD
    return out


def graph_stage(a: np.ndarray, i: int) -> np.ndarray:
    out = a
    for _ in range(GRAPH_ROUNDS):
        out = (out * 31 + i) % GRAPH_MOD
    return out


def graph_combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = a + b
    return out


def graph_reference() -> np.ndarray:
    """The graph's result computed with numpy alone, in this process."""
    total = np.zeros(GRAPH_ELEMS, dtype=np.int64)
    for i in range(GRAPH_LEAVES):
        total += graph_stage(graph_leaf(i), i)
    return total


def record_sweeps() -> list[str]:
    """A list that gets the segment names the process pool's start-up sweep of orphans
    removes in this process (empty, and nothing wrapped, where the pool has no sweep)."""
    swept: list[str] = []
    # The pool module calls the sweep by its own global name (the pool moved into a
    # subpackage in later versions).
    for module in ("chunkgraph.execute.pool._process_pool", "chunkgraph.execute._process_pool"):
        with contextlib.suppress(ImportError):
            pool = importlib.import_module(module)
            break
    else:
        return swept
    original = getattr(pool, "sweep_orphans", None)
    if original is None:
        return swept

    def recording() -> Any:
        names = original()
        swept.extend(names or ())
        return names

    setattr(pool, "sweep_orphans", recording)  # noqa: B010 - the name the pool calls
    return swept


def run_graph_child(cfg: dict[str, Any]) -> None:
    """Child process: build the graph, announce, run it on processes, save its result."""
    import chunkgraph as cg

    status = Path(cfg["status"])
    swept = record_sweeps()
    with cg.Graph() as g:
        parts = [g.add(graph_stage, g.add(graph_leaf, i), i) for i in range(GRAPH_LEAVES)]
        while len(parts) > 1:
            pairs = zip(parts[::2], parts[1::2], strict=True)
            parts = [g.add(graph_combine, a, b) for a, b in pairs]
    extra: dict[str, Any] = {}
    params = inspect.signature(cg.run).parameters
    if "workers" in params:
        extra["workers"] = workers_of("processes")
    if "timeout" in params:
        extra["timeout"] = CHILD_TIMEOUT_S
    _write_json(status.with_suffix(".started"), {"flow_id": "", "pid": os.getpid()})
    t0 = time.perf_counter()
    result = cg.run(g, parts[0], executor="processes", **extra)
    wall = time.perf_counter() - t0
    np.save(status.with_suffix(".npy"), np.asarray(result))
    _write_json(status.with_suffix(".done"), {"wall_seconds": wall, "swept": swept})


# --- observing children -------------------------------------------------------------------------


class TreeWatcher:
    """Polls a child's process tree, remembering every pid (with its start time) seen in it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, float] = {}
        self.segments: set[str] = set()  # /dev/shm/cg_* names seen while it ran
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    self.seen.setdefault(p.pid, p.create_time())
            self.segments |= shm_names()
            self._stop.wait(0.02)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        return set(self.seen)

    def survivors(self) -> list[int]:
        """Pids seen in the tree that still run (same start time, not a zombie)."""
        import psutil

        alive = []
        for pid, created in self.seen.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return alive

    def workers(self) -> list[int]:
        """Live worker processes: descendants that are neither the driver, a parent of
        another descendant (a fork server) nor multiprocessing's resource tracker."""
        import psutil

        try:
            procs = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        parents = {p.ppid() for p in procs if p.is_running()}
        found = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(p.cmdline())
                if "resource_tracker" in cmd or p.pid in parents or p.pid == self.pid:
                    continue
                if "python" in p.name() or "python" in cmd:
                    found.append(p.pid)
        return found


def shm_names() -> set[str]:
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith("cg_")}
    except OSError:
        return set()


def ours(new: set[str], pids: set[int]) -> set[str]:
    """The segments among ``new`` that processes in ``pids`` made or own, with every other
    segment of their pools.

    Names are ``<pool prefix><creator pid>_<k>``; the prefix is ``cg_<6 hex>_`` or
    ``cg_<owner pid, hex>_<start>_<pid ns>_<n>_`` depending on the version.
    """

    def pid_at(text: str, base: int) -> int | None:
        try:
            return int(text, base)
        except ValueError:
            return None

    mine: set[str] = set()
    for name in new:
        parts = name.split("_")
        if len(parts) < 4:
            continue
        owner = pid_at(parts[1], 16) if len(parts) >= 7 else None
        if pid_at(parts[-2], 10) in pids or (owner is not None and owner in pids):
            mine.add(name)
    pools = {"_".join(n.split("_")[:-2]) + "_" for n in mine}
    return mine | {n for n in new if any(n.startswith(p) for p in pools)}


def files_under(root: Path) -> int:
    """Files and folders left under an intermediates root (0 when it is gone or holds only
    completion records, ``<flow id>.done``, which the flow keeps on purpose)."""
    if not root.exists():
        return 0
    left = [p for p in root.rglob("*") if not (p.parent == root and p.suffix == ".done")]
    kept = any(p.suffix == ".done" for p in root.iterdir())
    return len(left) if kept else max(1, len(left))


def markers(root: Path, flow_id: str) -> tuple[int, int]:
    """Done markers (top, reduce) of one flow under an intermediates root."""
    counts = []
    for kind in ("top", "reduce"):
        folder = root / flow_id / "markers" / kind
        try:
            counts.append(sum(1 for n in os.listdir(folder) if not n.startswith(".")))
        except OSError:
            counts.append(0)
    return counts[0], counts[1]


def completed(root: Path, flow_id: str) -> bool:
    """Whether the flow's completion record exists: every task finished (the run writes
    it before deleting the markers, so a kill after it leaves few or no markers)."""
    return (root / f"{flow_id}.done").exists()


def tasks_done(root: Path, flow_id: str, total: int) -> int:
    """Tasks of one flow finished: all once it is complete, else its done markers."""
    return total if completed(root, flow_id) else sum(markers(root, flow_id))


def cleanup_state(root: Path, flow_id: str) -> str:
    """What an interrupted deletion left of a flow: its completion record, its folder, and
    copies renamed away for deletion (``.<flow id>.deleted-*``, by versions that do so)."""
    parts = [f"completion record {'present' if completed(root, flow_id) else 'absent'}"]
    for folder in [root / flow_id, *sorted(root.glob(f".{flow_id}.deleted-*"))]:
        if not folder.is_dir():
            continue
        counts = []
        for kind in ("top", "reduce"):
            with contextlib.suppress(OSError):
                n = sum(1 for x in os.listdir(folder / "markers" / kind) if not x.startswith("."))
                counts.append(f"{n} {kind}")
        layers = "layers" if (folder / "layers").exists() else "no layers"
        what = "flow folder" if folder.name == flow_id else "renamed-away copy"
        parts.append(f"{what} with {layers}, markers: {', '.join(counts) or 'none'}")
    if len(parts) == 1:
        parts.append("no flow folder")
    return "; ".join(parts)


def marker_keys(root: Path, flow_id: str, kind: str) -> list[tuple[int, ...]]:
    folder = root / flow_id / "markers" / kind
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(folder) if not n.startswith(".")]
        return [tuple(int(i) for i in n.split("_")) for n in names]
    return []


def flow_dirs(root: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(p.name for p in root.iterdir() if (p / "markers").is_dir())
    return []


def strace_kill_at(nth: int) -> list[str]:
    """strace arguments that SIGKILL a traced thread at its ``nth`` unlinkat call."""
    return [
        "strace",
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=unlinkat",
        "-e",
        f"inject=unlinkat:signal=KILL:when={nth}",
    ]


def message_lines(text: str, *needles: str) -> list[str]:
    """The first line of a child's output holding every needle, as a note."""
    for line in text.splitlines():
        if all(n in line for n in needles):
            return ["message: " + line.strip(" |")[:200]]
    return []


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def dst_bytes(path: Path) -> bytes:
    vol = volume.open(str(path))
    return bytes(vol.read(vol.bounds).tobytes())


# --- the driver's bookkeeping -------------------------------------------------------------------


@dataclass
class Outcome:
    """One faulted run and its recovery."""

    fault: str
    executor: str
    first: str  # what the faulted run did
    identical: bool
    total: int  # tasks of a whole run: top-level tasks + reductions
    redone: int | None  # None when no resume was needed
    bound: int
    flow_left: int
    shm_left: int
    procs_left: int
    notes: list[str] = field(default_factory=list)
    shm_used: int = 0  # segments its processes made (the leftover check's exposure)
    recovery: str = "resume"  # how the work is finished after the fault: "resume" or "rerun"
    shm_at_kill: int | None = None  # our segments present right after a kill (graph runs)
    swept: int | None = None  # of those, how many the rerun's start-up sweep removed


@dataclass
class Bench:
    work: Path
    out: Path
    rng: random.Random
    src: Path = field(init=False)
    ref: bytes = b""
    clean_wall: dict[str, float] = field(default_factory=dict)
    total: int = 0
    temporary_bytes: int = 0
    dst_disk_bytes: int = 0
    red_chunk: tuple[int, ...] = ()
    foreign_shm: int = 0
    used_shm: set[str] = field(default_factory=set)  # segments our runs made, ever
    n_child: int = 0
    graph_ref: np.ndarray | None = None  # the task graph's result, computed with numpy
    graph_wall: float = 0.0  # a clean graph run's time in run()
    graph_lead: float = 0.0  # of which before its first segment appeared (pool start)

    def __post_init__(self) -> None:
        self.src = self.work / "src.zarr"

    # children

    def stop(self, watch: TreeWatcher) -> set[int]:
        """Stop watching a child; its pids. Remembers the segments its processes made."""
        pids = watch.stop()
        self.used_shm |= ours(watch.segments, pids)
        return pids

    def spawn(
        self,
        executor: str,
        dst: Path,
        *,
        resume: bool,
        intermediates: Path | None = None,
        retries: bool = False,
        wrap: Sequence[str] = (),
    ) -> tuple[subprocess.Popen[bytes], Path, Path]:
        """Start one apply in a new session; returns the process, its status stem and log."""
        cfg = dict(
            src=str(self.src),
            dst=str(dst),
            executor=executor,
            resume=resume,
            intermediates=None if intermediates is None else str(intermediates),
            retries=retries,
        )
        return self.launch(cfg, wrap)

    def launch(
        self, cfg: dict[str, Any], wrap: Sequence[str] = ()
    ) -> tuple[subprocess.Popen[bytes], Path, Path]:
        """Start a child with ``cfg`` (plus its status stem) in a new session."""
        self.n_child += 1
        stem = self.work / f"child{self.n_child:03d}"
        cfg = {**cfg, "status": str(stem)}
        cmd = [*wrap, sys.executable, os.path.abspath(__file__), "--child", json.dumps(cfg)]
        log = self.out / "logs" / f"child{self.n_child:03d}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        return proc, stem, log

    @staticmethod
    def wait_started(proc: subprocess.Popen[bytes], stem: Path) -> str | None:
        """The flow id once the child is about to run apply; None if it exited first."""
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        started = stem.with_suffix(".started")
        while time.monotonic() < deadline:
            if started.exists():
                return str(json.loads(started.read_text())["flow_id"])
            if proc.poll() is not None:
                return None
            time.sleep(0.005)
        raise RuntimeError(f"child {proc.pid} did not start apply in {CHILD_TIMEOUT_S} s")

    @staticmethod
    def finish(proc: subprocess.Popen[bytes], stem: Path) -> tuple[int, dict[str, Any] | None]:
        """Wait for a child; its exit status and report (None when it failed)."""
        try:
            rc = proc.wait(CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -9999, None
        done = stem.with_suffix(".done")
        report = json.loads(done.read_text()) if rc == 0 and done.exists() else None
        return rc, report

    def resume_and_check(
        self,
        executor: str,
        dst: Path,
        root: Path,
        done_at_fault: int,
        flow_id: str | None,
        *,
        retries: bool = False,
    ) -> tuple[bool, int | None, list[str], set[int]]:
        """Rerun with resume=True; (identical, redone, notes, pids seen)."""
        notes: list[str] = []
        proc, stem, log = self.spawn(
            executor, dst, resume=True, intermediates=root, retries=retries
        )
        watch = TreeWatcher(proc.pid)
        rc, report = self.finish(proc, stem)
        pids = self.stop(watch)
        if report is None:
            notes.append(f"resume failed (exit {rc}, see {log})")
            return False, None, notes, pids
        redone = self.redone(report, done_at_fault, flow_id, notes)
        identical = dst_bytes(dst) == self.ref
        return identical, redone, notes, pids

    def redone(
        self, report: dict[str, Any], done_at_fault: int, flow_id: str | None, notes: list[str]
    ) -> int:
        """Tasks the resume executed minus those not done at the fault: finished work redone."""
        if flow_id is not None and report["flow_id"] != flow_id:
            notes.append(f"flow id changed on resume: {flow_id} -> {report['flow_id']}")
        skipped = int(report["top_tasks_skipped"] or 0) + int(report["reductions_skipped"] or 0)
        return (self.total - skipped) - (self.total - done_at_fault)

    def leftovers(
        self, root: Path | None, shm_before: set[str], pids: set[int]
    ) -> tuple[int, int, list[str]]:
        """(paths left under ``root``, our new segments, notes); ``root`` None: no flow."""
        new = shm_names() - shm_before
        mine = ours(new, pids)
        self.foreign_shm += len(new - mine)
        notes = [f"left {len(mine)} segment(s), e.g. {sorted(mine)[0]}"] if mine else []
        if root is None:
            return 0, len(mine), notes
        left = files_under(root)
        if left:
            notes.append(f"left {left} path(s) under {root.name}: {flow_dirs(root)}")
        return left, len(mine), notes

    def fresh(self, name: str) -> tuple[Path, Path]:
        """A new dst path and its default intermediates root (neither exists)."""
        dst = self.work / "runs" / f"{name}.zarr"
        root = dst.parent / f".{dst.name}.chunkgraph"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        return dst, root

    # setup

    def make_source(self) -> None:
        src = volume.create(str(self.src), SHAPE, (CHUNK,) * 3, "float32")
        rng = np.random.default_rng(0)
        for z in range(0, SHAPE[0], CHUNK):
            slab = rng.standard_normal((CHUNK, *SHAPE[1:]), dtype=np.float32)
            src.write(Box((z, 0, 0), (z + CHUNK, *SHAPE[1:])), slab)

    def baseline(self) -> list[Outcome]:
        """A clean run per executor: the reference bytes, wall times, sizes."""
        rows = []
        for executor in EXECUTORS:
            dst, root = self.fresh(f"clean-{executor}")
            before, used0 = shm_names(), len(self.used_shm)
            proc, stem, log = self.spawn(executor, dst, resume=False)
            watch = TreeWatcher(proc.pid)
            rc, report = self.finish(proc, stem)
            pids = self.stop(watch)
            if report is None:
                raise RuntimeError(f"the clean {executor} run failed (exit {rc}); see {log}")
            data = dst_bytes(dst)
            if not self.ref:
                self.ref = data
                self.total = int(report["tasks_per_level"][0]) + int(report["reductions"])
                self.temporary_bytes = int(report["temporary_bytes"])
                self.dst_disk_bytes = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
            self.clean_wall[executor] = float(report["wall_seconds"])
            left, shm, notes = self.leftovers(root, before, pids)
            rows.append(
                Outcome(
                    "none (clean run)",
                    executor,
                    "completed",
                    data == self.ref,
                    self.total,
                    None,
                    workers_of(executor),
                    left,
                    shm,
                    0,
                    notes,
                )
            )
            rows[-1].shm_used = len(self.used_shm) - used0
            print(
                f"  clean {executor}: {report['wall_seconds']:.2f} s, tasks per level "
                f"{report['tasks_per_level']}, reductions {report['reductions']}, "
                f"{report['temporary_bytes'] / 2**20:.1f} MiB temporary",
                flush=True,
            )
        dst_chunk = (CHUNK,) * 3
        # The documented reduction grid: dst chunks merged per axis up to the top chunk.
        self.red_chunk = tuple(max(1, t // c) * c for t, c in zip(TOP, dst_chunk, strict=True))
        return rows

    # fault 1

    def kill9(self, executor: str, run: int, runs: int) -> Outcome:
        dst, root = self.fresh(f"kill9-{executor}-{run}")
        before, used0 = shm_names(), len(self.used_shm)
        proc, stem, log = self.spawn(executor, dst, resume=False)
        watch = TreeWatcher(proc.pid)
        flow_id = self.wait_started(proc, stem)
        if flow_id is None:
            raise RuntimeError(f"the run to kill exited early (exit {proc.wait()}); see {log}")
        share = self.rng.uniform(0.1, 0.9)
        t0 = time.monotonic()
        time.sleep(share * self.clean_wall[executor])
        notes: list[str] = []
        counted = sum(markers(root, flow_id))
        finished_first = proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        at = time.monotonic() - t0
        proc.wait()
        time.sleep(0.2)  # let the kernel finish delivering SIGKILL to the group
        alive = watch.survivors()
        for pid in alive:  # descendants of our child that escaped the group kill
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pids = self.stop(watch)
        done = tasks_done(root, flow_id, self.total)
        if completed(root, flow_id):
            if not finished_first:
                notes.append("killed after every task finished (completion record written)")
        elif flow_id not in flow_dirs(root) and not finished_first:
            notes.append(f"no flow dir {flow_id} at the kill; found {flow_dirs(root)}")
        elif done != counted:
            notes.append(f"{done - counted} task(s) finished between counting and the kill")
        first = "finished before the kill" if finished_first else f"killed at {at:.2f} s"
        if alive:
            notes.append(f"{len(alive)} process(es) of the killed run survived the group kill")
        identical, redone, more, pids2 = self.resume_and_check(executor, dst, root, done, flow_id)
        left, shm, leftover_notes = self.leftovers(root, before, pids | pids2)
        row = Outcome(
            "kill -9",
            executor,
            first,
            identical,
            self.total,
            redone,
            workers_of(executor),
            left,
            shm,
            len(alive),
            notes + more + leftover_notes,
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  [kill -9 {executor} {run + 1}/{runs}] {first} ({share:.0%} of clean), "
            f"done {done}/{self.total}; resume redid {redone} finished task(s); "
            f"identical: {identical}; leftovers: {left} path(s), {shm} segment(s)"
            + "".join(f"\n      {n}" for n in row.notes),
            flush=True,
        )
        return row

    # fault 2

    def kill_worker(self, run: int, runs: int) -> Outcome:
        executor = "processes"
        retries = "retries" in inspect.signature(volume.apply).parameters
        dst, root = self.fresh(f"worker-{run}")
        before, used0 = shm_names(), len(self.used_shm)
        proc, stem, log = self.spawn(executor, dst, resume=False, retries=retries)
        watch = TreeWatcher(proc.pid)
        flow_id = self.wait_started(proc, stem)
        if flow_id is None:
            raise RuntimeError(f"the run exited before a worker could be killed; see {log}")
        deadline = time.monotonic() + self.rng.uniform(0.2, 0.7) * self.clean_wall[executor]
        victim = None
        while victim is None and proc.poll() is None:
            workers = watch.workers()
            if workers and time.monotonic() >= deadline:
                victim = self.rng.choice(workers)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            time.sleep(0.01)
        rc, _ = self.finish(proc, stem)
        time.sleep(0.2)
        alive = watch.survivors()
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pids = self.stop(watch)
        notes: list[str] = []
        more: list[str] = []
        pids2: set[int] = set()
        redone: int | None = None
        if victim is None:
            notes.append("the run finished before a worker was found to kill")
        text = log.read_text(errors="replace")
        if rc == 0:
            first = "completed" + (" (retries=1)" if retries else "")
            identical = dst_bytes(dst) == self.ref
        else:
            named = victim is not None and str(victim) in text
            first = f"failed, exit {rc}" + (", names the dead worker" if named else "")
            notes += message_lines(text, "TaskError", str(victim))
            if rc == -9999:
                first = f"hung > {CHILD_TIMEOUT_S:.0f} s, killed"
            done = tasks_done(root, flow_id, self.total)
            identical, redone, more, pids2 = self.resume_and_check(
                executor, dst, root, done, flow_id, retries=retries
            )
        if alive:
            notes.append(f"{len(alive)} process(es) still running after the run ended")
        left, shm, leftover_notes = self.leftovers(root, before, pids | pids2)
        row = Outcome(
            "killed worker",
            executor,
            first,
            identical,
            self.total,
            redone,
            workers_of(executor),
            left,
            shm,
            len(alive),
            notes + more + leftover_notes,
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  [killed worker {run + 1}/{runs}] pid {victim}: {first}; redone {redone}; "
            f"identical: {identical}; leftovers: {left} path(s), {shm} segment(s)"
            + "".join(f"\n      {n}" for n in row.notes),
            flush=True,
        )
        return row

    # fault 4

    def can_trace(self) -> str | None:
        """None when strace can kill a process at its Nth unlinkat here, else why not."""
        if shutil.which("strace") is None:
            return "no strace command"
        victim = self.work / "probe-victim"
        victim.write_bytes(b"")
        cmd = [*strace_kill_at(1), "rm", "-f", str(victim)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"strace failed: {err}"
        if not victim.exists():
            return f"strace did not stop rm at its first unlinkat (exit {out.returncode})"
        return None

    def cleanup_phases(self, executor: str) -> list[tuple[str, int]]:
        """Where to kill a run while it deletes its intermediates: (phase, Nth unlinkat).

        A traced clean run (intermediates on a tmpfs) lists the unlinkat calls of the
        thread that called apply; the removals of the documented folders (``layers``,
        ``markers/top``, ``markers/reduce``) end the phases, and each phase's middle call
        is the kill point. strace counts calls per thread, as its injection does.
        """
        base = self.work / "runs" / f"cleanup-count-{executor}"
        shutil.rmtree(base, ignore_errors=True)
        mount = base / "mnt"
        mount.mkdir(parents=True)
        trace = base / "trace"
        before = f'strace -f -qq -y -ff -o "{trace}" -e trace=unlinkat,execve'
        wrap = self.in_tmpfs(mount, 4 * self.temporary_bytes + (64 << 20), before, "")
        dst = base / "dst.zarr"
        proc, stem, log = self.spawn(
            executor, dst, resume=False, intermediates=mount / "inter", wrap=wrap
        )
        rc, report = self.finish(proc, stem)
        if report is None:
            raise RuntimeError(f"the traced {executor} run failed (exit {rc}); see {log}")
        main = [
            f
            for f in base.glob("trace.*")
            if any(ln.startswith("execve(") and '"--child"' in ln for ln in _lines(f))
        ]
        if len(main) != 1:
            raise RuntimeError(f"cannot tell the driver's trace among {len(main)} candidates")
        # Every unlinkat counts (as for the injection); phases hold only the calls in
        # folders of the flow (-y prints each call's folder).
        calls = [ln for ln in _lines(main[0]) if ln.startswith("unlinkat(")]
        phases: list[tuple[str, int]] = []
        start = None
        for n, line in enumerate(calls, 1):
            if f"{mount}/inter/" not in line.split(">")[0]:
                continue
            start = n if start is None else start
            name = line.split('"')[1] if '"' in line else ""
            if "AT_REMOVEDIR" in line and name in ("layers", "top", "reduce", "markers"):
                if n - 1 >= start:
                    label = name if name == "layers" else f"markers/{name}"
                    phases.append((f"deleting {label}/", (start + n - 1) // 2))
                start = n + 1
        shutil.rmtree(base, ignore_errors=True)
        return phases

    def kill_in_cleanup(self, executor: str, phase: str, nth: int) -> Outcome:
        """SIGKILL at the driver's ``nth`` unlinkat (strace), intermediates on a tmpfs."""
        base = self.work / "runs" / f"cleanup-{executor}-{nth}"
        shutil.rmtree(base, ignore_errors=True)
        mount, save = base / "mnt", base / "save"
        mount.mkdir(parents=True)
        save.mkdir()
        before, used0 = shm_names(), len(self.used_shm)
        dst = base / "dst.zarr"
        keep = f'cp -a "$0/inter" "{save}/inter" 2>/dev/null'
        inject = " ".join(strace_kill_at(nth))
        wrap = self.in_tmpfs(mount, 4 * self.temporary_bytes + (64 << 20), inject, keep)
        proc, stem, log = self.spawn(
            executor, dst, resume=False, intermediates=mount / "inter", wrap=wrap
        )
        watch = TreeWatcher(proc.pid)
        rc, _ = self.finish(proc, stem)
        time.sleep(0.2)
        alive = watch.survivors()
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pids = self.stop(watch)
        started = stem.with_suffix(".started")
        if not started.exists():
            raise RuntimeError(f"the {executor} run failed before apply started; see {log}")
        flow_id = json.loads(started.read_text())["flow_id"]
        root = save / "inter"
        notes: list[str] = []
        killed = rc in (137, -9)
        first = f"killed at its unlinkat #{nth}" if killed else f"not killed (exit {rc})"
        if killed:
            notes.append(f"{phase}: left {cleanup_state(root, flow_id)}")
        # Every task had finished: cleanup starts after run() returned all results.
        done = self.total if killed else tasks_done(root, flow_id, self.total)
        identical, redone, more, pids2 = self.resume_and_check(executor, dst, root, done, flow_id)
        if not identical:
            vol = volume.open(str(dst))
            data = vol.read(vol.bounds)
            ref = np.frombuffer(self.ref, dtype=np.float32).reshape(SHAPE)
            wrong = int(np.count_nonzero(data != ref))
            more.append(
                f"{phase}: resume reported success but {wrong} of {data.size} voxels differ "
                f"({int(np.count_nonzero(data == 0))} are 0)"
            )
        if alive:
            notes.append(f"{len(alive)} process(es) of the killed run outlived it")
        left, shm, leftover_notes = self.leftovers(root, before, pids | pids2)
        row = Outcome(
            f"kill -9 while {phase}",
            executor,
            first,
            identical,
            self.total,
            redone,
            workers_of(executor),
            left,
            shm,
            len(alive),
            notes + more + leftover_notes,
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  [kill -9 while {phase} {executor}] {first}; redone {redone}; "
            f"identical: {identical}; leftovers: {left} path(s), {shm} segment(s)"
            + "".join(f"\n      {n}" for n in row.notes),
            flush=True,
        )
        return row

    # fault 5

    def graph_child(self) -> tuple[subprocess.Popen[bytes], Path, Path, TreeWatcher]:
        """Start a child that runs the task graph on processes; returns it with a watcher."""
        proc, stem, log = self.launch({"mode": "graph"})
        return proc, stem, log, TreeWatcher(proc.pid)

    @staticmethod
    def wait_segment(proc: subprocess.Popen[bytes]) -> float | None:
        """Seconds until the first segment of a pool the child owns exists (its name
        starts with ``cg_<child pid, hex>_``); None if the child exits first."""
        prefix = f"cg_{proc.pid:x}_"
        t0 = time.monotonic()
        while time.monotonic() - t0 < CHILD_TIMEOUT_S and proc.poll() is None:
            if any(n.startswith(prefix) for n in shm_names()):
                return time.monotonic() - t0
            time.sleep(0.005)
        return None

    def graph_result(self, stem: Path) -> bool:
        """Whether a graph child's saved result equals the numpy reference."""
        path = stem.with_suffix(".npy")
        if self.graph_ref is None or not path.exists():
            return False
        return bool(np.array_equal(np.load(path), self.graph_ref))

    def graph_clean(self) -> Outcome:
        """A clean run of the task graph: its time, result and leftovers."""
        self.graph_ref = graph_reference()
        before, used0 = shm_names(), len(self.used_shm)
        proc, stem, log, watch = self.graph_child()
        if self.wait_started(proc, stem) is None:
            raise RuntimeError(f"the graph run exited before run() (exit {proc.wait()}); see {log}")
        lead = self.wait_segment(proc)
        rc, report = self.finish(proc, stem)
        pids = self.stop(watch)
        if report is None:
            raise RuntimeError(f"the clean graph run failed (exit {rc}); see {log}")
        self.graph_wall = float(report["wall_seconds"])
        notes: list[str] = []
        if lead is None:
            notes.append("no segment named after the run's process was seen")
        self.graph_lead = min(lead or 0.0, self.graph_wall)
        left, shm, more = self.leftovers(None, before, pids)
        row = Outcome(
            "none (clean run)",
            "processes",
            "completed",
            self.graph_result(stem),
            GRAPH_TASKS,
            None,
            workers_of("processes"),
            left,
            shm,
            0,
            notes + more,
            recovery="rerun",
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  clean graph: {self.graph_wall:.2f} s in run() ({self.graph_lead:.2f} s before "
            f"its first segment), {GRAPH_TASKS} tasks, {row.shm_used} segment(s) seen; "
            f"result equals numpy's: {row.identical}",
            flush=True,
        )
        return row

    def graph_kill9(self, run: int, runs: int) -> Outcome:
        """SIGKILL the graph run's process group while tasks run; then a fresh run."""
        before, used0 = shm_names(), len(self.used_shm)
        proc, stem, log, watch = self.graph_child()
        if self.wait_started(proc, stem) is None:
            raise RuntimeError(f"the graph run exited before run() (exit {proc.wait()}); see {log}")
        t0 = time.monotonic()
        lead = self.wait_segment(proc)
        # A random point of the task phase: segments exist only once the pool is up.
        share = self.rng.uniform(0.1, 0.9)
        time.sleep(share * max(0.0, self.graph_wall - self.graph_lead))
        finished_first = proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        at = time.monotonic() - t0
        proc.wait()
        time.sleep(0.2)  # let the kernel finish delivering SIGKILL to the group
        alive = watch.survivors()
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pids = self.stop(watch)
        at_kill = ours(shm_names() - before, pids)
        notes: list[str] = []
        first = "finished before the kill" if finished_first else f"killed at {at:.2f} s"
        if lead is None and not finished_first:
            notes.append("killed before any segment of its pool appeared")
        if alive:
            notes.append(f"{len(alive)} process(es) of the killed run survived the group kill")
        # A fresh process: its pool's start sweeps segments whose owner died.
        proc2, stem2, log2, watch2 = self.graph_child()
        rc2, report2 = self.finish(proc2, stem2)
        pids2 = self.stop(watch2)
        swept: set[str] = set()
        if report2 is None:
            identical = False
            notes.append(f"rerun failed (exit {rc2}, see {log2})")
        else:
            identical = self.graph_result(stem2)
            swept = set(report2.get("swept") or ()) & at_kill
            if not identical:
                notes.append(f"the rerun's result differs from numpy's (see {log2})")
        others = len(at_kill - swept - shm_names())
        if others and report2 is not None:
            notes.append(
                f"{others} segment(s) left at the kill were removed before the rerun's sweep"
            )
        left, shm, leftover_notes = self.leftovers(None, before, pids | pids2)
        row = Outcome(
            "kill -9 of a process-mode task graph",
            "processes",
            first,
            identical,
            GRAPH_TASKS,
            None,
            workers_of("processes"),
            left,
            shm,
            len(alive),
            notes + leftover_notes,
            recovery="rerun",
            shm_at_kill=len(at_kill),
            swept=len(swept),
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  [graph kill -9 {run + 1}/{runs}] {first} ({share:.0%} of its task phase), "
            f"{len(at_kill)} segment(s) left at the kill, {len(swept)} swept by the rerun; "
            f"rerun equals numpy: {identical}; leftovers: {shm} segment(s)"
            + "".join(f"\n      {n}" for n in row.notes),
            flush=True,
        )
        return row

    # fault 3

    def can_mount(self) -> str | None:
        """None when a tmpfs can be mounted in a user + mount namespace, else why not."""
        if shutil.which("unshare") is None:
            return "no unshare command"
        probe = self.work / "probe"
        probe.mkdir(exist_ok=True)
        cmd = [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            'mount -t tmpfs -o size=1m tmpfs "$0" && touch "$0/x"',
            str(probe),
        ]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"unshare failed: {err}"
        if out.returncode:
            return f"unshare/mount refused: {out.stderr.strip() or out.returncode}"
        return None

    def in_tmpfs(self, mount: Path, size: int, before: str, after: str) -> list[str]:
        """A wrapper: a private tmpfs of ``size`` bytes at ``mount`` around the child.

        ``before``/``after`` are shell commands run in the namespace around the child
        (the tmpfs and what is on it vanish with the namespace); the child's status is kept.
        """
        script = (
            f'mount -t tmpfs -o size={max(1, size // 1024)}k tmpfs "$0" || exit 97; '
            f'{before} "$@"; rc=$?; {after or "true"}; exit $rc'
        )
        return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(mount)]

    def check_done_regions(self, dst: Path, root: Path, flow_id: str) -> tuple[int, int]:
        """(reductions marked done whose dst region equals the reference, those marked)."""
        keys = marker_keys(root, flow_id, "reduce")
        vol = volume.open(str(dst))
        ref = np.frombuffer(self.ref, dtype=np.float32).reshape(SHAPE)
        good = 0
        for key in keys:
            start = tuple(k * c for k, c in zip(key, self.red_chunk, strict=True))
            ends = zip(start, self.red_chunk, SHAPE, strict=True)
            stop = tuple(min(s + c, n) for s, c, n in ends)
            box = Box(start, stop)
            try:
                ok = vol.read(box).tobytes() == ref[box.slices()].tobytes()
            except Exception:  # an unreadable chunk is a corrupted one
                ok = False
            good += ok
        return good, len(keys)

    def disk_full(self, executor: str, where: str) -> Outcome:
        """``where``: "intermediates" or "dst" on a tmpfs too small for it."""
        name = f"full-{where}-{executor}"
        base = self.work / "runs" / name
        shutil.rmtree(base, ignore_errors=True)
        mount, save = base / "mnt", base / "save"
        mount.mkdir(parents=True)
        save.mkdir()
        before, used0 = shm_names(), len(self.used_shm)
        if where == "intermediates":
            dst, root = base / "dst.zarr", mount / "inter"
            need = self.temporary_bytes
            keep = f'cp -a "$0/inter" "{save}/inter" 2>/dev/null'
        else:
            dst, root = mount / "dst.zarr", base / "inter"
            need = self.dst_disk_bytes
            keep = f'cp -a "$0/dst.zarr" "{save}/dst.zarr"'
        size = int(need * FULL_SHARE)
        wrap = self.in_tmpfs(mount, size, "", keep)
        proc, stem, log = self.spawn(executor, dst, resume=False, intermediates=root, wrap=wrap)
        watch = TreeWatcher(proc.pid)
        started = time.monotonic()
        rc, _ = self.finish(proc, stem)
        took = time.monotonic() - started
        pids = self.stop(watch)
        text = log.read_text(errors="replace")
        notes: list[str] = []
        if rc == 97:
            raise RuntimeError(f"mounting the tmpfs failed; see {log}")
        enospc = "No space left on device" in text or "ENOSPC" in text or "Errno 28" in text
        started_file = stem.with_suffix(".started")
        if not started_file.exists():
            raise RuntimeError(f"the {executor} run failed before apply started; see {log}")
        flow_id = json.loads(started_file.read_text())["flow_id"]
        if rc == 0:
            first = f"completed in a {size / 2**20:.0f} MiB tmpfs (not full?)"
        elif rc == -9999:
            first = f"hung > {CHILD_TIMEOUT_S:.0f} s, killed"
        else:
            first = f"failed, exit {rc}" + (", says ENOSPC" if enospc else ", no ENOSPC message")
            first += f" in {took:.1f} s"
            notes += message_lines(text, "TaskError", "No space left") or message_lines(
                text, "No space left"
            )
        # The state the failure left, now on real disk.
        if where == "intermediates":
            root = save / "inter"
            check_dst = dst
        else:
            check_dst = save / "dst.zarr"
        done = tasks_done(root, flow_id, self.total)
        good, marked = self.check_done_regions(check_dst, root, flow_id) if rc else (0, 0)
        more: list[str] = []
        pids2: set[int] = set()
        redone: int | None = None
        if marked:
            notes.append(f"dst regions reported done before the failure: {good}/{marked} correct")
        if good != marked:
            first += f"; {marked - good} done region(s) CORRUPTED"
        if rc == 0:
            identical = dst_bytes(dst) == self.ref
        elif where == "intermediates":
            # Enough space: the intermediates moved to real disk, resumed from there.
            identical, redone, more, pids2 = self.resume_and_check(
                executor, dst, root, done, flow_id
            )
        else:
            # Enough space: a big tmpfs at the same path (dst's path is part of the flow id).
            restore = f'cp -a "{save}/dst.zarr" "$0/dst.zarr" &&'
            final = save / "final.zarr"
            keep = f'cp -a "$0/dst.zarr" "{final}"'
            wrap = self.in_tmpfs(mount, 4 * need + (64 << 20), restore, keep)
            proc, stem, log = self.spawn(executor, dst, resume=True, intermediates=root, wrap=wrap)
            watch = TreeWatcher(proc.pid)
            rc2, report2 = self.finish(proc, stem)
            pids2 = self.stop(watch)
            if report2 is None:
                identical, redone = False, None
                more.append(f"resume failed (exit {rc2}, see {log})")
            else:
                redone = self.redone(report2, done, flow_id, more)
                identical = dst_bytes(final) == self.ref
        left, shm, leftover_notes = self.leftovers(root, before, pids | pids2)
        label = f"disk full: {where} ({size / 2**20:.0f} MiB tmpfs)"
        row = Outcome(
            label,
            executor,
            first,
            identical,
            self.total,
            redone,
            workers_of(executor),
            left,
            shm,
            0,
            notes + more + leftover_notes,
        )
        row.shm_used = len(self.used_shm) - used0
        print(
            f"  [{label}, {executor}] {first}; done {done}/{self.total}; redone {redone}; "
            f"identical: {identical}; leftovers: {left} path(s), {shm} segment(s)"
            + "".join(f"\n      {n}" for n in row.notes),
            flush=True,
        )
        return row


# --- tables -------------------------------------------------------------------------------------


def table(rows: list[Outcome]) -> str:
    at_kill = any(r.shm_at_kill is not None for r in rows)
    lines = [
        "| fault | executor | runs | faulted run | identical to clean | redone on resume "
        "(max; mean of total) | in flight at the fault (bound) | leftover flow paths | "
        + ("/dev/shm/cg_* left at the kill (swept by the rerun) | " if at_kill else "")
        + "leftover /dev/shm/cg_* (of made) | leftover processes |",
        "|---|---|---:|---|---:|---:|---:|---:|" + ("---:|" if at_kill else "") + "---:|---:|",
    ]
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for r in rows:
        groups.setdefault((r.fault, r.executor), []).append(r)
    for (fault, executor), rs in groups.items():
        firsts: dict[str, int] = {}
        for r in rs:
            timed = r.first.startswith("killed at") and r.first.endswith(" s")
            kind = "killed" if timed else r.first
            firsts[kind] = firsts.get(kind, 0) + 1
        first = "; ".join(f"{k} x{n}" if len(rs) > 1 else k for k, n in firsts.items())
        redone = [r.redone for r in rs if r.redone is not None]
        failed_resumes = sum(
            1 for r in rs if r.redone is None and any("resume failed" in n for n in r.notes)
        )
        if redone:
            cell = f"{max(redone)}/{rs[0].total}; {np.mean(redone) / rs[0].total:.1%}"
        elif rs[0].recovery == "rerun" and rs[0].shm_at_kill is not None:
            cell = "n/a (a rerun redoes all)"
        else:
            cell = "n/a (no resume)"
        if failed_resumes:
            cell += f" ({failed_resumes} resume(s) failed)"
        failed_reruns = sum(1 for r in rs if any("rerun failed" in n for n in r.notes))
        if failed_reruns:
            cell += f" ({failed_reruns} rerun(s) failed)"
        kill_cell = ""
        if at_kill:
            counted = [r for r in rs if r.shm_at_kill is not None]
            kill_cell = (
                f"{sum(r.shm_at_kill or 0 for r in counted)} "
                f"({sum(r.swept or 0 for r in counted)}) | "
                if counted
                else "n/a | "
            )
        lines.append(
            f"| {fault} | {executor} | {len(rs)} | {first} | "
            f"{sum(r.identical for r in rs)}/{len(rs)} | {cell} | {max(r.bound for r in rs)} | "
            f"{sum(r.flow_left for r in rs)} | {kill_cell}"
            f"{sum(r.shm_left for r in rs)} (of {sum(r.shm_used for r in rs)}) | "
            f"{sum(r.procs_left for r in rs)} |"
        )
    return "\n".join(lines)


def targets(rows: list[Outcome]) -> str:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    identical = all(r.identical for r in rows)
    within = all(r.redone is None or r.redone <= r.bound for r in rows)
    resumed = all(not any("resume failed" in n for n in r.notes) for r in rows)
    clean = all(r.flow_left == 0 and r.shm_left == 0 and r.procs_left == 0 for r in rows)
    if rows and all(r.recovery == "rerun" for r in rows):
        rerun = all(not any("rerun failed" in n for n in r.notes) for r in rows)
        killed = [r for r in rows if r.shm_at_kill is not None and r.first.startswith("killed")]
        exercised = all(r.shm_at_kill for r in killed)
        return (
            f"targets: every result equals numpy's {mark(identical)}, "
            f"every rerun succeeded {mark(rerun)}, "
            f"every kill left segments (the sweep is exercised) {mark(exercised)}, "
            f"no leftovers after the rerun {mark(clean)}"
        )
    extra = []
    corrupted = [r for r in rows if "CORRUPTED" in r.first]
    if corrupted:
        extra.append("done regions intact MISSED")
    return (
        f"targets: every run identical {mark(identical)}, "
        f"every resume succeeded {mark(resumed)}, "
        f"redone work <= tasks in flight at the fault {mark(within)}, "
        f"no leftovers {mark(clean)}" + "".join(f", {e}" for e in extra)
    )


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cg-faults-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="kill -9 runs per executor (default 8; half as many killed-worker runs and "
        "task graph kills, at least 2 of those)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 kill -9 runs per executor, 1 killed worker, 1 full disk of each kind per "
        "executor, cleanup kills on threads only, 2 task graph kills",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill times")
    parser.add_argument("--out", default="bench-out/faults", help="tables, JSON and child logs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(json.loads(args.child))
        return
    runs = args.runs if args.runs is not None else (2 if args.quick else 8)
    worker_runs = 1 if args.quick else max(1, runs // 2)
    graph_runs = max(2, runs // 2)
    out = Path(args.out)
    shutil.rmtree(out / "logs", ignore_errors=True)
    (out / "logs").mkdir(parents=True)
    params = inspect.signature(volume.apply).parameters
    optional = [k for k in ("retries", "workers", "timeout") if k in params]
    t_start = time.monotonic()
    print(
        f"volume {SHAPE} float32, chunks {CHUNK}^3; flow: top {TOP} blend {BLEND}, bottom "
        f"{BOTTOM} crop {CROP}, gaussian sigma {SIGMA}; {workers_of('threads')} workers; "
        f"apply keywords detected: {optional or 'none of retries/workers/timeout'}",
        flush=True,
    )
    sections: list[tuple[str, list[Outcome], str | None]] = []
    with workdir() as work:
        bench = Bench(work=work, out=out, rng=random.Random(args.seed))
        bench.make_source()
        print("clean runs", flush=True)
        sections.append(("clean runs (baseline)", bench.baseline(), None))
        print(f"fault 1: kill -9 of the whole run, {runs} run(s) per executor", flush=True)
        rows = [bench.kill9(ex, i, runs) for ex in EXECUTORS for i in range(runs)]
        sections.append(("fault 1: kill -9 at a random point, then resume", rows, None))
        print(f"fault 2: one worker process killed, {worker_runs} run(s)", flush=True)
        rows = [bench.kill_worker(i, worker_runs) for i in range(worker_runs)]
        sections.append(("fault 2: a worker process killed (executor=processes)", rows, None))
        why = bench.can_mount()
        if why is None:
            print("fault 3: a full disk", flush=True)
            rows = [
                bench.disk_full(ex, where) for where in ("intermediates", "dst") for ex in EXECUTORS
            ]
            sections.append(("fault 3: a full disk (ENOSPC), then resume with space", rows, None))
        else:
            print(f"fault 3 skipped: {why}", flush=True)
            sections.append(("fault 3: a full disk", [], f"skipped: {why}"))
        why_trace = why or bench.can_trace()
        if why_trace is None:
            print("fault 4: kill -9 while the finished run deletes its intermediates", flush=True)
            rows = []
            for ex in EXECUTORS[:1] if args.quick else EXECUTORS:
                for phase, nth in bench.cleanup_phases(ex):
                    rows.append(bench.kill_in_cleanup(ex, phase, nth))
            title = (
                "fault 4: kill -9 during the final cleanup (intermediates on tmpfs), then resume"
            )
            sections.append((title, rows, None))
        else:
            print(f"fault 4 skipped: {why_trace}", flush=True)
            sections.append(
                ("fault 4: kill -9 during the final cleanup", [], f"skipped: {why_trace}")
            )
        print(
            f"fault 5: kill -9 of a process-mode task graph, {graph_runs} run(s), "
            "each followed by a fresh run",
            flush=True,
        )
        rows = [bench.graph_clean()]
        rows += [bench.graph_kill9(i, graph_runs) for i in range(graph_runs)]
        title = (
            "fault 5: kill -9 of a process-mode task graph (arrays through /dev/shm), "
            "then a fresh process-mode run"
        )
        sections.append((title, rows, None))
        foreign = bench.foreign_shm
    text = []
    for title, rows, skipped in sections:
        text.append(f"### {title}\n")
        if skipped:
            text.append(skipped + "\n")
            continue
        text.append(table(rows) + "\n")
        text.append(targets(rows) + "\n")
        # Notes, once each (numbers and ids differ run to run: the first few are listed).
        notes = list(dict.fromkeys(f"{r.executor}: {n}" for r in rows for n in r.notes))
        text.extend(f"- {n}" for n in notes[:MAX_NOTES])
        if len(notes) > MAX_NOTES:
            text.append(f"- ... {len(notes) - MAX_NOTES} more in {out / 'faults.json'}")
        if notes:
            text.append("")
    if foreign:
        text.append(f"({foreign} new /dev/shm/cg_* segment(s) of other programs were ignored)\n")
    text.append(f"whole benchmark: {time.monotonic() - t_start:.0f} s")
    report = "\n".join(text)
    print("\n" + report)
    (out / "faults.md").write_text(report + "\n")
    (out / "faults.json").write_text(
        json.dumps({title: [asdict(r) for r in rows] for title, rows, _ in sections}, indent=1)
    )


if __name__ == "__main__":
    main()
