"""N-d integer geometry: ``Box`` and its chunking.

Pure values and arithmetic; no I/O. Everything above (volumes, the apply flow)
speaks in boxes of global voxel coordinates.
"""

from chunkgraph.geometry._box import Box

__all__ = ["Box"]
