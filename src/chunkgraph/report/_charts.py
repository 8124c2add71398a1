"""The report's pictures, drawn from the report document (see ``_document``).

    gantt.png          one row per worker, one bar per try: where the time went.
                       Flow levels get their own colour, failed tries are red;
                       bars are labelled with the task's name when wide enough,
                       and not at all past GANTT_LABEL_LIMIT tasks.
    utilisation.png    workers busy over time, a step curve from the tries'
                       starts and ends; the I/O rate on a second axis: over
                       time from the tasks' own bytes when the report has
                       them, else the summary's bytes_read / bytes_written
                       averaged over the run (said so in the legend); for
                       the adaptive executor, the workers it had activated.
    breakdown.png      a flow's report only (its summary has a "breakdown"):
                       one stacked bar of the slots' time, a segment per term
                       (compute, redundant, decode, waits, encode, other, idle).

The I/O rate is the run's average, a flat line, and its legend says so: the
events carry no per-task byte counts, and drawing a shape from an average
would invent one.

matplotlib is imported inside ``render_pictures`` with the Agg backend: no
display needed, and importing chunkgraph never pays for matplotlib.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from chunkgraph.execute import Breakdown
from chunkgraph.report._document import tries_of

# Past this many tasks, labels are unreadable and cost most of the drawing time.
GANTT_LABEL_LIMIT = 2000
# A bar gets a label when the label fits: this many inches per character at the
# labels' 7 points, and never fewer than LABEL_MIN_CHARS characters.
CHAR_INCHES = 0.06
LABEL_MIN_CHARS = 4
# Rows and size: a row per worker, but a picture no taller than matplotlib draws quickly.
ROW_INCHES = 0.32
MAX_INCHES = 30.0
WIDTH_INCHES = 12.0
DPI = 100

_CORNER = re.compile(r"start=\(([^)]*)\)")  # a Box repr's start: "Box(start=(0, 64), ..."
_COLOURS = {"top": "tab:blue", "reduce": "tab:green", None: "tab:gray"}
_FAILED = "tab:red"


def render_pictures(directory: Path, document: Mapping[str, Any]) -> list[Path]:
    """Draw ``gantt.png``, ``utilisation.png`` (and ``breakdown.png`` for a flow's report,
    see the module doc) of ``document`` into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")  # before pyplot: no display
    import matplotlib.pyplot as plt

    paths = [directory / "gantt.png", directory / "utilisation.png"]
    draws = [_gantt, _utilisation]
    if isinstance(document["summary"].get("breakdown"), Mapping):
        paths.append(directory / "breakdown.png")
        draws.append(_breakdown)
    for draw, path in zip(draws, paths, strict=True):
        figure = draw(plt, document)
        try:
            figure.savefig(path, dpi=DPI)
        finally:
            plt.close(figure)
    return paths


def _gantt(plt: Any, document: Mapping[str, Any]) -> Any:
    workers: list[str] = list(document["workers"]) or ["(none)"]
    tasks = document["tasks"]
    wall = float(document["totals"].get("wall_seconds") or 0.0)
    height = min(MAX_INCHES, max(3.0, 1.6 + ROW_INCHES * len(workers)))
    figure, axes = plt.subplots(figsize=(WIDTH_INCHES, height))
    row = {name: i for i, name in enumerate(workers)}
    bars: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (worker, colour) -> spans
    labels = len(tasks) <= GANTT_LABEL_LIMIT
    # Characters per second of run that fit across the plot (about 10.5 of its 12 inches).
    chars_per_second = (WIDTH_INCHES - 1.5) / CHAR_INCHES / max(wall, 1e-9)
    for task in tasks:
        for t in tries_of(task):
            colour = _FAILED if t.failed else _COLOURS.get(task.get("level"), _COLOURS[None])
            width = max(t.end - t.start, 0.0)
            bars.setdefault((t.worker, colour), []).append((t.start, width))
            fits = int(width * chars_per_second)
            if labels and fits >= LABEL_MIN_CHARS and t.worker in row:
                axes.text(t.start + width / 2, row[t.worker], _label(task, fits),
                          ha="center", va="center", fontsize=7, clip_on=True)  # fmt: skip
    # Edges show the gaps between short tasks; past the label limit they would hide the bars.
    edge = "white" if labels else "none"
    for (worker, colour), spans in bars.items():
        if worker in row:
            axes.broken_barh(spans, (row[worker] - 0.4, 0.8), facecolors=colour,
                             edgecolor=edge, linewidth=0.3)  # fmt: skip
    axes.set_yticks(range(len(workers)), workers, fontsize=8 if len(workers) < 40 else 5)
    axes.set_ylim(len(workers) - 0.5, -0.5)
    axes.set_xlim(0, max(wall, 1e-6))
    axes.set_xlabel("seconds from the run's start")
    totals = document["totals"]
    axes.set_title(
        f"{totals.get('tasks', len(tasks))} tasks on {len(document['workers'])} workers, "
        f"{wall:.3g} s; failed tries in red",
        loc="left",
    )
    handles = _legend_handles(plt, {c for _, c in bars})
    if handles:
        # Above the plot, right of the title: inside, it would hide bars.
        axes.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0),
                    ncols=len(handles), fontsize=7, frameon=False)  # fmt: skip
    figure.tight_layout()
    return figure


