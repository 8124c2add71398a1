"""Size and complexity limits of chunkgraph's functions (radon's cyclomatic complexity).

A function that grows past these limits is a sign to split it into named steps: no
function anywhere in ``src/`` is above ``MAX_COMPLEXITY``, ``apply`` is a short pipeline
(options -> plan -> validate -> FlowRun), and no function of the flow reads like a
second scheduler.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from radon.complexity import cc_visit

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "chunkgraph"
FLOW = PACKAGE / "flow"
MAX_COMPLEXITY = 20
MAX_APPLY_COMPLEXITY = 10
MAX_APPLY_LINES = 80
MAX_APPLY_MODULE_LINES = 550


def _blocks(path: Path) -> list[Any]:
    """Every function and method of a module (classes are flattened into their methods)."""
    found: list[Any] = []
    for block in cc_visit(path.read_text()):
        found.extend(getattr(block, "methods", None) or [block])
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_package_is_measured() -> None:
    """The limit reaches every package and subpackage: a module moved stays measured."""
    names = {path.relative_to(PACKAGE).as_posix() for path in _modules()}
    for module in ("flow/_apply.py", "flow/run/_flow_run.py", "flow/state/_status.py",
                   "flow/plan/_spec.py", "jobs/_pyramid.py", "volume/_registry.py",
                   "cli/_cmd_run.py", "execute/pool/_worker.py", "report/_document.py",
                   ):  # fmt: skip
        assert module in names, module


def test_no_function_is_above_the_complexity_limit() -> None:
    over = [
        f"{path.relative_to(PACKAGE)}:{b.lineno} {b.name} ({b.complexity})"
        for path in _modules()
        for b in _blocks(path)
        if b.complexity > MAX_COMPLEXITY
    ]
    assert not over, f"above complexity {MAX_COMPLEXITY}: {over}"


def _docstring_lines(path: Path, name: str) -> int:
    """How many lines the docstring of the function ``name`` in ``path`` takes."""
    (function,) = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    first = function.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return 0
    assert first.end_lineno is not None
    return first.end_lineno - first.lineno + 1


def test_apply_is_a_short_pipeline() -> None:
    """Its code, that is: the docstring documenting each parameter does not count."""
    module = FLOW / "_apply.py"
    (apply,) = [b for b in _blocks(module) if b.name == "apply"]
    lines = apply.endline - apply.lineno + 1 - _docstring_lines(module, "apply")
    assert apply.complexity <= MAX_APPLY_COMPLEXITY, apply.complexity
    assert lines <= MAX_APPLY_LINES, lines
    assert len(module.read_text().splitlines()) <= MAX_APPLY_MODULE_LINES


def test_the_limits_see_a_complex_function(tmp_path: Path) -> None:
    """The measure can fail: 25 branches in one function are counted as such."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    module = tmp_path / "m.py"
    module.write_text(f"def tangled(x):\n{body}    return -1\n")
    (block,) = _blocks(module)
    assert block.complexity > MAX_COMPLEXITY
