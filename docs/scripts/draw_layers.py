"""Draw the design notes' picture of the packages and their import direction.

The picture is read from the import-linter contracts in ``pyproject.toml``, the
ones ``make lint`` and ``tests/test_layers.py`` check, not drawn by hand: the
top-level layers in the contract's order, the flow's rooms (the face above
``run``, ``run`` above ``plan`` and ``state``) and the state's one direction.
An arrow is "imports". Each layer's line of text (what lives there) is kept
here, keyed by the contract's names: a layer added to a contract without a line
here, or a line for a layer no contract names, stops the drawing with the
names, so the picture cannot fall behind the contract.

    python docs/scripts/draw_layers.py [OUT_DIR]     (default docs/images)
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[2]
PICTURE = "layers.png"
DPI = 110

# The contracts the picture shows, by their ``containers`` (None: the top level).
TOP, FLOW, STATE = None, "chunkgraph.flow", "chunkgraph.flow.state"

# What lives in each layer, one line each, keyed as the contracts name them.
WHAT = {
    "chunkgraph.cli": "the chunkgraph command, spec files, progress; the flow's faces only",
    "chunkgraph.report": "run reports: the event recorder, report.json, charts",
    "chunkgraph.viewer": "Neuroglancer views of volumes, read lazily through Volume",
    "chunkgraph.jobs": "downsample, transfer, block reductions: flow's and volume's public names",
    "chunkgraph.flow": "apply, reduce_deferred, the report: a face on three rooms",
    "chunkgraph.volume": "Volume, formats and places, chunk cache, object stores",
    "chunkgraph.execute": "executors, the scheduler state machine, events, Dask; a run's breakdown",
    "chunkgraph.parallel": "work-stealing loops, NUMA topology, PartitionRunner",
    "chunkgraph.planning": "contexts, fusion, ranks, HEFT/PEFT/merge, Plan, simulation",
    "chunkgraph.gpu": "the device backend (CuPy), GPU detection, residency",
    "chunkgraph.graph": "Graph, TaskRef, Cost, Resources, @task, from_dask",
    "chunkgraph.geometry": "Box: n-d integer boxes, padding, splitting",
    # the flow's rooms
    "_apply": "the face (__init__, _apply): apply, check_device, the jobs by name",
    "run": "the engine: FlowRun, FlowGraph, top tasks, layers, reductions, probe, device",
    "plan": "pure: RunOptions, FlowSpec, divisibility, resolutions, sizes, estimates",
    "state": "what a flow keeps: store, lock, markers, FlowDir, status, clean",
    # the state's one direction
    "_clean": "clean",
    "_resume": "resume of the same work",
    "_status": "status",
    "_flow_dir": "FlowDir",
    "_info": "flow.json",
    "_where": "state elsewhere",
    "_journal": "markers in bulk",
    "_markers": "done markers",
    "_dst_lock": "claims on dst",
    "_lock": "hold: flock or lease",
    "_lease": "lease",
    "_store": "folder or prefix",
    "_layout": "names",
    "_fingerprint": "flow id",
    "_holder": "holders",
    "_root": "StateRoot: a folder or a URL",
}


@dataclass(frozen=True)
class Layers:
    """The contracts' layers, highest first; a row of several names is one layer of
    independent parts (``"plan | state"``)."""

    top: tuple[tuple[str, ...], ...]
    flow: tuple[tuple[str, ...], ...]
    state: tuple[tuple[str, ...], ...]

    def names(self) -> set[str]:
        return {name for rows in (self.top, self.flow, self.state) for row in rows for name in row}


def contract_layers(pyproject: Path = ROOT / "pyproject.toml") -> Layers:
    """The layers of the top-level, flow and flow-state ``layers`` contracts."""
    config: dict[str, Any] = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    found: dict[str | None, tuple[tuple[str, ...], ...]] = {}
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers") or [None]
        rows = tuple(tuple(p.strip() for p in layer.split("|")) for layer in contract["layers"])
        for container in containers:
            found[container] = rows
    missing = [str(c) for c in (TOP, FLOW, STATE) if c not in found]
    if missing:
        raise SystemExit(f"pyproject.toml has no layers contract for {missing} (None: top)")
    return Layers(found[TOP], found[FLOW], found[STATE])


def check_described(layers: Layers) -> None:
    """Every layer of the contracts has its line in ``WHAT``, and nothing else has one."""
    names = layers.names()
    undescribed = sorted(names - WHAT.keys())
    stale = sorted(WHAT.keys() - names)
    if undescribed or stale:
        raise SystemExit(
            "the layers picture and the import-linter contracts differ: "
            f"layers without a line in WHAT: {undescribed}; lines for no layer: {stale}"
        )


def box(
    ax: Axes, x: float, y: float, w: float, h: float, title: str, text: str, colour: str
) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=colour, edgecolor="#333333", linewidth=1,
        )
    )  # fmt: skip
    ax.text(x + 0.12, y + h - 0.16, title, fontsize=10, fontweight="bold", va="top")
    ax.text(x + 0.12, y + 0.12, text, fontsize=8, va="bottom", color="#222222")


def arrow(ax: Axes, x: float, y0: float, y1: float) -> None:
    ax.add_patch(
        FancyArrowPatch((x, y0), (x, y1), arrowstyle="-|>", mutation_scale=12, color="#555555")
    )


def draw(layers: Layers, out: Path) -> Path:
    """The picture: top-level layers down the left, the flow's rooms inside the flow's
    row, the state's one direction as a column on the right; arrows point down."""
    check_described(layers)
    row_h, gap, width = 0.72, 0.32, 7.4
    flow_rows = len(layers.flow)
    heights = [row_h * (flow_rows + 1.2) if row == (FLOW,) else row_h for row in layers.top]
    total = sum(heights) + gap * (len(heights) - 1)
    fig, ax = plt.subplots(figsize=(12.5, total * 0.95 + 0.6))
    y = total
    for row, h in zip(layers.top, heights, strict=True):
        y -= h
        name = " | ".join(row)
        colour = "#dde6f5" if row == (FLOW,) else "#eef1f6"
        box(ax, 0, y, width, h, name, " ; ".join(WHAT[n] for n in row), colour)
        if row == (FLOW,):
            draw_rooms(ax, layers, y, h, width)
        if y > 0.01:
            arrow(ax, width / 2, y, y - gap)
        y -= gap
    note = "an arrow is \u201cimports\u201d: each layer imports only those below it"
    ax.text(0, total + 0.25, note, fontsize=9, style="italic")
    ax.set_xlim(-0.2, 12.2)
    ax.set_ylim(-0.2, total + 0.5)
    ax.axis("off")
    fig.tight_layout()
    path = out / PICTURE
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def draw_rooms(ax: Axes, layers: Layers, y: float, h: float, width: float) -> None:
    """The flow's rooms in its row; the state's own layers beside it, to the right."""
    inner_h, inner_gap = 0.5, 0.18
    top = y + h - 0.45
    state_box: tuple[float, float] | None = None
    for k, row in enumerate(layers.flow):
        ry = top - (k + 1) * inner_h - k * inner_gap
        w = (width - 0.5 - 0.15 * (len(row) - 1)) / len(row)
        for j, name in enumerate(row):
            rx = 0.25 + j * (w + 0.15)
            label = name if name.startswith("_") else f"flow.{name}"
            ax.add_patch(FancyBboxPatch((rx, ry), w, inner_h, boxstyle="round,pad=0.01",
                                        facecolor="white", edgecolor="#4c72b0"))  # fmt: skip
            ax.text(rx + 0.08, ry + inner_h - 0.08, label, fontsize=9, fontweight="bold", va="top")
            ax.text(rx + 0.08, ry + 0.06, WHAT[name], fontsize=6.5, va="bottom", wrap=True)
            if name == "state":
                state_box = (rx + w, ry + inner_h / 2)
        if k + 1 < len(layers.flow):
            arrow(ax, width / 2, ry, ry - inner_gap)
    if state_box is not None:
        draw_state(ax, layers, state_box, width + 0.5)


def draw_state(ax: Axes, layers: Layers, anchor: tuple[float, float], x: float) -> None:
    """flow.state's layers, highest first, joined to the state's box."""
    step, text_h = 0.42, 0.2
    height = step * len(layers.state)
    y0 = anchor[1] + height / 2
    ax.text(x, y0 + 0.1, "flow.state, one direction", fontsize=9, fontweight="bold")
    for k, row in enumerate(layers.state):
        ry = y0 - (k + 1) * step
        label = " | ".join(f"{n} ({WHAT[n]})" for n in row)
        ax.text(x + 0.05, ry + 0.04, label, fontsize=7.5, family="monospace", va="bottom")
        if k + 1 < len(layers.state):
            arrow(ax, x + 0.3, ry + 0.02, ry - step + 0.04 + text_h)
    ax.plot([anchor[0], x - 0.05], [anchor[1], anchor[1]], color="#4c72b0", linewidth=1, ls=":")


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else ROOT / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    print(f"layers picture in {draw(contract_layers(), out)}")


if __name__ == "__main__":
    main(sys.argv[1:])
