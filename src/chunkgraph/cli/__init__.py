"""The ``chunkgraph`` command line and its demos (``chunkgraph demo``)."""

from chunkgraph.cli._main import main

__all__ = ["main"]
