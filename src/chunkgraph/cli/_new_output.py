"""The output a ``chunkgraph run`` creates, and taking it back when the run writes nothing.

"Exit 2 means nothing was written" holds only if a run that fails before its first
write leaves no new ``out.zarr`` behind: a later run (or a person) would take the
empty array for a result. So the run notes what it created::

    create_output ──> NewOutput(path, existed, stamp)      stamp: zarr.json's inode
                                                            and modification time
    apply fails before its first write ──> NewOutput.take_back()

``take_back`` removes only what this run made, and only while it is as made:

* an output found made by another run (two runs at once over one new output) is
  not this run's: ``create_output`` says so and nothing is taken back;
* ``zarr.json`` must be this run's own (same stamp) and alone in the directory: a
  chunk, an edge lock or anything else there means something has been written,
  and the output stays;
* a directory that existed before (an empty one given as the output) stays; only
  ``zarr.json`` goes.

Which failures come before the first write is the caller's to say (apply's
``ConfigError`` and a failed probe do).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

METADATA = "zarr.json"


@dataclass(frozen=True)
class NewOutput:
    """An output this run created at ``path``; ``existed``: its directory was there
    before (empty); ``stamp``: ``(inode, mtime_ns)`` of the ``zarr.json`` it wrote."""

    path: Path
    existed: bool
    stamp: tuple[int, int]

    @classmethod
    def noted(cls, path: str | os.PathLike[str], existed: bool) -> NewOutput | None:
        """What was just created at ``path`` (None: no Zarr metadata file there to note,
        a backend that keeps none on this disk)."""
        try:
            meta = os.stat(Path(path) / METADATA)
        except OSError:
            return None
        return cls(Path(path), existed, (meta.st_ino, meta.st_mtime_ns))

    def take_back(self) -> bool:
        """Remove the output if it is still only what this run created; True if removed."""
        meta = self.path / METADATA
        try:
            now = os.stat(meta)
            entries = os.listdir(self.path)
        except OSError:
            return False
        if (now.st_ino, now.st_mtime_ns) != self.stamp or entries != [METADATA]:
            return False
        meta.unlink()
        if not self.existed:
            with contextlib.suppress(OSError):
                self.path.rmdir()
        return True
