"""The flow's state reads top to bottom: every chunkgraph module it uses is imported at
the top of the module (none inside a function or under ``if TYPE_CHECKING``, which hide
a dependency from the reader and from the contracts), and the commands about flow state
use only public names (``chunkgraph.flow.state``'s face, ``chunkgraph.volume``'s)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "chunkgraph"


def _chunkgraph_imports(tree: ast.Module) -> list[tuple[ast.stmt, str]]:
    found: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node, node.module))
        elif isinstance(node, ast.Import):
            found += [(node, alias.name) for alias in node.names]
    return [(n, m) for n, m in found if m == "chunkgraph" or m.startswith("chunkgraph.")]


def late_imports(source: str, name: str) -> list[str]:
    """chunkgraph imports of ``source`` that are not module-level statements."""
    tree = ast.parse(source)
    top = {id(s) for s in tree.body}
    return [f"{name}:{n.lineno} {m}" for n, m in _chunkgraph_imports(tree) if id(n) not in top]


def private_imports(source: str, name: str, own: str) -> list[str]:
    """Imports of another package's private module (a ``_`` part below chunkgraph),
    other than ``own``'s and chunkgraph's shared ``_errors`` and ``_util``."""
    found = []
    for node, module in _chunkgraph_imports(ast.parse(source)):
        parts = module.split(".")
        private = any(p.startswith("_") for p in parts[1:])
        if private and not module.startswith(own) and parts[1] not in ("_errors", "_util"):
            found.append(f"{name}:{node.lineno} {module}")
    return found


def test_the_state_imports_chunkgraph_at_module_level_only() -> None:
    state = SRC / "flow" / "state"
    late = [hit for p in sorted(state.glob("*.py")) for hit in late_imports(p.read_text(), p.name)]
    assert not late, "import these at the top of the module:\n" + "\n".join(late)


def test_the_status_and_clean_commands_use_public_names() -> None:
    path = SRC / "cli" / "_cmd_status.py"
    assert private_imports(path.read_text(), path.name, "chunkgraph.cli.") == []


def test_the_rules_see_what_they_forbid() -> None:
    hidden = (
        "from typing import TYPE_CHECKING\nfrom chunkgraph.flow.state._root import StateRoot\n"
        "if TYPE_CHECKING:\n    from chunkgraph.volume import Volume\n"
        "def f():\n    import chunkgraph.geometry\n"
    )
    assert len(late_imports(hidden, "x.py")) == 2
    reaching = (
        "from chunkgraph.volume._object_store import SCHEMES\nfrom chunkgraph._errors import E\n"
    )
    assert len(private_imports(reaching, "x.py", "chunkgraph.cli.")) == 1
