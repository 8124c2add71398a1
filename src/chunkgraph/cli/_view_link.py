"""What ``chunkgraph run``, ``downsample`` and ``transfer`` say at the end of a run so that
a person can look at its inputs and outputs: the ``chunkgraph view`` command line
(printed, and kept in ``report.json`` by ``run --report``), and with ``--view``, the
viewer itself, served until Ctrl-C (``serve``, which ``chunkgraph view`` runs too).

The paths are the ones the user gave (made absolute where they were relative to a spec
file), not ``Volume.path``: a level of a precomputed or OME-Zarr volume reopens from its
root, and the command must work as printed.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from chunkgraph.viewer import view, view_command
from chunkgraph.volume import relative_place


def add_view_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--view",
        action="store_true",
        help="at the end, show the inputs and outputs in Neuroglancer (Ctrl-C stops it)",
    )


def spec_paths(resolved: Any) -> list[str]:
    """A run spec's input paths, then its output's, as the run opened them."""
    spec = resolved.spec
    base = Path(resolved.file).resolve().parent
    given = [spec.input] if spec.input is not None else list((spec.inputs or {}).values())
    return [relative_place(base, p) for p in given] + [resolved.output.path]


def say_view(args: argparse.Namespace, paths: Sequence[str], out: TextIO) -> None:
    """Print the view command; with ``--view``, serve the viewer until Ctrl-C."""
    if getattr(args, "dry_run", False):
        return  # nothing was written: there is no output to look at
    print(f"view: {view_command(paths)}", file=out, flush=True)
    if getattr(args, "view", False):
        serve(paths, out=out)


def serve(paths: Sequence[str], *, out: TextIO = sys.stdout, **options: Any) -> None:
    """Serve ``paths`` (``view``'s ``options``), print the URL, and wait for Ctrl-C."""
    shown = view(*paths, **{"open_browser": True, **options})
    try:
        # The URL inside the try: a Ctrl-C that comes as soon as it is read lands in the
        # print's last step (the handler runs when the call returns), not before the try.
        print(shown.url, file=out, flush=True)
        threading.Event().wait()  # the server runs in its own thread until Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        shown.stop()
