"""Task graphs with costs for the scheduling benchmarks, as plain arrays first.

Every generator returns a ``Dag``: tasks ``0..n-1`` in a topological order
(each edge goes from a lower id to a higher one, so a Dag is acyclic by
construction and builds into a Graph in id order), each task's mean run
time in seconds, the bytes its result holds, and the bytes sent along each
edge. Nothing here runs a task; ``to_graph`` turns a Dag into a chunkgraph
``Graph`` of no-op tasks that only the planner reads.

    generator                 shape                                        tasks
    heft_random(v, ...)       Topcuoglu et al. 2002 random DAG             v
    reduction_tree(l, k)      l leaves summed k at a time, to one root     l + l/k + l/k² ... + 1
    stencil_2d(s, steps)      s×s grid; each cell reads itself and its     s²·steps
                              4 neighbours of the step before
    fft(m)                    2m-1 recursive calls, log2 m butterfly        2m - 1 + m·log2 m
                              stages of m tasks (Topcuoglu's FFT graph)
    fork_join(w, stages)      a source, then per stage w tasks and a join  1 + stages·(w + 1)
    montage(images)           mProject fan-out -> mDiffFit pairs ->        2·images + pairs + 6
                              mConcatFit -> mBgModel -> mBackground fan-out
                              -> mImgTbl -> mAdd -> mShrink -> mJPEG

Every generator takes a ``seed``; the same arguments give the same Dag.

CCR (communication to computation ratio, as in the HEFT paper) is the time
to send the average edge's data over the average link divided by the average
task's time. ``heft_random`` draws its edges for a given CCR directly; for
the structured shapes ``with_ccr(dag, ccr, bandwidth)`` rescales every data
size so that ``mean(edge bytes) / bandwidth == ccr * mean(work)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Bytes per second that ``heft_random`` and ``with_ccr`` size the data for.
# Any value works as long as the benchmark's links use the same one; 1 GB/s
# keeps byte counts readable (1 ms of transfer = 1 MB).
BANDWIDTH = 1e9


@dataclass(frozen=True)
class Dag:
    """A task graph as arrays: task ``i`` runs ``work[i]`` seconds (its mean over the
    processors), holds ``output[i]`` bytes of result, and edge ``e`` sends
    ``data[e]`` bytes from ``src[e]`` to ``dst[e]`` (``src[e] < dst[e]``)."""

    name: str
    names: tuple[str, ...]
    work: FloatArray
    output: FloatArray
    src: IntArray
    dst: IntArray
    data: FloatArray

    def __len__(self) -> int:
        return len(self.work)

    @property
    def edges(self) -> int:
        return len(self.src)

    def predecessors(self) -> list[list[int]]:
        """Inputs of each task, in edge order."""
        preds: list[list[int]] = [[] for _ in range(len(self))]
        for s, d in zip(self.src.tolist(), self.dst.tolist(), strict=True):
            preds[d].append(s)
        return preds

    def ccr(self, bandwidth: float = BANDWIDTH) -> float:
        """Mean edge transfer time over ``bandwidth`` / mean task time (0 without edges)."""
        if not self.edges or not self.work.mean() > 0:
            return 0.0
        return float(self.data.mean() / bandwidth / self.work.mean())

    def critical_path(self) -> float:
        """Longest chain of ``work`` (no transfers): a lower bound on any makespan
        on processors of speed 1."""
        finish = self.work.astype(np.float64).copy()
        for i, preds in enumerate(self.predecessors()):
            if preds:
                finish[i] += max(finish[p] for p in preds)
        return float(finish.max()) if len(finish) else 0.0


def _make(
    name: str,
    names: Sequence[str],
    work: Sequence[float] | FloatArray,
    output: Sequence[float] | FloatArray,
    edges: Sequence[tuple[int, int]],
    data: Sequence[float] | FloatArray | None = None,
) -> Dag:
    """A Dag; edge sizes default to the producer's output (one result, sent whole)."""
    src = np.array([s for s, _ in edges], dtype=np.int64)
    dst = np.array([d for _, d in edges], dtype=np.int64)
    out = np.asarray(output, dtype=np.float64)
    sizes = out[src] if data is None else np.asarray(data, dtype=np.float64)
    dag = Dag(name, tuple(names), np.asarray(work, dtype=np.float64), out, src, dst, sizes)
    if len(set(dag.names)) != len(dag.names) or len(dag.names) != len(dag.work):
        raise ValueError(f"{name}: task names must be unique, one per task")
    if dag.edges and not (dag.src < dag.dst).all():
        raise ValueError(f"{name}: every edge must go from a lower task id to a higher one")
    return dag


