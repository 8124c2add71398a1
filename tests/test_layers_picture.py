"""The design notes show the layers the import-linter contracts enforce, in their order.

``docs/scripts/draw_layers.py`` draws the picture of the packages from the contracts in
``pyproject.toml``; it stops on a layer that has no line of text, or a line for a layer
no contract names. The Layout list of ``docs/design/index.md`` ("layers depend only on
those above them in this list") names the top-level packages in the contract's order,
lowest first, and the page shows the picture.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
DESIGN = ROOT / "docs" / "design" / "index.md"


def draw_layers() -> ModuleType:
    path = ROOT / "docs" / "scripts" / "draw_layers.py"
    spec = importlib.util.spec_from_file_location("draw_layers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def top_contract() -> list[str]:
    """The top-level layers contract's layers, highest first, read here on its own."""
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [
        c["layers"]
        for c in contracts["contracts"]
        if c["type"] == "layers" and "containers" not in c
    ]
    return list(layers)


def test_the_picture_is_drawn_from_the_contracts(tmp_path: Path) -> None:
    module = draw_layers()
    layers = module.contract_layers(PYPROJECT)
    assert [" | ".join(row) for row in layers.top] == top_contract()
    assert ("plan", "state") in layers.flow and layers.flow[0] == ("_apply",)
    assert layers.state[-2:] == (("_layout", "_fingerprint", "_holder"), ("_root",))
    picture = module.draw(layers, tmp_path)
    from PIL import Image

    with Image.open(picture) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50  # text and boxes, not a blank page


CLI = '    "chunkgraph.cli",\n'


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        # a layer added to the contract without its line of text
        (CLI, CLI + '    "chunkgraph.extra",\n', "chunkgraph.extra"),
        # a layer gone from the contract, its line left behind
        ('    "chunkgraph.gpu",\n', "", "chunkgraph.gpu"),
    ],
)
def test_a_contract_the_picture_does_not_describe_stops_it(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    module = draw_layers()
    text = PYPROJECT.read_text(encoding="utf-8")
    assert old in text
    changed = text.replace(old, new)
    (tmp_path / "pyproject.toml").write_text(changed, encoding="utf-8")
    layers = module.contract_layers(tmp_path / "pyproject.toml")
    with pytest.raises(SystemExit, match=re.escape(named)):
        module.draw(layers, tmp_path)


def test_the_layout_list_follows_the_contract_and_shows_the_picture() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("```")[1]
    packages = {name.removeprefix("chunkgraph.") for name in top_contract()}
    listed = [m for m in re.findall(r"^  (\w+)/", layout, re.MULTILINE) if m in packages]
    lowest_first = [name.removeprefix("chunkgraph.") for name in reversed(top_contract())]
    assert listed == lowest_first
    assert "](../images/layers.png)" in text
    for room in ("flow/plan/", "flow/state/", "flow/run/", "jobs/"):
        assert f"`{room}`" in text
