"""``draw_gantt``: a plan as a PNG, PDF or SVG (its suffix), one row per slot of each context.

    numa0/0  |██ load+blur ██|█ seg █|      |███ write ███|
    numa0/1  |███ load ███|     |██ seg ██|
    gpu0/0        |████ infer ████|██ infer ██|
             0 s ──────────────────────────────────────> makespan

Bars run from the replayed start to finish (``simulate``; the times the
cost model gives the plan, which a strategy's own numbers should equal),
coloured by subgraph (the unit of dispatch) from a qualitative colormap that
cycles; a bar carries its tasks' names (``a+b+c`` for a fused chain) when the
name fits, cut short with "…" when it fits only in part. Above
``LABEL_UNITS_MAX`` units no name would be readable, so none is drawn and
each row is one ``broken_barh`` collection, which keeps 100,000 units to a
few seconds.

``gantt_target`` checks a path (its folder exists and is writable, its suffix
is one of ``GANTT_FORMATS``) without drawing anything: the command line calls
it before planning. matplotlib is imported inside the function (Agg backend, no display needed)
so that ``import chunkgraph`` stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph._errors import ConfigError

if TYPE_CHECKING:
    from chunkgraph.planning._plan import Plan

# Above this many units bars carry no names: the text would overlap, and one
# text artist per bar costs more than all the bars together.
LABEL_UNITS_MAX = 2_000
# Width of one character of the bar labels, in pixels at the figure's dpi
# (fontsize 7 at 100 dpi: about 4.2 px on average; a little more is safe).
CHAR_PIXELS = 5.0
FIGURE_WIDTH_INCHES = 14.0
DPI = 100
# The colormap cycles: neighbouring subgraphs get different colours, far ones may repeat.
COLORMAP = "tab20"
# The suffixes drawn, each as the format it names (matplotlib's Agg, PDF and SVG backends).
GANTT_FORMATS = ("png", "pdf", "svg")


def gantt_target(path: object) -> tuple[str, str]:
    """(the file path, its format) for a Gantt chart at ``path``; ConfigError if it cannot be.

    The format is the suffix's, one of ``GANTT_FORMATS`` (any case); the folder must
    exist and be writable. Nothing is written.
    """
    if not isinstance(path, str | os.PathLike):
        raise ConfigError(f"gantt needs a file path (str or pathlib.Path), got {path!r}")
    target = os.fspath(path)
    if not isinstance(target, str):
        target = os.fsdecode(target)
    folder = os.path.dirname(os.path.abspath(target))
    if os.path.isdir(target) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ConfigError(
            f"gantt cannot write {target!r}: give a file path in a folder that exists "
            "and is writable, e.g. 'plan.png'"
        )
    suffix = os.path.splitext(target)[1].lstrip(".").lower()
    if suffix not in GANTT_FORMATS:
        named = f"the suffix {'.' + suffix!r}" if suffix else "no suffix"
        raise ConfigError(
            f"gantt cannot write {target!r}: it has {named}; give one of "
            f"{', '.join('.' + f for f in GANTT_FORMATS)} (the format drawn), e.g. 'plan.png'"
        )
    return target, suffix


def draw_gantt(plan: Plan, path: object) -> None:
    """Write ``plan``'s Gantt chart to ``path`` (a str or os.PathLike) as its suffix says:
    .png, .pdf or .svg."""
    target, fmt = gantt_target(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problem, schedule = plan.problem, plan.schedule
    sim = plan.simulate()
    contexts = plan.contexts
    rows = [(c, s) for c, ctx in enumerate(contexts) for s in range(ctx.slots)]
    row_of = {row: i for i, row in enumerate(rows)}
    height = min(max(2.5, 0.32 * len(rows) + 1.4), 60.0)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_INCHES, height), dpi=DPI)
    try:
        n = len(problem)
        start, finish = sim.start, sim.finish
        cmap = plt.get_cmap(COLORMAP)
        ncolors = int(getattr(cmap, "N", 20))
        colors = cmap(np.asarray(schedule.subgraph) % ncolors) if n else np.zeros((0, 4))
        placed = zip(schedule.context.tolist(), schedule.slot.tolist(), strict=True)
        unit_row = np.array([row_of[(c, s)] for c, s in placed], dtype=np.int64)
        span = max(sim.makespan, 1e-9)
        edge = "white" if n <= LABEL_UNITS_MAX else "none"
        for r in range(len(rows)):
            units = np.flatnonzero(unit_row == r)
            if not len(units):
                continue
            bars = list(zip(start[units].tolist(), (finish - start)[units].tolist(), strict=True))
            ax.broken_barh(bars, (r - 0.4, 0.8), facecolors=colors[units], edgecolor=edge,
                           linewidth=0.5)  # fmt: skip
        if n <= LABEL_UNITS_MAX:
            axes_pixels = ax.get_position().width * FIGURE_WIDTH_INCHES * DPI
            pixels_per_second = axes_pixels / (span * 1.02)
            for u in range(n):
                chars = int((finish[u] - start[u]) * pixels_per_second / CHAR_PIXELS) - 1
                label = _fit(problem.label(u), chars)
                if label:
                    ax.text((start[u] + finish[u]) / 2, unit_row[u], label, ha="center",
                            va="center", fontsize=7, clip_on=True)  # fmt: skip
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{contexts[c].name}/{s}" for c, s in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the first context on top
        ax.set_xlim(0, span * 1.02)
        ax.set_xlabel("seconds")
        ax.set_title(
            f"strategy {plan.strategy}: makespan {sim.makespan:.4g} s, "
            f"lower bound {sim.lower_bound:.4g} s ({len(problem.member_idx)} tasks, {n} units)"
        )
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        fig.savefig(target, format=fmt)
    finally:
        plt.close(fig)


def _fit(label: str, chars: int) -> str:
    """``label`` cut to ``chars`` characters with "…" (empty: not even 3 fit)."""
    if chars >= len(label):
        return label
    if chars < 3:
        return ""
    return label[: chars - 1] + "…"
