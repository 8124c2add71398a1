"""The task graph: integer task ids, flat dependency arrays, cost columns, payloads.

A Graph is built by ``add()`` calls and then read by the planner and the
executors. Everything is stored per *column*, never as one object per task, so
a million-task graph costs tens of bytes per task plus its payloads:

    task id i (0, 1, 2, ... in add order)
      |
      +-- _fns[i], _args[i], _kwargs[i], _shapes[i]   payload (list / bytearray)
      +-- _dep_indptr[i]:_dep_indptr[i+1]             its dependencies' ids in
      |                                               _dep_indices (CSR, append-only)
      +-- _seconds[i], _memory[i], _output_bytes[i]   cost columns (numpy, grown x2)
      +-- _user_names[i] (sparse), _resources[i] (sparse; default {"cpu": 1})
      +-- _context_seconds[i] (sparse): seconds per context name/kind, when
      |                       given as a mapping (_seconds[i] holds their mean)
      +-- _edge_bytes[(i, c)] (sparse): bytes i sends to consumer c, where
                              that differs from _output_bytes[i]

Policy and why:

* Dependencies are known when a task is added and tasks are appended in id
  order, so the dependency CSR is built incrementally in ``array('q')`` buffers
  (compact, fast appends); the numpy copies and the *dependents* CSR (the
  transpose) are built lazily on first use and dropped by the next ``add()``.
  Values derived by other layers (a priority order) are kept the same way
  through ``cached()``, which ``set_cost()`` also clears: they may read costs.
* Every dependency of a task added with ``add()`` has a smaller id, so the id
  order is a topological order and no cycle can exist. A cycle needs a forged
  ``TaskRef``; ``validate()`` checks for that (and for ids out of range).
* Auto names (``"<fn name>-<id>"``) are computed on demand, never stored; user
  names are unique, checked when added, and against auto names in ``validate()``.
* Cost columns are the only per-task numbers the planner reads. Costs that
  differ per context (a GPU vs a CPU time) are rare and kept sparse beside the
  column, which holds their mean so that context-free passes (the priority
  order) still see one number per task.
"""

from __future__ import annotations

import contextvars
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from chunkgraph._errors import GraphError
from chunkgraph.graph._cost import (
    DEFAULT_RESOURCES,
    DEFAULT_SECONDS,
    ContextSeconds,
    Cost,
    Resources,
)
from chunkgraph.graph._payload import NESTED_REFS, NO_REFS, TOP_REFS, resolve_call, scan
from chunkgraph.graph._validate import check_ids, check_names, find_cycle, topological_order

IntArray = npt.NDArray[np.int64]
T = TypeVar("T")

# First capacity of the cost columns; they double when full, so growth costs
# O(log n) reallocations and at most 2x the final size.
_INITIAL_CAPACITY = 1024

# The graph that ``@task`` calls add to inside ``with Graph() as g:``.
current_graph: contextvars.ContextVar[Graph | None] = contextvars.ContextVar(
    "chunkgraph_current_graph", default=None
)


class TaskRef:
    """A handle to one task of one Graph; as an argument, it stands for that task's result.

    Args:
        graph: The Graph the task belongs to.
        id: The task's id in ``graph`` (its position, from 0). ``Graph.add`` and
            ``Graph.ref`` make TaskRefs; building one by hand is rarely needed.
    """

    __slots__ = ("graph", "id")

    def __init__(self, graph: Graph, id: int) -> None:
        self.graph = graph
        self.id = id

    @property
    def name(self) -> str:
        """The task's unique name (given to ``add`` or ``"<fn name>-<id>"``)."""
        return self.graph.name(self.id)

    @property
    def dependencies(self) -> list[TaskRef]:
        """The tasks whose results this task consumes."""
        g = self.graph  # the append-only buffers: no CSR copy, cheap while building
        lo, hi = g._dep_indptr[self.id], g._dep_indptr[self.id + 1]
        return [TaskRef(g, j) for j in g._dep_indices[lo:hi]]

    @property
    def cost(self) -> Cost:
        return self.graph.cost(self.id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskRef):
            return NotImplemented
        return self.graph is other.graph and self.id == other.id

    def __hash__(self) -> int:
        return hash((id(self.graph), self.id))

    def __repr__(self) -> str:
        return f"TaskRef({self.name!r}, id={self.id})"


