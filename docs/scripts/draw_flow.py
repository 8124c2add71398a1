"""Draw the pictures of the apply flow's page from the flow's own geometry code.

Each picture is computed, not drawn by hand: the levels come from the flow's
validation (``validate_flow``), a level's children from the same ``Box.split``
the run uses, the blend weights from ``axis_ramp``, the temporary layers from
``plan_layers`` and the reductions from ``reduction_boxes``. A change to the
geometry shows on the site at the next ``make docs``.

    python docs/scripts/draw_flow.py [OUT_DIR]     (default docs/images)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from chunkgraph import volume
from chunkgraph.flow.plan._blend import axis_ramp
from chunkgraph.flow.plan._spec import FlowSpec, validate_flow
from chunkgraph.flow.run._checkerboard import plan_layers
from chunkgraph.flow.run._reduce import reduction_boxes, top_chunk_box, top_indices_meeting
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

LAYER_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")
DPI = 110


def identity(x: object) -> object:
    return x


def flow_spec(
    name: str, shape: tuple[int, ...], chunks: tuple[int, ...], **levels: object
) -> tuple[FlowSpec, Volume]:
    """The validated flow that ``apply(identity, src, dst, **levels)`` would run, and dst."""
    src = volume.create(f"{name}-src", shape, chunks, "float32", backend="memory")
    dst = volume.create(f"{name}-dst", shape, chunks, "float32", backend="memory")
    return validate_flow(identity, src, dst, **levels), dst  # type: ignore[arg-type]


def draw_box(ax: Axes, box: Box, **style: object) -> None:
    """A 2-D box, axis 0 drawn along x and axis 1 along y."""
    (x0, y0), (x1, y1) = box.start, box.stop
    ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, **style))  # type: ignore[arg-type]


def finish(ax: Axes, around: Box, title: str) -> None:
    margin = 12
    ax.set_xlim(around.start[0] - margin, around.stop[0] + margin)
    ax.set_ylim(around.stop[1] + margin, around.start[1] - margin)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=8)


def draw_levels(out: Path) -> None:
    """A top-level chunk, its padded region, the children that tile it, one child's read."""
    spec, _ = flow_spec(
        "levels",
        (256, 256),
        (64, 64),
        chunk_sizes=[(128, 128), (72, 72)],
        crop_pads=[0, 8],
        blend_pads=[8, 0],
    )
    top, bottom = spec.levels
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.8))

    for chunk in spec.bbox.split(top.chunk):
        draw_box(left, chunk, fill=False, edgecolor="black", linewidth=1)
    chunk = top_chunk_box(spec, (1, 0))
    draw_box(left, chunk.padded(top.blend), fill=True, alpha=0.25, color=LAYER_COLOURS[1])
    draw_box(left, chunk, fill=False, edgecolor=LAYER_COLOURS[1], linewidth=2.5)
    left.text(12, 230, f"bbox {spec.bbox.shape}\ntop chunks {top.chunk}", fontsize=9)
    finish(left, spec.bbox.padded(top.blend), "level 0: one task per top chunk (blend pad shaded)")

    region = chunk.padded(tuple(c + b for c, b in zip(top.crop, top.blend, strict=True)))
    draw_box(right, region, fill=True, alpha=0.15, color=LAYER_COLOURS[1])
    children = region.split(bottom.chunk)
    for child in children:
        draw_box(right, child, fill=False, edgecolor="black", linewidth=1)
    first = children[0]
    draw_box(right, first.padded(bottom.crop), fill=True, alpha=0.3, color=LAYER_COLOURS[0])
    draw_box(right, first, fill=False, edgecolor=LAYER_COLOURS[0], linewidth=2.5)
    right.annotate(
        f"fn reads {first.padded(bottom.crop).shape}\nkeeps {first.shape}",
        xy=(first.start[0] + 36, first.start[1] + 36),
        xytext=(region.stop[0] - 60, region.start[1] + 20),
        fontsize=9,
        arrowprops={"arrowstyle": "->"},
    )
    finish(
        right,
        region.padded(bottom.crop),
        f"level 1: {len(children)} children tile {region.shape} (chunk + 2 * blend)",
    )
    fig.tight_layout()
    fig.savefig(out / "levels.png", dpi=DPI)
    plt.close(fig)


