"""Look at volumes in Neuroglancer, served from this process.

    >>> from chunkgraph.viewer import view_command
    >>> view_command(["raw.zarr", "labels.zarr"])
    'chunkgraph view raw.zarr labels.zarr'

``view(*volumes)`` starts a Neuroglancer viewer on 127.0.0.1 whose layers read through
chunkgraph's own volumes, so every store and format chunkgraph opens can be seen,
memory volumes included, and credentials stay in this process. ``_layers.py``: a
volume as the viewer's data (read lazily, a chunk when the viewer asks for it; image or
segmentation from the dtype; aligned by offset and resolution; contrast).
``_pyramid.py``: zoomed out, chunks from the volume's stored pyramid. ``_serve.py``:
the server's lifecycle. ``_command.py``: the command line that runs print. Viewing
needs the ``neuroglancer`` package (``pip install 'chunkgraph[view]'``); printing a
command does not.
"""

from chunkgraph.viewer._command import view_command
from chunkgraph.viewer._serve import View, view

__all__ = ["View", "view", "view_command"]