class CostColumns(NamedTuple):
    """Read-only views of a graph's cost columns, one entry per task id.

    Attributes:
        seconds: Each task's seconds (a per-context cost: its mean).
        memory: Each task's peak bytes.
        output_bytes: Each task's result bytes.
    """

    seconds: npt.NDArray[np.float64]
    memory: IntArray
    output_bytes: IntArray


class Graph:
    """Tasks with data dependencies, costs and resources.

    >>> g = Graph()
    >>> a = g.add(int, "2")
    >>> b = g.add(pow, a, 10, name="power")
    >>> len(g), b.name, [d.name for d in b.dependencies]
    (2, 'power', ['int-0'])
    """

    def __init__(self) -> None:
        self._fns: list[Callable[..., Any]] = []
        self._args: list[tuple[Any, ...]] = []
        self._kwargs: list[dict[str, Any] | None] = []
        self._shapes = bytearray()
        self._dep_indptr = array("q", [0])
        self._dep_indices = array("q")
        self._capacity = 0
        self._seconds = np.empty(0, np.float64)
        self._memory = np.empty(0, np.int64)
        self._output_bytes = np.empty(0, np.int64)
        self._grow()
        self._user_names: dict[int, str] = {}
        self._ids_by_name: dict[str, int] = {}
        self._resources: dict[int, Resources] = {}
        self._context_seconds: dict[int, ContextSeconds] = {}
        self._edge_bytes: dict[tuple[int, int], int] = {}
        self._interned: dict[Resources, Resources] = {}
        self._cache: dict[str, Any] = {}
        self._tokens: list[contextvars.Token[Graph | None]] = []

    # ----------------------------------------------------------------- building
    def add(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        name: str | None = None,
        cost: Cost | None = None,
        resources: Resources | Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Add the task ``fn(*args, **kwargs)``; TaskRefs in the arguments are its inputs.

        Args:
            fn: The callable the task runs (positional only).
            *args: Its positional arguments; a TaskRef, also nested in lists, tuples and
                dicts, stands for that task's result and makes the task depend on it.
            name: A unique name for the task; None: ``"<fn name>-<id>"``.
            cost: Its estimated ``Cost``; None: ``DEFAULT_SECONDS``, no memory, no output.
            resources: What it occupies while it runs (``{"gpu": 1}``); None: ``{"cpu": 1}``.
            **kwargs: Its keyword arguments, with TaskRefs as in ``args``.

        Returns:
            The new task's TaskRef.

        Raises:
            GraphError: When ``fn`` is not callable, ``name`` is used already or empty, a
                TaskRef is of another graph, or ``cost`` is not a Cost; nothing is added then.
        """
        if not callable(fn):
            raise GraphError(f"add() needs a callable first, got {fn!r}; e.g. g.add(np.sum, ref)")
        tid = len(self._fns)
        refs: list[TaskRef] = []
        shape = _collect_refs(args, refs, NO_REFS)
        if kwargs:
            shape = _collect_refs(kwargs.values(), refs, shape)
        # Check everything first: a failed add must leave the graph exactly as it was.
        ids = self._dependency_ids(tid, fn, name, refs) if refs else None
        if name is not None:
            self._check_name(tid, name)
        if cost is not None and not isinstance(cost, Cost):
            raise GraphError(f"cost must be a chunkgraph Cost, got {cost!r}; e.g. Cost(seconds=2)")
        res = Resources.coerce(resources) if resources is not None else None
        # From here on nothing raises.
        if ids:
            self._dep_indices.extend(ids)
        if name is not None:
            self._ids_by_name[name] = tid
            self._user_names[tid] = name
        if tid >= self._capacity:
            self._grow()
        if cost is not None:
            self._set_cost(tid, cost)
        if res is not None and res != DEFAULT_RESOURCES:
            self._resources[tid] = self._interned.setdefault(res, res)
        self._fns.append(fn)
        self._args.append(args)
        self._kwargs.append(kwargs or None)
        self._shapes.append(shape)
        self._dep_indptr.append(len(self._dep_indices))
        if self._cache:
            self._cache.clear()
        return TaskRef(self, tid)

    def _dependency_ids(
        self, tid: int, fn: Callable[..., Any], name: str | None, refs: list[TaskRef]
    ) -> list[int]:
        """The distinct task ids behind ``refs``; GraphError for a ref of another graph."""
        ids = []
        for ref in refs:
            if ref.graph is not self:
                label = name if name is not None else f"{_fn_name(fn)}-{tid}"
                raise GraphError(
                    f"task {label!r} of this graph uses {ref.name!r}, a task of another Graph; "
                    "add that task to this graph (or pass its computed value) instead"
                )
            ids.append(ref.id)
        if len(ids) > 1:
            ids = list(dict.fromkeys(ids))  # a result used twice is one dependency
        return ids

    def _check_name(self, tid: int, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"task names must be non-empty strings, got {name!r}")
        if name in self._ids_by_name:
            raise GraphError(
                f"task name {name!r} is used twice (tasks {self._ids_by_name[name]} and {tid}); "
                "names must be unique, or pass name=None for an automatic one"
            )

    def _grow(self) -> None:
        new = max(_INITIAL_CAPACITY, 2 * self._capacity)
        old = self._capacity
        self._seconds = np.resize(self._seconds, new)
        self._memory = np.resize(self._memory, new)
        self._output_bytes = np.resize(self._output_bytes, new)
        self._seconds[old:] = DEFAULT_SECONDS
        self._memory[old:] = 0
        self._output_bytes[old:] = 0
        self._capacity = new

    def _set_cost(self, tid: int, cost: Cost) -> None:
        if not isinstance(cost, Cost):
            raise GraphError(f"cost must be a chunkgraph Cost, got {cost!r}; e.g. Cost(seconds=2)")
        if isinstance(cost.seconds, ContextSeconds):
            self._context_seconds[tid] = cost.seconds
            self._seconds[tid] = cost.seconds.mean
        else:
            self._context_seconds.pop(tid, None)
            self._seconds[tid] = cost.seconds
        self._memory[tid] = cost.memory
        self._output_bytes[tid] = cost.output_bytes

    def set_cost(self, ref: TaskRef | int, cost: Cost) -> None:
        """Replace a task's cost estimate (e.g. with a measured one).

        Args:
            ref: The task, as a TaskRef of this graph or its id.
            cost: The new estimate; plans and orders kept with the graph are forgotten.
        """
        self._set_cost(self.task_id(ref), cost)
        self._cache.pop("derived", None)  # an order or a plan depends on the costs

    def set_edge_bytes(
        self, producer: TaskRef | int | str, consumer: TaskRef | int | str, nbytes: int
    ) -> None:
        """Declare that ``producer`` sends ``nbytes`` to ``consumer`` (instead of its
        ``Cost.output_bytes``): a task may send different amounts to different consumers.

        Args:
            producer: The task sending, as a TaskRef of this graph, an id or a name.
            consumer: The task receiving, one of ``producer``'s consumers, given the same way.
            nbytes: The bytes sent (an int >= 0).

        >>> g = Graph()
        >>> a = g.add(abs, -1, cost=Cost(output_bytes=10))
        >>> b, c = g.add(abs, a), g.add(abs, a)
        >>> g.set_edge_bytes(a, c, 4)
        >>> g.edge_bytes(a, b), g.edge_bytes(a, c)
        (10, 4)
        """
        p, c = self.task_id(producer), self.task_id(consumer)
        lo, hi = self._dep_indptr[c], self._dep_indptr[c + 1]
        if p not in self._dep_indices[lo:hi]:
            raise GraphError(
                f"{self.name(c)!r} does not consume {self.name(p)!r}: edge sizes are set "
                "only for a task and one of its inputs"
            )
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise GraphError(f"nbytes must be an int >= 0, got {nbytes!r}")
        self._edge_bytes[(p, c)] = nbytes
        self._cache.pop("derived", None)  # a plan depends on the sizes

    def edge_bytes(self, producer: TaskRef | int | str, consumer: TaskRef | int | str) -> int:
        """Bytes ``producer`` sends to ``consumer``: as set, else its ``output_bytes``.

        Args:
            producer: The task sending, as a TaskRef of this graph, an id or a name.
            consumer: The task receiving, given the same way.
        """
        p, c = self.task_id(producer), self.task_id(consumer)
        size = self._edge_bytes.get((p, c))
        return int(self._output_bytes[p]) if size is None else size

    def edge_bytes_overrides(self) -> Mapping[tuple[int, int], int]:
        """The sizes set by ``set_edge_bytes``, by ``(producer, consumer)`` (read-only view)."""
        return MappingProxyType(self._edge_bytes)

    def context_seconds(self) -> Mapping[int, ContextSeconds]:
        """The tasks whose seconds were given per context, by id (read-only view)."""
        return MappingProxyType(self._context_seconds)

    def __enter__(self) -> Graph:
        self._tokens.append(current_graph.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        current_graph.reset(self._tokens.pop())

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._fns)

    def __iter__(self) -> Iterator[TaskRef]:
        return (TaskRef(self, i) for i in range(len(self._fns)))

    def __repr__(self) -> str:
        return f"<Graph: {len(self)} tasks, {len(self._dep_indices)} dependencies>"

    def ref(self, key: int | str) -> TaskRef:
        """The TaskRef of a task id or name.

        Args:
            key: A task id (from 0) or a task name.

        Raises:
            GraphError: When no task of this graph has that id or name.
        """
        if isinstance(key, str):
            if key in self._ids_by_name:
                return TaskRef(self, self._ids_by_name[key])
            _, _, suffix = key.rpartition("-")
            if suffix.isdigit() and int(suffix) < len(self) and self.name(int(suffix)) == key:
                return TaskRef(self, int(suffix))
            raise GraphError(f"no task named {key!r} in this graph of {len(self)} tasks")
        return TaskRef(self, self.task_id(key))

    def task_id(self, key: TaskRef | int | str) -> int:
        """The id of a task given as a TaskRef of this graph, an id or a name.

        GraphError when it is not a task of this graph.

        Args:
            key: A TaskRef of this graph, a task id or a task name.

        >>> g = Graph()
        >>> a = g.add(abs, -1, name="a")
        >>> g.task_id(a), g.task_id("a"), g.task_id(0)
        (0, 0, 0)
        """
        if isinstance(key, str):
            return self.ref(key).id
        if isinstance(key, TaskRef):
            if key.graph is not self:
                raise GraphError(f"{key!r} belongs to another Graph")
            key = key.id
        tid = int(key)
        if not 0 <= tid < len(self):
            raise GraphError(f"task id {tid} out of range: this graph has {len(self)} tasks")
        return tid

    def name(self, tid: int) -> str:
        """Task ``tid``'s name: the one given to ``add`` or ``"<fn name>-<id>"``.

        Args:
            tid: The task's id.
        """
        user = self._user_names.get(tid)
        if user is not None:
            return user
        return f"{_fn_name(self._fns[tid])}-{tid}"

    def payload(self, tid: int) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The callable and the arguments as given (TaskRefs not substituted).

        Args:
            tid: The task's id.

        Returns:
            ``(fn, args, kwargs)`` as given to ``add``.
        """
        return self._fns[tid], self._args[tid], self._kwargs[tid] or {}

    def resolve(
        self, tid: int, results: Sequence[Any]
    ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """Task ``tid``'s callable and arguments with each TaskRef ``r`` as ``results[r.id]``.

        Args:
            tid: The task's id.
            results: The results of the tasks it depends on, indexed by task id (entries
                of other tasks are not read).

        Returns:
            ``(fn, args, kwargs)`` ready to call.
        """
        args, kwargs = resolve_call(
            self._shapes[tid], self._args[tid], self._kwargs[tid], TaskRef, results
        )
        return self._fns[tid], args, kwargs

    def cost(self, tid: int) -> Cost:
        """Task ``tid``'s estimated Cost (its per-context seconds where it has them).

        Args:
            tid: The task's id.
        """
        per_context = self._context_seconds.get(tid)
        seconds = float(self._seconds[tid]) if per_context is None else per_context
        return Cost(seconds, int(self._memory[tid]), int(self._output_bytes[tid]))

    def costs(self) -> CostColumns:
        """Cost columns as read-only views (valid until the next ``add``)."""
        n = len(self)
        seconds, memory, output_bytes = (
            self._seconds[:n].view(),
            self._memory[:n].view(),
            self._output_bytes[:n].view(),
        )
        for view in (seconds, memory, output_bytes):
            view.flags.writeable = False
        return CostColumns(seconds, memory, output_bytes)

    def resources(self, tid: int) -> Resources:
        """What task ``tid`` occupies while it runs (default ``{"cpu": 1}``).

        Args:
            tid: The task's id.
        """
        return self._resources.get(tid, DEFAULT_RESOURCES)

    def resources_overrides(self) -> Mapping[int, Resources]:
        """The tasks whose resources are not the default ``{"cpu": 1}``, by id (read-only)."""
        return MappingProxyType(self._resources)

    def dependencies(self) -> tuple[IntArray, IntArray]:
        """``(indptr, indices)``: task i consumes ``indices[indptr[i]:indptr[i+1]]``."""
        if "deps" not in self._cache:
            indptr = np.frombuffer(self._dep_indptr, dtype=np.int64).copy()
            indices = np.frombuffer(self._dep_indices, dtype=np.int64).copy()
            self._cache["deps"] = (indptr, indices)
        result: tuple[IntArray, IntArray] = self._cache["deps"]
        return result

    def dependents(self) -> tuple[IntArray, IntArray]:
        """``(indptr, indices)``: task i's result is consumed by ``indices[indptr[i]:...]``."""
        if "dependents" not in self._cache:
            indptr, indices = self.dependencies()
            n = len(self)
            counts = np.bincount(indices, minlength=n) if len(indices) else np.zeros(n, np.int64)
            out_ptr = np.zeros(n + 1, np.int64)
            np.cumsum(counts[:n], out=out_ptr[1:])
            consumers = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            out_idx = consumers[np.argsort(indices, kind="stable")]
            self._cache["dependents"] = (out_ptr, out_idx)
        result: tuple[IntArray, IntArray] = self._cache["dependents"]
        return result

    def sinks(self) -> IntArray:
        """Ids of the tasks no other task consumes, ascending."""
        indptr, _ = self.dependents()
        return np.flatnonzero(np.diff(indptr) == 0).astype(np.int64)

    def roots(self) -> IntArray:
        """Ids of the tasks with no dependencies, ascending."""
        indptr, _ = self.dependencies()
        return np.flatnonzero(np.diff(indptr) == 0).astype(np.int64)

    # --------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise GraphError for a cycle, an unknown task id or a name used twice."""
        check_ids(self)
        cycle = find_cycle(self)
        if cycle:
            path = " -> ".join(repr(self.name(t)) for t in cycle)
            raise GraphError(
                f"the graph has a cycle: {path}; a task cannot depend on its own result"
            )
        check_names(self, self._user_names)

    def cached(self, key: str, compute: Callable[[Graph], T]) -> T:
        """``compute(self)``, computed once and kept under ``key`` until the graph changes.

        For what is derived from the whole graph and reused by every run of it
        (the executors keep ``planning.order`` here). ``add()`` and ``set_cost()``
        forget every kept value; the caller names the key and must not mutate
        the value.

        Args:
            key: The name the value is kept under.
            compute: Called with the graph when no value is kept under ``key``.

        >>> g = Graph()
        >>> _ = g.add(abs, -1)
        >>> g.cached("size", len), g.cached("size", lambda graph: -1)
        (1, 1)
        """
        derived: dict[str, Any] = self._cache.setdefault("derived", {})
        if key not in derived:
            derived[key] = compute(self)
        value: T = derived[key]
        return value

    def topological_order(self) -> IntArray:
        """Task ids, each after all its dependencies (the id order unless refs were forged)."""
        if "topo" not in self._cache:
            self._cache["topo"] = topological_order(self)
        result: IntArray = self._cache["topo"]
        return result


def needed_mask(graph: Graph, targets: Sequence[int]) -> npt.NDArray[np.bool_]:
    """True for the targets and every task they transitively depend on.

    Args:
        graph: The graph.
        targets: The ids of the tasks whose results are wanted.

    Returns:
        A bool array with one entry per task id.
    """
    n = len(graph)
    wanted = np.zeros(n, dtype=bool)
    wanted[np.asarray(targets, dtype=np.int64)] = True
    if wanted[graph.sinks()].all():
        return np.ones(n, dtype=bool)  # every task leads to some sink
    ptr, idx = (a.tolist() for a in graph.dependencies())
    needed = bytearray(wanted.astype(np.uint8).tobytes())
    # Consumers come after their dependencies in topological order, so one
    # backward sweep marks every ancestor of a target.
    for t in graph.topological_order()[::-1].tolist():
        if needed[t]:
            for d in idx[ptr[t] : ptr[t + 1]]:
                needed[d] = 1
    return np.frombuffer(needed, dtype=np.uint8).astype(bool)


def _fn_name(fn: Callable[..., Any]) -> str:
    inner = getattr(fn, "func", None)  # functools.partial names its function
    target = inner if callable(inner) else fn
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else type(target).__name__


def _collect_refs(values: Iterable[Any], refs: list[TaskRef], shape: int) -> int:
    """Append the TaskRefs among ``values`` (direct, or nested in lists, tuples and dicts)
    to ``refs``; the argument shape (``_payload``) with theirs taken into account."""
    for v in values:
        if v.__class__ is TaskRef:
            refs.append(v)
            shape |= TOP_REFS
        elif isinstance(v, list | tuple | dict) and scan(v, TaskRef, refs):
            shape = NESTED_REFS
    return shape
