"""The ``chunkgraph`` command line.

    chunkgraph demo [--workdir DIR] [--tasks N] [--no-progress]

``demo`` runs the two faces of the engine on generated data and prints a
summary: a task graph (per-block statistics of a random array reduced by a
fan-in tree, checked against numpy on the whole array) and the subchunkable
volume flow (a blended, cropped filter over a generated Zarr v3 volume).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from chunkgraph import __version__

# float32 blends of chunk results that each equal the whole-array filter: differences are
# rounding (~1e-5 on values ~100); anything near this bound is a bug.
DEMO_TOLERANCE = 1e-3


def _demo(args: argparse.Namespace) -> int:
    from chunkgraph.cli._flow_demo import check_demo, run_demo
    from chunkgraph.cli._graph_demo import run_graph_demo

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkgraph",
        description="Plan and run task graphs and chunked volume flows.",
    )
    parser.add_argument("--version", action="version", version=f"chunkgraph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a task graph and a volume flow on generated data")
    demo.add_argument(
        "--workdir", default="demo-out", help="where demo volumes go (default: demo-out)"
    )
    demo.add_argument(
        "--tasks", type=int, default=4096, help="blocks in the task-graph demo (default: 4096)"
    )
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "tasks", 1) < 1:
        print(f"chunkgraph: --tasks must be at least 1, got {args.tasks}", file=sys.stderr)
        return 2
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
