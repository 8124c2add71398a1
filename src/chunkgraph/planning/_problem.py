"""The numbers every planning pass reads: units of work × contexts, edges with sizes.

Passes do not walk the Graph; they read a ``Problem`` built once from it:

    unit u          one task, or a chain of tasks fused into one (``_fuse``);
                    its graph tasks are member_idx[member_ptr[u]:member_ptr[u+1]],
                    in run order. Only a chain's head has inputs from other
                    units and only its tail has consumers, so edges between
                    units are edges between graph tasks.
    seconds[u, c]   time of u on context c (inf: cannot run there), from the
                    task's cost: one number / c.speed, or its per-context
                    mapping (by context name, then kind); a fused unit sums
                    its members
    memory[u]       peak bytes while u runs (the largest member's)
    output_bytes[u] bytes of u's result while it is held for its consumers
    dep_ptr/dep_idx the units u consumes (CSR); dep_bytes aligned with dep_idx:
                    bytes sent along that edge (``Graph.edge_bytes``)
    out_ptr/out_idx the units consuming u (CSR); out_bytes aligned with out_idx
    keep[u]         u's result is a target: held until the end of the run
    latency[a, b], bandwidth[a, b]
                    the link between contexts (0 and inf on the diagonal)

Which context may run a task with one number for its cost: the contexts
whose kind is among its resource names (the default ``{"cpu": 1}``: CPU
contexts; ``{"gpu": 1}``: GPU contexts), or every context when its resources
name neither kind. A task naming "gpu" is a GPU task whatever else it names
(``{"gpu": 1, "cpu": 1}``: a GPU and a host core): GPU contexts only, as
the executor's residency and its check of a given plan read it. A task with
costs per context runs where it has an entry; if its resources name a kind
(not the default), only on contexts of that kind.
With ``gpu_fallback`` and no GPU context, a task whose resources name "gpu"
runs on CPU contexts instead (as if it named "cpu"); where its costs per
context name no CPU context, its "gpu" cost is the estimate there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import PlanError
from chunkgraph.graph import Graph
from chunkgraph.planning._contexts import CONTEXT_KINDS, Context, Links, link_between

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(eq=False)
class Problem:
    """What the passes plan: see the module doc."""

    graph: Graph
    contexts: tuple[Context, ...]
    member_ptr: IntArray
    member_idx: IntArray
    unit_of: IntArray  # graph task id -> unit (-1: a task the targets do not need)
    seconds: FloatArray
    memory: IntArray
    output_bytes: IntArray
    dep_ptr: IntArray
    dep_idx: IntArray
    dep_bytes: FloatArray
    out_ptr: IntArray
    out_idx: IntArray
    out_bytes: FloatArray
    latency: FloatArray
    bandwidth: FloatArray
    keep: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.memory)

    def members(self, u: int) -> IntArray:
        """Graph task ids of unit ``u``, in run order."""
        return self.member_idx[self.member_ptr[u] : self.member_ptr[u + 1]]

    def comm(self, nbytes: float, a: int, b: int) -> float:
        """Seconds to move ``nbytes`` from context ``a`` to ``b`` (0 within one context)."""
        if a == b:
            return 0.0
        return float(self.latency[a, b] + nbytes / self.bandwidth[a, b])

    def mean_comm(self, nbytes: float) -> float:
        """Average seconds to move ``nbytes`` between two different contexts (HEFT's c̄)."""
        k = len(self.contexts)
        if k == 1:
            return 0.0
        off = ~np.eye(k, dtype=bool)
        return float(np.mean(self.latency[off] + nbytes / self.bandwidth[off]))

    def label(self, u: int) -> str:
        """The user's names of unit ``u``'s tasks (``a+b+c`` for a fused chain)."""
        names = [self.graph.name(int(t)) for t in self.members(u)]
        return names[0] if len(names) == 1 else "+".join(names)

    def can_run(self) -> npt.NDArray[np.bool_]:
        return np.isfinite(self.seconds)


def build_problem(
    graph: Graph,
    contexts: Sequence[Context],
    links: Links = None,
    *,
    member_ptr: IntArray | None = None,
    member_idx: IntArray | None = None,
    targets: IntArray | None = None,
    gpu_fallback: bool = False,
) -> Problem:
    """The Problem of ``graph`` on ``contexts``; units are the given fusion groups
    (CSR ``member_ptr``/``member_idx`` over task ids), or one unit per task.
    ``targets`` (task ids) are the results kept to the end (default: the sinks).
    ``gpu_fallback``: GPU tasks run on CPU contexts when there is no GPU context.

    Raises PlanError naming a task that no context can run.
    """
    n = len(graph)
    ctx = tuple(contexts)
    k = len(ctx)
    if member_ptr is None or member_idx is None:
        member_ptr = np.arange(n + 1, dtype=np.int64)
        member_idx = np.arange(n, dtype=np.int64)
    units = len(member_ptr) - 1
    unit_of = np.full(n, -1, dtype=np.int64)
    unit_of[member_idx] = np.repeat(np.arange(units, dtype=np.int64), np.diff(member_ptr))
    heads = member_idx[member_ptr[:-1]]
    tails = member_idx[member_ptr[1:] - 1]

    fallback = gpu_fallback and not any(c.kind == "gpu" for c in ctx)
    task_seconds = _task_seconds(graph, ctx, fallback)  # (n, k)
    seconds = (
        np.add.reduceat(task_seconds[member_idx], member_ptr[:-1], axis=0)
        if units
        else (np.zeros((0, k)))
    )
    costs = graph.costs()
    memory = (
        np.maximum.reduceat(costs.memory[member_idx], member_ptr[:-1])
        if units
        else np.zeros(0, np.int64)
    )
    output_bytes = costs.output_bytes[tails].astype(np.int64)
    dep_ptr, dep_idx, dep_bytes = _unit_edges(graph, heads, unit_of)
    out_ptr, out_idx, out_bytes = _transpose(dep_ptr, dep_idx, dep_bytes)

    kept = np.zeros(n, bool)
    kept[graph.sinks() if targets is None else targets] = True
    keep = kept[tails] if units else np.zeros(0, bool)
    latency, bandwidth = _link_matrices(ctx, links)

    problem = Problem(
        graph, ctx, member_ptr, member_idx, unit_of, seconds, memory, output_bytes,
        dep_ptr, dep_idx, dep_bytes, out_ptr, out_idx, out_bytes, latency, bandwidth, keep,
    )  # fmt: skip
    nowhere: IntArray = (
        np.flatnonzero(~np.isfinite(seconds).any(axis=1)) if units else np.zeros(0, np.int64)
    )
    if len(nowhere):
        raise _nowhere_error(graph, ctx, int(problem.members(int(nowhere[0]))[0]), gpu_fallback)
    return problem


def _unit_edges(
    graph: Graph, heads: IntArray, unit_of: IntArray
) -> tuple[IntArray, IntArray, FloatArray]:
    """The edges between units as CSR ``(dep_ptr, dep_idx, dep_bytes)``: the heads'
    dependencies (a member's only input is the one before it), sized by the producer's
    ``output_bytes`` unless ``set_edge_bytes`` gave the edge its own size."""
    units = len(heads)
    g_ptr, g_idx = graph.dependencies()
    counts = np.diff(g_ptr)[heads]
    dep_ptr = np.zeros(units + 1, dtype=np.int64)
    np.cumsum(counts, out=dep_ptr[1:])
    starts = g_ptr[heads]
    gather = np.repeat(starts - dep_ptr[:-1], counts) + np.arange(int(dep_ptr[-1]))
    producers = g_idx[gather]
    dep_idx = unit_of[producers]
    if len(dep_idx) and (dep_idx < 0).any():
        bad = int(producers[np.flatnonzero(dep_idx < 0)[0]])
        raise PlanError(f"task {graph.name(bad)!r} is an input of a planned task but not planned")
    dep_bytes = graph.costs().output_bytes[producers].astype(np.float64)
    overrides = graph.edge_bytes_overrides()
    if overrides:
        consumers = np.repeat(heads, counts)
        for j, (p, c) in enumerate(zip(producers.tolist(), consumers.tolist(), strict=True)):
            size = overrides.get((p, c))
            if size is not None:
                dep_bytes[j] = size
    return dep_ptr, dep_idx, dep_bytes


def _transpose(
    dep_ptr: IntArray, dep_idx: IntArray, dep_bytes: FloatArray
) -> tuple[IntArray, IntArray, FloatArray]:
    """Each unit's consumers as CSR ``(out_ptr, out_idx, out_bytes)``, the sizes carried
    along."""
    units = len(dep_ptr) - 1
    consumer_unit = np.repeat(np.arange(units, dtype=np.int64), np.diff(dep_ptr))
    order = np.argsort(dep_idx, kind="stable")
    out_counts = (
        np.bincount(dep_idx, minlength=units) if len(dep_idx) else np.zeros(units, np.int64)
    )
    out_ptr = np.zeros(units + 1, dtype=np.int64)
    np.cumsum(out_counts[:units], out=out_ptr[1:])
    return out_ptr, consumer_unit[order], dep_bytes[order]


def _link_matrices(ctx: tuple[Context, ...], links: Links) -> tuple[FloatArray, FloatArray]:
    """(contexts, contexts) latency and bandwidth; 0 and inf where no link applies."""
    k = len(ctx)
    latency = np.zeros((k, k))
    bandwidth = np.full((k, k), math.inf)
    for a in range(k):
        for b in range(k):
            link = link_between(ctx[a], ctx[b], links)
            if link is not None:
                latency[a, b], bandwidth[a, b] = link.latency, link.bandwidth
    return latency, bandwidth


def _nowhere_error(graph: Graph, ctx: tuple[Context, ...], t: int, gpu_fallback: bool) -> PlanError:
    """The PlanError for task ``t``, which no context can run, with the likely way out."""
    kinds = ", ".join(f"{c.name} ({c.kind})" for c in ctx)
    hint = (
        "; no GPU context was given (none is detected without CuPy, the 'gpu' extra: "
        "pip install 'chunkgraph[gpu]'); plan(..., gpu_fallback=True) runs GPU tasks "
        "on CPU contexts instead"
        if "gpu" in graph.resources(t)
        and not any(c.kind == "gpu" for c in ctx)
        and not gpu_fallback  # never suggest what was passed already
        else "; its cost names 'gpu' but its resources do not: give it "
        "resources={'gpu': 1} to plan it on GPU contexts"
        if "gpu" in graph.context_seconds().get(t, {}) and "gpu" not in graph.resources(t)
        else ""
    )
    return PlanError(
        f"no context can run task {graph.name(t)!r} (resources "
        f"{dict(graph.resources(t))}, cost {graph.cost(t).seconds!r}); the contexts are "
        f"{kinds}. Give it a cost for one of them, or add a context of the kind it "
        f"needs{hint}"
    )


def _task_seconds(
    graph: Graph, contexts: tuple[Context, ...], gpu_fallback: bool = False
) -> FloatArray:
    """(tasks, contexts) seconds, inf where a context cannot run the task (module doc)."""
    n, k = len(graph), len(contexts)
    base = np.asarray(graph.costs().seconds, dtype=np.float64)
    speed = np.array([c.speed for c in contexts])
    out = base[:, None] / speed[None, :]
    kinds = [c.kind for c in contexts]
    cpu = np.array([kind == "cpu" for kind in kinds])
    out[:, ~cpu] = math.inf  # the default resources {"cpu": 1}: CPU contexts only
    for t in _tasks_with_resources(graph):
        names = set(graph.resources(t))
        wanted = _wanted(names, gpu_fallback)
        allowed = np.array([(not wanted) or kind in wanted for kind in kinds])
        out[t] = np.where(allowed, base[t] / speed, math.inf)
    overrides = graph.resources_overrides()
    for t, per_context in graph.context_seconds().items():
        row = np.full(k, math.inf)
        wanted = _wanted(set(overrides[t]), gpu_fallback) if t in overrides else set()
        # In fallback a GPU task runs on CPUs: its GPU cost is the estimate there when
        # it has none for them (it may have been costed for GPUs alone).
        on_cpu_instead = gpu_fallback and t in overrides and "gpu" in overrides[t]
        for c, context in enumerate(contexts):
            if wanted and context.kind not in wanted:
                continue  # {"gpu": 1} runs on GPU contexts whatever its costs say
            value = per_context.get(context.name)
            if value is None:
                value = per_context.get(context.kind)
            if value is None and on_cpu_instead and context.kind == "cpu":
                value = per_context.get("gpu")
            if value is not None:
                row[c] = value
        out[t] = row
    return out if n else np.zeros((0, k))


def _wanted(names: set[str], gpu_fallback: bool) -> set[str]:
    """The context kinds a task's resource names ask for ("gpu" read as "cpu" in fallback)."""
    wanted = names & set(CONTEXT_KINDS)
    if "gpu" in wanted:  # a GPU task, whatever else it names (module doc)
        return {"cpu"} if gpu_fallback else {"gpu"}
    return wanted


def _tasks_with_resources(graph: Graph) -> list[int]:
    """Tasks whose resources are not the default (kept sparse by the graph)."""
    return sorted(graph.resources_overrides())
