"""Clusters started through dask-jobqueue, for real, without a batch system: fake
``sbatch``, ``squeue`` and ``scancel`` first on ``PATH`` (a few lines of shell each).

    sbatch SCRIPT   copies the generated job script to jobs/N/, runs it in the
                    background in a session of its own (pid = process group, in
                    jobs/N/pid), prints "Submitted batch job N"; past the number of
                    jobs in the file ``accept`` (``Batch.accept``), refuses the job as
                    SLURM refuses a bad partition (stderr, exit 1)
    squeue          the jobs whose process group still has a live process, one id a line
    scancel N...    logs the ids, sends SIGTERM to each job's process group

So the workers are the ones the job script that dask-jobqueue wrote starts, they run the
flow, and closing the executor ends them through scancel. The workers import this
checkout: the fake sbatch passes the environment on (``PYTHONPATH``), as SLURM does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from tests.dask._cluster import START_DEADLINE_S, wait_until
from tests.dask._tasks import identity_marking

import chunkgraph as cg
from chunkgraph import volume
from chunkgraph.execute import ClusterSpec, cluster
from chunkgraph.execute._dask_clusters import import_jobqueue
from chunkgraph.geometry import Box

# Not pytest.importorskip: dask-jobqueue's import makes Ctrl-C call sys.exit() for the
# rest of the process, which would break the interrupt tests run after these.
try:
    dask_jobqueue = import_jobqueue()
except ImportError:
    pytest.skip("dask-jobqueue is not installed", allow_module_level=True)

SBATCH = """#!/usr/bin/env bash
n=1
while ! mkdir "{jobs}/$n" 2>/dev/null; do n=$((n + 1)); done
if [ -f "{jobs}/../accept" ] && [ "$n" -gt "$(cat "{jobs}/../accept")" ]; then
    rmdir "{jobs}/$n"
    echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
    exit 1
