"""Every public function and method documents its parameters, in the docstring style the
site declares.

The public surface is what the API reference shows: the modules named by the
``::: module`` lines of ``docs/reference/*.md``, each through its ``__all__``. For every
function there, every public method of every class there, and every class whose
constructor is written by hand, the docstring's parameter section (``Args:`` in the
Google style, parsed by griffe as mkdocstrings parses it) names exactly the parameters
of the signature: none missing, none that does not exist. ``self`` and ``cls`` need no
entry; ``*args`` and ``**kwargs`` each need one, with or without their stars.

A constructor's parameters are documented in the class docstring (mkdocstrings leaves
``__init__`` out of the reference). A dataclass or named tuple, whose constructor is
made from its fields, may name them in an ``Attributes:`` section instead: its fields
are both its parameters and what a reader of one looks up.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import griffe
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$", re.MULTILINE)


def docstring_style() -> str:
    """The ``docstring_style`` of mkdocs.yml's mkdocstrings Python handler."""
    # mkdocs.yml may carry `!!python/name:` tags; none are needed to read the plugins.
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.load(text, Loader=yaml.BaseLoader)
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            options = plugin["mkdocstrings"]["handlers"]["python"]["options"]
            return str(options["docstring_style"])
    raise AssertionError("mkdocs.yml declares no mkdocstrings Python handler")


def reference_modules() -> list[str]:
    """The modules the API reference renders, the top level first (a name is reported
    where a user finds it first: ``chunkgraph.Graph``, not ``chunkgraph.graph.Graph``)."""
    names = {
        name
        for page in REFERENCE.glob("*.md")
        for name in DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    }
    return sorted(names, key=lambda name: (name.count("."), name))


def unwrapped(value: Any) -> Any:
    """The function under ``classmethod``/``staticmethod``/decorators, or None."""
    if isinstance(value, classmethod | staticmethod):
        value = value.__func__
    value = inspect.unwrap(value)
    return value if inspect.isfunction(value) else None


def hand_written_init(cls: type) -> bool:
    """Whether ``cls`` defines its own ``__init__`` in source (not a dataclass's)."""
    init = vars(cls).get("__init__")
    return inspect.isfunction(init) and init.__code__.co_filename != "<string>"


def made_of_fields(cls: type) -> bool:
    """Whether ``cls``'s constructor is generated from its fields (a dataclass's, a
    named tuple's)."""
    return not hand_written_init(cls) and (
        dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    )


def documented_classes(cls: type) -> bool:
    """Classes whose methods and constructor are the user's to call."""
    return not (
        issubclass(cls, BaseException | enum.Enum)
        or Protocol in cls.__mro__[1:2]
        or getattr(cls, "_is_protocol", False)
    )


# (qualified name, what the signature is read from, docstring, whether an Attributes
# section documents the parameters too: a constructor made of fields)
Entry = tuple[str, Callable[..., Any], str | None, bool]


def public_callables() -> Iterator[Entry]:
    """The functions, methods and constructors of the surface, as ``Entry`` values."""
    seen: set[int] = set()
    for module_name in reference_modules():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if id(value) in seen:
                continue
            seen.add(id(value))
            where = f"{module_name}.{name}"
            if inspect.isclass(value):
                if documented_classes(value):
                    yield from class_entries(where, value)
            elif (function := unwrapped(value)) is not None:
                yield where, function, inspect.getdoc(value), False


def class_entries(where: str, cls: type) -> Iterator[Entry]:
    if hand_written_init(cls):
        yield where, vars(cls)["__init__"], inspect.getdoc(cls), False
    elif made_of_fields(cls):
        yield where, cls, inspect.getdoc(cls), True
    for name, member in vars(cls).items():
        if name.startswith("_") or (function := unwrapped(member)) is None:
            continue
        yield f"{where}.{name}", function, inspect.getdoc(getattr(cls, name)), False


