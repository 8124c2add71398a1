"""The layer rule of the design notes' Layout (docs/design/index.md), as import-linter
checks it (pyproject's contract)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    """Run the contract over the chunkgraph package found in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_every_layer_imports_only_the_layers_beneath_it() -> None:
    done = lint_imports(ROOT / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KEPT" in done.stdout


def test_an_import_of_a_higher_layer_breaks_the_contract(tmp_path: Path) -> None:
    """The check can fail: geometry (the lowest layer) importing the flow is reported."""
    shutil.copytree(ROOT / "src" / "chunkgraph", tmp_path / "chunkgraph")
    box = tmp_path / "chunkgraph" / "geometry" / "_box.py"
    box.write_text(box.read_text() + "\nfrom chunkgraph import flow  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "chunkgraph.geometry is not allowed to import chunkgraph.flow" in done.stdout


@pytest.mark.parametrize(
    ("module", "imported", "refusal"),
    [
        # the state's one direction: its names never import what reads them
        ("flow/state/_layout.py", "chunkgraph.flow.state._status", "is not allowed to import"),
        # the plan is pure: it never reaches the engine
        ("flow/plan/_spec.py", "chunkgraph.flow.run", "is not allowed to import"),
        # a job uses the flow's public names only
        ("jobs/_transfer.py", "chunkgraph.flow.state", "is not allowed to import"),
        # a room's modules are reached through its face
        ("cli/_cmd_status.py", "chunkgraph.flow.state._status", "chunkgraph.flow.state._status"),
    ],
)
def test_an_import_across_the_flow_rooms_breaks_a_contract(
    tmp_path: Path, module: str, imported: str, refusal: str
) -> None:
    """The flow's contracts can fail: each seeded import is reported."""
    shutil.copytree(ROOT / "src" / "chunkgraph", tmp_path / "chunkgraph")
    path = tmp_path / "chunkgraph" / module
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and refusal in done.stdout, done.stdout
