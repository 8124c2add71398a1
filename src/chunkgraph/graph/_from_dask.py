"""``from_dask``: a dask collection or graph as a chunkgraph ``Graph``.

Dask hands out graphs in three generations, and all are accepted:

    a collection (dask.array, delayed, ...)   optimised the way ``compute`` would
    an expression (``dask._expr.Expr``)       what ``compute`` hands a scheduler since
                                              2025.4: ``__dask_graph__()`` is the dict
    a Mapping (dict or HighLevelGraph)        values are ``dask._task_spec`` nodes or
                                              tuple tasks ``(func, *args)``

Every key becomes one of three things, and only tasks cost a chunkgraph task:

    task    one chunkgraph task that evaluates the dask node with its
            dependencies' values (``SpecCall`` / ``TupleCall``), so dask's own
            semantics (nested tasks, containers) hold exactly; a subgraph dask
            fused into one task is expanded into a task per node (``_expand``)
    data    no task: the value is passed to the tasks that use it as a literal
            argument (``DataNode``, or a tuple-graph value that refers to no key)
    alias   no task: the key resolves to whatever its target resolves to

A requested key that is data gets one task returning its value, so that every
requested key has a task id and ``run(result.graph, result.targets)`` works.

Two node formats, chosen by feature, not by version: when ``dask._task_spec``
exists (recent dask) the graph goes through dask's own
``convert_legacy_graph``, so tuple tasks mean exactly what that dask makes of
them; an older dask has no task_spec and its tuple tasks are read here
(``TupleNodes``), by the documented tuple-task rules.

Cost: one pass over the graph, a depth-first walk that adds each node after
its dependencies (dask dicts are not in topological order), and per task one
``Graph.add`` whose arguments are top-level refs, the cheapest shape to run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from chunkgraph._errors import ConfigError, GraphError
from chunkgraph.graph._dask_nodes import ALIAS, DATA, TASK, Key, NodeFormat, key_name
from chunkgraph.graph._dask_tuples import TupleNodes
from chunkgraph.graph._graph import Graph, TaskRef


class DaskGraph(NamedTuple):
    """What ``from_dask`` returns.

    Attributes:
        graph: The chunkgraph Graph.
        task_ids: The task id of each dask key that is a task or an alias of one
            (aliases share their target's id).
        data: The keys that hold data, with their values (no task; see the module doc).
        targets: TaskRefs in the nested list structure of the requested keys (a
            collection's ``__dask_keys__()`` by default), or None when no keys were
            asked for; ``chunkgraph.run(graph, targets)`` computes them.
    """

    graph: Graph
    task_ids: dict[Key, int]
    data: dict[Key, Any]
    targets: Any


def from_dask(
    collection_or_graph: object, keys: object = None, *, optimize: bool = True
) -> DaskGraph:
    """Convert a dask collection, expression, HighLevelGraph or dict graph to a ``Graph``.

    Args:
        collection_or_graph: A dask collection (array, dataframe, delayed), an
            expression, a HighLevelGraph or a plain dict graph.
        keys: The keys wanted: a key or (nested) lists of keys; None: the collection's
            or expression's keys, and none for a plain graph.
        optimize: Apply dask's graph optimisations to a collection first, as
            ``compute`` does.

    Returns:
        A ``DaskGraph``: the Graph, the task id of each key, and the targets in the
            shape of ``keys``.

    >>> import operator
    >>> from chunkgraph import run
    >>> dsk = {"x": 1, "y": (operator.add, "x", 10), "z": "y"}
    >>> result = from_dask(dsk, keys=["z", "x"])
    >>> len(result.graph), result.task_ids["z"] == result.task_ids["y"]
    (2, True)
    >>> run(result.graph, result.targets)
    [11, 1]
    """
    dsk, default_keys = _graph_and_keys(collection_or_graph, optimize)
    wanted = default_keys if keys is None else keys
    nodes = _node_format(dsk)
    graph = Graph()
    resolved = _resolve_all(graph, nodes)
    task_ids: dict[Key, int] = {}
    data: dict[Key, Any] = {}
    for key, value in resolved.items():
        if value.__class__ is TaskRef:
            task_ids[key] = value.id
        else:
            data[key] = value
    targets = None if wanted is None else _targets(graph, wanted, resolved)
    return DaskGraph(graph, task_ids, data, targets)


# ------------------------------------------------------------------ inputs


def _graph_and_keys(obj: object, optimize: bool) -> tuple[Mapping[Key, Any], object]:
    """The key -> node mapping of ``obj`` and the keys it stands for (None for a Mapping)."""
    if isinstance(obj, Mapping):
        to_dict = getattr(obj, "to_dict", None)  # a HighLevelGraph materialises once
        return (to_dict() if callable(to_dict) else obj), None
    if hasattr(obj, "__dask_graph__") and hasattr(obj, "__dask_keys__"):
        if hasattr(obj, "__dask_postcompute__"):  # a collection, not an expression
            return _collection_graph(obj, optimize)
        dsk = obj.__dask_graph__()
        return _graph_and_keys(dsk, optimize)[0], obj.__dask_keys__()
    raise ConfigError(
        f"from_dask() takes a dask collection (such as a dask.array.Array), a dask "
        f"expression, a HighLevelGraph or a dict graph, got {type(obj).__name__}: {obj!r:.80}"
    )


def _collection_graph(collection: Any, optimize: bool) -> tuple[Mapping[Key, Any], object]:
    import dask.base

    to_expr = getattr(dask.base, "collections_to_expr", None)
    if to_expr is not None:  # expression-based dask: optimising may rename the keys
        expr = to_expr(collection, optimize_graph=optimize)
        if optimize:
            expr = expr.optimize()
        return _graph_and_keys(expr.__dask_graph__(), optimize)[0], expr.__dask_keys__()
    keys = collection.__dask_keys__()
    dsk = collection.__dask_graph__()
    if optimize and hasattr(collection, "__dask_optimize__"):
        dsk = collection.__dask_optimize__(dsk, keys)
    return _graph_and_keys(dsk, optimize)[0], keys


# ------------------------------------------------------------- node formats


def _node_format(dsk: Mapping[Key, Any]) -> NodeFormat:
    try:
        from dask import _task_spec as spec
    except ImportError:  # a dask from before task_spec: tuple tasks only
        return TupleNodes(dsk)
    return SpecNodes(dsk, spec)


class SpecCall:
    """Runs one ``dask._task_spec`` node, given its dependencies' values in ``keys`` order."""

    __slots__ = ("key", "keys", "node")

    def __init__(self, key: Key, node: Any, keys: tuple[Key, ...]) -> None:
        self.key = key
        self.node = node
        self.keys = keys

    def __call__(self, *values: Any) -> Any:
        return self.node(dict(zip(self.keys, values, strict=True)))

    @property
    def __name__(self) -> str:  # chunkgraph names a task "<fn name>-<id>": use the key's
        return key_name(self.key)

    def __repr__(self) -> str:
        return f"SpecCall({self.node!r})"


class SpecNodes:
    """A graph of ``dask._task_spec`` nodes (tuple tasks converted by dask itself)."""

    def __init__(self, dsk: Mapping[Key, Any], spec: Any) -> None:
        graph_node = spec.GraphNode
        if not all(isinstance(v, graph_node) for v in dsk.values()):
            dsk = spec.convert_legacy_graph(dsk)
        self.nodes = dsk
        self.spec = spec
        self.alias, self.data_node, self.task, self.ref = (
            spec.Alias, spec.DataNode, spec.Task, spec.TaskRef
        )  # fmt: skip
        # Fused subgraphs are expanded where this dask has them (see _expand).
        self.fused = getattr(spec, "_execute_subgraph", None)

    def kind(self, key: Key) -> tuple[int, Any]:
        node = self.nodes[key]
        cls = node.__class__
        if cls is self.alias:
            return ALIAS, node.target
        if cls is self.data_node:
            return DATA, node.value
        return TASK, node  # any other GraphNode: Task, containers, fused subgraphs

    def dependencies(self, key: Key) -> Iterable[Key]:
        deps: Iterable[Key] = self.nodes[key].dependencies
        return deps

    def add(self, graph: Graph, key: Key, node: Any, resolved: dict[Key, Any]) -> Any:
        if node.__class__ is self.task and node.func is self.fused and not node.kwargs:
            expanded = self._expand(graph, node, resolved)
            if expanded is not None:
                return expanded
        keys = tuple(node.dependencies)
        return graph.add(SpecCall(key, node, keys), *[resolved[k] for k in keys])

    def _expand(self, graph: Graph, node: Any, resolved: dict[Key, Any]) -> Any:
        """The tasks of a subgraph dask fused into one task, as chunkgraph tasks.

        A fused task runs ``dask.order`` on its subgraph every time it runs
        (about 0.2 ms, more than most chunks' work); chunkgraph orders and
        fuses the whole graph once instead. None when the task does not have
        the shape ``_execute_subgraph(inner, outkey, inkeys, *inputs)`` with each
        input a TaskRef or a DataNode.
        """
        inner, outkey, inkeys, *inputs = node.args
        if not (isinstance(inner, dict) and outkey in inner and len(inkeys) == len(inputs)):
            return None
        local = {}
        for inkey, given in zip(inkeys, inputs, strict=True):
            if given.__class__ is self.ref:
                local[inkey] = resolved[given.key]
            elif given.__class__ is self.data_node:
                local[inkey] = given.value
            else:  # an inline task as an input: leave the fused task whole
                return None
        return _resolve_all(graph, SpecNodes(inner, self.spec), local)[outkey]


# ----------------------------------------------------------------- building


def _resolve_all(
    graph: Graph, nodes: NodeFormat, resolved: dict[Key, Any] | None = None
) -> dict[Key, Any]:
    """Every key -> a TaskRef of ``graph`` (a task) or its value (data), deps first.

    ``resolved``: keys already resolved (a fused subgraph's inputs); filled in place.
    """
    resolved = {} if resolved is None else resolved
    known = nodes.nodes
    for root in known:
        if root in resolved:
            continue
        path, on_path = [root], {root}
        pending = [iter(nodes.dependencies(root))]
        while pending:
            for dep in pending[-1]:
                if dep in resolved:
                    continue
                if dep in on_path:
                    _raise_cycle(path, dep)
                if dep not in known:
                    _raise_missing(path[-1], dep)
                path.append(dep)
                on_path.add(dep)
                pending.append(iter(nodes.dependencies(dep)))
                break
            else:  # every dependency resolved: this key can be added
                pending.pop()
                key = path.pop()
                on_path.discard(key)
                resolved[key] = _resolve(graph, nodes, key, resolved)
    return resolved


def _resolve(graph: Graph, nodes: NodeFormat, key: Key, resolved: dict[Key, Any]) -> Any:
    kind, payload = nodes.kind(key)
    if kind == ALIAS:
        return resolved[payload]
    if kind == DATA:
        return payload
    return nodes.add(graph, key, payload, resolved)


def _raise_cycle(path: list[Key], dep: Key) -> None:
    cycle = [*path[path.index(dep) :], dep]
    raise GraphError(
        "the dask graph has a cycle: " + " -> ".join(repr(k) for k in cycle)
        + "; a key cannot depend on its own result"
    )  # fmt: skip


def _raise_missing(key: Key, dep: Key) -> None:
    raise GraphError(
        f"dask key {key!r} depends on {dep!r}, which the graph does not define; pass "
        "the whole graph (a key computed elsewhere, such as a distributed Future, must "
        "be computed by the scheduler that holds it)"
    )


def _targets(graph: Graph, keys: object, resolved: dict[Key, Any]) -> Any:
    if isinstance(keys, list):
        return [_targets(graph, k, resolved) for k in keys]
    try:
        value = resolved[keys]
    except (KeyError, TypeError):
        raise ConfigError(
            f"key {keys!r} is not in the dask graph; keys must be keys of the graph "
            "(a key or nested lists of keys)"
        ) from None
    if value.__class__ is TaskRef:
        return value
    return graph.add(_data, value)


def _data(value: Any) -> Any:
    """A requested key that holds data: its task returns the value."""
    return value
