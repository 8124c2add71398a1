"""summarize(): a run report's few lines, re-read from its report.json, for example::

    run report DIR
      12 tasks on 2 workers in 0.184 s (1 run)
      finished 11, failed 1, cancelled 0; retried 1 task (1 retry); steals 0
      busiest worker chunkgraph-worker-0: busy 91% of the wall, 55% of all work
      bytes_read: 64.0 MiB; read_amplification: 1.06
      where the time went: 2 slots x 0.170 s = 0.340 slot-s (...)    a flow's breakdown:
        compute         0.212 s  62.4%  fn on the voxels needed      one term a line
        ...                                                          (``Breakdown.table``)
      view: chunkgraph view /data/raw.zarr /data/out.zarr

Every number is read from the document: nothing is measured again.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunkgraph._util import format_bytes
from chunkgraph.execute import Breakdown
from chunkgraph.report._document import load_report, tries_of

# Summary fields are wrapped to lines of this many characters.
SUMMARY_WIDTH = 88


def summarize(directory: str | Path) -> str:
    """A few lines about the run whose report is in ``directory`` (see the module doc).

    Raises ConfigError when ``directory`` holds no readable report.json.
    """
    document = load_report(directory)
    totals = document["totals"]
    wall = float(totals.get("wall_seconds") or 0.0)
    runs = int(totals.get("runs", 1))
    lines = [
        f"run report {directory}",
        f"  {totals.get('tasks', len(document['tasks']))} tasks on "
        f"{_count(len(document['workers']), 'worker')} in {wall:.3g} s "
        f"({runs} run{'s' if runs != 1 else ''})",
        f"  finished {totals.get('finished', 0)}, failed {totals.get('failed', 0)}, "
        f"cancelled {totals.get('cancelled', 0)}; "
        f"retried {_count(totals.get('retried', 0), 'task')} "
        f"({_count(totals.get('retries', 0), 'retry', 'retries')}); "
        f"steals {totals.get('steals', 0)}",
    ]
    busiest = _busiest(document)
    if busiest is not None:
        worker, seconds, total = busiest
        share_of_wall = f"{seconds / wall:.0%}" if wall > 0 else "n/a"
        lines.append(
            f"  busiest worker {worker}: busy {share_of_wall} of the wall, "
            f"{seconds / total:.0%} of all work"
        )
    steps = document.get("activation") or []
    if steps:
        active = [sum(step["active"]) for step in steps]
        grew = sum(1 for before, after in itertools.pairwise(active) if after > before)
        lines.append(
            f"  adaptive: {active[0]} workers active at the start, {active[-1]} at the end "
            f"({_count(len(steps) - 1, 'check')}, {_count(grew, 'growth step')})"
        )
    failed = [t for t in document["tasks"] if t.get("outcome") == "failed"]
    for task in failed[:3]:
        lines.append(f"  failed: {task['name']}: {task.get('error', '')}")
    if len(failed) > 3:
        lines.append(f"  ... and {len(failed) - 3} more failed tasks (see report.json)")
    lines.extend(f"  {line}" for line in document.get("gpu", []))
    summary = dict(document["summary"])
    breakdown = summary.pop("breakdown", None)
    shown = summary.pop("view", None)  # a command line: its own line, to copy whole
    lines.extend(_wrapped(_fields(summary)))
    if isinstance(breakdown, dict):
        lines.extend(f"  {line}" for line in Breakdown.from_json(breakdown).table())
    if shown:
        lines.append(f"  view: {shown}")
    lines.extend(f"  note: {note}" for note in document.get("notes", []))
    return "\n".join(lines)


def _busiest(document: Mapping[str, Any]) -> tuple[str, float, float] | None:
    """(worker, its busy seconds, everyone's busy seconds), or None when no try took time."""
    busy: dict[str, float] = {}
    for task in document["tasks"]:
        for t in tries_of(task):
            busy[t.worker] = busy.get(t.worker, 0.0) + max(0.0, t.end - t.start)
    total = sum(busy.values())
    if total <= 0:
        return None
    worker = max(busy, key=lambda w: busy[w])
    return worker, busy[worker], total


def _count(n: Any, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _fields(summary: Mapping[str, Any]) -> list[str]:
    """``key: value`` for each summary field, bytes in binary units, floats to 3 figures."""
    out = []
    for key, value in summary.items():
        if value is None or value == "":
            continue  # nothing to say (e.g. a flow that had not finished before)
        if isinstance(value, bool) or not isinstance(value, int | float):
            out.append(f"{key}: {value}")
        elif "bytes" in key:
            out.append(f"{key}: {format_bytes(float(value))}")
        elif isinstance(value, float):
            out.append(f"{key}: {value:.3g}")
        else:
            out.append(f"{key}: {value:,}")
    return out


def _wrapped(fields: list[str], width: int = SUMMARY_WIDTH) -> list[str]:
    """``fields`` joined by "; " into indented lines of at most ``width`` characters
    (a field longer than that gets a line of its own)."""
    lines: list[str] = []
    for field in fields:
        if lines and len(lines[-1]) + 2 + len(field) <= width:
            lines[-1] += "; " + field
        else:
            lines.append("  " + field)
    return lines
