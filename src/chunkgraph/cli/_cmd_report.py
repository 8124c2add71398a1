"""``chunkgraph report DIR [--pictures]``: a run report's summary, re-read from DIR/report.json.

With ``--pictures``, gantt.png and utilisation.png are drawn again from the
same document (after a chunkgraph upgrade, or when they were deleted).
Exit 0 when the report was read, 2 when DIR or its report.json is missing or
not a report.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from chunkgraph.report import load_report, render_pictures, summarize


def register(commands: Any) -> None:
    report = commands.add_parser("report", help="summarize a run report directory")
    report.add_argument("directory", metavar="DIR", help="a directory a run wrote its report to")
    report.add_argument(
        "--pictures", action="store_true", help="draw gantt.png and utilisation.png again"
    )
    report.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # A ConfigError (no directory, no or bad report.json) is a usage error: _main exits 2.
    print(summarize(args.directory))
    if args.pictures:
        folder = Path(args.directory)
        for path in render_pictures(folder, load_report(folder)):
            print(f"  wrote {path}")
    return 0
