"""The jobs' refusals, in the words of whoever called them.

A refusal names parameters (``give threshold=T``, ``pass resume=True``); called from
Python they are keywords, from the command line options (``--threshold T``,
``--resume``). So a refusal is written once, as a template whose ``{threshold}``,
``{resume}``, ... are words looked up in a table: ``PYTHON_WORDS`` here, and the
command line's one table of its options (``cli/_flow_command``), which
``JobRefusal.spelled`` takes. The values a refusal shows (paths, dtypes, shapes)
are filled in as they are, never parsed again as a template.

A refusal may show settings too (``Settings``: "chunks 8x8x8 and dtype uint16"): Python
words them as the job does, another face as it gives them (the command line: ``--chunks
8,8,8 --dtype uint16``), with the ``setting`` that ``spelled`` takes.

The flow's refusal for the memory limit is the flow's text; ``memory_refusal`` makes it
a ``JobRefusal`` whose ``memory_limit`` is a word, followed by the job's own advice.

>>> err = JobRefusal("give {threshold} (got {given})", field="threshold", given="{x}")
>>> str(err), err.spelled({"threshold": "--threshold T"})
('give threshold=T (got {x})', 'give --threshold T (got {x})')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from chunkgraph._errors import ConfigError
from chunkgraph.flow.plan import job_memory_refusal

# Each word a refusal uses, as a Python caller writes it. A table for another face maps
# the same keys (the parameters' names; ``remove``: how a volume is removed;
# ``dst_template``: where downsample's levels go).
PYTHON_WORDS: Mapping[str, str] = {
    "threshold": "threshold=T",
    "connectivity": "connectivity",
    "dtype": "dtype",
    "chunk": "chunk",
    "chunks": "chunks=",
    "cast": "cast",
    "dst_template": "dst template (dst=)",
    "memory_limit": "memory_limit",
    "resume": "resume=True",
    "remove": "remove it first (volume.remove)",
    "zarr3": "format='zarr3'",
}


# How a face shows one setting: (its name, its value as a mark keeps it) -> text.
Shown = Callable[[str, Any], str]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Settings a refusal shows, joined by "and": in Python's words ``python`` (the job's
    own: "chunks 8x8x8", "method 'max'"), or another face's (``JobRefusal.spelled``).

    Attributes:
        pairs: (name, value) of each setting, in order.
        python: How the job names one setting to a Python caller.
    """

    pairs: tuple[tuple[str, Any], ...]
    python: Shown

    def shown(self, setting: Shown | None = None) -> str:
        """The settings, each by ``setting`` (None: ``python``)."""
        each = setting or self.python
        return " and ".join(each(name, value) for name, value in self.pairs)


class JobRefusal(ConfigError):
    """A ``ConfigError`` of a job whose text is ``template`` with ``PYTHON_WORDS``
    (``str``), or another face's words (``spelled``); ``field`` names the parameter."""

    def __init__(self, template: str, *, field: str, **values: Any) -> None:
        self.template = template
        self.values = values
        super().__init__(self.spelled({}), field=field)

    def spelled(self, words: Mapping[str, str], setting: Shown | None = None) -> str:
        """The refusal with ``words`` (keys of ``PYTHON_WORDS``; those missing: Python's),
        and its ``Settings`` each shown by ``setting`` (None: as Python names them)."""
        values = {
            k: v.shown(setting) if isinstance(v, Settings) else v for k, v in self.values.items()
        }
        return self.template.format_map({**PYTHON_WORDS, **words, **values})

    def __reduce__(self) -> tuple[Any, ...]:
        # Across a pickle (a worker's error) the text as Python spells it is enough.
        return (ConfigError, (str(self),), {"field": self.field})


def memory_refusal(err: ConfigError, advice: str) -> ConfigError:
    """``err``, the flow's refusal for the memory limit, as a job that takes no chunk sizes
    says it (``job_memory_refusal``): a ``JobRefusal`` whose ``memory_limit`` is a word,
    then ``advice`` (a template of the same words); any other error as it is."""
    refused = job_memory_refusal(err, "")
    if refused is err:
        return err
    # The flow's text is made a template: its braces kept, its one parameter a word.
    text = str(refused).replace("{", "{{").replace("}", "}}")
    return JobRefusal(text.replace("memory_limit", "{memory_limit}") + advice, field="memory_limit")
