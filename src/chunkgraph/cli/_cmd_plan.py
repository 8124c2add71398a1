"""``chunkgraph plan``: plan a task graph described in JSON, without running anything.

    chunkgraph plan GRAPH.json [--contexts CONTEXTS.json | --context SPEC ...]
                    [--strategy auto|heft|peft|merge] [--memory BYTES] [--no-fuse]
                    [--gantt plan.png] [--schedule]

The graph file (written up with a complete example in ``docs/graph-format.md``)::

    {"tasks": [{"name": "load", "seconds": 2.0, "output_bytes": 1048576},
               {"name": "segment", "seconds": {"cpu": 8, "gpu": 1}, "memory": 2147483648,
                "resources": {"gpu": 1}, "deps": ["load"], "edge_bytes": {"load": 524288}}],
     "contexts": [{"name": "numa0", "kind": "cpu", "slots": 4, "memory": 17179869184},
                  {"name": "gpu0", "kind": "gpu"}],
     "links": {"bandwidth": 1e9, "latency": 1e-4}}

* ``tasks`` (required, a non-empty list, any order): ``name`` (required, unique);
  ``seconds``: a number (on a context of speed 1) or seconds per context name or
  kind (default: the library's default cost); ``memory``, ``output_bytes``: bytes;
  ``resources``: amounts a task holds while it runs (``{"gpu": 1}``: only on GPU
  contexts); ``deps``: names of the tasks whose results it takes; ``edge_bytes``:
  bytes that a dep sends to this task, by dep name (else the dep's ``output_bytes``).
* ``contexts`` (optional): fields of ``chunkgraph.Context`` (``name``, ``kind``,
  ``slots``, ``speed``, ``memory``: bytes or null for no budget, ``host``).
  ``--contexts FILE`` (a list, or an object with ``contexts`` and ``links``) or
  ``--context name:kind:slots[:speed[:memory]]`` (repeatable) replace them; with
  none of these, the plan is for this machine (``chunkgraph.local_contexts()``).
* ``links`` (optional): one ``{"bandwidth": bytes/s, "latency": s}`` for every
  pair of hosts, or a list of ``{"between": ["a", "b"], "bandwidth": .., "latency": ..}``.

Each task becomes a no-op with those costs; ``plan.summary()`` is printed, and
with ``--schedule`` each task's context, slot, start and finish. Exit 2 names the
task and field of any error in the files (bad JSON, unknown dep, a cycle, a bad
value); exit 1 when no plan exists (``PlanError``: a task fits no context).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunkgraph._errors import ConfigError, PlanError
from chunkgraph.cli._main import EXIT_FAILED, EXIT_OK
from chunkgraph.graph import Cost, Graph
from chunkgraph.planning import Context, Link, local_contexts, plan
from chunkgraph.planning._gantt import gantt_target

TASK_FIELDS = ("name", "seconds", "memory", "output_bytes", "resources", "deps", "edge_bytes")
CONTEXT_FIELDS = ("name", "kind", "slots", "speed", "memory", "host")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}  # fmt: skip


def register(commands: Any) -> None:
    p = commands.add_parser("plan", help="plan a task graph given as JSON; print the plan")
    p.add_argument("graph", metavar="GRAPH.json", help="tasks, costs and deps (see docs)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--contexts", metavar="FILE", help="JSON file of contexts (and links)")
    where.add_argument(
        "--context",
        action="append",
        metavar="SPEC",
        help="name:kind:slots[:speed[:memory]], e.g. gpu0:gpu:1:1:8GiB (repeatable)",
    )
    p.add_argument("--strategy", default="auto", choices=("auto", "heft", "peft", "merge"))
    p.add_argument("--memory", metavar="BYTES", help="budget of every context, e.g. 16GiB")
    p.add_argument("--no-fuse", action="store_true", help="plan every task as its own unit")
    p.add_argument(
        "--gantt",
        metavar="FILE",
        help="draw the plan as a Gantt chart (FILE.png, .pdf or .svg: the format drawn)",
    )
    p.add_argument("--schedule", action="store_true", help="print each task's place and times")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.gantt:
        gantt_target(args.gantt)  # before planning: a ConfigError (exit 2), nothing printed
    doc = _load(Path(args.graph))
    graph = build_graph(doc, args.graph)
    contexts, links = contexts_and_links(doc, args.graph)
    if args.contexts:
        extra = _load(Path(args.contexts))
        if isinstance(extra, list):
            extra = {"contexts": extra}
        contexts, links = contexts_and_links(extra, args.contexts)
        if contexts is None:
            raise ConfigError(f"{args.contexts}: no contexts in it")
    elif args.context:
        contexts = [parse_context_flag(spec) for spec in args.context]
    memory = None if args.memory is None else parse_bytes(args.memory, "--memory")
    try:
        result = plan(
            graph,
            list(contexts) if contexts else list(local_contexts()),
            strategy=args.strategy,
            fuse=not args.no_fuse,
            memory=memory,
            links=links,
        )
    except PlanError as err:
        print(f"chunkgraph plan: no plan: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(result.summary())
    if args.schedule:
        start, finish = result.times()
        planned = [t for t in range(len(graph)) if result.context_of(t) is not None]
        for t in sorted(planned, key=lambda t: (start[t], graph.name(t))):
            where = f"{result.context_of(t).name}[{int(result.task_slot[t])}]"  # type: ignore[union-attr]
            print(f"  {graph.name(t):<20} {where:<12} {start[t]:g} -> {finish[t]:g} s")
    if args.gantt:
        result.gantt(args.gantt)
        print(f"Gantt chart: {args.gantt}")
    return EXIT_OK


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason})") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from err


def build_graph(doc: Any, source: str) -> Graph:
    """The Graph of no-op tasks that ``doc`` (a parsed graph file) describes."""
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(tasks, list) or not tasks:
        raise ConfigError(f'{source}: needs "tasks": a non-empty list of task objects')
    by_name: dict[str, dict[str, Any]] = {}
    for i, task in enumerate(tasks):
        where = f"{source}: tasks[{i}]"
        if not isinstance(task, dict):
            raise ConfigError(f"{where} must be an object with a name, got {task!r}")
        _no_unknown(task, TASK_FIELDS, where)
        name = task.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f'{where}: "name" must be a non-empty string, got {name!r}')
        if name in by_name:
            raise ConfigError(f"{where}: task name {name!r} is used twice; names must be unique")
        by_name[name] = task
    deps = {n: _deps(t, by_name, f"{source}: task {n!r}") for n, t in by_name.items()}
    graph = Graph()
    refs: dict[str, Any] = {}
    for name in _topological(deps, source):
        task, where = by_name[name], f"{source}: task {name!r}"
        try:
            seconds = task.get("seconds")
            cost = Cost(
                **({} if seconds is None else {"seconds": seconds}),
                memory=_whole(task.get("memory", 0)),
                output_bytes=_whole(task.get("output_bytes", 0)),
            )
            refs[name] = graph.add(
                _noop, *(refs[d] for d in deps[name]), name=name, cost=cost,
                resources=task.get("resources"),
            )  # fmt: skip
        except (ConfigError, ValueError, TypeError) as err:
            raise ConfigError(f"{where}: {err}") from err
        edge_bytes = task.get("edge_bytes", {})
        if not isinstance(edge_bytes, dict):
            raise ConfigError(f'{where}: "edge_bytes" must map dep names to bytes')
        for dep, nbytes in edge_bytes.items():
            if dep not in deps[name]:
                raise ConfigError(f'{where}: "edge_bytes" names {dep!r}, which is not in its deps')
            try:
                graph.set_edge_bytes(refs[dep], refs[name], _whole(nbytes))
            except (ConfigError, ValueError, TypeError) as err:
                raise ConfigError(f'{where}: "edge_bytes"[{dep!r}]: {err}') from err
    return graph


def _noop(*_inputs: object) -> None:
    """What every task of a planned graph file does: nothing (only its costs matter)."""


def _no_unknown(obj: Mapping[str, Any], fields: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(obj) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; the fields are {list(fields)}")


def _deps(task: Mapping[str, Any], names: Mapping[str, Any], where: str) -> list[str]:
    deps = task.get("deps", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ConfigError(f'{where}: "deps" must be a list of task names, got {deps!r}')
    for dep in deps:
        if dep not in names:
            raise ConfigError(f'{where}: "deps" names {dep!r}, which is no task of the file')
    return list(dict.fromkeys(deps))


def _topological(deps: Mapping[str, list[str]], source: str) -> list[str]:
    """Names with every task after its deps (file order among equals); a cycle is an error."""
    waiting = {n: len(d) for n, d in deps.items()}
    users: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            users[d].append(n)
    ready = [n for n, k in waiting.items() if k == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for u in users[n]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(order) < len(deps):
        left = {n for n, k in waiting.items() if k > 0}
        path, at = [], next(iter(n for n in deps if n in left))
        while at not in path:  # each task left waits on another task left: walk to a repeat
            path.append(at)
            at = next(d for d in deps[at] if d in left)
        cycle = [*path[path.index(at) :], at]
        raise ConfigError(
            f"{source}: the tasks form a cycle: {' -> '.join(reversed(cycle))} (each arrow: "
            "a result going to a task that lists it in its deps); remove one of these deps"
        )
    return order


def _whole(value: Any) -> Any:
    """Bytes written as 1e9 in JSON (a float) are still a whole number of bytes."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def contexts_and_links(doc: Any, source: str) -> tuple[list[Context] | None, Any]:
    """The ``contexts`` and ``links`` of a parsed file (None where absent)."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected an object with contexts, got {type(doc).__name__}")
    contexts = None
    if doc.get("contexts") is not None:
        if not isinstance(doc["contexts"], list) or not doc["contexts"]:
            raise ConfigError(f'{source}: "contexts" must be a non-empty list of objects')
        contexts = []
        for i, spec in enumerate(doc["contexts"]):
            where = f"{source}: contexts[{i}]"
            if not isinstance(spec, dict):
                raise ConfigError(f"{where} must be an object, got {spec!r}")
            _no_unknown(spec, CONTEXT_FIELDS, where)
            fields = dict(spec)
            if "memory" in fields:
                fields["memory"] = math.inf if fields["memory"] is None else fields["memory"]
            try:
                contexts.append(Context(**fields))
            except (ConfigError, ValueError, TypeError) as err:
                raise ConfigError(f"{where}: {err}") from err
    links = doc.get("links")
    if links is None:
        return contexts, None
    try:
        if isinstance(links, dict):
            return contexts, Link(**links)
        if isinstance(links, list):
            pairs: dict[tuple[str, str], Link] = {}
            for entry in links:
                fields = dict(entry)
                a, b = fields.pop("between")
                pairs[(a, b)] = Link(**fields)
            return contexts, pairs
    except (ConfigError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f'{source}: "links": {err!r}') from err
    raise ConfigError(f'{source}: "links" must be an object or a list, got {links!r}')


def parse_context_flag(spec: str) -> Context:
    """``name:kind:slots[:speed[:memory]]`` as a Context.

    >>> parse_context_flag("gpu0:gpu:1:2:8GiB")
    Context(name='gpu0', kind='gpu', slots=1, speed=2.0, memory=8589934592, host='local')
    """
    parts = spec.split(":")
    if not 3 <= len(parts) <= 5:
        raise ConfigError(f"--context {spec!r}: expected name:kind:slots[:speed[:memory]]")
    try:
        fields: dict[str, Any] = {"name": parts[0], "kind": parts[1], "slots": int(parts[2])}
        if len(parts) > 3:
            fields["speed"] = float(parts[3])
        if len(parts) > 4:
            fields["memory"] = parse_bytes(parts[4], f"--context {spec!r}")
        return Context(**fields)
    except (ConfigError, ValueError, TypeError) as err:
        raise ConfigError(f"--context {spec!r}: {err}") from err


def parse_bytes(text: str, what: str) -> int:
    """``"16GiB"``, ``"2e9"``, ``"512M"`` as bytes.

    >>> parse_bytes("16GiB", "x"), parse_bytes("2e9", "x"), parse_bytes("1.5k", "x")
    (17179869184, 2000000000, 1500)
    """
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]i?)?[bB]?\s*", text)
    if match is None:
        raise ConfigError(f"{what}: {text!r} is not a number of bytes (e.g. 16GiB, 2e9, 512M)")
    try:
        value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    except ValueError as err:
        raise ConfigError(f"{what}: {text!r} is not a number of bytes") from err
    return int(value)
