"""``LocalExecutor``: runs a graph here: on threads (fixed or adaptive), processes or the caller.

    LocalExecutor.run(graph, targets, plan=None)
      validate ─ plan (chunkgraph.plan on local_contexts(), kept by graph.cached;
      or the one given) ─ Placement (_placement) ─ Scheduler
      ─ Driver(...).run(backend) ─┬─ "threads"   ThreadBackend   _threads.py
                                  ├─ "adaptive"  AdaptiveBackend _adaptive.py
                                  ├─ "processes" ProcessBackend  _processes.py
                                  └─ "sync"      SyncBackend     _sync.py
      <─ {target: result}, or ExceptionGroup[TaskError]

A run either returns every target's result or raises: when tasks fail for
good it raises one ``ExceptionGroup`` holding a ``TaskError`` per failed task
(its name, its inputs' names, its attempts; the original exception, with its
traceback, as ``__cause__``), never a partial result. Any exception a task
raises is a failed try, ``SystemExit`` included (it must not end the program
that waits for the task); ``KeyboardInterrupt`` is not: it interrupts the run.
A Ctrl-C while a run is active always ends it with ``KeyboardInterrupt``
(see ``_interrupts``).

GPUs. A graph with tasks asking for ``{"gpu": ...}`` is planned on this
machine's CPU and GPU contexts (a graph without is planned on its CPUs only,
so a GPU in the machine changes nothing for it); without a device backend
there are no GPU contexts, and such a graph is a ConfigError unless
``gpu_fallback=True`` (then its GPU tasks run on CPU workers). A plan given to
``run`` is held to the same rule: a task asking for a GPU that it places on a
CPU context, or on a GPU context while no backend is active, is a ConfigError
unless ``gpu_fallback=True``. When tasks are
planned on GPU contexts and a backend is active, the run has a ``Residency``
(``chunkgraph.gpu._residency``): each GPU context's worker is bound to its
device, arrays move to where each task runs, results the caller gets are on
the host. "threads", "adaptive" and "sync" run GPU tasks; "processes" refuses
them (a device array cannot go through shared memory to a worker process).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph._util import usable_cores
from chunkgraph.execute import _interrupts
from chunkgraph.execute._adaptive import AdaptiveBackend
from chunkgraph.execute._driver import Backend, Driver
from chunkgraph.execute._events import Subscriber
from chunkgraph.execute._failures import failure_group, task_error
from chunkgraph.execute._limits import check_timeout, task_timeouts
from chunkgraph.execute._placement import placement_of, uses_memory
from chunkgraph.execute._processes import ProcessBackend
from chunkgraph.execute._scheduler import Scheduler
from chunkgraph.execute._sync import SyncBackend
from chunkgraph.execute._threads import ThreadBackend
from chunkgraph.gpu._backend import active_backend
from chunkgraph.gpu._residency import Residency, device_indices, residency_limits
from chunkgraph.graph import Graph, needed_mask
from chunkgraph.planning import Context, Plan, local_contexts, plan
from chunkgraph.planning._contexts import gpu_contexts

if TYPE_CHECKING:
    from chunkgraph.parallel._signals import Sampler

ExecutorKind = Literal["threads", "adaptive", "processes", "sync"]
EXECUTOR_KINDS: tuple[ExecutorKind, ...] = ("threads", "adaptive", "processes", "sync")

# "adaptive": most workers per usable core. It starts a quarter of them (one
# per core), so CPU-bound tasks are at full occupancy at once, and tasks that
# wait on storage can grow to four per core.
ADAPTIVE_WORKERS_PER_CORE = 4


@dataclass(frozen=True)
class LocalExecutor:
    """Runs graphs on this machine.

    Args:
        kind: ``"threads"`` (a persistent thread pool; numpy releases the GIL),
            ``"adaptive"`` (threads, their number grown while the measured CPU and I/O
            signals say the machine absorbs more: see ``_adaptive``), ``"processes"``
            (worker processes, numpy arrays through shared memory) or ``"sync"`` (the
            calling thread).
        workers: How many workers; None: all usable cores. For ``"adaptive"``, the most
            workers (default ``ADAPTIVE_WORKERS_PER_CORE`` per core), a quarter of them
            active at the start.
        retries: Extra tries per task (a dead worker process counts as a try).
        subscribers: Callables receiving every ``Event``.
        timeout: Seconds a try of a task may run before it fails with ``TimeoutError``
            (a worker process running it is killed; a thread, which cannot be killed, is
            abandoned); None: no limit. Refused for ``"sync"``, where nothing could stop
            the calling thread.
        sampler: The signals ``"adaptive"`` reads; None: this process's CPU time and
            storage bytes. Refused for other kinds.
        gpu_fallback: Where no GPU is found, run tasks that ask for ``{"gpu": ...}`` on
            CPU workers instead of raising ConfigError.

    >>> from chunkgraph.graph import Graph
    >>> g = Graph()
    >>> total = g.add(sum, [g.add(abs, -i) for i in range(4)])
    >>> LocalExecutor("sync").run(g, [total.id])
    {4: 6}
    """

    kind: ExecutorKind = "threads"
    workers: int | None = None
    retries: int = 0
    subscribers: tuple[Subscriber, ...] = field(default=())
    timeout: float | None = None
    sampler: Sampler | None = field(default=None, repr=False, compare=False)
    gpu_fallback: bool = False

    def __post_init__(self) -> None:
        if self.kind not in EXECUTOR_KINDS:
            raise ConfigError(f"executor must be one of {EXECUTOR_KINDS}, got {self.kind!r}")
        if self.workers is not None and (
            not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1
        ):
            raise ConfigError(
                f"workers must be a positive int or None (all cores), got {self.workers!r}"
            )
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {self.retries!r}")
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        if self.timeout is not None and self.kind == "sync":
            raise ConfigError(
                f"timeout={self.timeout:g} cannot be enforced with executor='sync' (tasks run "
                "in the calling thread, which nothing can stop); use executor='threads' or "
                "'processes', or timeout=None"
            )
        if not isinstance(self.gpu_fallback, bool):
            raise ConfigError(f"gpu_fallback must be True or False, got {self.gpu_fallback!r}")
        if self.sampler is not None and self.kind != "adaptive":
            raise ConfigError(
                f"sampler is read only by executor='adaptive', not {self.kind!r}; "
                "drop it or use kind='adaptive'"
            )

    @property
    def in_process(self) -> bool:
        """True unless tasks run in worker processes ("processes")."""
        return self.kind != "processes"

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        """Run the tasks ``targets`` need.

        Args:
            graph: The graph to run.
            targets: Task ids whose results are wanted; None: every sink.
            subscribers: Callables that receive this run's events, besides the
                executor's own.
            plan: A Plan of ``graph`` to follow; None: planned on this machine's contexts
                (a one-context machine's plan is the priority order, kept with the graph
                for later runs).

        Returns:
            ``{task id: result}`` for the targets.

        Raises:
            ExceptionGroup: Of ``TaskError``, one per failed task; no partial result is
                returned.
        """
        graph.validate()
        target_ids = graph.sinks().tolist() if targets is None else list(targets)
        plan = self._plan_for(graph, target_ids, plan)
        workers = self.workers or usable_cores() * (
            ADAPTIVE_WORKERS_PER_CORE if self.kind == "adaptive" else 1
        )
        # Tasks' CPU resources count cores, not the adaptive executor's extra threads.
        cpus = max(1, workers // ADAPTIVE_WORKERS_PER_CORE) if self.kind == "adaptive" else None
        placement = None if _trivial(plan) else placement_of(plan, graph, workers, cpus)
        scheduler = Scheduler(graph, target_ids, plan.order, self.retries, placement)
        residency = self._residency(plan, scheduler, target_ids)
        driver = Driver(
            graph, scheduler, (*self.subscribers, *subscribers), task_timeouts(self.timeout)
        )
        with _interrupts.InterruptGuard():
            driver.run(self._backend(driver, workers, residency))
        if scheduler.failures:
            raise _error_group(graph, scheduler)
        return {t: scheduler.results[t] for t in target_ids}  # on the host (Residency.finish)

    def _residency(self, plan: Plan, scheduler: Scheduler, targets: list[int]) -> Residency | None:
        """The run's Residency when tasks are planned on GPU contexts and a device
        backend is active; None otherwise (GPU contexts are then plain workers)."""
        placement = scheduler.placement
        kinds = [c.kind for c in plan.contexts]
        if placement is None or "gpu" not in kinds:
            return None
        gpu_ids = [c for c, kind in enumerate(kinds) if kind == "gpu"]
        if not np.isin(plan.task_context, gpu_ids).any():
            return None
        backend = active_backend()
        if backend is None or backend.device_count() < 1:
            return None  # no device: only gpu_fallback lets a GPU task get here (_plan_for)
        if self.kind == "processes":
            name = next(
                plan.graph.name(int(t)) for t in np.flatnonzero(np.isin(plan.task_context, gpu_ids))
            )
            raise ConfigError(
                f"executor='processes' cannot run tasks on GPUs (task {name!r} is planned on "
                f"one): device arrays do not travel to worker processes; use "
                "executor='threads' (one worker thread per GPU, CPU tasks on the others)"
            )
        devices = device_indices(placement.names, kinds, backend.device_count())
        limits = residency_limits(devices, placement.budget, placement.context, placement.memory)
        gpu_tasks = {t for t, res in plan.graph.resources_overrides().items() if "gpu" in res}
        deps = plan.graph.dependencies()
        return Residency(backend, devices, limits, scheduler.results, gpu_tasks, deps, targets)

    def _plan_for(self, graph: Graph, targets: list[int], given: Plan | None) -> Plan:
        if given is None:
            contexts = self._contexts_for(graph, targets)
            digest = hashlib.blake2b(np.asarray(targets, np.int64).tobytes())
            digest.update(repr((contexts, self.gpu_fallback)).encode())
            return graph.cached(
                "plan:" + digest.hexdigest(),
                lambda g: plan(g, contexts, targets=targets, gpu_fallback=self.gpu_fallback),
            )
        checked = check_plan(graph, targets, given)
        self._check_gpu_placement(graph, targets, checked)
        return checked

    def _check_gpu_placement(self, graph: Graph, targets: list[int], given: Plan) -> None:
        """ConfigError when a given plan would run a needed task that asks for a GPU on
        a CPU: placed on a CPU context, or on a GPU context with no device backend to
        drive it (its worker would be a plain CPU thread). Only ``gpu_fallback`` allows
        either; tasks that do not ask for a GPU may be placed anywhere the plan says."""
        if self.gpu_fallback:
            return
        for t in needed_gpu_tasks(graph, targets):
            context = given.contexts[int(given.task_context[t])]
            if context.kind != "gpu":
                raise ConfigError(
                    f"the plan places task {graph.name(t)!r}, which asks for resources "
                    f"{dict(graph.resources(t))}, on {context.kind.upper()} context "
                    f"{context.name!r}; plan it on GPU contexts (chunkgraph.plan(graph)), "
                    "or pass gpu_fallback=True to run GPU tasks on CPU workers"
                )
            backend = active_backend()
            if backend is None or backend.device_count() < 1:
                raise ConfigError(no_gpu_message(graph, t))

    def _contexts_for(self, graph: Graph, targets: list[int]) -> tuple[Context, ...]:
        """This machine's contexts for a graph: its GPUs only when a needed task asks for
        one and a backend can drive them; ConfigError when none is found (see the module doc)."""
        asking = next(iter(needed_gpu_tasks(graph, targets)), -1)
        if asking < 0:
            return local_contexts(gpus=False)
        contexts = local_contexts(gpus=active_backend() is not None)
        if any(c.kind == "gpu" for c in contexts) or self.gpu_fallback:
            return contexts
        raise ConfigError(no_gpu_message(graph, asking))

    def _backend(self, driver: Driver, workers: int, residency: Residency | None) -> Backend:
        if self.kind == "threads":
            return ThreadBackend(driver, workers, residency)
        if self.kind == "adaptive":
            return AdaptiveBackend(driver, workers, usable_cores(), self.sampler, residency)
        if self.kind == "processes":
            return ProcessBackend(driver, workers)
        return SyncBackend(driver, residency)


def check_plan(graph: Graph, targets: list[int], given: object) -> Plan:
    """``given`` if it is a Plan of ``graph`` as it is now, placing every task ``targets``
    need and fusing none of them away; ConfigError saying what to do otherwise."""
    if not isinstance(given, Plan):
        raise ConfigError(f"plan must be a chunkgraph Plan (from chunkgraph.plan), got {given!r}")
    if given.graph is not graph:
        raise ConfigError(
            "plan was made for another Graph; plan this graph with chunkgraph.plan(graph)"
        )
    if given.tasks != len(graph):
        raise ConfigError(
            f"the graph changed after it was planned ({given.tasks} tasks then, "
            f"{len(graph)} now); plan it again with chunkgraph.plan(graph)"
        )
    inside = given.fused_through(targets)
    if inside:
        raise ConfigError(
            f"the plan fused task {graph.name(inside[0])!r} into a chain, so its result "
            "never leaves the worker, but it is a target of this run; plan with the "
            "same targets (chunkgraph.plan(graph, targets=...)) or with fuse=False"
        )
    unplanned = needed_mask(graph, targets) & (given.task_context < 0)
    if unplanned.any():
        name = graph.name(int(np.flatnonzero(unplanned)[0]))
        raise ConfigError(
            f"the plan does not place task {name!r}, which these targets need; plan "
            "with the same targets (chunkgraph.plan(graph, targets=...))"
        )
    return given


def needed_gpu_tasks(graph: Graph, targets: list[int]) -> list[int]:
    """The tasks ``targets`` need that ask for a GPU, in id order (cheap without any)."""
    asking = [t for t, res in graph.resources_overrides().items() if "gpu" in res]
    if not asking:
        return []
    needed = needed_mask(graph, targets)
    return [t for t in sorted(asking) if needed[t]]


def no_gpu_message(graph: Graph, t: int) -> str:
    """Why task ``t`` (asking for a GPU) cannot run here, and the two ways out."""
    backend = active_backend()
    if backend is not None:
        why = f"the device backend {backend.name!r} sees no device"
    else:
        listed = len(gpu_contexts())
        why = (
            f"nvidia-smi lists {listed} GPU(s), but CuPy is not installed or cannot use them"
            if listed
            else "CuPy is not installed, or no device is visible"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        why += f" (CUDA_VISIBLE_DEVICES={visible!r})"
    return (
        f"task {graph.name(t)!r} asks for resources {dict(graph.resources(t))}, but no GPU "
        f"was found: {why}. Install the GPU extra on a machine with an NVIDIA GPU "
        "(pip install 'chunkgraph[gpu]'), or pass gpu_fallback=True to run GPU tasks "
        "on CPU workers"
    )


def _trivial(plan: Plan) -> bool:
    """True when following ``plan`` is following its order: one context, nothing fused,
    no budget, no resources to count (the scheduler's lean path)."""
    problem = plan.problem
    return (
        len(plan.contexts) == 1
        and len(problem) == len(problem.member_idx)
        and not (np.isfinite(plan.memory_cap).any() and uses_memory(plan.graph))
        and not plan.graph.resources_overrides()
    )


def _error_group(graph: Graph, scheduler: Scheduler) -> ExceptionGroup[TaskError]:
    errors = [
        task_error(graph, t, scheduler.attempts[t], cause)
        for t, cause in sorted(scheduler.failures.items())
    ]
    return failure_group(errors, len(scheduler.cancelled()))
