"""Passes over a Graph that decide how it runs: ranks and the priority order."""

from chunkgraph.planning._order import order
from chunkgraph.planning._rank import bottom_level, path_length, top_level

__all__ = ["bottom_level", "order", "path_length", "top_level"]
