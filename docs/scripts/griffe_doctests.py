"""A griffe extension for the API reference: doctests render as code.

The docstrings of chunkgraph carry doctest examples (``>>>`` lines and their
output) without a Markdown fence around them; Markdown would read them as
nested quotes, and an output such as ``[(2, 3), (2, 2)]`` as a link. This wraps
every run of doctest lines, with the output lines that follow, in a ``pycon``
fence, and leaves the docstrings in the source as they are.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with each doctest example (prompts and output) inside a fence.

    >>> fence_doctests("Adds.\\n\\n    >>> 1 + 1\\n    2\\n\\nDone.").split("\\n")
    ['Adds.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'Done.']
    """
    out: list[str] = []
    inside = False
    fenced = False
    indent = ""
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        starts = line.lstrip().startswith(">>>")
        if not fenced and starts and not inside:
            # An indented example would read as an indented code block, without prompts
            # that the pycon lexer recognises: the fence takes its lines dedented.
            indent = line[: len(line) - len(line.lstrip())]
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line.removeprefix(indent) if inside else line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences the doctest examples of every docstring in a package griffe loads."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        fence_all(pkg)


def fence_all(obj: griffe.Object) -> None:
    """Fence the docstrings of ``obj`` and of every member defined under it (not aliases)."""
    if obj.docstring is not None and ">>>" in obj.docstring.value:
        obj.docstring.value = fence_doctests(obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            fence_all(member)  # type: ignore[arg-type]
