"""``DaskExecutor``: runs a graph on a Dask cluster, one Dask task per planned subgraph.

    DaskExecutor.run(graph, targets, plan=None)
      plan       chunkgraph.plan on dask_contexts(client) (strategy "merge":
                 coarse subgraphs), or check the plan given; only what targets need runs
      check      ConfigError unless some worker offers each unit's resources (Dask
                 would wait forever); every unit pickled before any is submitted
      dispatch   units = plan subgraphs (each a fused chain at least); exports =
                 results another unit or a target needs; a DAG of units
      submit     per unit, producers first: client.submit(run_subgraph, program,
                 *producer futures, workers=[its context's worker] (loose),
                 resources={"GPU": 1} for gpu tasks, priority = the plan's order)
      wait       as_completed: FINISHED per task, STARTED for units whose inputs
                 are now done; the first failure, or any exception (Ctrl-C),
                 cancels everything not finished
      gather     the targets' units  ->  {target: result}, or ExceptionGroup[TaskError]

Why units and not tasks. Dask's scheduler spends about a millisecond and a
few kilobytes on each task it tracks; a graph of 50,000 small tasks costs it
more than the tasks. A planned subgraph runs its tasks back to back in one
worker thread (``_dask_subgraph``) and only its exported results leave.

Placement. When the plan's contexts are this cluster's (``dask_contexts``),
each unit is submitted with its worker as a *loose* restriction: Dask starts
it there, may steal it for an idle worker, and runs it elsewhere when that
worker died. Resources are hard restrictions: a unit whose tasks ask for
``{"gpu": 1}`` runs only on a worker started with ``resources={"GPU": 1}``,
so it gets no pin at all (Dask would let a loose pin override its resources,
and move it to a worker without them); Dask picks among the workers offering them.

Failures and retries. A failed task is tried again where it ran, up to
``retries`` more times, unless its error would fail every try the same way
(``_errors.is_permanent``, the rule every executor keeps; ``_dask_subgraph``):
Dask's own ``retries`` would run such an error again, and the whole unit from its
start. Dask retries nothing itself. A worker that
dies is not a try: Dask recomputes what it held or ran elsewhere, up to the
scheduler's ``distributed.scheduler.allowed-failures`` deaths per task
(after which the task fails with a ``WorkerDiedError``). A unit pinned to a
worker that died while no other ran would wait in ``no-worker`` for good;
``_dask_stranded`` watches for those and has the scheduler place them. A task that fails
for good becomes a ``TaskError`` like LocalExecutor's (name, inputs,
attempts, the exception with the worker's traceback as its ``__cause__``),
all of them one ``ExceptionGroup``; no partial result is returned. A result
that must leave its worker (a target's, or one read on another worker) and
cannot be serialized fails its task, on the worker (``_dask_subgraph``).

Events. STARTED when a unit is handed over with its inputs done (for the
first units: at submission), FINISHED when it is done, for each of its
tasks; FAILED and CANCELLED as locally; no RETRIED (a task is tried again on
its worker, unseen by the client). ``Event.worker`` is "" (events are made by the client).

Transport. ``tcp://``, ``tls://``, ``ucx://`` (GPU clusters, through
Dask's UCX support), ``ws://``, ``inproc://`` addresses are handed to
``distributed.Client`` untouched: chunkgraph knows nothing of the protocol.
"""

from __future__ import annotations

import heapq
import os
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import (
    ConfigError,
    RemoteTraceback,
    TaskError,
    UsageError,
    WorkerDiedError,
)
from chunkgraph.execute._dask_contexts import (
    GPU_RESOURCE,
    dask_contexts,
    dask_links,
    remote_workers,
    worker_address,
)
from chunkgraph.execute._dask_stranded import watch_stranded
from chunkgraph.execute._dask_stream import Call, stream_calls
from chunkgraph.execute._dask_subgraph import (
    Inputs,
    SubgraphFailed,
    SubgraphProgram,
    pickle_calls,
    run_subgraph,
)
from chunkgraph.execute._events import EventKind, EventQueue, Subscriber
from chunkgraph.execute._failures import failure_group, task_error
from chunkgraph.execute._local import check_plan, needed_gpu_tasks
from chunkgraph.graph import Graph, needed_mask
from chunkgraph.planning import STRATEGIES, Plan, plan
from chunkgraph.planning._plan import Strategy

