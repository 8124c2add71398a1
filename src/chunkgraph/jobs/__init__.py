"""Jobs built on the apply flow: ``downsample`` (pyramid levels), ``transfer`` (copy,
rechunk, convert), each an ``apply`` with a fixed function, and ``label`` (connected
components: two flows and a reduction between them, ``_label``).

Policy. A job uses only public names: ``chunkgraph.flow``'s (``apply``, the report,
the claim on a region of dst), ``chunkgraph.flow.plan``'s (the cast rules, the memory
budget) and ``chunkgraph.volume``'s; never the flow's engine or its state (the
import-linter contracts in pyproject.toml check it). ``_block_reduce`` holds the
reductions downsample applies, ``_run_options`` the run options a job takes (``run=``),
``_dst_mark`` the mark a job writes into what it makes (a resume continues only its own),
``_words`` the refusals written once and spelled in the caller's words.
``chunkgraph.downsample`` and ``chunkgraph.transfer`` are these functions (and
``chunkgraph.flow.downsample`` / ``.transfer``, looked up here on first use).
"""

from __future__ import annotations

from chunkgraph.jobs._block_reduce import METHODS
from chunkgraph.jobs._label import LabelReport, label
from chunkgraph.jobs._pyramid import DownsampleReport, downsample
from chunkgraph.jobs._transfer import transfer

__all__ = ["METHODS", "DownsampleReport", "LabelReport", "downsample", "label", "transfer"]
