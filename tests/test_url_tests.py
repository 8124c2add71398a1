"""Rules of the house: code above the storage layer never tests a path's spelling for a
URL scheme, nor a volume's backend by name; it asks ``chunkgraph.volume`` (``is_url``,
``place_of``, ``Volume.location``, ``Volume.format``, ``path_to_open``,
``shards_by_write_chunks``, ``plain_zarr_backend``). Tests of spellings spread and
disagree (a format prefix is a URL to one and a local path to another); one answer in
``volume/`` cannot. And nowhere but the table of formats (``volume/_formats.py``) lists
formats by name: a set of names is a capability asked the wrong way, and the next format
added misses it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "chunkgraph"
# The backends' names, as a comparison outside volume/ would spell them.
BACKENDS = {"zarr", "zarr2", "tensorstore", "memory", "precomputed", "n5", "ome-zarr"}
# ... and the path prefixes, as a list of formats would spell them.
FORMAT_NAMES = BACKENDS | {"zarr3"}
# The schemes of places a volume lives at, as a test of a path's spelling would name them.
PLACE_SCHEMES = {"file", "s3", "gs", "http", "https"} | FORMAT_NAMES
TABLE = SRC / "volume" / "_formats.py"


def _texts(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or parts of f-strings: text for
    people (which may show a URL), not a test."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.update(id(part) for part in node.values)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def _names_backend(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "backend") or (
        isinstance(node, ast.Name) and node.id == "backend"
    )


def _constants(node: ast.expr) -> set[object]:
    if isinstance(node, ast.Constant):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    return set()


def offences(source: str, name: str) -> list[str]:
    tree = ast.parse(source)
    docs = _texts(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "://" and id(node) not in docs:
            found.append(f'{name}:{node.lineno} tests for "://"')
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.endswith("://")
            and node.value[:-3] in PLACE_SCHEMES
            and id(node) not in docs
        ):
            found.append(f"{name}:{node.lineno} tests for {node.value!r}")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_backend(s) for s in sides) and any(
                _constants(s) & BACKENDS for s in sides
            ):
                found.append(f"{name}:{node.lineno} compares a backend with its name")
    return found


def test_no_url_scheme_or_backend_name_test_outside_the_storage_layer() -> None:
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if "volume" not in path.relative_to(SRC).parts[:1]
        for hit in offences(path.read_text(), str(path.relative_to(SRC)))
    ]
    assert not found, "ask chunkgraph.volume instead:\n" + "\n".join(found)


def test_the_rule_sees_each_kind_of_test() -> None:
    bad = 'if "://" in path:\n    pass\nif vol.backend == "precomputed":\n    pass\n'
    assert len(offences(bad, "x.py")) == 2
    assert len(offences('if text.startswith("file://"):\n    pass\n', "x.py")) == 1
    fine = (
        'def f(path, b):\n    """s3://bucket/a.zarr"""\n    print(f"{b}://x")\n'
        "    return is_url(path)\n"
    )
    assert offences(fine, "x.py") == []


def listed_formats(source: str, name: str) -> list[str]:
    """Tuples, lists, sets (``Literal[...]`` too) and dict keys naming two or more formats."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = {i.value for i in items if isinstance(i, ast.Constant)} & FORMAT_NAMES
        if len(names) >= 2:
            found.append(f"{name}:{node.lineno} lists formats {sorted(names)}")
    return found


def test_formats_are_listed_only_in_the_table_of_formats() -> None:
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if path != TABLE
        for hit in listed_formats(path.read_text(), str(path.relative_to(SRC)))
    ]
    assert not found, "ask the Format (volume.FORMATS, Volume.format) instead:\n" + "\n".join(found)


def test_the_list_rule_sees_each_kind_of_list() -> None:
    bad = (
        'A = ("zarr", "tensorstore")\nB = {"n5": 1, "zarr2": 2}\nC = Literal["memory", "zarr"]\n'
        'if b in ["ome-zarr", "precomputed"]:\n    pass\n'
    )
    assert len(listed_formats(bad, "x.py")) == 4
    fine = 'A = ("zarr3", *names)\nB = {"zarr": 1}\nC = ("zarr", "png")\n'
    assert listed_formats(fine, "x.py") == []


def test_the_names_cover_the_table() -> None:
    from chunkgraph.volume import FORMATS

    assert {f.name for f in FORMATS} | {p for f in FORMATS for p in f.prefixes} <= FORMAT_NAMES