IntArray = npt.NDArray[np.int64]

# Seconds to wait for the scheduler when connecting to an address. Long enough
# for a scheduler across a busy network, short enough that a wrong address
# fails while the user still waits for it.
CONNECT_TIMEOUT_S = 10.0


class DaskExecutor:
    """Runs graphs on a Dask cluster: each planned subgraph is one Dask task.

    ``close()`` (or the end of ``with``) closes a Client it opened itself, and the
    executor runs nothing more (a UsageError says so); closing again does nothing.
    ``ship_module(path)`` sends a module file the workers cannot import to them.
    ``stream(calls)`` runs calls from a lazy iterator a bounded window at a time (a
    flow's batches of top-level tasks, ``_dask_stream``).

    Args:
        client_or_address: A ``distributed.Client`` (open), or a scheduler address
            (``"tcp://host:8786"``; any protocol Dask supports, e.g. ``ucx://``, is
            passed through untouched), to which this executor connects now.
        retries: Extra tries of a failed task, on its worker, unless its error is
            permanent (``is_permanent``); an int >= 0.
        strategy: How a graph is planned on the cluster's workers when ``run`` gets no
            plan, one of ``planning.STRATEGIES`` (``"merge"``, the default, makes few
            coarse subgraphs).
        connect_timeout: Seconds to wait for the scheduler at an address.
        subscribers: Callables that receive every run's events.

    Raises:
        ConfigError: For a bad ``retries`` or ``strategy``, or a first argument that is
            neither a Client nor an address.
        UsageError: For a Client that is closed.

    >>> with DaskExecutor("tcp://127.0.0.1:8786") as ex:  # doctest: +SKIP
    ...     chunkgraph.run(graph, total, executor=ex)
    """

    def __init__(
        self,
        client_or_address: Any,
        *,
        retries: int = 0,
        strategy: Strategy = "merge",
        connect_timeout: float = CONNECT_TIMEOUT_S,
        subscribers: Sequence[Subscriber] = (),
    ) -> None:
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {retries!r}")
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        self.retries = retries
        self.strategy: Strategy = strategy
        self.subscribers = tuple(subscribers)
        if isinstance(client_or_address, str):
            self.client = connect(client_or_address, connect_timeout)
            # Closed with this executor at the latest (``executor="tcp://..."`` makes one
            # per run): a Client left open keeps reconnecting to a scheduler that is gone.
            self._close: Any = weakref.finalize(self, self.client.close)
        else:
            from distributed import Client

            if not isinstance(client_or_address, Client):
                raise ConfigError(
                    "DaskExecutor takes a distributed.Client or a scheduler address such as "
                    f"'tcp://127.0.0.1:8786', got {client_or_address!r}"
                )
            if client_or_address.status in ("closing", "closed"):
                raise UsageError(
                    f"the distributed.Client given ({client_or_address!r}) was closed; pass an "
                    "open Client, or the scheduler's address"
                )
            self.client = client_or_address
            self._close = None
        self._address = str(self.client.scheduler.address)
        self._closed = False

    @property
    def in_process(self) -> bool:
        """False: tasks run in the cluster's worker processes."""
        return False

    @property
    def address(self) -> str:
        """The scheduler's address (kept: a closed Client no longer knows it)."""
        return self._address

    def close(self) -> None:
        """Close the Client if this executor opened it (one passed in stays open); after
        this, ``run`` raises a UsageError. Closing again does nothing."""
        self._closed = True
        if self._close is not None:
            self._close()  # a weakref.finalize: calls client.close once at most

    def _check_open(self) -> None:
        """UsageError when this executor, or the Client it was given, was closed (Dask's
        own error would be an "IOLoop is closed" from deep inside distributed)."""
        if self._closed:
            raise UsageError(
                f"{self!r} was closed (close(), or the end of its with block) and runs "
                "nothing more; create a new DaskExecutor for the next run"
            )
        if self.client.status in ("closing", "closed"):
            raise UsageError(
                f"the distributed.Client of {self!r} was closed; create a new DaskExecutor "
                "with an open Client (or a scheduler address) for the next run"
            )

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DaskExecutor({self.address!r}, retries={self.retries})"

    # -- code the workers need -----------------------------------------------------------

    def ship_module(self, path: str) -> None:
        """Make a module file or package directory importable as ``name`` on every worker.

        Those that join later included: functions of code the workers cannot import from
        where they run (beside a spec file) then reach them by reference (``_dask_ship``).
        Shipping changed code again replaces the workers' copy.

        Args:
            path: A module file (``name.py``) or a package directory (``name/``).

        Raises:
            ConfigError: When a worker cannot import it (a package it imports is missing
                there, say).
        """
        from chunkgraph.execute._dask_ship import ShipCode  # deferred: imports distributed

        self._check_open()
        plugin = ShipCode(path)
        try:
            self.client.register_plugin(plugin, name=plugin.name)
        except Exception as err:  # the worker's import error, whatever its type
            # Left registered, it would fail again on every worker that joins.
            self.client.unregister_worker_plugin(plugin.name)
            raise ConfigError(
                f"the workers of the Dask cluster at {self.address} cannot import "
                f"{plugin.module!r} (sent to them from {path}): {type(err).__name__}: {err}; "
                "install what it imports on the workers, or put the function in a package "
                "installed there"
            ) from err

    # -- paths ------------------------------------------------------------------------

    def check_paths(self, paths: Mapping[str, str]) -> None:
        """Check that every worker can reach ``paths``.

        Workers on this machine see its files; a worker on another host must see
        them too (a shared file system mounted at the same place): a path that
        exists here must exist there.

        Args:
            paths: ``{what: path}``, paths on this machine's file system (the caller leaves
                out what an object store serves); ``what`` names the path in the error.

        Raises:
            ConfigError: Naming the first path a worker cannot reach.
        """
        self._check_open()
        local = dict(paths)
        if not local:
            return
        remote = remote_workers(self.client)
        if not remote:
            return

        wanted = {what: p for what, p in local.items() if os.path.exists(p)}
        seen = self.client.run(_existing, list(wanted.values()), workers=remote)
        for worker, found in sorted(seen.items()):
            missing = [what for what, p in wanted.items() if p not in found]
            if missing:
                what = missing[0]
                raise ConfigError(
                    f"{what} {wanted[what]!r} is a path on this machine, and worker {worker} "
                    "(on another host) cannot see it; put it on a file system every worker "
                    "mounts at the same path, or give a URL they can all reach"
                )

    # -- running ----------------------------------------------------------------------

    def run(
        self,
        graph: Graph,
        targets: Sequence[int] | None = None,
        *,
        subscribers: Sequence[Subscriber] = (),
        plan: Plan | None = None,
    ) -> dict[int, Any]:
        """Run the tasks ``targets`` need on the cluster.

        Args:
            graph: The graph to run.
            targets: Task ids whose results are wanted; None: every sink.
            subscribers: Callables that receive this run's events, besides the
                executor's own.
            plan: A Plan of ``graph`` to follow; None: planned on
                ``dask_contexts(client)`` with this executor's strategy.

        Returns:
            ``{task id: result}`` for the targets.

        Raises:
            ExceptionGroup: Of ``TaskError``, one per failed task; no partial result is
                returned.
        """
        self._check_open()
        graph.validate()
        target_ids = graph.sinks().tolist() if targets is None else list(targets)
        if not target_ids:
            return {}
        plan = self._plan_for(graph, target_ids, plan)
        subs = (*self.subscribers, *subscribers)
        return _Run(self, graph, target_ids, plan, EventQueue(subs) if subs else None).run()

    def threads(self) -> int:
        """The worker threads of the cluster now; ConfigError when it has no workers."""
        self._check_open()
        threads = sum(self.client.nthreads().values())
        if not threads:
            raise ConfigError(
                f"the Dask cluster at {self.address} has no workers; start some "
                f"(dask worker {self.address}) or wait for them with client.wait_for_workers()"
            )
        return int(threads)

    def stream(self, calls: Iterable[Call | None], *, retries: int | None = None) -> Iterator[Any]:
        """Run ``calls`` (a lazy iterable) on the cluster, a few per worker thread in flight,
        yielding each result as it completes (``_dask_stream``: order, ``None`` in
        ``calls``, failures).

        Args:
            calls: The calls to run, produced lazily (a batch of a flow's tasks each, say);
                None: nothing to submit yet (see ``_dask_stream``).
            retries: Extra tries per call on its worker; None: this executor's ``retries``.

        Raises:
            ConfigError: When the cluster has no workers.
            ExceptionGroup: Of ``TaskError``, for the first call that failed for good.
        """
        self.threads()
        tries = self.retries if retries is None else retries
        return stream_calls(self.client, calls, retries=tries)

    def _plan_for(self, graph: Graph, targets: list[int], given: Plan | None) -> Plan:
        if given is not None:
            return check_plan(graph, targets, given)

        contexts = dask_contexts(self.client)
        if not contexts:
            raise ConfigError(
                f"the Dask cluster at {self.address} has no workers; start some "
                f"(dask worker {self.address}) or wait for them with client.wait_for_workers()"
            )
        asking = needed_gpu_tasks(graph, targets)
        if asking and not any(c.kind == "gpu" for c in contexts):
            raise ConfigError(
                f"task {graph.name(asking[0])!r} asks for {dict(graph.resources(asking[0]))}, "
                f"but no worker of the Dask cluster at {self.address} offers a GPU; start GPU "
                f"workers with `dask worker {self.address} --resources GPU=1` (dask-cuda's "
                "workers offer it)"
            )
        return plan(
            graph, contexts, links=dask_links(contexts), targets=targets, strategy=self.strategy
        )


