"""``label``'s reduction, on the driver: the chunks' pieces joined into components.

Input: one ``Pieces`` per chunk of a grid (chunk shape ``chunk`` laid from the
volume's corner). Output: a ``Merge``: each piece's provisional id, and ``table``,
provisional id -> final id.

::

    provisional ids   chunk g's pieces are offsets[g] + 1 .. offsets[g] + counts[g]
                      (offsets: the counts summed in C order of the grid; dense, so the
                      table is an array, not a hash map)
    pairs             for every boundary plane between two layers of chunks, on every
                      axis: the planes on its two sides, assembled from the chunks' faces,
                      compared at each offset of the connectivity that crosses it (the
                      diagonals included, so a component that meets only at a chunk's edge
                      or corner is joined too); both foreground: one pair
    components        scipy.sparse.csgraph.connected_components over all pieces
    final ids         1..N by each component's first voxel in C order (the smallest
                      ``Pieces.first`` of its pieces): scipy.ndimage.label's numbering of
                      the whole array, whatever the chunks

Memory on the driver: the faces of every chunk (2 x ndim planes per chunk, in the
narrowest dtype of its piece count, 1 byte a voxel below 256 pieces: 6 / edge of the
volume's voxels for cubes, 2% at 128 x 64 x 64), two boundary planes at a time (int64,
each as large as the volume's cross-section on that axis), and 8 + 8 bytes per piece.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from types import EllipsisType
from typing import Any

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from chunkgraph.geometry import Box
from chunkgraph.jobs._label_chunk import Pieces


@dataclasses.dataclass(frozen=True)
class Merge:
    """The reduction's result.

    Attributes:
        components: N, the number of components (final ids 1..N).
        offsets: Per chunk of the grid (its shape): the provisional id before its first.
        counts: Per chunk of the grid: how many pieces it has.
        digests: Per chunk of the grid: its foreground's digest (``Pieces.digest``), uint64.
        table: ``table[p]``: the final id of provisional id ``p`` (``table[0] = 0``), int64.
    """

    components: int
    offsets: np.ndarray[Any, Any]
    counts: np.ndarray[Any, Any]
    digests: np.ndarray[Any, Any]
    table: np.ndarray[Any, Any]


def merge(
    pieces: Mapping[Box, Pieces], bounds: Box, chunk: Sequence[int], connectivity: int
) -> Merge:
    """Join the pieces of every chunk of ``bounds`` (``pieces``: the first pass's values,
    one per chunk of the grid ``chunk`` lays from ``bounds.start``)."""
    grid = tuple(-(-n // c) for n, c in zip(bounds.shape, chunk, strict=True))
    counts = np.zeros(grid, np.int64)
    digests = np.zeros(grid, np.uint64)
    for box, found in pieces.items():
        counts[_grid_index(box, bounds, chunk)] = found.count
        digests[_grid_index(box, bounds, chunk)] = found.digest
    offsets = (np.cumsum(counts.ravel()) - counts.ravel()).reshape(grid)
    total = int(counts.sum())
    first = np.empty(total, np.int64)
    for box, found in pieces.items():
        at = int(offsets[_grid_index(box, bounds, chunk)])
        first[at : at + found.count] = found.first
    pairs = _pairs(pieces, bounds, chunk, offsets, connectivity)
    graph = coo_matrix(
        (np.ones(len(pairs), np.int8), (pairs[:, 0] - 1, pairs[:, 1] - 1)), shape=(total, total)
    )
    count, component = connected_components(graph, directed=False)
    # Each component's first voxel: the smallest first voxel of its pieces.
    key = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(key, component, first)
    rank = np.empty(count, np.int64)
    rank[np.argsort(key, kind="stable")] = np.arange(1, count + 1)
    table = np.zeros(total + 1, np.int64)
    table[1:] = rank[component]
    return Merge(int(count), offsets, counts, digests, table)


def _grid_index(box: Box, bounds: Box, chunk: Sequence[int]) -> tuple[int, ...]:
    return tuple((a - b) // c for a, b, c in zip(box.start, bounds.start, chunk, strict=True))


def _pairs(
    pieces: Mapping[Box, Pieces],
    bounds: Box,
    chunk: Sequence[int],
    offsets: np.ndarray[Any, Any],
    connectivity: int,
) -> np.ndarray[Any, Any]:
    """Every pair of provisional ids that touch across a chunk boundary, (n, 2) int64,
    deduplicated per boundary plane."""
    ndim = bounds.ndim
    chunks = [(_grid_index(box, bounds, chunk), box, p) for box, p in pieces.items() if p.count]
    structure = ndimage.generate_binary_structure(ndim, connectivity)
    found = [np.empty((0, 2), np.int64)]
    for axis in range(ndim):
        # The offsets that step +1 across this axis; the others stay in the plane.
        steps = [
            tuple(d for k, d in enumerate(step) if k != axis)
            for step in itertools.product((-1, 0, 1), repeat=ndim)
            if step[axis] == 1 and structure[tuple(d + 1 for d in step)]
        ]
        # Each layer's chunks, found once: each chunk is visited twice per axis, not
        # once per layer.
        layers: list[list[tuple[tuple[int, ...], Box, Pieces]]] = [
            [] for _ in range(offsets.shape[axis])
        ]
        for entry in chunks:
            layers[entry[0][axis]].append(entry)
        for layer in range(1, offsets.shape[axis]):
            low = _plane(layers[layer - 1], bounds, offsets, axis, 1)
            high = _plane(layers[layer], bounds, offsets, axis, 0)
            found.append(_touching(low, high, steps))
    return np.concatenate(found)


def _plane(
    chunks: Sequence[tuple[tuple[int, ...], Box, Pieces]],
    bounds: Box,
    offsets: np.ndarray[Any, Any],
    axis: int,
    end: int,
) -> np.ndarray[Any, Any]:
    """The plane of provisional ids on one side of a boundary: the first (``end`` 0) or
    last (1) plane on ``axis`` of every chunk with pieces in one grid layer (``chunks``)."""
    shape = tuple(n for k, n in enumerate(bounds.shape) if k != axis)
    plane = np.zeros(shape, np.int64)
    for index, box, found in chunks:
        face = np.asarray(found.faces[2 * axis + end], np.int64)  # 0-d for a 1-d volume
        face[face > 0] += offsets[index]
        start = [
            a - b for k, (a, b) in enumerate(zip(box.start, bounds.start, strict=True)) if k != axis
        ]
        plane[tuple(slice(s, s + n) for s, n in zip(start, face.shape, strict=True))] = face
    return plane


def _touching(
    low: np.ndarray[Any, Any], high: np.ndarray[Any, Any], steps: Sequence[tuple[int, ...]]
) -> np.ndarray[Any, Any]:
    """Pairs ``(low[x], high[x + step])`` where both are foreground, over every step."""
    found = []
    for step in steps:
        # Ellipsis last: arrays, also when the planes are 0-d (a 1-d volume).
        a: tuple[slice | EllipsisType, ...] = (
            *(slice(max(0, -d), n - max(0, d)) for d, n in zip(step, low.shape, strict=True)),
            ...,
        )
        b: tuple[slice | EllipsisType, ...] = (
            *(slice(max(0, d), n - max(0, -d)) for d, n in zip(step, low.shape, strict=True)),
            ...,
        )
        x, y = low[a], high[b]
        both = (x > 0) & (y > 0)
        found.append(np.stack([x[both], y[both]], axis=1))
    if not found:
        return np.empty((0, 2), np.int64)
    return np.unique(np.concatenate(found), axis=0)
