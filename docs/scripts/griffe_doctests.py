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

    >>> print(fence_doctests("Adds.\\n\\n>>> 1 + 1\\n2\\n\\nDone."))
    Adds.
    <BLANKLINE>
    ```pycon
    >>> 1 + 1
    2
    ```
    <BLANKLINE>
    Done.
    """
    out: list[str] = []
    inside = False
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        starts = line.lstrip().startswith(">>>")
        if not fenced and starts and not inside:
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences the doctest examples of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