def with_ccr(dag: Dag, ccr: float, bandwidth: float = BANDWIDTH) -> Dag:
    """``dag`` with every output and edge size scaled by one factor so that its CCR
    over ``bandwidth`` is ``ccr`` (relative sizes kept)."""
    if not dag.edges or not dag.data.mean() > 0:
        return dag
    factor = ccr * bandwidth * float(dag.work.mean()) / float(dag.data.mean())
    return replace(
        dag,
        name=dag.name,
        output=np.round(dag.output * factor),
        data=np.round(dag.data * factor),
    )


def _jitter(rng: np.random.Generator, base: FloatArray | float, n: int) -> FloatArray:
    """``base`` × uniform[0.5, 1.5): tasks of one kind differ by up to 3x, as measured
    tasks of one function on different chunks do."""
    return np.asarray(base, dtype=np.float64) * rng.uniform(0.5, 1.5, n)


# ---------------------------------------------------------------- random (HEFT paper)
def heft_random(
    v: int,
    *,
    alpha: float = 1.0,
    out_degree: int = 3,
    ccr: float = 1.0,
    mean_work: float = 1.0,
    seed: int = 0,
    bandwidth: float = BANDWIDTH,
) -> Dag:
    """The random DAG generator of Topcuoglu, Hariri and Wu (IEEE TPDS 13(3), 2002).

    ``v`` tasks in levels: the height is drawn uniformly around ``sqrt(v) / alpha``
    and the width of each level uniformly around ``alpha * sqrt(v)`` (alpha > 1:
    short and wide, much parallelism; alpha < 1: long and thin). Each task's
    mean cost ``w̄_i`` is uniform in [0, 2·mean_work]; each task but the last
    level's has an out-degree uniform in [1, 2·out_degree - 1] (mean
    ``out_degree``) to tasks of later levels, and every task below the first
    level has a parent in the level just above (so the levels are the real
    height). Each edge's transfer time is uniform in [0, 2·ccr·mean_work], stored
    as bytes at ``bandwidth``. Per-processor costs with heterogeneity β come
    from ``unrelated_costs``.
    """
    if v < 1:
        raise ValueError(f"heft_random needs v >= 1 tasks, got {v}")
    rng = np.random.default_rng(seed)
    mean_height = math.sqrt(v) / alpha
    lo, hi = max(1, math.ceil(mean_height / 2)), max(1, math.floor(mean_height * 3 / 2))
    height = min(v, int(rng.integers(lo, hi + 1)))
    # Level widths: uniform weights around their mean, then exactly v tasks with >= 1 per level.
    weights = rng.uniform(0.5, 1.5, height)
    widths = np.ones(height, dtype=np.int64)
    extra = v - height
    if extra:
        widths += np.floor(weights / weights.sum() * extra).astype(np.int64)
        short = v - int(widths.sum())
        widths[rng.choice(height, size=short, replace=False)] += 1
    starts = np.concatenate(([0], np.cumsum(widths)))
    level = np.repeat(np.arange(height), widths)

    edges: set[tuple[int, int]] = set()
    degree = np.zeros(v, dtype=np.int64)
    for i in range(int(starts[1]), v):  # a parent in the level above
        above = int(level[i]) - 1
        parent = int(rng.integers(starts[above], starts[above + 1]))
        edges.add((parent, i))
        degree[parent] += 1
    for i in range(int(starts[-2])):  # out-degree to later levels
        later = int(starts[level[i] + 1])
        want = min(int(rng.integers(1, 2 * out_degree)), v - later)
        for d in rng.permutation(np.arange(later, v)).tolist():
            if degree[i] >= want:
                break
            if (i, d) not in edges:
                edges.add((i, d))
                degree[i] += 1
    ordered = sorted(edges)
    work = rng.uniform(0.0, 2.0 * mean_work, v)
    # Around the drawn tasks' mean, not ``mean_work``: the graph's CCR is then ``ccr``
    # up to the sampling of the edges alone.
    comm = rng.uniform(0.0, 2.0 * ccr * float(work.mean()), len(ordered))
    data = np.round(comm * bandwidth)
    # A task holds its largest outgoing message; a sink an average one (kept to the end).
    output = np.zeros(v)
    np.maximum.at(output, np.array([s for s, _ in ordered], dtype=np.int64), data)
    output[degree == 0] = float(data.mean()) if len(data) else 0.0
    names = [f"t{i}" for i in range(v)]
    return _make(
        f"heft-random v={v} a={alpha:g} ccr={ccr:g} seed={seed}", names, work, output,
        ordered, data,
    )  # fmt: skip


