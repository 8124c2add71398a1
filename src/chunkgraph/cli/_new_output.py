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

``exists: overwrite`` replaces a volume that was there. It is not deleted up front:
``set_aside`` renames it beside itself (one rename, same directory), ``take_back``
renames it back when the new output is taken back, and ``settle`` deletes it once
the new output stays (the run wrote, or finished). So a run that fails or is
interrupted before its first write leaves the user's old volume as it was::

    set_aside(out.zarr) ──> .out.zarr.replaced-<id> ──┬─ nothing written: renamed back
                                                     └─ written / finished: deleted

Which failures come before the first write is the caller's to say (apply's
``ConfigError``, a failed probe and a Ctrl-C during it do).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

METADATA = "zarr.json"


def set_aside(path: str | os.PathLike[str]) -> Path | None:
    """Rename the volume at ``path`` beside itself, to be replaced; where it went (None:
    nothing there, or not a directory of this file system, which is then removed)."""
    where = Path(path)
    if not where.is_dir():
        from chunkgraph import volume

        volume.remove(path)
        return None
    aside = where.with_name(f".{where.name}.replaced-{uuid.uuid4().hex[:8]}")
    os.rename(where, aside)
    return aside


@dataclass(frozen=True)
class NewOutput:
    """An output this run created at ``path``; ``existed``: its directory was there
    before (empty); ``stamp``: ``(inode, mtime_ns)`` of the ``zarr.json`` it wrote;
    ``replaced``: where the volume it replaces was set aside (``set_aside``)."""

    path: Path
    existed: bool
    stamp: tuple[int, int]
    replaced: Path | None = None

    @classmethod
    def noted(
        cls, path: str | os.PathLike[str], existed: bool, replaced: Path | None = None
    ) -> NewOutput | None:
        """What was just created at ``path`` (None: no Zarr metadata file there to note,
        a backend that keeps none on this disk)."""
        try:
            meta = os.stat(Path(path) / METADATA)
        except OSError:
            return None
        return cls(Path(path), existed, (meta.st_ino, meta.st_mtime_ns), replaced)

    def settle(self) -> None:
        """The new output stays: delete the volume it replaced (if it was not put back)."""
        if self.replaced is not None and self.replaced.exists():
            shutil.rmtree(self.replaced, ignore_errors=True)

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
        if not self.existed or self.replaced is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()
        if self.replaced is not None:
            os.rename(self.replaced, self.path)  # the user's volume, as it was
        return True
