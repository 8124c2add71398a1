"""No import cycles among chunkgraph's modules, counting the imports inside functions.

import-linter (tests/test_layers.py) sees every import, but a cycle whose closing import
sits inside a function passes it and still ties the modules into one: neither can be
read, tested or moved without the other. This reads the sources with :mod:`ast` (nothing
is imported): each import of a chunkgraph module is an edge, whether it runs at module
level or inside a function; one under ``if TYPE_CHECKING:`` never runs and is left out.
``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``; the
implicit import of parent packages is not counted (as import-linter does not).

The few cycles that stay are named in ``ALLOWED``, one closing import each, with why.

An import of a chunkgraph module inside a function is the exception: each one says
why on its line (``# deferred: <reason>``: an optional dependency the imported module
loads, a re-export from a layer above), and there are at most ``MAX_LATE_IMPORTS``.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "chunkgraph"
STATE = "chunkgraph.flow.state"
ROOMS = ("chunkgraph.flow", "chunkgraph.jobs")

# (importer, imported): the import that closes a cycle and stays, with its reason.
ALLOWED = {
    ("chunkgraph.volume", "chunkgraph.flow"): (
        "volume.__getattr__ re-exports apply lazily for `chunkgraph.volume.apply` callers: a "
        "name lookup at the package surface (the same exception as the layers contract's)"
    ),
    ("chunkgraph.flow", "chunkgraph.jobs"): (
        "flow.__getattr__ re-exports the jobs lazily for `chunkgraph.flow.downsample` "
        "callers (the jobs sit above the flow; the layers contract names it too)"
    ),
}
MAX_LATE_IMPORTS = 40
REASON = re.compile(r"#\s*deferred: \S")


def module_files(src: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``src/chunkgraph``."""
    found: dict[str, Path] = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.Module) -> Iterator[tuple[ast.AST, bool]]:
    """Every node that runs, with whether it runs inside a function."""
    todo: list[tuple[ast.AST, bool]] = [(tree, False)]
    while todo:
        node, inside = todo.pop()
        yield node, inside
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend((n, inside) for n in node.orelse)  # the else branch runs
            continue
        deeper = inside or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        todo.extend((child, deeper) for child in ast.iter_child_nodes(node))


def imports(src: Path) -> list[tuple[str, str, bool]]:
    """(importer, imported, inside a function?) for each import of a chunkgraph module."""
    files = module_files(src)
    found: list[tuple[str, str, bool]] = []
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node, inside in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(module, a.name, inside) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append((module, sub if sub in files else base, inside))
    own = [(a, b, inside) for a, b, inside in found if b == PACKAGE or b.startswith(PACKAGE + ".")]
    return sorted(set(own))


def late_imports(src: Path) -> list[tuple[str, int, str]]:
    """(module, line, text) of each import statement of a chunkgraph module made inside
    a function (outside ``if TYPE_CHECKING:``)."""
    found = []
    for module, path in module_files(src).items():
        text = path.read_text()
        lines = text.splitlines()
        for node, inside in _runtime_nodes(ast.parse(text, str(path))):
            if inside and isinstance(node, ast.Import | ast.ImportFrom) and _own(node):
                found.append((module, node.lineno, lines[node.lineno - 1].strip()))
    return sorted(found)


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether the statement imports a chunkgraph module (a relative import does)."""
    if isinstance(node, ast.ImportFrom):
        names = [] if node.level else [node.module or ""]
    else:
        names = [alias.name for alias in node.names]
    return all(n == PACKAGE or n.startswith(PACKAGE + ".") for n in names)


def cycles(src: Path, allowed: dict[tuple[str, str], str] = ALLOWED) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b, _ in imports(src):
        if (a, b) not in allowed and a != b:
            graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(members) > 1:
                        found.append(sorted(members))
    return sorted(found)


def test_no_module_is_in_an_import_cycle() -> None:
    assert cycles(SRC) == []


def test_each_allowed_cycle_is_still_there() -> None:
    """An exception whose cycle is gone is removed from ``ALLOWED``."""
    edges = {(a, b) for a, b, _ in imports(SRC)}
    for pair in ALLOWED:
        assert pair in edges, pair
        assert cycles(SRC, {p: w for p, w in ALLOWED.items() if p != pair}), pair


def test_the_flow_and_the_jobs_import_at_module_level() -> None:
    """The flow's rooms import each other in one direction (the contracts in
    pyproject.toml), so no module of the flow or the jobs has a reason to import inside a
    function; the flow's face looks the jobs up on first use (``ALLOWED``)."""
    late = {(a, b) for a, b, inside in imports(SRC) if inside and a.startswith(ROOMS)}
    assert late == {("chunkgraph.flow", "chunkgraph.jobs")}
    assert not any(a.startswith(STATE) for a, _ in late)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The check can fail: geometry importing the flow inside a function closes a cycle
    (the flow imports geometry at module level)."""
    shutil.copytree(SRC / PACKAGE, tmp_path / PACKAGE)
    box = tmp_path / PACKAGE / "geometry" / "_box.py"
    box.write_text(box.read_text() + "\n\ndef _late():\n    from chunkgraph import flow\n")
    found = cycles(tmp_path)
    assert any("chunkgraph.geometry._box" in c and "chunkgraph.flow" in c for c in found)


def test_few_imports_are_made_inside_functions_and_each_says_why() -> None:
    late = late_imports(SRC)
    assert len(late) <= MAX_LATE_IMPORTS, [f"{m}:{n}" for m, n, _ in late]
    unexplained = [f"{m}:{n} {line}" for m, n, line in late if not REASON.search(line)]
    assert not unexplained, "say why on the line: # deferred: <reason>"


def test_a_late_import_without_a_reason_is_found(tmp_path: Path) -> None:
    """The check can fail: an import added inside a function, saying nothing, is listed
    (and the test above would name it)."""
    shutil.copytree(SRC / PACKAGE, tmp_path / PACKAGE)
    box = tmp_path / PACKAGE / "geometry" / "_box.py"
    box.write_text(box.read_text() + "\n\ndef _late():\n    from chunkgraph import _util\n")
    line = len(box.read_text().splitlines())
    late = late_imports(tmp_path)
    assert ("chunkgraph.geometry._box", line, "from chunkgraph import _util") in late
    assert not REASON.search("from chunkgraph import _util")