def unrelated_costs(work: FloatArray, processors: int, beta: float, seed: int = 0) -> FloatArray:
    """(tasks, processors) seconds: ``w_ij`` uniform in [w̄_i(1 - β/2), w̄_i(1 + β/2)]
    (the HEFT paper's heterogeneity β in [0, 2); β = 0: identical processors)."""
    if not 0 <= beta < 2:
        raise ValueError(f"beta must be in [0, 2), got {beta}")
    rng = np.random.default_rng(seed)
    spread = rng.uniform(1 - beta / 2, 1 + beta / 2, (len(work), processors))
    return np.asarray(work, dtype=np.float64)[:, None] * spread


def gpu_capable(n: int, fraction: float = 0.5, seed: int = 0) -> BoolArray:
    """Which of ``n`` tasks also run on a GPU: ``round(fraction * n)`` of them, by seed."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=round(fraction * n), replace=False)] = True
    return mask


# ---------------------------------------------------------------- structured shapes
def reduction_tree(leaves: int, arity: int = 2, *, seed: int = 0) -> Dag:
    """``leaves`` leaf tasks, combined ``arity`` at a time until one root remains.

    Leaves cost ~1 s, combines ~0.3 s (jittered); every result is one unit of data.
    """
    if leaves < 1 or arity < 2:
        raise ValueError(f"reduction_tree needs leaves >= 1 and arity >= 2, got {leaves}, {arity}")
    rng = np.random.default_rng(seed)
    names = [f"leaf{i}" for i in range(leaves)]
    edges: list[tuple[int, int]] = []
    level, depth = list(range(leaves)), 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for j in range(0, len(level), arity):
            tid = len(names)
            names.append(f"sum{depth}.{j // arity}")
            edges.extend((c, tid) for c in level[j : j + arity])
            nxt.append(tid)
        level = nxt
    work = np.concatenate((_jitter(rng, 1.0, leaves), _jitter(rng, 0.3, len(names) - leaves)))
    kind = "binary" if arity == 2 else f"{arity}-ary"
    return _make(f"{kind} reduction {leaves}", names, work, np.ones(len(names)), edges)


def stencil_2d(side: int, steps: int, *, seed: int = 0) -> Dag:
    """A ``side`` × ``side`` grid over ``steps`` iterations: cell (r, c) at step t reads
    cells (r, c), (r±1, c), (r, c±1) of step t - 1 (a 5-point stencil, edges clipped)."""
    if side < 1 or steps < 1:
        raise ValueError(f"stencil_2d needs side, steps >= 1, got {side}, {steps}")
    rng = np.random.default_rng(seed)
    names, edges = [], []
    for t in range(steps):
        for r in range(side):
            for c in range(side):
                tid = len(names)
                names.append(f"cell{t}.{r}.{c}")
                if t == 0:
                    continue
                prev = (t - 1) * side * side
                near = [(r, c), (r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)]
                edges.extend(
                    (prev + y * side + x, tid) for y, x in near if 0 <= y < side and 0 <= x < side
                )
    n = len(names)
    return _make(f"stencil {side}x{side}x{steps}", names, _jitter(rng, 1.0, n), np.ones(n), edges)


def fft(points: int, *, seed: int = 0) -> Dag:
    """Topcuoglu's FFT task graph for ``points`` (a power of two) input points.

    A binary tree of 2·points - 1 recursive-call tasks from the root down to
    ``points`` leaves, then log2(points) butterfly stages of ``points`` tasks:
    butterfly (s, i) reads (s-1, i) and (s-1, i XOR 2^(s-1)), stage 0 being the
    leaves. Calls cost ~0.5 s, butterflies ~1 s.
    """
    if points < 2 or points & (points - 1):
        raise ValueError(f"fft needs a power of two >= 2 points, got {points}")
    rng = np.random.default_rng(seed)
    names = [f"call{i}" for i in range(2 * points - 1)]  # heap order: children 2i+1, 2i+2
    edges = [((i - 1) // 2, i) for i in range(1, 2 * points - 1)]
    previous = list(range(points - 1, 2 * points - 1))  # the leaves
    for s in range(1, points.bit_length()):
        stage = []
        for i in range(points):
            tid = len(names)
            names.append(f"bfly{s}.{i}")
            partner = i ^ (1 << (s - 1))
            edges.extend(sorted([(previous[i], tid), (previous[partner], tid)]))
            stage.append(tid)
        previous = stage
    calls = 2 * points - 1
    work = np.concatenate((_jitter(rng, 0.5, calls), _jitter(rng, 1.0, len(names) - calls)))
    return _make(f"fft {points}", names, work, np.ones(len(names)), edges)


def fork_join(width: int, stages: int, *, seed: int = 0) -> Dag:
    """A source, then ``stages`` times: ``width`` parallel tasks (~1 s) and a join (~0.2 s)."""
    if width < 1 or stages < 1:
        raise ValueError(f"fork_join needs width, stages >= 1, got {width}, {stages}")
    rng = np.random.default_rng(seed)
    names, edges, work = ["fork"], [], [0.2]
    join = 0
    for s in range(stages):
        branch = list(range(len(names), len(names) + width))
        names.extend(f"work{s}.{i}" for i in range(width))
        work.extend(_jitter(rng, 1.0, width).tolist())
        edges.extend((join, b) for b in branch)
        join = len(names)
        names.append(f"join{s}")
        work.append(float(_jitter(rng, 0.2, 1)[0]))
        edges.extend((b, join) for b in branch)
    return _make(f"fork-join {width}x{stages}", names, work, np.ones(len(names)), edges)


# Montage: seconds per job after the profile of Juve et al., "Characterizing and
# profiling scientific workflows" (FGCS 29(3), 2013), whose run mosaicked
# MONTAGE_PROFILE_IMAGES images. The one-job stages read every fit or image, so
# their time is scaled by images / MONTAGE_PROFILE_IMAGES. Relative output sizes:
# a projected or corrected image is 1, a fit or a table is small, the mosaic
# holds every image.
MONTAGE_PROFILE_IMAGES = 2102
MONTAGE_SECONDS = {
    "mProject": 1.73, "mDiffFit": 0.66, "mConcatFit": 143.26, "mBgModel": 384.49,
    "mBackground": 1.72, "mImgTbl": 2.78, "mAdd": 282.37, "mShrink": 66.10, "mJPEG": 0.64,
}  # fmt: skip
MONTAGE_ONE_JOB = ("mConcatFit", "mBgModel", "mImgTbl", "mAdd", "mShrink")


def montage(images: int, *, seed: int = 0) -> Dag:
    """A Montage mosaic workflow (the Pegasus workflow gallery's shape) of ``images``.

    Images lie on a near-square grid; each overlaps its right, lower and
    lower-right neighbours, and each overlapping pair gets an mDiffFit reading
    both projections. mBackground i reads mBgModel and mProject i; mAdd reads
    mImgTbl and every corrected image.
    """
    if images < 2:
        raise ValueError(f"montage needs >= 2 images, got {images}")
    rng = np.random.default_rng(seed)
    cols = math.ceil(math.sqrt(images))
    names: list[str] = []
    kinds: list[str] = []
    output: list[float] = []
    edges: list[tuple[int, int]] = []

    def add(kind: str, label: str, size: float, inputs: Sequence[int]) -> int:
        tid = len(names)
        names.append(label)
        kinds.append(kind)
        output.append(size)
        edges.extend((i, tid) for i in inputs)
        return tid

    project = [add("mProject", f"mProject{i}", 1.0, []) for i in range(images)]
    pairs = []
    for i in range(images):
        r, c = divmod(i, cols)
        for dr, dc in ((0, 1), (1, 0), (1, 1)):
            j = (r + dr) * cols + (c + dc)
            if c + dc < cols and j < images:
                pairs.append((i, j))
    diffs = [add("mDiffFit", f"mDiffFit{i}-{j}", 0.01, [project[i], project[j]]) for i, j in pairs]
    concat = add("mConcatFit", "mConcatFit", 0.01 * len(pairs), diffs)
    model = add("mBgModel", "mBgModel", 0.01 * images, [concat])
    background = [
        add("mBackground", f"mBackground{i}", 1.0, [model, project[i]]) for i in range(images)
    ]
    table = add("mImgTbl", "mImgTbl", 0.01 * images, background)
    mosaic = add("mAdd", "mAdd", float(images), [table, *background])
    shrink = add("mShrink", "mShrink", images / 16, [mosaic])
    add("mJPEG", "mJPEG", images / 64, [shrink])

    base = np.array([MONTAGE_SECONDS[k] for k in kinds])
    one_job = np.array([k in MONTAGE_ONE_JOB for k in kinds])
    scale = np.where(one_job, images / MONTAGE_PROFILE_IMAGES, 1.0)
    work = _jitter(rng, base * scale, len(names))
    return _make(f"montage {images}", names, work, output, sorted(edges))


# ---------------------------------------------------------------- to a chunkgraph Graph
def noop(*args: Any) -> None:
    """What every benchmark task calls: the planner reads costs, it never runs a task."""
    return None


def to_graph(
    dag: Dag,
    seconds: Sequence[float | Mapping[str, float]] | None = None,
    memory: Sequence[float] | FloatArray | None = None,
) -> Any:
    """A chunkgraph Graph of ``dag``: task i is ``noop(*inputs)`` named ``dag.names[i]``,
    with ``seconds[i]`` (default ``dag.work[i]``: one number for every CPU context) or a
    per-context mapping, ``memory[i]`` bytes while it runs (default 0), its output
    bytes, and each edge's own size where it differs from the producer's output."""
    from chunkgraph import Cost, Graph

    g = Graph()
    preds = dag.predecessors()
    refs = []
    for i in range(len(dag)):
        sec = float(dag.work[i]) if seconds is None else seconds[i]
        mem = 0 if memory is None else int(memory[i])
        cost = Cost(seconds=sec, memory=mem, output_bytes=int(dag.output[i]))
        refs.append(g.add(noop, *[refs[p] for p in preds[i]], name=dag.names[i], cost=cost))
    for s, d, size in zip(dag.src.tolist(), dag.dst.tolist(), dag.data.tolist(), strict=True):
        if int(size) != int(dag.output[s]):
            g.set_edge_bytes(refs[s], refs[d], int(size))
    return g