def _existing(paths: list[str]) -> list[str]:
    """Those of ``paths`` that exist where this runs (on a worker)."""
    return [p for p in paths if os.path.exists(p)]


def connect(address: str, timeout: float) -> Any:
    """A new ``distributed.Client`` of the scheduler at ``address``; ConfigError when
    it cannot be reached within ``timeout`` seconds or the address is malformed."""
    from distributed import Client

    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
        raise ConfigError(f"connect_timeout must be a positive number of seconds, got {timeout!r}")
    try:
        return Client(address, timeout=timeout, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as err:
        raise ConfigError(
            f"cannot reach a Dask scheduler at {address!r} within {timeout:g} s "
            f"({type(err).__name__}: {err}); start one (`dask scheduler`, then `dask worker "
            f"{address}`) or give its address as protocol://host:port, e.g. "
            "'tcp://10.0.0.5:8786' (tls://, ucx://, ws:// and inproc:// are passed to Dask as "
            "they are)"
        ) from err


def dask_resources(graph: Graph, tasks: IntArray) -> dict[str, float] | None:
    """The Dask resources a unit of ``tasks`` holds while it runs: per name the most any
    of them asks; ``gpu`` is Dask's ``GPU``, ``cpu`` is a worker thread (not a resource)."""
    overrides = graph.resources_overrides()
    if not overrides:
        return None
    out: dict[str, float] = {}
    for t in tasks.tolist():
        for name, amount in overrides.get(t, {}).items():
            if name == "cpu":
                continue
            key = GPU_RESOURCE if name == "gpu" else name
            out[key] = max(out.get(key, 0.0), amount)
    return out or None


class _Units:
    """The plan's units of dispatch: members, dependencies between them, exports.

    ``members[u]``: graph ids in run order (plan priority); ``producers[u]``:
    units whose exports u reads, ``consumers[u]`` the reverse; ``exports[u]``:
    ids whose results leave u; ``order``: units, producers first.
    """

    def __init__(self, graph: Graph, plan: Plan, targets: list[int]) -> None:
        self.graph = graph
        # A plan may place more than these targets need (one plan of the whole graph, run
        # for a few targets): only needed tasks run, as with LocalExecutor. A unit partly
        # needed runs its needed members alone: what a target needs is closed under
        # dependencies, so no needed member ever reads a result of one left out.
        needed = needed_mask(graph, targets)
        unit_of = np.where(needed, plan.task_subgraph, -1)
        order = self._topological(graph, unit_of, plan.order)
        if order is None:  # subgraphs that feed each other: dispatch the units alone
            unit_of = np.where(needed, plan.problem.unit_of, -1)
            order = self._topological(graph, unit_of, plan.order)
            assert order is not None  # fused chains never form a cycle
        self.unit_of, self.order = unit_of, order
        placed = np.flatnonzero(unit_of >= 0)
        priority = plan.order
        ranked = placed[np.lexsort((priority[placed], unit_of[placed]))]
        bounds = np.flatnonzero(np.diff(unit_of[ranked])) + 1
        self.members: dict[int, IntArray] = {
            int(unit_of[m[0]]): m for m in np.split(ranked, bounds) if len(m)
        }
        dep_ptr, dep_idx = graph.dependencies()
        consumer = np.repeat(np.arange(len(graph), dtype=np.int64), np.diff(dep_ptr))
        live = (unit_of[consumer] >= 0) & (unit_of[dep_idx] != unit_of[consumer])
        self.producers: dict[int, list[int]] = {u: [] for u in self.members}
        self.consumers: dict[int, list[int]] = {u: [] for u in self.members}
        pairs = np.unique(np.stack([unit_of[dep_idx[live]], unit_of[consumer[live]]]), axis=1)
        for p, c in pairs.T.tolist():
            self.producers[c].append(p)
            self.consumers[p].append(c)
        leaving = np.zeros(len(graph), bool)
        leaving[dep_idx[live]] = True
        leaving[targets] = True
        self.leaving = leaving

    @staticmethod
    def _topological(graph: Graph, unit_of: IntArray, priority: IntArray) -> list[int] | None:
        """Units with producers first (Kahn), or None when their dependencies cycle; among
        ready units, the one whose first task comes first in ``priority`` (the plan's order).

        Dask starts a unit as soon as it is submitted, so the first units submitted are
        the first to run: in a flow, the start of the plan's sweep.
        """
        dep_ptr, dep_idx = graph.dependencies()
        consumer = np.repeat(np.arange(len(graph), dtype=np.int64), np.diff(dep_ptr))
        a, b = unit_of[dep_idx], unit_of[consumer]
        keep = (a >= 0) & (b >= 0) & (a != b)
        needed = np.flatnonzero(unit_of >= 0)
        first: dict[int, int] = {}
        for u, rank in zip(unit_of[needed].tolist(), priority[needed].tolist(), strict=True):
            first[u] = min(rank, first.get(u, rank))
        units = sorted(first, key=first.__getitem__)
        if not keep.any():
            return units
        pairs = np.unique(np.stack([a[keep], b[keep]]), axis=1)
        missing = dict.fromkeys(units, 0)
        out_edges: dict[int, list[int]] = {}
        for p, c in pairs.T.tolist():
            missing[c] += 1
            out_edges.setdefault(p, []).append(c)
        ready = [(first[u], u) for u, n in missing.items() if n == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, u = heapq.heappop(ready)
            order.append(u)
            for c in out_edges.get(u, ()):
                missing[c] -= 1
                if missing[c] == 0:
                    heapq.heappush(ready, (first[c], c))
        return order if len(order) == len(missing) else None

    def program(self, u: int, retries: int = 0) -> SubgraphProgram:
        """What a worker runs for unit ``u``, each task tried up to ``1 + retries`` times
        (see ``_dask_subgraph``)."""
        graph, members = self.graph, self.members[u]
        dep_ptr, dep_idx = graph.dependencies()
        inputs = Inputs()
        tasks = members.tolist()
        calls, uses, last_use = [], [], {}
        for i, t in enumerate(tasks):
            calls.append(graph.resolve(t, inputs))  # type: ignore[arg-type]
            deps = dep_idx[dep_ptr[t] : dep_ptr[t + 1]].tolist()
            uses.append(bool(deps))
            for d in deps:
                last_use[d] = i
        exports = tuple(t for t in tasks if self.leaving[t])
        kept = set(exports)
        drop: list[list[int]] = [[] for _ in tasks]
        for d, i in last_use.items():
            if d not in kept:
                drop[i].append(d)
        return SubgraphProgram(
            tuple(tasks), pickle_calls(calls), tuple(uses), tuple(map(tuple, drop)), exports,
            retries,
        )  # fmt: skip

    def unpicklable(self, u: int) -> int:
        """The first member of unit ``u`` whose call cannot be pickled (the first, if each
        pickles alone)."""
        tasks = self.members[u].tolist()
        for t in tasks:
            try:
                pickle_calls([self.graph.resolve(t, Inputs())])  # type: ignore[arg-type]
            except Exception:
                return int(t)
        return int(tasks[0])


class _Run:
    """One run of a plan on the cluster (see the module doc)."""

    def __init__(
        self,
        executor: DaskExecutor,
        graph: Graph,
        targets: list[int],
        plan: Plan,
        events: EventQueue | None,
    ) -> None:
        self.executor = executor
        self.client = executor.client
        self.graph = graph
        self.targets = targets
        self.plan = plan
        self.units = _Units(graph, plan, targets)
        self.events = events
        self.finished: set[int] = set()
        # Submitted units not done yet (their futures): cancelled when the run stops early.
        self.unfinished: dict[int, Any] = {}
        self.failures: dict[int, tuple[BaseException, int]] = {}  # task -> (cause, attempts)
        self.token = uuid.uuid4().hex[:12]  # in every key of this run's units

    def _workers_of_contexts(self) -> list[str | None]:
        """Per plan context, the worker to pin its units to (None: not this cluster's)."""
        alive = set(self.client.scheduler_info()["workers"])
        out: list[str | None] = []
        for ctx in self.plan.contexts:
            address = worker_address(ctx)
            out.append(address if address in alive else None)
        return out

    def run(self) -> dict[int, Any]:
        units, events = self.units, self.events
        self._check_resources()
        total = sum(len(m) for m in units.members.values())
        if events is not None:
            events.emit(EventKind.RUN_STARTED, total=total)
        wanted = {int(units.unit_of[t]) for t in self.targets}
        keep: dict[int, Any] = {}
        try:
            programs = self._programs()
            if self.failures:  # nothing was submitted
                raise self._error_group(total)
            self._submit(programs)
            del programs
            keep = {u: self.unfinished[u] for u in wanted}
            by_future = {f.key: u for u, f in self.unfinished.items()}
            with watch_stranded(self.client, f"-{self.token}-"):
                self._wait(list(self.unfinished.values()), by_future)
            if self.failures:
                raise self._error_group(total)
            values = self.client.gather([keep[u] for u in wanted])
            exports = dict(zip(wanted, values, strict=True))
            return {t: exports[int(units.unit_of[t])][t] for t in self.targets}
        except BaseException:
            # Ctrl-C, a failure, a lost connection: nothing of this run goes on on the cluster.
            # Finished units hold no future here (released as they finish, so their results
            # are freed), and what still needs their results is among those cancelled.
            running = [*keep.values(), *self.unfinished.values()]
            if running:
                self.client.cancel(running, force=True)
            raise
        finally:
            self.unfinished.clear()
            if events is not None:
                for u, members in units.members.items():
                    if u not in self.finished:
                        for t in members.tolist():
                            if t not in self.failures:
                                events.emit(EventKind.CANCELLED, t, self.graph.name(t))
                done = sum(len(units.members[u]) for u in self.finished)
                events.emit(EventKind.RUN_FINISHED, total=done)
                events.drain()

    def _check_resources(self) -> None:
        """ConfigError unless, for every unit, some worker offers the resources it asks for.

        Dask would keep such a unit waiting for a worker forever (and a resource name that
        no worker has ever offered breaks its scheduler), so this is checked before anything
        is submitted, against the workers there are now.
        """
        workers = self.client.scheduler_info()["workers"]
        if not workers:
            raise ConfigError(
                f"the Dask cluster at {self.executor.address} has no workers; start some "
                f"(dask worker {self.executor.address}) or wait for them with "
                "client.wait_for_workers()"
            )
        offers = {a: dict(info.get("resources") or {}) for a, info in sorted(workers.items())}
        graph, overrides = self.graph, self.graph.resources_overrides()
        if not overrides:
            return
        for u in self.units.order:
            members = self.units.members[u]
            wants = dask_resources(graph, members)
            if not wants or any(
                all(offer.get(k, 0) >= v for k, v in wants.items()) for offer in offers.values()
            ):
                continue
            offered = "; ".join(f"{a} offers {o or 'no resources'}" for a, o in offers.items())
            short = [k for k, v in wants.items() if all(o.get(k, 0) < v for o in offers.values())]
            if not short:
                raise ConfigError(
                    f"task {graph.name(int(members[0]))!r} and the tasks planned with it ask for "
                    f"Dask resources {wants} at once, but no single worker offers all of them "
                    f"({offered}); plan them apart or start a worker with all of them"
                )
            key = short[0]
            asked = "gpu" if key == GPU_RESOURCE else key
            t = next(
                t for t in members.tolist() if dict(overrides.get(t, {})).get(asked) == wants[key]
            )
            raise ConfigError(
                f"task {graph.name(t)!r} asks for {{{asked!r}: {wants[key]:g}}}, but no worker "
                f"of the Dask cluster at {self.executor.address} offers {wants[key]:g} "
                f"{key!r} ({offered}); start workers with `dask worker "
                f"{self.executor.address} --resources {key}={wants[key]:g}`, or ask only for "
                "what the workers offer"
            )

    def _programs(self) -> dict[int, SubgraphProgram]:
        """Every unit's program, made before any unit is submitted: a task whose function or
        arguments cannot be pickled fails the run before anything of it runs."""
        programs = {}
        for u in self.units.order:
            try:
                programs[u] = self.units.program(u, self.executor.retries)
            except Exception as err:  # pickling raises many types (TypeError, PicklingError...)
                err.add_note(
                    "its function or arguments cannot be pickled, which sending them to the Dask "
                    "workers needs (a lock, an open file or a connection among them?)"
                )
                self._record(self.units.unpicklable(u), err, 1)
        return programs

    def _submit(self, programs: dict[int, SubgraphProgram]) -> None:
        """Submit every unit, producers first, into ``self.unfinished``."""
        units, graph = self.units, self.graph
        pins = self._workers_of_contexts()
        context_of = self.plan.task_context
        token = self.token
        futures = self.unfinished
        # Dask starts higher priorities first; members[0] is the unit's earliest task in the
        # plan's order (a flow's sweep), which units.order (producers first) does not keep.
        priority = self.plan.order
        for u in units.order:
            members = units.members[u]
            resources = dask_resources(graph, members)
            # Dask lets a loose pin override resources too: work stealing, or re-placing
            # the unit when its worker is gone, would hand it to a worker without them,
            # whose state machine then fails (KeyError) and closes the worker
            # (dask/distributed#4792). A unit asking for resources is placed by them alone.
            pin = None if resources else pins[int(context_of[members[0]])]
            futures[u] = self.client.submit(
                run_subgraph,
                programs.pop(u),
                *[futures[p] for p in units.producers[u]],
                key=f"chunkgraph-{graph.name(int(members[0]))}-{token}-{u}",
                workers=[pin] if pin is not None else None,
                allow_other_workers=pin is not None,
                resources=resources,
                priority=-int(priority[members[0]]),
                pure=False,
            )
            if not units.producers[u]:
                self._started(u)

    def _started(self, u: int) -> None:
        if self.events is not None:
            for t in self.units.members[u].tolist():
                self.events.emit(EventKind.STARTED, t, self.graph.name(t), 1)

    def _wait(self, pending: list[Any], by_future: dict[Any, int]) -> None:
        from distributed import as_completed

        units, events = self.units, self.events
        waiting = {u: len(p) for u, p in units.producers.items()}
        done = as_completed(pending, loop=self.client.loop)  # type: ignore[no-untyped-call]
        pending.clear()
        for batch in done.batches():  # type: ignore[no-untyped-call]
            self._take(batch, by_future, waiting)
            del batch
            if events is not None:
                events.drain()
            if self.failures:
                done.clear()  # type: ignore[no-untyped-call]  # stop; the caller cancels the rest
                return

    def _take(self, batch: list[Any], by_future: dict[Any, int], waiting: dict[int, int]) -> None:
        """Note the units of ``batch`` that are done; in a frame of its own, so that an
        interrupt while subscribers run holds no finished future (and its result)."""
        units, events = self.units, self.events
        for future in batch:
            u = by_future[future.key]
            if future.status == "finished":
                self.finished.add(u)
                if events is not None:
                    for t in units.members[u].tolist():
                        events.emit(EventKind.FINISHED, t, self.graph.name(t), 1)
                for c in units.consumers[u]:
                    waiting[c] -= 1
                    if waiting[c] == 0:
                        self._started(c)
            else:
                self._failed(u, future)
            del self.unfinished[u]  # released once its consumers hold it (rule: release)

    def _failed(self, u: int, future: Any) -> None:
        """Record the failure of unit ``u`` (not of a producer it inherited it from)."""
        from distributed.scheduler import KilledWorker

        members = self.units.members[u]
        try:
            error = future.exception(timeout=CONNECT_TIMEOUT_S)
        except BaseException as err:  # the scheduler lost it
            error = err
        attempts = 1
        if isinstance(error, SubgraphFailed):
            if error.task not in set(members.tolist()):
                return  # a producer's failure, recorded with the producer
            t, cause, attempts = error.task, error.error, error.attempts
            cause.__cause__ = RemoteTraceback(error.text)
        elif isinstance(error, KilledWorker):
            t, attempts = int(members[0]), 1
            cause = WorkerDiedError(
                f"{error}; Dask stops retrying a task after "
                "distributed.scheduler.allowed-failures worker deaths"
            )
        elif error is None:  # a cancelled future has no exception
            t, attempts = int(members[0]), 1
            cause = RuntimeError(
                f"cancelled on the cluster before it finished (Dask status {future.status!r}): "
                "client.restart(), or another client cancelled its key; run it again"
            )
        else:
            t, cause = int(members[0]), error
            if isinstance(error, ImportError):
                cause.add_note(
                    "Dask could not load this task's unit on a worker (is chunkgraph installed "
                    "on the workers, at the client's version?)"
                )
        self._record(t, cause, attempts)

    def _record(self, t: int, cause: BaseException, attempts: int) -> None:
        self.failures[t] = (cause, attempts)
        if self.events is not None:
            self.events.emit(EventKind.FAILED, t, self.graph.name(t), attempts, error=cause)

    def _error_group(self, total: int) -> ExceptionGroup[TaskError]:
        errors = [
            task_error(self.graph, t, attempts, cause)
            for t, (cause, attempts) in sorted(self.failures.items())
        ]
        ran = sum(len(self.units.members[u]) for u in self.finished)
        return failure_group(errors, total - ran - len(errors))
