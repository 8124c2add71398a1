"""A downsample's read with the reduction fused in: each source chunk reduced as it is decoded.

Why. A downsample task reads its region of the level below and reduces it block by
block. Read whole, the region is assembled at the source's resolution (``prod(factor)``
times the level's voxels: 8x at factor 2) before the reduction starts: that assembly
was 7% of a mean pyramid's time, and the region the largest buffer the task held.

What. ``read_reduced`` is ``downsample_chunk``'s own read of its input (``read_input``:
the flow asks fn for one, ``_top_task.read_inputs``). It hands ``Volume.read_pieces``
a callback that reduces each piece (one stored chunk's part of the region; an inner
chunk's, sharded) into its place in the level's array, on the chunk pool, while
other chunks are still being fetched and decoded::

    source chunk ─fetch, decode─> piece ─block_reduce─> level[piece / factor]
                                  (one piece per chunk in flight, then dropped)

and returns the level's array as a ``ReducedRead``. The flow indexes what it read in
the source's voxels (a bottom chunk's view of its region); a ``ReducedRead`` turns those
block-aligned slices into the level's, and ``downsample_chunk`` takes its voxels from it
instead of reducing. A task holds the level's voxels and a piece per chunk in flight,
never the source's region.

Exactness. Every method reduces each block from that block's voxels alone
(``_block_reduce``), so a piece whose edges are block edges gives the region's voxels bit
for bit, whatever the method, dtype or fast path taken. A piece's edges are chunk edges
(``offset + k * chunk``) and the region's. The source's offset is a multiple of the factor
(``_check_offset``) and the region starts on a block; so when each read chunk is a
multiple of the factor, every piece starts on a block and ends on one, or at the
source's end, where the last block is partial in a piece exactly as in the region
(reduced over the voxels present). Partial edge chunks are therefore reduced here too.

When not (``read_reduced`` returns None, and the flow reads the region whole for
``downsample_chunk`` to reduce, as before):

* a read chunk is no multiple of the factor on some axis where the source has more
  than one chunk: blocks straddle chunks, and a block's voxels would arrive in two
  pieces (a reduction per piece would be wrong). A level's chunks clipped to its shape
  (a small level) are one chunk across that axis, which is fine;
* ``Volume.read_pieces`` cannot serve the volume: a chunk cache on the handle, channel
  axes split across chunks, or a backend without the direct whole-chunk path
  (``_whole_chunks``, ``_shards``: TensorStore's formats, precomputed, N5, Zarr v2, a
  zarr array with codecs or a pipeline that path does not run).

Reads. The flow still reads each input once per task over the same region; the same
chunks are fetched, and ``read_pieces`` counts them as ``read`` does, so bytes read and
read amplification are unchanged. Only the part past the source's end (fill, which a
downsample never reduces) is not read at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph.geometry import Box
from chunkgraph.jobs._block_reduce import block_reduce

if TYPE_CHECKING:
    from chunkgraph.volume import Volume


class ReducedRead:
    """A level's voxels over a region of the level below, standing for that region's
    voxels where the flow hands fn what it read.

    Indexed as the region would be, with ``(..., slice, ...)`` in the source's voxels
    relative to the region's start (each start on a block edge), it gives the level's
    voxels of those blocks: ``level[..., start // f : ceil(stop / f)]``.

    >>> r = ReducedRead(np.arange(4).reshape(2, 2), (2, 2))
    >>> r[..., 2:4, 0:4].level.tolist()
    [[2, 3]]
    """

    def __init__(self, level: np.ndarray[Any, Any], factor: tuple[int, ...]) -> None:
        self.level = level
        self.factor = factor

    @property
    def flags(self) -> Any:
        """The level array's flags: the flow makes what it read read-only through them."""
        return self.level.flags

    def __getitem__(self, index: tuple[Any, ...]) -> ReducedRead:
        spatial = index[1:] if index[:1] == (Ellipsis,) else ()
        if len(spatial) != len(self.factor) or not all(
            isinstance(s, slice) and s.step is None and (s.start or 0) % f == 0
            for s, f in zip(spatial, self.factor, strict=True)
        ):
            raise TypeError(
                f"a ReducedRead is indexed by (..., slice, ...) with one slice per spatial "
                f"axis starting on a block edge (factor {self.factor}), got {index!r}"
            )
        level = tuple(
            slice((s.start or 0) // f, None if s.stop is None else -(-s.stop // f))
            for s, f in zip(spatial, self.factor, strict=True)
        )
        return ReducedRead(self.level[(Ellipsis, *level)], self.factor)


def read_reduced(
    vol: Volume,
    box: Box,
    *,
    factor: tuple[int, ...],
    method: str,
    src_start: tuple[int, ...],
    src_stop: tuple[int, ...],
    above: tuple[tuple[Any, ...], ...] = (),
) -> ReducedRead | None:
    """``vol`` (the level below) over ``box`` (its voxels, starting on a block edge),
    reduced by ``method`` chunk by chunk as it is decoded; None where it cannot be (module
    docstring), for the flow to read ``box`` whole. Takes ``downsample_chunk``'s keywords
    (``above`` is not used here). Voxels of the level past the source's end are zeros
    (``downsample_chunk`` never keeps them)."""
    del above
    extent = vol.bounds.shape
    # A chunk as long as the source has no edge inside it: nothing to straddle there.
    if any(c % f and c < n for c, f, n in zip(vol.read_chunks, factor, extent, strict=True)):
        return None
    if any(o % f for o, f in zip(vol.offset, factor, strict=True)):  # downsample refuses it
        return None
    level_start = tuple(b // f for b, f in zip(box.start, factor, strict=True))
    level_shape = tuple(-(-n // f) for n, f in zip(box.shape, factor, strict=True))
    out = np.zeros(vol.channel_shape + level_shape, vol.dtype)
    inside = box.intersection(Box(src_start, src_stop))
    if inside.is_empty:
        return ReducedRead(out, factor)

    def take(piece: Box, data: np.ndarray[Any, Any]) -> None:
        start = [p // f - s for p, f, s in zip(piece.start, factor, level_start, strict=True)]
        stop = [-(-p // f) - s for p, f, s in zip(piece.stop, factor, level_start, strict=True)]
        where: tuple[Any, ...] = (Ellipsis, *map(slice, start, stop))
        out[where] = block_reduce(data, factor, method)

    if not vol.read_pieces(inside, take):
        return None
    return ReducedRead(out, factor)