def draw_crop_and_blend(out: Path) -> None:
    """Along one axis: a crop pad is read and dropped; blend pads overlap and are weighed."""
    chunk, pad, crop = 64, 8, 6
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5), height_ratios=(1, 2))

    read = Box((64 - crop,), (128 + crop,))
    top.broken_barh([(read.start[0], read.shape[0])], (0.55, 0.35), color=LAYER_COLOURS[0])
    top.broken_barh([(64, chunk)], (0.1, 0.35), color=LAYER_COLOURS[2])
    top.text(read.stop[0] + 3, 0.65, f"fn reads chunk + 2 * crop ({read.shape[0]})", fontsize=9)
    top.text(128 + 3, 0.2, f"the output keeps the chunk ({chunk})", fontsize=9)
    top.set_xlim(0, 256)
    top.set_yticks([])
    top.set_title("crop: context read around a chunk and dropped from its output", fontsize=10)

    total = None
    bbox = Box((0,), (3 * chunk,))
    for i, part in enumerate(bbox.split((chunk,))):
        padded = part.padded((pad,))
        weights = axis_ramp(padded.shape[0], pad, "quadratic", i > 0, i < 2)
        xs = range(padded.start[0], padded.stop[0])
        bottom.plot(xs, weights, color=LAYER_COLOURS[i], linewidth=2, label=f"chunk {i}")
        if total is None:
            total = dict.fromkeys(range(bbox.start[0], bbox.stop[0]), 0.0)
        for x, w in zip(xs, weights, strict=True):
            if x in total:
                total[x] += float(w)
    assert total is not None
    bottom.plot(list(total), list(total.values()), "k--", linewidth=1, label="sum of weights")
    for edge in (chunk, 2 * chunk):
        bottom.axvspan(edge - pad, edge + pad, color="grey", alpha=0.15)
    bottom.set_ylim(-0.05, 1.15)
    bottom.set_xlim(-pad - 4, 3 * chunk + pad + 4)
    bottom.legend(fontsize=8, loc="center", ncols=2)
    bottom.set_title(
        f"blend: chunks padded by {pad} overlap by {2 * pad} (shaded); "
        "quadratic ramps sum to 1, no ramp at the region's edge",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out / "crop-blend.png", dpi=DPI)
    plt.close(fig)


def draw_checkerboard(out: Path) -> None:
    """Top-level chunks write to the layer of their parity: no two writers share a chunk."""
    spec, dst = flow_spec("layers", (256, 256), (32, 32), chunk_sizes=[(64, 64)], blend_pads=8)
    layers = plan_layers(spec, dst, Path("layers"))
    top = spec.levels[0]
    grid = spec.top_grid
    mosaic = [["grid", "layer 0", "layer 1"], ["grid", "layer 2", "layer 3"]]
    fig, named = plt.subplot_mosaic(mosaic, figsize=(11, 7), width_ratios=(2, 1, 1))
    axes = [named["grid"]] + [named[f"layer {k}"] for k in range(layers.n_layers)]
    indices = [(i, j) for i in range(grid[0]) for j in range(grid[1])]
    for index in indices:
        chunk = top_chunk_box(spec, index)
        layer = layers.layer_of(index)
        colour = LAYER_COLOURS[layer]
        draw_box(axes[0], chunk, color=colour, alpha=0.6)
        draw_box(axes[0], chunk, fill=False, edgecolor="black", linewidth=0.5)
        x, y = chunk.start
        axes[0].text(x + 8, y + 20, f"{index}\nlayer {layer}", fontsize=8)
        draw_box(axes[1 + layer], chunk.padded(top.blend), color=colour, alpha=0.5)
    finish(
        axes[0], spec.bbox, f"{grid[0]}x{grid[1]} top chunks of {top.chunk}, blend pad {top.blend}"
    )
    for k in range(layers.n_layers):
        ax = axes[1 + k]
        for storage in layers.bounds.split(layers.storage_chunk, mode="shrink"):
            draw_box(ax, storage, fill=False, edgecolor="grey", linewidth=0.4)
        finish(ax, layers.bounds, f"layer {k}: padded outputs")
    fig.tight_layout()
    fig.savefig(out / "checkerboard.png", dpi=DPI)
    plt.close(fig)


def draw_reductions(out: Path) -> None:
    """One reduction per group of dst chunks, reading every layer that meets it."""
    spec, dst = flow_spec("reduce", (256, 256), (32, 32), chunk_sizes=[(64, 64)], blend_pads=8)
    layers = plan_layers(spec, dst, Path("layers"))
    boxes, grid = reduction_boxes(spec, dst)
    fig, ax = plt.subplots(figsize=(6, 5.4))
    for chunk in dst.bounds.split(dst.spatial_chunks):
        draw_box(ax, chunk, fill=False, edgecolor="lightgrey", linewidth=0.5)
    for box in boxes:
        draw_box(ax, box, fill=False, edgecolor="black", linewidth=1.2)
    chosen = boxes[len(boxes) // 2 + grid[1] // 2 - 1]
    for index in top_indices_meeting(spec, chosen):
        padded = top_chunk_box(spec, index).padded(spec.levels[0].blend)
        colour = LAYER_COLOURS[layers.layer_of(index)]
        draw_box(ax, padded, fill=False, edgecolor=colour, linewidth=2, linestyle="--")
    draw_box(ax, chosen, color="black", alpha=0.25)
    finish(
        ax,
        dst.bounds,
        f"{len(boxes)} reductions of {spec.max_reduction_chunk_size} (dst chunks "
        f"{dst.spatial_chunks});\nthe shaded one weighs the padded outputs (dashed) "
        "that meet it",
    )
    fig.tight_layout()
    fig.savefig(out / "reductions.png", dpi=DPI)
    plt.close(fig)


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "images"
    out.mkdir(parents=True, exist_ok=True)
    for draw in (draw_levels, draw_crop_and_blend, draw_checkerboard, draw_reductions):
        draw(out)
    print(f"flow pictures in {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
