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

Records. A marker per task is a million objects for a million top tasks: a
bucket lists them 1000 a request, one page after another, and ``status`` would
wait minutes. A batch of tasks run together (on one cluster worker) writes
instead one *record* of the keys it finished (``mark_done_many``), rewritten
whole, with a growing key set, as the batch progresses::

    markers/<kind>.records/<record>   the keys of batch <record>, sorted, one a line,
                                      gzip-compressed (``zcat`` reads it)

A record is written like the flow's other state (``DirStore.write``: temporary
file renamed into place; in a bucket one PUT), so a reader sees the old record
or the new one, whole; a key in a record vouches for its data as a marker does.
The records live beside the plain markers, never among them, so ``done_keys``
is two listings and the records' reads side by side (``at_once``), and counts
a key once however many markers and records name it. Gzip at level 1 shrinks
a record of 1000 three-axis keys from 6.9 kB to 1.9 kB for 70 µs of CPU. A
record that does not decode (nothing this module writes) counts as absent: its
tasks run again, which is always safe.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import time
import uuid
import zlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from chunkgraph._errors import ConfigError
from chunkgraph.flow.state._layout import DONE_SUFFIX, MARKERS_NAME, RECORDS_SUFFIX
from chunkgraph.flow.state._lock import Fence
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import DirStore, StateStore, at_once, join, state_store

TOP = "top"
REDUCE = "reduce"
_KINDS = (TOP, REDUCE)

# A record's name is an object's name as it is: a batch id, short and plain.
_RECORD_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Gzip's fastest level: a third of the bytes of a record of grid keys; the higher
# levels save 10 % more for 2 to 10 times the CPU of a record rewritten many times.
_GZIP_LEVEL = 1
_GZIP_WBITS = 31  # zlib's gzip framing: a header and a CRC, so ``zcat`` reads a record


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
        return _kind_dir(MARKERS_NAME, kind)

    def mark_done(self, kind: str, key: str) -> None:
        """Record that ``key`` finished; call only after its data is written. Refused
        (``FlowLockedError``) when this process's run of the flow lost its lock."""
        check_fence(self.location)
        self.store.touch(join(self._dir(kind), key))

    def mark_done_many(self, kind: str, keys: Collection[str], record: str) -> None:
        """Record that all ``keys`` of ``kind`` finished, as one object named ``record``
        (a batch id: 1 to 128 letters, digits, ``-`` or ``_``); call only after their data
        is written. Writing a record again replaces it whole: a reader sees the old one or
        the new one. One writer per record, each write a superset of the last (a write
        with fewer keys forgets the others: their tasks rerun). Refused
        (``FlowLockedError``) when this run lost its lock.

        >>> import tempfile
        >>> store = MarkerStore(StateRoot.of(tempfile.mkdtemp()))
        >>> store.mark_done_many(TOP, ["0_0", "0_1"], "batch-7")
        >>> store.mark_done_many(TOP, ["0_0", "0_1", "0_2"], "batch-7")  # it grew
        >>> sorted(store.record_keys(TOP, "batch-7")), len(store.done_keys(TOP))
        (['0_0', '0_1', '0_2'], 3)
        """
        where = join(self._records_dir(kind), _record_name(record))
        data = encode_record(keys)
        check_fence(self.location)
        self.store.write(where, data)

    def record_keys(self, kind: str, record: str) -> set[str]:
        """The keys in record ``record`` of ``kind`` (empty when there is none): what a
        batch run again may skip."""
        return _read_record(self.store, join(self._records_dir(kind), _record_name(record)))

    def done_keys(self, kind: str) -> set[str]:
        """Keys of ``kind`` marked done: plain markers and every record's keys (temporary
        files of interrupted writes ignored)."""
        return read_done_keys(self.store, MARKERS_NAME, kind)

    def _records_dir(self, kind: str) -> str:
        return f"{self._dir(kind)}{RECORDS_SUFFIX}"

    def clear(self, kinds: tuple[str, ...] = _KINDS) -> None:
        """Forget every marker and record of ``kinds`` (all: a fresh, non-resumed run)."""
        every = set(kinds) == set(_KINDS)
        if every:  # one tree: one listing in a bucket
            self.store.delete_tree(MARKERS_NAME)
        for kind in kinds:
            if not every:
                self.store.delete_tree(self._dir(kind))
                self.store.delete_tree(self._records_dir(kind))
            self.store.make_folder(self._dir(kind))


def read_done_keys(store: StateStore, markers: str, kind: str) -> set[str]:
    """Keys of ``kind`` marked done under the markers folder ``markers`` of ``store`` (a
    flow's ``markers``): its plain markers and the keys of each of its records. Both
    folders are listed side by side, then the records read side by side (``at_once``)."""
    plain_dir = _kind_dir(markers, kind)
    records_dir = f"{plain_dir}{RECORDS_SUFFIX}"
    plain, records = at_once(
        store, [functools.partial(_visible, store, d) for d in (plain_dir, records_dir)]
    )
    done = set(plain)
    reads = [functools.partial(_read_record, store, join(records_dir, r)) for r in records]
    for keys in at_once(store, reads):
        done |= keys
    return done


def encode_record(keys: Collection[str]) -> bytes:
    """A record's bytes: ``keys`` sorted, one a line, gzip-compressed. A ``ConfigError``
    for a key that is empty or holds a line break (it would read back as other keys).

    >>> sorted(decode_record(encode_record({"1_0", "0_2"})))
    ['0_2', '1_0']
    """
    bad = next((k for k in keys if not k or "\n" in k), None)
    if bad is not None:
        raise ConfigError(
            f"done marker key {bad!r} is empty or holds a line break; a record keeps one "
            "key a line: give keys as grid_key writes them ('3_0_12')",
            field="keys",
        )
    text = "\n".join(sorted(keys)).encode()
    return zlib.compress(text, _GZIP_LEVEL, _GZIP_WBITS)


def decode_record(data: bytes) -> set[str]:
    """The keys in a record's bytes; ``ValueError`` when they are no record."""
    try:
        text = zlib.decompress(data, _GZIP_WBITS).decode()
    except (zlib.error, UnicodeDecodeError) as err:
        raise ValueError(f"not a record of done markers: {err}") from err
    return set(text.split("\n")) if text else set()


def _read_record(store: StateStore, key: str) -> set[str]:
    data = store.read(key)
    if data is None:
        return set()
    try:
        return decode_record(data)
    except ValueError:
        return set()  # not ours, never half written (module docstring): its tasks rerun


def _visible(store: StateStore, folder: str) -> list[str]:
    """The names in ``folder`` but the temporary files of writes under way (``.``)."""
    return [name for name in store.names(folder) if not name.startswith(".")]


def _kind_dir(markers: str, kind: str) -> str:
    if kind not in _KINDS:
        raise AssertionError(f"unknown marker kind {kind!r}; valid kinds are {_KINDS}")
    return join(markers, kind)


def _record_name(record: str) -> str:
    """``record``, checked to be a plain object name (``_RECORD_NAME``)."""
    if not isinstance(record, str) or not _RECORD_NAME.fullmatch(record):
        raise ConfigError(
            f"done marker record name {record!r} is not 1 to 128 letters, digits, '-' or "
            "'_': a record is one object named as given; use a batch id such as 'batch-17'",
            field="record",
        )
    return record


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