def parameters(function: Callable[..., Any]) -> list[str]:
    """The names a caller passes, in signature order (``self``/``cls`` left out)."""
    names = list(inspect.signature(function).parameters)
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def documented(doc: str, style: str, fields: bool) -> list[str] | None:
    """The names of the docstring's parameter sections, and with ``fields`` of its
    attribute sections too (None: it has none)."""
    kinds = {griffe.DocstringSectionKind.parameters}
    if fields:
        kinds.add(griffe.DocstringSectionKind.attributes)
    sections = griffe.Docstring(doc, parser=style).parse(warnings=False)
    found = [s for s in sections if s.kind in kinds]
    if not found:
        return None
    return [item.name.lstrip("*") for section in found for item in section.value]


def problems(entries: list[Entry], style: str) -> list[str]:
    out = []
    for where, function, doc, fields in entries:
        wanted = parameters(function)
        if not wanted:
            continue
        names = documented(doc or "", style, fields)
        if names is None:
            section = "Args or Attributes" if fields else "Args"
            out.append(f"{where}: no {section} section for {wanted}")
            continue
        missing = [p for p in wanted if p not in names]
        unknown = [n for n in names if n not in wanted]
        repeated = sorted({n for n in names if names.count(n) > 1})
        for label, which in (("missing", missing), ("not a parameter", unknown)):
            if which:
                out.append(f"{where}: {label}: {which}")
        if repeated:
            out.append(f"{where}: documented twice: {repeated}")
    return out


def test_the_site_declares_google_docstrings() -> None:
    assert docstring_style() == "google"


def test_the_walk_reaches_the_whole_reference() -> None:
    """The walk is not vacuous: it sees the functions and methods a user calls first."""
    names = {where for where, *_ in public_callables()}
    assert {"chunkgraph.apply", "chunkgraph.Graph.add", "chunkgraph.Volume.read"} <= names
    assert {"chunkgraph.Context", "chunkgraph.ApplyReport", "chunkgraph.volume.Level"} <= names
    assert {"chunkgraph.volume.create", "chunkgraph.Box", "chunkgraph.jobs.METHODS"} - names == {
        "chunkgraph.jobs.METHODS"
    }
    assert len(names) > 100


def test_every_public_parameter_is_documented() -> None:
    found = problems(list(public_callables()), docstring_style())
    assert not found, "\n".join(found)


def spelled(*lines: str) -> str:
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (spelled("Adds.", "", "Args:", "    a: one.", "    b: two."), []),
        (spelled("Adds ``a`` and ``b``."), ["f: no Args section for ['a', 'b']"]),
        (spelled("Adds.", "", "Args:", "    a: one."), ["f: missing: ['b']"]),
        (
            spelled("Adds.", "", "Args:", "    a: one.", "    b: two.", "    c: three."),
            ["f: not a parameter: ['c']"],
        ),
    ],
)
def test_a_missing_or_unknown_parameter_is_reported(doc: str, expected: list[str]) -> None:
    """The check can fail: an undocumented parameter, or one that is not there."""

    def f(a: int, b: int) -> int:
        return a + b

    assert problems([("f", f, doc, False)], "google") == expected


def test_star_parameters_and_constructors_count() -> None:
    class Pool:
        """A pool.

        Args:
            workers: how many.
        """

        def __init__(self, workers: int, *more: int, **options: int) -> None:
            self.workers = workers

    assert hand_written_init(Pool)
    entries = list(class_entries("Pool", Pool))
    assert problems(entries, "google") == ["Pool: missing: ['more', 'options']"]

    @dataclasses.dataclass
    class Point:
        """A point.

        Attributes:
            x: across.
        """

        x: int
        y: int

    assert not hand_written_init(Point) and made_of_fields(Point)
    assert problems(list(class_entries("Point", Point)), "google") == ["Point: missing: ['y']"]
    # an Attributes section documents fields, never a function's parameters
    assert problems([("f", Point.__init__, Point.__doc__, False)], "google") == [
        "f: no Args section for ['x', 'y']"
    ]
