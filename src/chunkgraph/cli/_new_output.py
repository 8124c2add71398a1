"""The output a ``chunkgraph run`` creates, and taking it back when the run writes nothing.

"Exit 2 means nothing was written" holds only if a run that fails before its first
write leaves no new ``out.zarr`` behind: a later run (or a person) would take the
empty array for a result. So the run notes what it created::

    create_output ──> NewOutput(path, existed, stamp)      stamp: Volume.stamp (zarr.json's
                                                            inode and mtime on a disk; the
                                                            creation token in a bucket)
    apply fails before its first write ──> NewOutput.take_back()

``take_back`` removes only what this run made, and only while it is as made:

* an output found made by another run (two runs at once over one new output) is
  not this run's: ``create_output`` says so and nothing is taken back;
* ``zarr.json`` must be this run's own (same stamp) and alone in the directory (or
  under the URL's prefix): a chunk, an edge lock or anything else there means
  something has been written, and the output stays;
* a flow into it with finished work (done markers written for this very output) has
  written too, only not to dst yet: with blending a top task's result goes to the
  flow's layers, and the reductions write dst later. The output stays, so that
  ``--resume`` continues that flow (a new output would start it over);
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
from typing import TYPE_CHECKING

import obstore

from chunkgraph import volume
from chunkgraph.flow.state import flows_for, read_flow_info, state_store
from chunkgraph.volume._object_store import StoreOptions, is_object_url, object_store

if TYPE_CHECKING:
    from chunkgraph.volume import Volume

METADATA = "zarr.json"


def set_aside(path: str | os.PathLike[str]) -> Path | None:
    """Rename the volume at ``path`` beside itself, to be replaced; where it went (None:
    nothing there, or not a directory of this file system, which is then removed)."""
    where = Path(path)
    if not where.is_dir():
        volume.remove(path)
        return None
    aside = where.with_name(f".{where.name}.replaced-{uuid.uuid4().hex[:8]}")
    os.rename(where, aside)
    return aside


@dataclass(frozen=True)
class NewOutput:
    """An output this run created at ``path`` (a directory or a URL); ``existed``: its
    directory was there before (empty); ``stamp``: the created volume's ``Volume.stamp``;
    ``replaced``: where the volume it replaces was set aside (``set_aside``)."""

    path: str
    existed: bool
    stamp: str
    replaced: Path | None = None
    storage_options: StoreOptions | None = None

    @classmethod
    def noted(cls, made: Volume, existed: bool, replaced: Path | None = None) -> NewOutput | None:
        """What was just created (None: nothing tells it from another volume later made at
        the same place: no stamp)."""
        stamp = made.stamp()
        if stamp is None:
            return None
        return cls(made.path, existed, stamp, replaced, made.storage_options)

    def settle(self) -> None:
        """The new output stays: delete the volume it replaced (if it was not put back)."""
        if self.replaced is not None and self.replaced.exists():
            shutil.rmtree(self.replaced, ignore_errors=True)

    def take_back(self) -> bool:
        """Remove the output if it is still only what this run created; True if removed."""
        if is_object_url(self.path):
            return self._take_back_from_bucket()
        where = Path(self.path)
        try:
            entries = os.listdir(where)
        except OSError:
            return False
        if entries != [METADATA] or self._stamp_now() != self.stamp or self._flow_worked():
            return False
        (where / METADATA).unlink()
        if not self.existed or self.replaced is not None:
            with contextlib.suppress(OSError):
                where.rmdir()
        if self.replaced is not None:
            os.rename(self.replaced, where)  # the user's volume, as it was
        return True

    def _flow_worked(self) -> bool:
        """Whether a flow has finished work for this output (see the module doc)."""
        try:
            return any(
                (state.top_done or state.reductions_done)
                and read_flow_info(state_store(state.flow_dir)).get("dst") == self.stamp
                for state in flows_for(self.path, None, sizes=False)
            )
        except Exception:  # its state cannot be read: keep the output, as unknown work
            return True

    def _stamp_now(self) -> str | None:
        try:
            return volume.open(self.path, storage_options=self.storage_options).stamp()
        except Exception:  # gone, or no longer a volume: not ours to remove
            return None

    def _take_back_from_bucket(self) -> bool:
        store = object_store(self.path, self.storage_options)
        try:
            keys = [m["path"] for m in obstore.list(store).collect()]
        except Exception:  # the store does not answer: leave it, as on a disk
            return False
        if keys != [METADATA] or self._stamp_now() != self.stamp or self._flow_worked():
            return False
        obstore.delete(store, METADATA)
        return True
