"""Chunk integrity: a CRC-32C on every stored chunk, and errors that name the bad chunk.

Volumes created by chunkgraph end their Zarr v3 codec chain with ``crc32c``
(``create(..., checksum=True)``, the default), so each chunk file carries a
CRC-32C of its encoded bytes, checked on every read::

    write: array ─bytes─> [zstd] ─crc32c─> file = payload + 4-byte CRC
    read:  file ─crc32c (check)─> [zstd] ─bytes─> array

Why: without it, a flipped bit in an uncompressed chunk, or in zstd data that
still decodes, comes back as plausible wrong numbers, and a truncated file
fails with a message that names no chunk. The checksum is the last codec, so
it runs over the (compressed) bytes on disk, not over the decoded array. The
codec chain is the whole record: nothing else is persisted, and volumes made
elsewhere without a checksum open and read as before (undetected damage
included).

Naming the chunk. A backend reads a region in one library call, and its
decode error names no chunk (TensorStore names the file; zarr names
nothing). On that error path only, ``raise_corrupt_chunks`` re-reads the
touched chunks one at a time and raises ``CorruptChunkError`` with each
failing chunk's grid index, storage key, file and global box. A missing chunk
file is not damage: it reads as ``fill_value``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from chunkgraph._errors import CorruptChunkError
from chunkgraph.geometry import Box
from chunkgraph.volume._storage import Index

CRC32C = "crc32c"
# Chunks listed by name in one error message; the rest are counted (the fields keep all).
_SHOWN = 4


@dataclass(frozen=True)
class ChunkLayout:
    """Where a backend's chunks live: enough to turn a grid index into a key, file and box.

    ``grid`` is the shape of one stored object (the shard shape for sharded arrays),
    ``encoding`` the Zarr v3 ``chunk_key_encoding`` JSON; ``key_of`` names the objects of
    a format whose keys are not Zarr's (precomputed: from the chunk's box).
    """

    path: str
    shape: tuple[int, ...]
    grid: tuple[int, ...]
    encoding: Mapping[str, Any]
    offset: tuple[int, ...]
    fill_value: Any
    key_of: Callable[[ChunkLayout, tuple[int, ...]], str] | None = None

    def key(self, coords: tuple[int, ...]) -> str:
        """The storage key of chunk ``coords``, e.g. ``c/0/1/2``.

        >>> ChunkLayout("v", (8, 8), (4, 4), {"name": "default"}, (0, 0), 0).key((1, 0))
        'c/1/0'
        """
        if self.key_of is not None:
            return self.key_of(self, coords)
        name = self.encoding.get("name", "default")
        config = self.encoding.get("configuration") or {}
        separator = str(config.get("separator", "." if name == "v2" else "/"))
        if name == "v2":
            return separator.join(map(str, coords)) if coords else "0"
        return separator.join(("c", *map(str, coords)))

    def file(self, key: str) -> str:
        if "://" in self.path:
            return self.path.rstrip("/") + "/" + key
        return os.path.join(self.path, *key.split("/"))

    def box(self, coords: tuple[int, ...]) -> Box:
        """The chunk's spatial box in global coordinates (clipped at the volume's edge)."""
        n_channel = len(self.shape) - len(self.offset)
        start, stop = [], []
        for k, g, n, o in zip(
            coords[n_channel:],
            self.grid[n_channel:],
            self.shape[n_channel:],
            self.offset,
            strict=True,
        ):
            start.append(o + k * g)
            stop.append(o + min((k + 1) * g, n))
        return Box(start, stop)

    def cells(self, index: Index) -> Iterator[tuple[tuple[int, ...], Index]]:
        """``(grid index, local index of the whole chunk)`` for every chunk ``index`` touches."""
        ranges = []
        for s, g, n in zip(index, self.grid, self.shape, strict=True):
            a, b, _ = s.indices(n)
            ranges.append(range(a // g, -(-b // g)) if b > a else range(0))
        for coords in itertools.product(*ranges):
            yield (
                coords,
                tuple(
                    slice(k * g, min((k + 1) * g, n))
                    for k, g, n in zip(coords, self.grid, self.shape, strict=True)
                ),
            )


def raise_corrupt_chunks(
    layout: ChunkLayout,
    index: Index,
    read: Callable[[Index], object],
    is_decode_error: Callable[[BaseException], bool],
    error: BaseException,
    op: str,
) -> NoReturn:
    """Re-read each chunk behind ``index``; raise ``CorruptChunkError`` naming those that fail.

    Call while handling ``error``, a decode error of a whole-region ``op``
    ('read' or 'write'); it is raised again unchanged if no single chunk fails
    (the file was repaired meanwhile, or the error was not about one chunk).
    """
    found: list[tuple[tuple[int, ...], BaseException]] = []
    for coords, cell in layout.cells(index):
        try:
            read(cell)
        except Exception as cell_error:
            if is_decode_error(cell_error) and _stored(layout, coords):
                found.append((coords, cell_error))
    if not found:
        raise error
    raise corrupt_chunk_error(layout, found, op) from found[0][1]


def _stored(layout: ChunkLayout, coords: tuple[int, ...]) -> bool:
    # An absent local file reads as fill, so it cannot be what failed to decode.
    return "://" in layout.path or os.path.isfile(layout.file(layout.key(coords)))


def corrupt_chunk_error(
    layout: ChunkLayout,
    found: Sequence[tuple[tuple[int, ...], BaseException]],
    op: str,
) -> CorruptChunkError:
    """The error for chunks that failed to decode, with what to do about them."""
    chunks = [coords for coords, _ in found]
    keys = [layout.key(coords) for coords in chunks]
    files = [layout.file(key) for key in keys]
    listed = "; ".join(
        f"chunk {coords} (key {key!r}, file {file!r}, global box {layout.box(coords)})"
        for coords, key, file in zip(chunks[:_SHOWN], keys, files, strict=False)
    )
    if len(found) > _SHOWN:
        listed += f"; and {len(found) - _SHOWN} more (see the error's .chunks)"
    what = "a stored chunk" if len(found) == 1 else f"{len(found)} stored chunks"
    first = found[0][1]
    cause = (str(first).splitlines() or [type(first).__name__])[0][:300]
    fill = np.asarray(layout.fill_value).item()
    message = (
        f"{op} of volume {layout.path!r} hit {what} that cannot be decoded: {listed}. "
        f"Decoder said: {cause}. The file changed after it was written (bit rot, a "
        f"truncated copy or upload, a write cut short by a crash). Rewrite that region "
        f"(rerun the step that produced it), or delete the file to read the chunk as "
        f"fill_value {fill!r}."
    )
    return CorruptChunkError(message, volume=layout.path, chunks=chunks, keys=keys, files=files)
