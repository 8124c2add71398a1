"""The ``chunkgraph view`` command line that shows some volumes: what runs print and
``report.json`` keeps, so that a person can look at a run's inputs and outputs. It
needs no viewer to be written (no Neuroglancer import)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from chunkgraph.geometry import Box


def view_command(
    paths: Sequence[str], bbox: Box | None = None, *, program: str = "chunkgraph"
) -> str:
    """The command line that shows ``paths``, as runs print it.

    Args:
        paths: The volumes' paths or URLs, as ``chunkgraph view`` takes them.
        bbox: A region to outline and centre on (``--bbox``); None: none.
        program: How the ``chunkgraph`` command is typed here.

    >>> view_command(["in.zarr", "out dir/x.zarr"])
    "chunkgraph view in.zarr 'out dir/x.zarr'"
    """
    words = [program, "view", *paths]
    if bbox is not None:
        words += ["--bbox", ",".join(map(str, bbox.start)) + ":" + ",".join(map(str, bbox.stop))]
    return shlex.join(words)