# One colour per term of a breakdown, in its order: fn's two, the reads', the writes', the rest.
_TERM_COLOURS = ("tab:blue", "lightsteelblue", "tab:orange", "navajowhite", "tab:purple",
                 "thistle", "tab:olive", "lightgray")  # fmt: skip


def _breakdown(plt: Any, document: Mapping[str, Any]) -> Any:
    """One stacked bar: the terms' sum, a segment per term, labelled with its share of that
    sum (the shares add up to 100%); a line marks the slots' time where the terms overlap."""
    b = Breakdown.from_json(document["summary"]["breakdown"])
    figure, axes = plt.subplots(figsize=(WIDTH_INCHES, 2.6))
    have = b.slots * b.wall_seconds
    total = max(b.total_seconds, 1e-9)
    shares = b.shares()
    left = 0.0
    for (label, seconds), colour in zip(b.labelled(), _TERM_COLOURS, strict=True):
        axes.barh(0, seconds, left=left, color=colour, label=f"{label} {shares[label]:.0f}%")
        if seconds / total >= 0.06:  # room for the words
            axes.text(left + seconds / 2, 0, label, ha="center", va="center", fontsize=8)
        left += seconds
    axes.set_xlim(0, max(left, have, 1e-9))
    axes.set_yticks([])
    xlabel = f"slot-seconds ({b.slots} slots x {b.wall_seconds:.3g} s)"
    if b.overlap_seconds and have > 0:
        axes.axvline(have, color="black", linewidth=1)
        xlabel += f"; the terms overlap: {total / have:.2f}x the slots' time (the line)"
    axes.set_xlabel(xlabel)
    axes.set_title(f"where the time went; {b.memory_line()}", loc="left", fontsize=9)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncols=4, fontsize=7,
                frameon=False)  # fmt: skip
    figure.tight_layout()
    return figure


def _legend_handles(plt: Any, colours: set[str]) -> list[Any]:
    from matplotlib.patches import Patch

    names = {"tab:blue": "top-level task", "tab:green": "reduction", _FAILED: "failed try"}
    if colours <= {_COLOURS[None]}:
        return []  # a plain graph: one colour, nothing to explain
    names[_COLOURS[None]] = "task"
    return [Patch(color=c, label=names[c]) for c in names if c in colours]


def _label(task: Mapping[str, Any], limit: int) -> str:
    """The task's name in at most ``limit`` characters; a flow task as its level and
    corner ("top (0, 64, 0)"), not its Box's repr."""
    name = str(task["name"])
    corner = _CORNER.search(name) if task.get("level") else None
    if corner:
        name = f"{task['level']} ({corner.group(1)})"
    return name if len(name) <= limit else name[: limit - 1] + "…"


def busy_curve(document: Mapping[str, Any]) -> tuple[list[float], list[int]]:
    """Times and the number of workers busy from each time on (a step curve)."""
    changes: list[tuple[float, int]] = []
    for task in document["tasks"]:
        for t in tries_of(task):
            changes.append((t.start, 1))
            changes.append((t.end, -1))
    changes.sort(key=lambda c: (c[0], c[1]))  # an end before a start at the same time
    times, busy, count = [0.0], [0], 0
    for time, step in changes:
        count += step
        if times[-1] == time:
            busy[-1] = count
        else:
            times.append(time)
            busy.append(count)
    return times, busy


