"""Done markers and the completion record of one apply flow: what ``resume=True`` may skip.

Policy. Every top-level task and every reduction writes its data first and
only then an empty marker file named after its grid key. A marker therefore
proves that the data it stands for is complete on disk; a process killed at
any point (SIGKILL included) leaves at worst a task whose data is partly
written and whose marker is missing, and that task simply runs again and
overwrites the same voxels with the same values.

State (all under ``<intermediates>/<flow_id>/``)::

    markers/top/<key>       top-level task ``key`` wrote its temporary output
    markers/reduce/<key>    reduction ``key`` wrote its dst chunks

and, beside that directory, ``<flow_id>.lock`` while a run holds the flow
(``_lock.flow_lock``) and ``<flow_id>.done`` once a run has finished it
(``CompletionRecord``; the markers and temporaries are gone by then).

A marker holds no bytes, so it is complete as soon as it exists: on a disk it
is created by one ``open`` (``DirStore.touch``: no temporary file and no rename,
which cost up to milliseconds per task on a busy disk), in an object store by
one PUT, atomic by itself (``_store``). A reader sees either no marker or a
complete one. Keys are grid indices joined by ``_``
(``"3_0_12"``), which keeps a directory listing the only query needed: the
driver lists each directory once instead of probing one path per task.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chunkgraph.flow.state._layout import DONE_SUFFIX, MARKERS_NAME
from chunkgraph.flow.state._lock import Fence
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import DirStore, join, state_store

TOP = "top"
REDUCE = "reduce"
_KINDS = (TOP, REDUCE)


def grid_key(index: tuple[int, ...]) -> str:
    """The marker name of a grid index.

    >>> grid_key((3, 0, 12))
    '3_0_12'
    """
    return "_".join(str(int(i)) for i in index)


class MarkerStore:
    """Done markers of the flow whose folder is ``location`` (a path, or a URL in an
    object store: ``_store``); safe from many threads, picklable as its location.

    >>> import tempfile
    >>> store = MarkerStore(StateRoot.of(tempfile.mkdtemp()))
    >>> store.mark_done(TOP, "0_1")
    >>> store.done_keys(TOP), store.done_keys(REDUCE)
    ({'0_1'}, set())
    """

    def __init__(self, location: StateRoot) -> None:
        self.location = str(location)
        self.store = state_store(location)
        for kind in _KINDS:
            self.store.make_folder(self._dir(kind))

    def _dir(self, kind: str) -> str:
        if kind not in _KINDS:
            raise AssertionError(f"unknown marker kind {kind!r}; valid kinds are {_KINDS}")
        return join(MARKERS_NAME, kind)

    def mark_done(self, kind: str, key: str) -> None:
        """Record that ``key`` finished; call only after its data is written. Refused
        (``FlowLockedError``) when this process's run of the flow lost its lock."""
        check_fence(self.location)
        self.store.touch(join(self._dir(kind), key))

    def done_keys(self, kind: str) -> set[str]:
        """Keys of ``kind`` marked done (temporary files of interrupted marks ignored)."""
        return {name for name in self.store.names(self._dir(kind)) if not name.startswith(".")}

    def clear(self, kinds: tuple[str, ...] = _KINDS) -> None:
        """Forget every marker of ``kinds`` (all: a fresh, non-resumed run)."""
        every = set(kinds) == set(_KINDS)
        if every:  # one tree: one listing in a bucket
            self.store.delete_tree(MARKERS_NAME)
        for kind in kinds:
            if not every:
                self.store.delete_tree(self._dir(kind))
            self.store.make_folder(self._dir(kind))


# The lock fence of each flow (by its location) this process holds whose lock can be
# lost (a lease): a marker written after the loss would vouch for work another run may
# be redoing. Process executors' workers have none: the driver checks between tasks.
_FENCES: dict[str, Fence] = {}


def check_fence(location: str) -> None:
    """``FlowLockedError`` when this process's run of the flow at ``location`` lost its
    lock (nothing when it holds none that can be lost)."""
    fence = _FENCES.get(location)
    if fence is not None:
        fence.check()


@contextlib.contextmanager
def fenced(location: str, fence: Fence) -> Iterator[None]:
    """Check ``fence`` before each marker of the flow at ``location`` written meanwhile."""
    _FENCES[location] = fence
    try:
        yield
    finally:
        _FENCES.pop(location, None)


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file renamed into place, so a reader sees
    the old file or the new one, never part of one (``DirStore.write``)."""
    DirStore(Path(path).parent).write(Path(path).name, text.encode())


class CompletionRecord:
    """``<intermediates>/<flow id>.done``: the flow finished; a resumed run has nothing to do.

    A successful run deletes its temporaries and markers, so without this
    small record ``resume=True`` after success would redo everything. It is
    removed when a run of the flow starts (until that run completes, the flow
    is not finished) and written, atomically, once it has.
    """

    def __init__(self, root: StateRoot, flow_id: str) -> None:
        self.store = state_store(root)
        self.key = f"{flow_id}{DONE_SUFFIX}"

    @property
    def where(self) -> str:
        return self.store.where(self.key)

    def read(self) -> dict[str, Any] | None:
        data = self.store.read(self.key)
        try:
            record = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def write(self, report: Any, dst: str | None = None, **extra: Any) -> None:
        """Record ``report`` as the flow's completion (into ``dst``'s stamp); ``extra``:
        more fields (JSON), e.g. what a reduced deferred flow was reduced into."""
        check_fence(self.store.where(self.key[: -len(DONE_SUFFIX)]))
        record = {
            "flow_id": report.flow_id,
            "dst": dst,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "bbox": [list(report.bbox.start), list(report.bbox.stop)],
            "tasks_per_level": list(report.tasks_per_level),
            "reductions": report.reductions + report.reductions_skipped,
            "bytes_written": report.bytes_written,
            **extra,
        }
        self.store.write(self.key, json.dumps(record).encode())

    def remove(self) -> None:
        self.store.delete(self.key)


def discard_flow(root: StateRoot, flow_id: str) -> None:
    """Delete flow ``flow_id``'s folder under ``root`` so that no interruption leaves
    part of it looking valid: on a disk, ``discard_flow_dir``; in an object store, where
    nothing renames a prefix at once, the markers go first, then the rest (a kill in
    between leaves layers no marker vouches for, which a resume recomputes)."""
    store = state_store(root)
    if isinstance(store, DirStore):
        discard_flow_dir(store.path(flow_id))
        return
    store.delete_tree(flow_id, first=MARKERS_NAME)  # one listing; the markers' deletes first


def discard_flow_dir(folder: Path) -> None:
    """Delete a flow's directory so that no interruption leaves part of it looking valid.

    Deleting file by file in directory order may remove the layers before the
    markers that vouch for them; a kill in between would leave markers of work
    whose data is gone. So the directory is first renamed away (atomic), and
    the renamed copy, which nothing reads, is deleted; copies that an earlier
    interrupted deletion left behind are deleted too.
    """
    flow_dir = Path(folder)
    if flow_dir.exists():
        tomb = flow_dir.with_name(f".{flow_dir.name}.deleted-{uuid.uuid4().hex[:8]}")
        os.replace(flow_dir, tomb)
    for tomb in flow_dir.parent.glob(f".{flow_dir.name}.deleted-*"):
        shutil.rmtree(tomb, ignore_errors=True)


# How deep flow_id_of follows callables nested in closures, defaults and partials:
# deep enough for decorators and partials of partials, bounded against cycles.
