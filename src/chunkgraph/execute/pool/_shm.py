"""Numpy arrays through POSIX shared memory, without pickling their bytes.

Policy
------
A message between the pool and a worker is pickled, but every ``np.ndarray``
found in it (also nested in lists, tuples and dicts, named tuples and dict
subclasses included: the graph's ``replace_leaves`` rule) at or above
``SHM_MIN_BYTES`` is replaced by a small :class:`ShmRef` (segment name, dtype,
shape, strides, byte offset). The receiver maps the segment and builds a view
on it: the array bytes are copied once, into the segment, by whoever created
the array, and never again.

An array that already lives in a segment (a result the parent holds, or a
worker's input returned as its output) is sent by reference to that same
segment, at any size, so passing a result on to the next task copies nothing.

Lifetime: the owner side (the pool's process)::

    segment  <--mapped by--  mmap  <--buffer of--  ndarray views (results, args)
       ^                       |
       |            weakref callback: SimpleQueue.put (C code only)
       |                       v
       +------ unlink  <-- reaper thread      when the last view is garbage-collected

* Every segment is mapped through one ``mmap`` object per process; numpy views
  keep that ``mmap`` alive through their ``.base`` chain, so "the last view is
  gone" is exactly "the mmap is collected", and then the segment is unlinked
  on the owner side. A scheduler that drops a result frees its memory.
* The mapping's weak reference calls ``SimpleQueue.put``, which runs no Python
  bytecode, so a Ctrl-C can never be raised inside it (Python reports an
  exception raised in a finalizer as "Exception ignored" and loses it). A
  daemon *reaper* thread, one per process, does the real work: it forgets the
  mapping and, on the owner side, unlinks the segment. Signal handlers run only
  in the main thread, so nothing the reaper runs can absorb an interrupt.
  Unlinking is therefore asynchronous, microseconds after the last view dies;
  ``flush_finalized()`` waits for it. The pool's manager thread also reaps
  (``reap_pending()``) as each call ends, so a call's argument segments are
  gone when its future resolves.
* :class:`SegmentTable` is the owner's state: ``_linked`` holds every segment
  name created or received and not yet unlinked (what ``unlink_all`` removes
  at shutdown, even while views are still alive: a Linux mapping outlives its
  name); ``_maps`` maps ``id(mmap)`` to ``(name, address, weak ref)`` for the
  mappings, so an array can be recognised as shared and re-sent by name (an
  entry whose mapping died but is not reaped yet never matches: its weak ref
  is checked, since the id may already belong to another object).
* Each linked name is registered once with ``multiprocessing``'s resource
  tracker and unregistered once when unlinked, so a parent killed outright
  still has its segments removed, and no double-unlink warning is printed.
  Registering a name and adding it to ``_linked`` happen under the table's
  lock in one go, as do taking it out, unlinking and unregistering it. The
  reaper is a daemon thread, stopped wherever it is when the interpreter
  exits, so shutdown's ``unlink_all`` must wait for an unlink the reaper has
  begun, not return while that name is still registered (the tracker would
  report it leaked at exit, its file already gone). After ``unlink_all`` a
  new segment is unlinked at once and never registered.

Workers (non-owners) map segments only for the duration of one task. They
unlink only segments they made for a result they then failed to send, and,
when the pool's process has died, every segment of the pool (``unlink_prefix``).

Segment names say which process owns them, so that the segments of a process
killed outright can be found and removed: see ``_segment_names``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import mmap
import os
import queue
import threading
import weakref
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any

import numpy as np

from chunkgraph.execute.pool._segment_names import open_name, unlink_name
from chunkgraph.graph import collect_leaves, has_leaf, replace_leaves

# Arrays smaller than this are pickled with the message instead. A segment has
# a fixed cost (create, map, fault its pages in on both sides, unlink, tell the
# resource tracker) that pickling through the pipe beats for small arrays; a
# pipe copies the bytes four times, though, so large arrays win by far through
# shared memory, and keep a single copy in memory. Measured round trips (one
# task returning ``-array``, 2-core VM): 128 KiB pipe 0.6 ms vs shared 1.0 ms;
# 256 KiB pipe 1.9 ms vs shared 1.4 ms; 4 MiB pipe 22.6 ms vs shared 11.9 ms.
SHM_MIN_BYTES = 256 * 1024

_TRACKER_TYPE = "shared_memory"

# Map every page at once (Linux): one system call instead of a page fault per
# 4 KiB page, which costs microseconds each in a virtual machine. A segment
# holds one array, written whole by its creator and usually read whole.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


@dataclass(frozen=True, slots=True)
class ShmRef:
    """An array in a shared-memory segment: enough to map it elsewhere."""

    name: str
    dtype: np.dtype[Any]  # the object, not its string: structured fields survive
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    nbytes_segment: int


def _open_mapping(name: str, size: int, *, create: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = open_name(name, flags)
    try:
        if create:
            os.ftruncate(fd, size)
            try:
                # ftruncate reserves nothing on tmpfs: without this, a full /dev/shm
                # (64 MB in a default container) kills the writer with SIGBUS later.
                os.posix_fallocate(fd, 0, size)
            except OSError:
                unlink_name(name)
                raise
        return mmap.mmap(fd, size, flags=_MAP_FLAGS)
    finally:
        os.close(fd)


def _address(mm: mmap.mmap) -> int:
    probe = np.frombuffer(mm, dtype=np.uint8, count=1)
    address: int = probe.__array_interface__["data"][0]
    return address


def _root_buffer(array: np.ndarray[Any, Any]) -> object:
    base: object = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def _view(mm: mmap.mmap, ref: ShmRef) -> np.ndarray[Any, Any]:
    return np.ndarray(ref.shape, dtype=ref.dtype, buffer=mm, offset=ref.offset, strides=ref.strides)


def _shareable(value: object, min_bytes: int) -> bool:
    return (
        type(value) is np.ndarray
        and not value.dtype.hasobject
        and value.nbytes >= max(min_bytes, 1)
    )


class _MappingRef(weakref.ref[mmap.mmap]):
    """A weak reference to one mapping, with what its table must forget when it dies."""

    __slots__ = ("key", "name", "table")
    key: int
    name: str
    table: SegmentTable


# Dead mappings (their weak refs) waiting for the reaper, and flush markers.
_finalized: queue.SimpleQueue[_MappingRef | threading.Event] = queue.SimpleQueue()
_reaper_pid = 0  # the process whose reaper thread is running (a forked child has none)
_reaper_lock = threading.Lock()


def _start_reaper() -> None:
    global _reaper_pid
    if _reaper_pid == os.getpid():
        return
    with _reaper_lock:
        if _reaper_pid != os.getpid():
            threading.Thread(target=_reap, name="chunkgraph-shm-reaper", daemon=True).start()
            _reaper_pid = os.getpid()


def _reap() -> None:
    while True:
        _handle(_finalized.get())


def _handle(item: _MappingRef | threading.Event) -> None:
    if isinstance(item, threading.Event):
        item.set()
        return
    # A name that fails to unlink keeps its prefix: the owner's shutdown
    # (unlink_prefix) removes it, so the reaper goes on serving.
    with contextlib.suppress(OSError):
        item.table._forget(item)


def reap_pending() -> None:
    """Forget (and unlink) the mappings collected so far, in the calling thread.

    For threads that signal handlers never interrupt (not the main thread): the
    pool's manager calls it as a call ends, so an argument's segment is gone by
    the time its future resolves.
    """
    while not _finalized.empty():  # the common case: nothing to do, and no exception raised
        try:
            item = _finalized.get_nowait()
        except queue.Empty:  # the reaper thread took it first
            return
        _handle(item)


def flush_finalized(timeout: float = 10.0) -> bool:
    """Wait until every mapping collected so far is forgotten (and unlinked by its
    owner); False if the reaper did not get there within ``timeout`` seconds."""
    if _reaper_pid != os.getpid():
        return True  # nothing was ever adopted in this process
    marker = threading.Event()
    _finalized.put(marker)
    return marker.wait(timeout)


class SegmentTable:
    """The segments one process maps; owner tables also create and unlink them.

    ``prefix`` starts every name this table creates (``prefix + creator pid +
    counter``), so a pool's segments can be found by name after a crash.
    """

    def __init__(self, prefix: str, *, owner: bool, min_bytes: int = SHM_MIN_BYTES) -> None:
        self.prefix = prefix
        self.owner = owner
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._linked: set[str] = set()
        self._closed = False  # unlink_all has run: nothing more is tracked
        self._maps: dict[int, tuple[str, int, _MappingRef]] = {}
        self._by_name: dict[str, _MappingRef] = {}

    # -- mapping -------------------------------------------------------------------

    def _adopt(self, name: str, mm: mmap.mmap) -> None:
        """Record a live mapping; its collection queues it for the reaper."""
        _start_reaper()
        ref = _MappingRef(mm, _finalized.put)
        ref.table, ref.name, ref.key = self, name, id(mm)
        with self._lock:
            self._maps[ref.key] = (name, _address(mm), ref)
            self._by_name[name] = ref

    def _forget(self, ref: _MappingRef) -> None:
        """A mapping died: drop its entries (if still its own) and, as owner, unlink it."""
        with self._lock:
            entry = self._maps.get(ref.key)
            if entry is not None and entry[2] is ref:
                del self._maps[ref.key]
            if self._by_name.get(ref.name) is ref:
                del self._by_name[ref.name]
        if self.owner:
            self.unlink(ref.name)

    def _mapping(self, ref: ShmRef) -> mmap.mmap:
        with self._lock:
            known = self._by_name.get(ref.name)
        mm = known() if known is not None else None
        if mm is not None:
            return mm
        if known is not None and self.owner:
            # Its last view died and the reaper has not unlinked it yet: do it
            # now, so the name fails to open here just as if it had.
            self._forget(known)
        mm = _open_mapping(ref.name, ref.nbytes_segment, create=False)
        if self.owner:
            self._track(ref.name)
        self._adopt(ref.name, mm)
        return mm

    def _track(self, name: str) -> None:
        with self._lock:
            if name in self._linked:
                return
            if self._closed:
                # Made or received after the shutdown sweep: nothing would unlink
                # it in time, so its name goes now (the mapping stays valid).
                unlink_name(name)
                return
            resource_tracker.register("/" + name, _TRACKER_TYPE)
            self._linked.add(name)

    def unlink(self, name: str) -> None:
        """Unlink one owned segment (idempotent); live views stay valid."""
        with self._lock:
            self._unlink_locked(name)

    def _unlink_locked(self, name: str) -> None:
        # Under the lock from the check to the unregister, so no other thread
        # sees a name gone from _linked but still registered: unlink_all skips
        # such a name, and the process may exit as soon as unlink_all returns.
        if name not in self._linked:
            return
        self._linked.discard(name)
        try:
            unlink_name(name)
        finally:
            resource_tracker.unregister("/" + name, _TRACKER_TYPE)

    def unlink_all(self) -> None:
        """Unlink every segment this owner created or received, for good.

        Waits for an unlink already under way in another thread (the reaper's),
        so that when it returns every name ever registered is unregistered; a
        segment made or received afterwards is unlinked at once, untracked.
        """
        failure: OSError | None = None
        with self._lock:
            self._closed = True
            for name in list(self._linked):
                try:
                    self._unlink_locked(name)
                except OSError as error:  # unregistered all the same; go on
                    failure = failure or error
        if failure is not None:
            raise failure

    @property
    def linked(self) -> frozenset[str]:
        """Names created or received and not yet unlinked."""
        with self._lock:
            return frozenset(self._linked)

    # -- arrays --------------------------------------------------------------------

    def segment_of(self, array: np.ndarray[Any, Any]) -> tuple[str, int] | None:
        """``(name, base address)`` of the segment backing ``array``, or None."""
        root = _root_buffer(array)
        if not isinstance(root, mmap.mmap):
            return None
        with self._lock:
            entry = self._maps.get(id(root))
        if entry is None or entry[2]() is not root:
            return None
        return entry[0], entry[1]

    def export(self, array: np.ndarray[Any, Any]) -> tuple[ShmRef, object] | None:
        """A reference to ``array`` in shared memory, copying it there if needed.

        Returns the reference and the object that keeps the segment alive on
        this side (the array or the new mapping), or None when the array is
        better pickled (small, or holds Python objects).
        """
        known = self.segment_of(array)
        if known is not None:
            name, base = known
            root = _root_buffer(array)
            assert isinstance(root, mmap.mmap)
            start = array.__array_interface__["data"][0] - base
            ref = ShmRef(name, array.dtype, array.shape, array.strides, start, len(root))
            return ref, array
        if not _shareable(array, self.min_bytes):
            return None
        name = f"{self.prefix}{os.getpid()}_{next(self._counter)}"
        size = array.nbytes
        try:
            mm = _open_mapping(name, size, create=True)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.ENOMEM):
                return None  # shared memory is full: this array goes through the pipe
            raise
        if self.owner:
            self._track(name)
            self._adopt(name, mm)
        strides = _c_strides(array.shape, array.itemsize)
        ref = ShmRef(name, array.dtype, array.shape, strides, 0, size)
        np.copyto(_view(mm, ref), array, casting="no")
        return ref, mm

    def materialize(self, ref: ShmRef, *, writeable: bool = True) -> np.ndarray[Any, Any]:
        """A view of the referenced array, mapping its segment once per process."""
        view = _view(self._mapping(ref), ref)
        if not writeable:
            view.flags.writeable = False
        return view

    # -- nested containers ---------------------------------------------------------

    def encode(self, value: object, keep: list[object]) -> object:
        """``value`` with shareable arrays replaced by refs; ``keep`` gets what pins them.

        Arrays are found in containers by the graph's rule (``replace_leaves``:
        named tuples and dict subclasses too); a value holding no array is
        returned as it is, not rebuilt.
        """
        if not has_leaf(value, _is_array):
            return value

        created: list[str] = []

        def export(leaf: object) -> object:
            if type(leaf) is not np.ndarray:
                return leaf
            exported = self.export(leaf)
            if exported is None:
                return leaf
            ref, pin = exported
            if isinstance(pin, mmap.mmap):
                created.append(ref.name)
            keep.append(pin)
            return ref

        try:
            return replace_leaves(value, export)
        except BaseException:
            # A container that cannot be rebuilt (a named tuple whose _make fails):
            # the segments made for it so far would reach no one.
            for name in created:
                if self.owner:
                    self.unlink(name)
                else:
                    unlink_name(name)
            raise

    def decode(self, value: object, *, writeable: bool = True) -> object:
        """The inverse of :meth:`encode`: refs become views on mapped segments."""
        if not has_leaf(value, _is_ref):
            return value

        def materialize(leaf: object) -> object:
            if type(leaf) is not ShmRef:
                return leaf
            return self.materialize(leaf, writeable=writeable)

        return replace_leaves(value, materialize)


def _is_array(value: object) -> bool:
    return type(value) is np.ndarray


def _is_ref(value: object) -> bool:
    return type(value) is ShmRef


def iter_refs(value: object) -> list[ShmRef]:
    """Every :class:`ShmRef` inside an encoded value."""
    found: list[ShmRef] = []
    collect_leaves([value], _is_ref, found)  # in a list: the value itself may be a ref
    return found


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))
