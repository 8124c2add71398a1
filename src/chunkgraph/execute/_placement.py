"""What the scheduler follows from a Plan: each task's context and subgraph, and the budgets.

A ``Plan`` (``chunkgraph.planning``) says where every task should run. The
executor keeps it as plain lists, indexed by task id, that its hot loop reads:

    context[t]      the context t is planned on (a steal may change it)
    subgraph[t]     its unit of dispatch; a steal moves a subgraph's unstarted
                    tasks together (sub_ptr/sub_idx: the tasks of each subgraph)
    chain_next[t]   the task fused after t (-1: none): the worker that ran t runs
                    it next, without going through the ready queues
    can_run[t]      bit c set when context c can run t (steals respect it)
    memory[t]       bytes t needs while it runs (Cost.memory; a fused task: the largest
                    of its chain's, admitted once for the whole chain)
    output[t]       bytes of t's result while it is held (Cost.output_bytes)
    budget[c]       context c's memory budget (inf: none)
    needs[t]        t's resources, where not the default {"cpu": 1}
    capacity[c]     per resource kind, how much context c has at once: its
                    workers for "cpu"/"gpu" (a ``{"gpu": 1}`` task runs one at
                    a time per GPU slot); other resource names are not limited
    workers[c]      how many of the executor's workers serve context c

``admit`` is False when no budget can bind (none is finite, or no task
declares memory or a result size) and every task has the default
resources: the scheduler then skips the admission bookkeeping entirely.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from chunkgraph.graph import Graph, Resources

if TYPE_CHECKING:
    from chunkgraph.planning import Plan


@dataclass(eq=False)
class Placement:
    """Per-task lists the scheduler follows (see the module doc)."""

    names: tuple[str, ...]
    context: list[int]
    subgraph: list[int]
    sub_ptr: list[int]
    sub_idx: list[int]
    chain_next: list[int]
    can_run: list[int]
    memory: list[int]
    output: list[int]
    budget: list[float]
    needs: dict[int, Resources]
    capacity: list[dict[str, float]]
    workers: list[int]
    admit: bool

    @property
    def multi(self) -> bool:
        return len(self.names) > 1


def split_workers(slots: list[int], kinds: list[str], workers: int) -> list[int]:
    """Workers per context: CPU contexts share ``workers`` in proportion to their slots
    (at least one each); each GPU context gets one worker per slot to drive it.

    >>> split_workers([4, 2, 1], ["cpu", "cpu", "gpu"], 6)
    [4, 2, 1]
    """
    cpu = [i for i, k in enumerate(kinds) if k != "gpu"]
    out = [slots[i] if kinds[i] == "gpu" else 0 for i in range(len(slots))]
    if not cpu:
        return out
    total = sum(slots[i] for i in cpu)
    share = [max(1, int(workers * slots[i] / total)) for i in cpu]
    # Hand out what rounding left over to the largest contexts first.
    for j in sorted(range(len(cpu)), key=lambda j: -slots[cpu[j]]):
        if sum(share) >= max(workers, len(cpu)):
            break
        share[j] += 1
    for j, i in enumerate(cpu):
        out[i] = share[j]
    return out


def placement_of(
    plan: Plan, graph: Graph, workers: int, resource_workers: int | None = None
) -> Placement:
    """The Placement that follows ``plan`` with ``workers`` CPU workers.

    ``resource_workers``: the workers that count as CPUs for tasks' resources
    (default ``workers``); the adaptive executor has up to four workers per
    core, but a task asking for 2 CPUs still gets 2 of the cores.
    """
    problem = plan.problem
    contexts = plan.contexts
    n = len(graph)
    context = plan.task_context
    subgraph = plan.task_subgraph
    k = len(contexts)
    # Subgraph membership, for moving a stolen subgraph as a whole.
    planned = np.flatnonzero(subgraph >= 0)
    sub_ids = subgraph[planned]
    count = int(sub_ids.max()) + 1 if len(sub_ids) else 0
    order = planned[np.argsort(sub_ids, kind="stable")]
    sub_ptr = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(sub_ids, minlength=count), out=sub_ptr[1:])
    # The task fused after each task, from the units.
    chain_next = np.full(n, -1, np.int64)
    sizes = np.diff(problem.member_ptr)
    if (sizes > 1).any():
        idx = problem.member_idx
        last = np.zeros(len(idx), bool)
        last[problem.member_ptr[1:] - 1] = True
        chain_next[idx[:-1][~last[:-1]]] = idx[1:][~last[:-1]]
    runnable = np.isfinite(problem.seconds)
    bits = (runnable * (1 << np.arange(k, dtype=np.int64))).sum(axis=1) if k <= 62 else None
    can_run = np.zeros(n, np.int64)
    if bits is not None:
        can_run[problem.member_idx] = np.repeat(bits, sizes)
    costs = graph.costs()
    # A fused chain is admitted once, for its largest task (its tasks run one after
    # another in one worker, as the planner counted it): every task of a unit carries
    # the unit's memory, so a claimed successor never needs more than was admitted.
    memory = costs.memory.copy()
    memory[problem.member_idx] = np.repeat(problem.memory, sizes)
    budget = [float(b) for b in plan.memory_cap]
    kinds: list[str] = [c.kind for c in contexts]
    split = split_workers([c.slots for c in contexts], kinds, workers)
    counted = (
        split
        if resource_workers is None
        else split_workers([c.slots for c in contexts], kinds, resource_workers)
    )
    capacity = [{kinds[c]: float(counted[c])} for c in range(k)]
    needs = dict(graph.resources_overrides())
    admit = (any(math.isfinite(b) for b in budget) and uses_memory(graph)) or _limits_resources(
        needs, capacity
    )
    return Placement(
        names=tuple(c.name for c in contexts),
        context=context.tolist(),
        subgraph=subgraph.tolist(),
        sub_ptr=sub_ptr.tolist(),
        sub_idx=order.tolist(),
        chain_next=chain_next.tolist(),
        can_run=can_run.tolist(),
        memory=memory.tolist(),
        output=costs.output_bytes.tolist(),
        budget=budget,
        needs=needs,
        capacity=capacity,
        workers=split,
        admit=admit,
    )


def uses_memory(graph: Graph) -> bool:
    """True when some task declares memory or a result size (else budgets cannot bind)."""
    costs = graph.costs()
    return bool(costs.memory.any() or costs.output_bytes.any())


def _limits_resources(needs: Mapping[int, Resources], capacity: list[dict[str, float]]) -> bool:
    """True when some task's resources could exceed what its context has at once."""
    kinds = {kind for cap in capacity for kind in cap}
    return any(
        (name in kinds and amount != 1) or name == "gpu"
        for res in needs.values()
        for name, amount in res.items()
    )