fi
cp "$1" "{jobs}/$n/script.sh"
setsid bash "{jobs}/$n/script.sh" > "{jobs}/$n/out" 2>&1 < /dev/null &
echo $! > "{jobs}/$n/pid"
echo "Submitted batch job $n"
"""
SQUEUE = """#!/usr/bin/env bash
live='$1 == g && $2 !~ /^Z/ {{found = 1}} END {{exit !found}}'  # not a zombie
for pid in "{jobs}"/*/pid; do
    [ -f "$pid" ] || continue
    ps -eo pgid=,stat= | awk -v g="$(cat "$pid")" "$live" && basename "$(dirname "$pid")"
done
exit 0
"""
SCANCEL = """#!/usr/bin/env bash
echo "$@" >> "{jobs}/scancel.log"
for n in "$@"; do kill -TERM -- "-$(cat "{jobs}/$n/pid")" 2>/dev/null; done
exit 0
"""
# A small job: one worker process of one thread, on the loopback interface (scheduler
# too), the scheduler's HTTP server on a free port.
SMALL: dict[str, Any] = {
    "cores": 1,
    "memory": "1GiB",
    "processes": 1,
    "interface": "lo",
    "scheduler_options": {"dashboard_address": ":0"},
    "start_timeout": START_DEADLINE_S,
}
SHAPE, STORAGE = (48, 40), (8, 8)


class Batch:
    """The fake batch system of one test: its jobs folder, and looks at its jobs."""

    def __init__(self, root: Path) -> None:
        self.jobs = root / "jobs"
        self.jobs.mkdir(parents=True)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name, text in (("sbatch", SBATCH), ("squeue", SQUEUE), ("scancel", SCANCEL)):
            (bin_dir / name).write_text(text.format(jobs=self.jobs))
            (bin_dir / name).chmod(0o755)
        self.bin = bin_dir

    def accept(self, jobs: int) -> None:
        """From now on, sbatch refuses every job after the first ``jobs``."""
        (self.jobs.parent / "accept").write_text(str(jobs))

    def submitted(self) -> list[str]:
        return sorted(p.name for p in self.jobs.iterdir() if p.is_dir())

    def queued(self) -> list[str]:
        """What ``squeue`` lists."""
        out = subprocess.run(["squeue"], capture_output=True, text=True, check=True).stdout
        return sorted(out.split())

    def cancelled(self) -> list[str]:
        log = self.jobs / "scancel.log"
        return sorted(log.read_text().split()) if log.exists() else []

    def processes(self) -> set[int]:
        """The live processes of every job (their process groups)."""
        groups = {int((self.jobs / n / "pid").read_text()) for n in self.submitted()}
        found = set()
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) in groups and p.status() != psutil.STATUS_ZOMBIE:
                    found.add(p.pid)
        return found

    def kill_all(self) -> None:
        for n in self.submitted():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int((self.jobs / n / "pid").read_text()), signal.SIGKILL)


@pytest.fixture
def batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _worker_environment: None) -> Any:
    made = Batch(tmp_path / "batch")
    monkeypatch.setenv("PATH", f"{made.bin}{os.pathsep}{os.environ['PATH']}")
    yield made
    made.kill_all()  # a test that failed half-way leaves no worker behind


def source(root: Path) -> Any:
    data = np.random.default_rng(7).integers(0, 2**15, SHAPE, dtype=np.int16)
    src = volume.create(str(root / "src.zarr"), SHAPE, STORAGE, data.dtype)
    src.write(Box.from_shape(SHAPE), data)
    return src


def stored_bytes(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


def flow(src: Any, dst_path: Path, marks: Path, executor: Any) -> Any:
    dst = volume.create(str(dst_path), SHAPE, STORAGE, src.dtype)
    return cg.apply(
        identity_marking,
        src,
        dst,
        fn_kwargs={"folder": str(marks)},
        chunk_sizes=[(24, 20), (8, 7)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(2, 2), (0, 0)],
        intermediates=dst_path.parent / f"{dst_path.name}.tmp",
        executor=executor,
        probe=False,  # the probe calls fn here: every mark is then a task's
    )


def test_a_flow_runs_on_the_workers_the_job_scripts_start_and_close_cancels_them(
    batch: Batch, tmp_path: Path
) -> None:
    src = source(tmp_path)
    (tmp_path / "marks").mkdir()
    flow(src, tmp_path / "threads.zarr", tmp_path / "marks", "threads")
    (tmp_path / "on-slurm").mkdir()
    with cluster("slurm", jobs=2, **SMALL) as ex:
        assert batch.submitted() == ["1", "2"]  # two jobs, submitted at once
        flow(src, tmp_path / "slurm.zarr", tmp_path / "on-slurm", ex)
        workers = set(ex.client.run(os.getpid).values())
        running = batch.processes()
        assert batch.queued() == ["1", "2"]
    # The tasks ran in the workers, which are processes of the jobs the scripts started.
    ran_in = {int(p.name) for p in (tmp_path / "on-slurm").iterdir()}
    assert ran_in and ran_in <= workers <= running
    assert os.getpid() not in ran_in
    assert stored_bytes(tmp_path / "slurm.zarr") == stored_bytes(tmp_path / "threads.zarr")
    # close() cancelled both jobs, and that ended every process they had started.
    assert batch.cancelled() == ["1", "2"]
    wait_until(lambda: not batch.processes(), START_DEADLINE_S, "the jobs' processes end")
    assert batch.queued() == []


def test_no_worker_arriving_is_an_error_naming_squeue_and_the_job_script(
    batch: Batch, tmp_path: Path
) -> None:
    src = source(tmp_path)
    dst_path = tmp_path / "dst.zarr"
    # The job starts, and its prologue fails before any worker does (a module that does
    # not load, say): no worker ever comes.
    options = {**SMALL, "start_timeout": 1.5, "prologue": ["echo no such module >&2; exit 3"]}
    with cluster("slurm", **options) as ex, pytest.raises(cg.ConfigError) as caught:
        flow(src, dst_path, tmp_path, ex)
    message = str(caught.value)
    assert "no worker of the slurm cluster arrived within 1.5 s" in message
    assert "`squeue -j 1`" in message
    assert "#SBATCH --mem=1G" in message and "exit 3" in message  # the job script
    assert "start_timeout" in message
    assert "no such module" in (batch.jobs / "1" / "out").read_text()
    assert not any(p.name.endswith(".chunk") for p in dst_path.rglob("*"))  # nothing written


@pytest.mark.parametrize(
    ("kind", "options", "field", "says"),
    [
        ("slurm", {"cores": 8}, "executor.slurm.memory", "executor.slurm.memory is needed"),
        ("slurm", {"cores": 8, "memory": "32GiB", "gres": 1}, "executor.slurm.gres",
         "unknown option of a slurm cluster; valid: cores, memory, walltime, jobs"),
        ("pbs", {"cores": 8, "memory": "8GB", "job_extra_directives": ["-l x"]},
         "executor.pbs.job_extra_directives", "'job_extra_directives' is 'extra_directives'"),
        ("sge", {"cores": 0, "memory": "8GB"}, "executor.sge.cores", "a positive int, got 0"),
        ("lsf", {"cores": 2, "memory": "a lot"}, "executor.lsf.memory", "such as '32GiB'"),
        ("slurm", {"cores": 2, "memory": "8GB", "processes": 4}, "executor.slurm.processes",
         "more than cores"),
        ("slurm", {"cores": 2, "memory": "8GB", "extra_directives": "--gres=gpu:1"},
         "executor.slurm.extra_directives", "a list of strings"),
        ("kubernetes", {"image": "x", "cores": 2}, "executor.kubernetes.cores",
         "valid: image, workers, namespace"),
        ("slrum", {}, "executor", "give one of slurm, pbs, lsf, sge, kubernetes"),
        # A number without a unit is bytes: 32 is no job's memory (jobqueue fails on it).
        ("slurm", {"cores": 1, "memory": 32}, "executor.slurm.memory",
         "at least 64 MiB (a number without a unit is bytes: give the unit, e.g. '32GiB'), "
         "got 32"),
        ("pbs", {"cores": 1, "memory": "4000"}, "executor.pbs.memory",
         "a number without a unit is bytes"),
        ("slurm", {"cores": 1, "memory": 2.5}, "executor.slurm.memory", "such as '32GiB'"),
        # Each system's walltime forms; what another system would take is refused.
        ("slurm", {"cores": 1, "memory": "1GiB", "walltime": "2h"}, "executor.slurm.walltime",
         "must be minutes, mm:ss, hh:mm:ss, d-hh, d-hh:mm or d-hh:mm:ss"),
        ("lsf", {"cores": 1, "memory": "1GiB", "walltime": "02:00:00"}, "executor.lsf.walltime",
         "must be [hh:]mm ('02:00' is two hours), got '02:00:00'"),
        ("pbs", {"cores": 1, "memory": "1GiB", "walltime": "1-02:00"}, "executor.pbs.walltime",
         "must be [[hh:]mm:]ss"),
        ("sge", {"cores": 1, "memory": "1GiB", "walltime": "02:00"}, "executor.sge.walltime",
         "must be hh:mm:ss or seconds"),
        # YAML reads an unquoted 2:00:00 as the number 7200.
        ("slurm", {"cores": 1, "memory": "1GiB", "walltime": 7200}, "executor.slurm.walltime",
         "a string (in YAML, quote it: unquoted, 2:00:00 is the number 7200), got 7200"),
    ],
)  # fmt: skip
def test_a_bad_option_is_refused_naming_it_and_the_valid_ones(
    kind: str, options: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(cg.ConfigError, match=None) as caught:
        cluster(kind, **options)
    assert caught.value.field == field
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "walltimes", "line"),
    [
        ("slurm", ["90", "30:00", "02:00:00", "1-12", "1-12:30", "1-12:30:00", "UNLIMITED"],
         "#SBATCH -t {}"),
        ("pbs", ["3600", "60:00", "02:00:00", "48:00:00"], "#PBS -l walltime={}"),
        ("lsf", ["90", "02:00"], "#BSUB -W {}"),
        ("sge", ["7200", "02:00:00"], "#$ -l h_rt={}"),
    ],
)  # fmt: skip
def test_the_walltimes_and_memory_each_system_takes_make_its_job_script(
    kind: str, walltimes: list[str], line: str
) -> None:
    """What passes the checks is what dask-jobqueue's job class of that system writes a
    script for; memory as a number of bytes too."""
    from chunkgraph.execute._dask_clusters import _passed

    job_class = getattr(dask_jobqueue, f"{kind.upper()}Cluster").job_cls
    for walltime in walltimes:
        spec = ClusterSpec.of(kind, cores=1, memory=3 * 2**30, walltime=walltime)
        script = job_class("tcp://127.0.0.1:1", name="x", **_passed(spec)).job_script()
        assert line.format(walltime) in script.splitlines()
        assert "--memory-limit 3.00GiB" in script


def test_options_beside_a_cluster_spec_are_refused_and_a_dry_run_starts_nothing(
    batch: Batch, tmp_path: Path
) -> None:
    src = source(tmp_path)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, STORAGE, src.dtype)
    spec = {"slurm": SMALL}
    with pytest.raises(cg.ConfigError, match="workers=4 does not apply to a slurm cluster"):
        cg.apply(identity_marking, src, dst, fn_kwargs={"folder": "."}, executor=spec, workers=4)
    report = cg.apply(
        identity_marking, src, dst, fn_kwargs={"folder": "."}, executor=spec, dry_run=True
    )
    assert report.dry_run
    assert batch.submitted() == []  # no job: sbatch was never called


def test_a_cluster_spec_given_to_apply_is_started_for_the_run_and_cancelled_after(
    batch: Batch, tmp_path: Path
) -> None:
    src = source(tmp_path)
    (tmp_path / "marks").mkdir()
    flow(src, tmp_path / "threads.zarr", tmp_path / "marks", "threads")
    flow(src, tmp_path / "slurm.zarr", tmp_path / "marks", ClusterSpec.of("slurm", **SMALL))
    assert stored_bytes(tmp_path / "slurm.zarr") == stored_bytes(tmp_path / "threads.zarr")
    assert batch.submitted() == batch.cancelled() == ["1"]
    wait_until(lambda: not batch.processes(), START_DEADLINE_S, "the job's processes end")


@pytest.mark.parametrize("accepted", [0, 1])
def test_a_refused_submission_fails_at_once_quoting_sbatch_and_cancels_what_was_submitted(
    batch: Batch, accepted: int
) -> None:
    """sbatch refuses the jobs (all, or the ones past the first): an error now, not after
    start_timeout, with sbatch's own words and the job script; the jobs it did take are
    cancelled."""
    batch.accept(accepted)
    began = time.monotonic()
    with pytest.raises(cg.ConfigError) as caught:
        cluster("slurm", jobs=3, **{**SMALL, "start_timeout": 30, "queue": "nosuch"})
    took = time.monotonic() - began
    message = str(caught.value)
    assert took < 15, took  # the scheduler's start and three sbatch calls, well before 30 s
    assert caught.value.field == "executor"
    assert "`sbatch` refused" in message
    assert "Invalid partition name specified" in message  # sbatch's stderr, quoted
    assert "#SBATCH -p nosuch" in message  # the job script
    assert batch.submitted() == [str(n) for n in range(1, accepted + 1)]
    assert batch.cancelled() == batch.submitted()
    wait_until(lambda: not batch.processes(), START_DEADLINE_S, "the jobs' processes end")


def test_kubernetes_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_kubernetes.operator", None)  # import fails
    with pytest.raises(cg.ConfigError, match=r"pip install 'chunkgraph\[kubernetes\]'"):
        cluster("kubernetes", image="ghcr.io/dask/dask:latest")


CLI_SPEC = """\
function: spec_functions:scale
kwargs: {factor: 3.0}
input: raw.zarr
output: {path: out.zarr, dtype: float32, chunks: [8, 8, 8]}
chunk_sizes: [8]
run:
  executor:
    slurm:
      cores: 1
      memory: 1GiB
      processes: 1
      jobs: 1
      walltime: "00:10:00"
      extra_directives: ["--gres=gpu:0"]
      interface: lo
      scheduler_options: {dashboard_address: ":0"}
      start_timeout: 60
"""


def test_chunkgraph_run_starts_the_spec_cluster_after_its_checks_and_cancels_it(
    batch: Batch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkgraph import cli

    # The function's module lies beside the spec: the workers get it sent (ship_module).
    shutil.copy(Path(__file__).parents[1] / "cli" / "spec_functions.py", tmp_path)
    sys.modules.pop("spec_functions", None)
    raw = volume.create(tmp_path / "raw.zarr", (16, 16, 16), (8, 8, 8), "float32")
    data = np.random.default_rng(3).random((16, 16, 16), dtype="float32")
    raw.write(raw.bounds, data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(CLI_SPEC)

    assert cli.main(["run", "--dry-run", str(spec)]) == 0
    assert batch.submitted() == []  # a dry run starts no cluster

    assert cli.main(["run", str(spec)]) == 0
    err = capsys.readouterr().err
    assert "waiting for 1 worker(s) from slurm (jobs 1; `squeue -j 1` shows them" in err
    script = (batch.jobs / "1" / "script.sh").read_text()
    assert "#SBATCH -t 00:10:00" in script and "#SBATCH --gres=gpu:0" in script
    out = volume.open(tmp_path / "out.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), data * 3)
    assert batch.submitted() == batch.cancelled() == ["1"]
    wait_until(lambda: not batch.processes(), START_DEADLINE_S, "the job's processes end")


def test_starting_a_jobqueue_cluster_keeps_ctrl_c_an_interrupt() -> None:
    """dask-jobqueue's import turns Ctrl-C into sys.exit() (exit 0, as if finished): the
    handler before it is put back. In a fresh process, where nothing imported it yet."""
    code = (
        "import signal; before = signal.getsignal(signal.SIGINT)\n"
        "from chunkgraph.execute._dask_clusters import import_jobqueue\n"
        "import_jobqueue()\n"
        "assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)\n"
        "import os; os.kill(os.getpid(), signal.SIGINT)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(cg.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    # an uncaught KeyboardInterrupt ends Python by SIGINT; sys.exit() would be exit 0
    assert done.returncode == -signal.SIGINT and "KeyboardInterrupt" in done.stderr, done.stderr


def test_chunkgraph_run_whose_jobs_sbatch_refuses_is_exit_2_at_once(
    batch: Batch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkgraph import cli

    shutil.copy(Path(__file__).parents[1] / "cli" / "spec_functions.py", tmp_path)
    sys.modules.pop("spec_functions", None)
    raw = volume.create(tmp_path / "raw.zarr", (16, 16, 16), (8, 8, 8), "float32")
    raw.write(raw.bounds, np.ones((16, 16, 16), "float32"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(CLI_SPEC.replace("start_timeout: 60", "start_timeout: 30"))
    batch.accept(0)
    began = time.monotonic()
    assert cli.main(["run", str(spec)]) == 2
    assert time.monotonic() - began < 15
    err = capsys.readouterr().err
    assert "`sbatch` refused" in err and "Invalid partition name specified" in err, err
    assert "Traceback" not in err  # the error, not dask's tracebacks of it
    assert not (tmp_path / "out.zarr").exists()
    assert batch.submitted() == []
