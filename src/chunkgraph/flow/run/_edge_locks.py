"""Destination chunks shared by two flows: one read-modify-write at a time.

A flow writes every destination chunk inside its bbox exactly once, whole,
so its own writes never race. A bbox that is not aligned to the destination's
storage chunks leaves partial chunks at its edge: the reduction (or, for a bbox
that automatic sizes grew out to the grid, the direct write of the one bottom
chunk that covers such a chunk) reads it, replaces the part inside the bbox and
writes the chunk back (``write_inside``). A second
flow over the adjacent region does the same to the same chunk, and without a
lock one of the two writes loses the other's voxels.

So edge chunks are locked while they are read, modified and written:

* across processes (and hosts sharing the filesystem), by POSIX byte-range
  locks on ``<dst>/.chunkgraph-edges.lock``, one byte per storage chunk at
  the chunk's flat C-order index; the file lives inside the volume's
  directory, so every flow on that destination finds it whatever its
  ``intermediates``, and it goes away with the volume. The kernel releases a
  dead process's locks.
* within a process, by one lock per destination: POSIX locks belong to a
  process, not to a thread, and edge writes are a small share of a flow.

Chunks are locked in increasing index order, so two flows cannot deadlock.
Memory volumes exist in one process and take only the process lock.

Volumes on an object store cannot be locked across processes and need not be:
their partial chunks are merged by conditional writes (an ETag match, retried
on conflict; ``Location.conditional_writes``), and the reduction writes only
the region inside the bbox (``Volume.merge_write``) without coming here. A
store that offers neither is refused when the flow's arguments are checked
(``check_edges_mergeable``, in the plan), before anything is written: adjacent
flows would lose voxels.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph.flow.plan import unmergeable
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.volume import Volume

LOCK_NAME = ".chunkgraph-edges.lock"

_GUARD = threading.Lock()
_PROCESS_LOCKS: dict[str, threading.Lock] = {}
# One descriptor per (process, file), never closed: closing any descriptor of a file
# drops all of the process's POSIX locks on it. Keyed by pid for forked workers.
_FILES: dict[tuple[int, str], int] = {}


def write_inside(dst: Volume, box: Box, inside: Box, result: np.ndarray) -> int:
    """Write ``result`` (over ``inside``) into ``dst``, where ``box`` is ``inside`` snapped
    out to dst's storage grid (clipped at its edge); the bytes written.

    Where ``inside`` cuts storage chunks, their other voxels are kept: merged by the store's
    conditional writes, or read, replaced and written back whole under their locks.
    """
    if inside == box:
        dst.write(box, result)
        return int(result.nbytes)
    if dst.location.conditional_writes:
        # The store merges the cut edge chunks conditionally: no lock, no read here.
        dst.merge_write(inside, result)
        return int(result.nbytes)
    # Edge chunks the bbox cuts: another flow may rewrite their other part.
    with edge_chunks_locked(dst, partial_chunks(dst, box, inside)):
        whole = dst.read(box)
        index: tuple[Any, ...] = (Ellipsis, *inside.slices(relative_to=box))
        whole[index] = result
        dst.write(box, whole)
    return int(whole.nbytes)


def partial_chunks(dst: Volume, box: Box, inside: Box) -> list[int]:
    """Flat indices of ``dst``'s storage chunks in ``box`` that ``inside`` does not cover.

    ``box`` is aligned to the storage grid (edges clipped by the bounds).

    >>> from chunkgraph import volume
    >>> v = volume.create("doc-edges", (8, 8), (4, 4), "uint8", backend="memory")
    >>> partial_chunks(v, Box((0, 0), (8, 8)), Box((0, 0), (8, 6)))
    [1, 3]
    >>> volume.remove("doc-edges")
    """
    chunks, origin = dst.spatial_chunks, dst.bounds.start
    grid = [-(-s // c) for s, c in zip(dst.bounds.shape, chunks, strict=True)]
    ranges = [
        range((a - o) // c, -((o - b) // c))
        for a, b, o, c in zip(box.start, box.stop, origin, chunks, strict=True)
    ]
    out = []
    for index in itertools.product(*ranges):
        start = tuple(o + i * c for o, i, c in zip(origin, index, chunks, strict=True))
        chunk = Box(start, tuple(s + c for s, c in zip(start, chunks, strict=True)))
        if not inside.contains(chunk.intersection(dst.bounds)):
            out.append(int(np.ravel_multi_index(index, grid)))
    return out


@contextlib.contextmanager
def edge_chunks_locked(dst: Volume, chunk_ids: list[int]) -> Iterator[None]:
    """Hold the locks of ``dst``'s storage chunks ``chunk_ids`` for the body."""
    if not chunk_ids:
        yield
        return
    where = dst.location
    if where.conditional_writes:
        yield  # the write itself is conditional (above)
        return
    if where.kind == "remote":  # refused before the run (check_edges_mergeable): kept safe
        raise unmergeable(dst, f"the {len(chunk_ids)} storage chunks a bbox edge cuts", None)
    on_disk = where.lockable
    key = os.path.join(dst.path, LOCK_NAME) if on_disk else f"{dst.backend}:{dst.path}"
    with _process_lock(key):
        if not on_disk:
            yield
            return
        fd = _descriptor(key)
        taken: list[int] = []
        try:
            for chunk in sorted(set(chunk_ids)):
                fcntl.lockf(fd, fcntl.LOCK_EX, 1, chunk)
                taken.append(chunk)
            yield
        finally:
            for chunk in taken:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, chunk)


def _process_lock(key: str) -> threading.Lock:
    with _GUARD:
        return _PROCESS_LOCKS.setdefault(key, threading.Lock())


def _descriptor(path: str) -> int:
    with _GUARD:
        key = (os.getpid(), path)
        if key not in _FILES:
            _FILES[key] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return _FILES[key]
