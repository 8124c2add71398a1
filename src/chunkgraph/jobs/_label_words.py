"""label's refusals, in the words of whoever called it.

A refusal names parameters (``give threshold=T``, ``pass resume=True``); called from
Python they are keywords, from the command line options (``--threshold T``,
``--resume``). So a refusal is written once, as a template whose ``{threshold}``,
``{resume}``, ... are words looked up in a table: ``PYTHON_WORDS`` here, and the
command line's table of its options (``cli/_cmd_label``), which
``LabelRefusal.spelled`` takes. The values a refusal shows (paths, dtypes, shapes)
are filled in as they are, never parsed again as a template.

>>> err = LabelRefusal("give {threshold} (got {given})", field="threshold", given="{x}")
>>> str(err), err.spelled({"threshold": "--threshold T"})
('give threshold=T (got {x})', 'give --threshold T (got {x})')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chunkgraph._errors import ConfigError

# Each word a refusal uses, as a Python caller writes it. A table for another face maps
# the same keys (the parameters' names, and ``remove``: how a volume is removed).
PYTHON_WORDS: Mapping[str, str] = {
    "threshold": "threshold=T",
    "connectivity": "connectivity",
    "dtype": "dtype",
    "chunk": "chunk",
    "memory_limit": "memory_limit",
    "resume": "resume=True",
    "remove": "remove it first (volume.remove)",
}


class LabelRefusal(ConfigError):
    """A ``ConfigError`` of ``label`` whose text is ``template`` with ``PYTHON_WORDS``
    (``str``), or another face's words (``spelled``); ``field`` names the parameter."""

    def __init__(self, template: str, *, field: str, **values: Any) -> None:
        self.template = template
        self.values = values
        super().__init__(self.spelled({}), field=field)

    def spelled(self, words: Mapping[str, str]) -> str:
        """The refusal with ``words`` (keys of ``PYTHON_WORDS``; those missing: Python's)."""
        return self.template.format_map({**PYTHON_WORDS, **words, **self.values})

    def __reduce__(self) -> tuple[Any, ...]:
        # Across a pickle (a worker's error) the text as Python spells it is enough.
        return (ConfigError, (str(self),), {"field": self.field})
