"""``FlowDir``: the one owner of a flow's state, behind methods rather than paths.

Policy. The lifecycle (run's ``_flow_run``) and the deferred reduction ask a
``FlowDir`` to lock the flow, read and write its completion record, its
``flow.json`` and its done markers, to name its layers folder, to mark an
in-place dst and to discard what a finished run leaves; they never build a
path of the flow's state themselves. The layout is ``_layout``'s; the lock
``_lock``'s (a ``flock``, or a lease in an object store); what is recorded
``_markers``' and ``_info``'s. So the same interface is given over either store
without touching the flow.

State. A ``FlowDir`` is a value: ``root`` and ``flow_id``; it creates nothing
until a method is called. ``held`` makes ``root`` (and removes it again when
the call made it and left it empty) and holds the lock for as long as it is
entered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkgraph._errors import ConfigError, CorruptChunkError
from chunkgraph._util import write_problem
from chunkgraph.flow.state._info import (
    mark_in_place,
    read_flow_info,
    unmark_in_place,
    write_failure,
    write_flow_info,
)
from chunkgraph.flow.state._layout import FAILED_NAME, LOCK_SUFFIX, SCRATCH_NAME, layers_place
from chunkgraph.flow.state._lock import flow_lock, hold
from chunkgraph.flow.state._markers import (
    CompletionRecord,
    MarkerStore,
    check_fence,
    discard_flow,
    discard_flow_dir,
    fenced,
)
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import StateStore, state_store
from chunkgraph.flow.state._where import note_state
from chunkgraph.volume import Volume, is_object_url
from chunkgraph.volume._object_store import StoreOptions


@dataclass(frozen=True)
class FlowDir:
    """The state of flow ``flow_id`` under ``root`` (see the module's layout): a folder,
    or an object-store prefix (``_store``; its lock is then a lease, ``_lease``), reached
    with the root's options (dst's storage_options: its endpoint, say; secrets are never
    pickled, ``StoreOptions``)."""

    root: StateRoot
    flow_id: str
    # Where this run puts the layers (``layers_place``); None: the default for ``root``.
    layers_at: StateRoot | None = None

    @classmethod
    def of(cls, flow_dir: StateRoot) -> FlowDir:
        """The ``FlowDir`` of a flow directory ``<root>/<flow id>`` (a report's
        ``intermediates``)."""
        return cls(flow_dir.parent, flow_dir.name)

    @property
    def options(self) -> StoreOptions | None:
        """How the root is reached (an object store's settings); None: as ``reach`` said."""
        return self.root.options

    @property
    def store(self) -> StateStore:
        return state_store(self.root)

    @property
    def folder(self) -> StateRoot:
        """The flow's own folder (markers, ``flow.json``), reached as the root is."""
        return self.root.join(self.flow_id)

    @property
    def own_store(self) -> StateStore:
        """The store rooted at the flow's own folder (``flow.json``, markers)."""
        return state_store(self.folder)

    @property
    def remote(self) -> bool:
        """Whether the state is in an object store rather than on a disk."""
        return self.root.remote

    @property
    def location(self) -> str:
        """The flow's own folder (markers, ``flow.json``): a path or a URL."""
        return str(self.folder)

    @property
    def layers_dir(self) -> StateRoot:
        """Where the checkerboard's layers are (``layers_place``): a folder or a URL."""
        if self.layers_at is not None:
            return self.layers_at
        return layers_place(self.root, self.flow_id, given=False, remote_workers=False)

    @property
    def lock_key(self) -> str:
        return f"{self.flow_id}{LOCK_SUFFIX}"

    def exists(self) -> bool:
        return self.store.exists(self.flow_id)

    def check_writable(self, dst: Volume) -> None:
        """A ConfigError naming the path when the flow's state folder (or where it will be
        made) or an on-disk dst cannot be written: before anything runs, dry runs too.

        A run needs both: it locks the flow and records its progress under ``root``, and
        writes dst's chunks. Found later, this would be a bare ``OSError`` from a mkdir.
        An object store answers for itself at the first write (its error names the key).
        """
        if dst.location.local_dir is not None:
            problem = write_problem(dst.path)
            if problem:
                raise ConfigError(
                    f"dst {dst.path!r} cannot be written: {problem}, so nothing was run. Is it "
                    "on a read-only mount, or without write permission? Make it writable, or "
                    "write to a dst on a writable file system",
                    field="dst",
                )
        local = self.root.local
        if local is None:
            return
        problem = write_problem(local)
        if problem:
            raise ConfigError(
                f"intermediates {str(local)!r} cannot be written: {problem}. The flow keeps "
                "its lock, done markers and temporary layers there, so nothing was run. Is it "
                "on a read-only mount, or without write permission? Give intermediates= (a "
                "spec's intermediates:) a directory on a writable file system",
                field="intermediates",
            )

    @contextlib.contextmanager
    def held(self, wait: float) -> Iterator[None]:
        """Hold the flow's lock (``FlowLockedError`` after ``wait`` seconds), making
        ``root`` if needed; a root this made is removed again if left empty (a completion
        record is worth keeping). A lease that is lost meanwhile stops marker writes
        (``_markers.fenced``)."""
        local = self.root.local
        if local is None:
            with hold(self.store, self.lock_key, wait) as fence, fenced(self.location, fence):
                try:
                    yield
                finally:
                    self.tidy_scratch()  # under the lock: no run of this flow is making them
            return
        made_root = not local.exists()
        local.mkdir(parents=True, exist_ok=True)
        try:
            with flow_lock(local / self.lock_key, wait):
                yield
        finally:
            if made_root:
                with contextlib.suppress(OSError):
                    local.rmdir()  # only when empty

    @property
    def record(self) -> CompletionRecord:
        return CompletionRecord(self.root, self.flow_id)

    def markers(self) -> MarkerStore:
        """The done markers (their folders made if missing)."""
        return MarkerStore(self.folder)

    def read_info(self) -> dict[str, Any]:
        return read_flow_info(self.own_store)

    def write_info(self, **fields: Any) -> None:
        write_flow_info(self.own_store, **fields)

    def record_failure(self, error: str) -> None:
        """Record that this run failed with ``error`` (one line) for ``status``; refused
        (``FlowLockedError``) when this run lost its lock."""
        check_fence(self.location)
        write_failure(self.own_store, error)

    def clear_failure(self) -> None:
        """A run starts: the last run's failure is no longer what the flow is doing."""
        self.own_store.delete(FAILED_NAME)

    def discard(self) -> None:
        """Delete the flow's folder (``_markers.discard_flow``), and its layers where they
        live apart from it (local scratch)."""
        check_fence(self.location)  # a run that lost its lease deletes nothing of the next's
        discard_flow(self.root, self.flow_id)
        layers = self.layers_dir.local
        if self.root.remote and layers is not None:
            discard_flow_dir(layers.parent)  # scratch: <digest>/<flow id>/layers
            self.tidy_scratch()

    def tidy_scratch(self) -> None:
        """Remove the folders of this machine's scratch that held the flow's layers
        (``scratch_layers``: ``chunkgraph-layers/<digest>/<flow id>/layers``), innermost
        first, each only while empty: a finished flow leaves none behind, a failed one
        only the layers a resume reads."""
        layers = self.layers_dir.local
        if not self.root.remote or layers is None:
            return
        folders = [layers, *layers.parents[:3]]  # up to chunkgraph-layers itself
        if folders[-1].name != SCRATCH_NAME:
            return  # layers placed elsewhere: not this machine's scratch
        for folder in folders:
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                return  # not empty: in use (this flow's layers, or another flow's)

    def note_beside(self, dst: Volume) -> None:
        """Tell ``chunkgraph status DST`` where this state is (a dst on a disk or in an
        object store)."""
        if dst.location.local_dir is not None or is_object_url(dst.path):
            note_state(dst.path, self.root, self.flow_id)

    def mark_in_place(self, dst: Volume) -> None:
        mark_in_place(dst, self.root, self.flow_id)

    def unmark_in_place(self, dst: Volume) -> None:
        unmark_in_place(dst)

    def written_for_other(self, stamp: str | None) -> bool:
        """True when the record or markers were written for a destination that has since
        been deleted and created again (see ``Volume.stamp``)."""
        if stamp is None:
            return False
        finished = self.record.read()
        before = finished.get("dst") if finished else self.read_info().get("dst")
        return before is not None and before != stamp

    def layer_corrupt(self, error: BaseException) -> bool:
        """Whether ``error`` (a group of task errors, or one) is a corrupt chunk of one of
        the flow's own layers (``_reduce.damaged_layer_error``)."""
        seen: list[BaseException] = [error]
        layers = f"{self.layers_dir.resolved()}/"
        while seen:
            e = seen.pop()
            volume = e.volume if isinstance(e, CorruptChunkError) else ""
            if volume and not is_object_url(volume):
                volume = str(Path(volume).resolve())
            if volume and f"{volume}/".startswith(layers):
                return True
            if isinstance(e, BaseExceptionGroup):
                seen.extend(e.exceptions)
            if e.__cause__ is not None:
                seen.append(e.__cause__)
        return False
