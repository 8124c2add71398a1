"""``chunkgraph demo``: the two faces of the engine on generated data, with a summary.

A task graph (per-block statistics of a random array reduced by a fan-in
tree, checked against numpy on the whole array) and the subchunkable volume
flow (a blended, cropped filter over a generated Zarr v3 volume).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

# float32 blends of chunk results that each equal the whole-array filter: differences are
# rounding (~1e-5 on values ~100); anything near this bound is a bug.
DEMO_TOLERANCE = 1e-3


def register(commands: Any) -> None:
    demo = commands.add_parser("demo", help="run a task graph and a volume flow on generated data")
    demo.add_argument(
        "--workdir", default="demo-out", help="where demo volumes go (default: demo-out)"
    )
    demo.add_argument(
        "--tasks", type=int, default=4096, help="blocks in the task-graph demo (default: 4096)"
    )
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from chunkgraph.cli._flow_demo import check_demo, run_demo
    from chunkgraph.cli._graph_demo import run_graph_demo

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
    started = time.perf_counter()
    report = run_demo(workdir, progress=not args.no_progress)
    console.print(report.summary())
    error = check_demo(workdir)
    verdict = "matches" if error < DEMO_TOLERANCE else "DOES NOT match"
    console.print(f"{verdict} the whole-array filter away from the edge (max |diff| {error:.1e})")
    console.print(
        f"volume flow finished in {time.perf_counter() - started:.2f} s; data in {workdir}"
    )
    return 0 if summary.matches and error < DEMO_TOLERANCE else 1