def _utilisation(plt: Any, document: Mapping[str, Any]) -> Any:
    figure, axes = plt.subplots(figsize=(WIDTH_INCHES, 4.0))
    times, busy = busy_curve(document)
    wall = float(document["totals"].get("wall_seconds") or 0.0)
    times.append(max(wall, times[-1]))
    busy.append(busy[-1])
    axes.step(times, busy, where="post", color="tab:blue", label="workers busy")
    workers = len(document["workers"])
    if workers:
        axes.axhline(workers, color="tab:gray", linestyle=":", label=f"workers ({workers})")
    steps = document.get("activation") or []
    if steps:
        at = [float(step["at"]) for step in steps] + [max(wall, float(steps[-1]["at"]))]
        active = [sum(step["active"]) for step in steps]
        axes.step(at, [*active, active[-1]], where="post", color="tab:green", linestyle="--",
                  label="workers active (adaptive)")  # fmt: skip
        workers = max(workers, max(active))
    axes.set_xlabel("seconds from the run's start")
    axes.set_ylabel("workers busy")
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.set_ylim(0, max(workers, max(busy), 1) * 1.1)
    axes.set_xlim(0, max(wall, 1e-6))
    lines, names = axes.get_legend_handles_labels()
    io = _io_rates(document["summary"], wall)
    over_time = io_over_time(document["tasks"], wall)
    if over_time:
        rates = axes.twinx()
        edges, curves = over_time
        for (label, rate), colour in zip(curves, ("tab:orange", "tab:purple"), strict=False):
            rates.step(edges[:-1], rate / 1e6, where="post", color=colour, label=f"{label} MB/s")
        rates.set_ylabel("MB/s")
        rates.set_ylim(0, max(float(r.max()) for _, r in curves) / 1e6 * 1.25 or 1.0)
        more_lines, more_names = rates.get_legend_handles_labels()
        lines, names = lines + more_lines, names + more_names
    elif io:
        rates = axes.twinx()
        for (label, rate), colour in zip(io, ("tab:orange", "tab:purple"), strict=False):
            label = f"{label}, average over the run (per-task bytes not recorded)"
            level = [rate / 1e6, rate / 1e6]
            rates.plot([0, wall], level, color=colour, linestyle="--", label=label)
        rates.set_ylabel("MB/s")
        rates.set_ylim(0, max(rate for _, rate in io) / 1e6 * 1.25)
        more_lines, more_names = rates.get_legend_handles_labels()
        lines, names = lines + more_lines, names + more_names
    axes.legend(lines, names, loc="lower right", fontsize=7)
    axes.set_title("utilisation over time", loc="left")
    figure.tight_layout()
    return figure


def io_over_time(
    tasks: list[Mapping[str, Any]], wall: float, bins: int = 100
) -> tuple[Any, list[tuple[str, Any]]] | None:
    """(bin edges, [(label, bytes per second per bin)]) from the tasks' own bytes, each
    spread evenly over its run; None when no task carries bytes."""
    known = [t for t in tasks if "bytes_read" in t and t.get("start") is not None]
    if not known or wall <= 0:
        return None
    edges = np.linspace(0.0, wall, bins + 1)
    width = edges[1] - edges[0]
    curves = []
    for key, label in (("bytes_read", "read"), ("bytes_written", "written")):
        amount = np.zeros(bins)
        for task in known:
            start, end = float(task["start"]), float(task["end"] or task["start"])
            span = max(end - start, 1e-9)
            # Overlap of [start, end) with each bin, as a share of the task's bytes.
            overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None)
            amount += float(task[key]) * overlap / span
        if amount.any():
            curves.append((label, amount / width))
    return (edges, curves) if curves else None


def _io_rates(summary: Mapping[str, Any], wall: float) -> list[tuple[str, float]]:
    """(label, bytes per second) for the summary's bytes read and written, averaged over
    the summary's own wall_seconds when given (the flow's), else the run's."""
    seconds = summary.get("wall_seconds")
    if not isinstance(seconds, int | float) or seconds <= 0:
        seconds = wall
    if seconds <= 0:
        return []
    rates = []
    for key, label in (("bytes_read", "read"), ("bytes_written", "written")):
        value = summary.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            rates.append((label, float(value) / seconds))
    return rates
