"""``chunkgraph demo``: the engine's main job on generated data, with a report to look at.

1. A task graph: per-block statistics of a random array reduced by a fan-in
   tree, checked against numpy on the whole array.
2. The subchunkable volume flow: a two-level, blended and cropped smoothing
   of a generated 256 MiB Zarr v3 volume (``_flow_demo``) on every core,
   with a progress bar; the result is checked against the filter applied to
   whole neighbourhoods. It prints voxels per second, read amplification,
   tasks per level and peak memory, and writes a run report (report.json,
   an execution Gantt chart, utilisation over time) under ``<workdir>/report``.

Exit 0 when both results check out, 1 when one does not.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from chunkgraph.cli._flow_demo import DEMO_VOLUMES, check_demo, run_demo
from chunkgraph.cli._graph_demo import run_graph_demo
from chunkgraph.report import Recorder, write_report
from chunkgraph.viewer import view_command

# float32 blends of chunk results that each equal the whole-array filter: differences are
# rounding (~1e-5 on values ~100); anything near this bound is a bug.
DEMO_TOLERANCE = 1e-3


def register(commands: Any) -> None:
    demo = commands.add_parser("demo", help="run a task graph and a volume flow on generated data")
    demo.add_argument(
        "--workdir", default="demo-data", help="where demo volumes go (default: demo-data)"
    )
    demo.add_argument(
        "--tasks", type=int, default=4096, help="blocks in the task-graph demo (default: 4096)"
    )
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.tasks < 1:
        print(f"chunkgraph: --tasks must be at least 1, got {args.tasks}", file=sys.stderr)
        return 2
    console = Console()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    console.rule("[bold]1. task graph")
    summary = run_graph_demo(blocks=args.tasks, progress=not args.no_progress)
    for line in summary.lines():
        console.print(line)

    console.rule("[bold]2. volume flow")

    recorder = Recorder()
    started = time.perf_counter()
    report = run_demo(workdir, progress=not args.no_progress, subscribers=[recorder])
    seconds = time.perf_counter() - started
    console.print(report.summary())
    voxels = report.voxels
    console.print(
        f"{voxels / report.wall_seconds / 1e6:.1f} M voxels/s; read amplification "
        f"{report.read_amplification:.2f}; tasks per level {list(report.tasks_per_level)}; "
        f"peak memory {_peak_rss_mib():.0f} MiB"
    )
    error = check_demo(workdir)
    verdict = "matches" if error < DEMO_TOLERANCE else "DOES NOT match"
    console.print(f"{verdict} the filter on whole neighbourhoods (max |diff| {error:.1e})")
    folder = write_report(
        workdir / "report",
        recorder,
        {
            "flow_id": report.flow_id,
            "voxels": voxels,
            "tasks_per_level": list(report.tasks_per_level),
            "bytes_read": report.bytes_read,
            "bytes_written": report.bytes_written,
            "read_amplification": report.read_amplification,
            "wall_seconds": report.wall_seconds,
            "breakdown": None if report.breakdown is None else report.breakdown.as_json(),
            "view": view_command([str(workdir / name) for name in DEMO_VOLUMES]),
        },
        report.task_bytes,
    )
    console.print(
        f"volume flow finished in {seconds:.2f} s; data in {workdir}; report in {folder} "
        f"(report.json, gantt.png, utilisation.png; `{_command()} report {folder}`)"
    )
    shown = view_command([str(workdir / name) for name in DEMO_VOLUMES], program=_command())
    console.print(
        f"look at the input and output: {shown}", markup=False, highlight=False, soft_wrap=True
    )
    return 0 if summary.matches and error < DEMO_TOLERANCE else 1


def _command() -> str:
    """How to type ``chunkgraph`` here: the bare name when it is on PATH, else the
    installed script's path (``make demo`` installs into ``.venv``, not onto PATH)."""
    if shutil.which("chunkgraph"):
        return "chunkgraph"
    script = Path(sys.executable).parent / "chunkgraph"
    if not script.exists():
        return "chunkgraph"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux: kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
