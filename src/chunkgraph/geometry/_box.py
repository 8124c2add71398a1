"""``Box``: an immutable n-d integer box ``[start, stop)``.

A box is a value: frozen, hashable, compared by its corners. Every method
returns a new box; none mutates. Coordinates are Python ints whatever came in
(lists, numpy arrays, numpy integers), so boxes hash and compare the same way
whether built by hand or from a numpy computation.

State::

    start  tuple[int, ...]   inclusive lower corner
    stop   tuple[int, ...]   exclusive upper corner, stop[d] >= start[d]

A box with ``stop[d] == start[d]`` on some axis is *empty*: it is what
``intersection`` returns for disjoint boxes, and it is a legal argument
everywhere (its ``size`` is 0, it splits into no chunks).

Padding is given as an int (every side), a per-axis sequence of ints (both
sides of that axis) or a per-axis sequence of ``(low, high)`` pairs;
``cropped(p)`` is exactly ``padded(p)`` with the signs flipped, so
``box.padded(p).cropped(p) == box`` always.

Chunking (``split`` / ``split_arrays``) lives in ``_split.py``; it is the one
hot path (a million chunks) and is vectorised with numpy there.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, SupportsIndex, TypeAlias

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph._util import as_int, as_int_tuple, per_axis
from chunkgraph.geometry._split import split_arrays

if TYPE_CHECKING:
    from numpy.typing import NDArray

IntLike: TypeAlias = SupportsIndex
Ints: TypeAlias = "Sequence[SupportsIndex] | NDArray[np.integer]"
Pad: TypeAlias = "SupportsIndex | Sequence[SupportsIndex] | Sequence[tuple[int, int]]"
SnapDirection = Literal["outer", "inner", "down", "up"]
SplitMode = Literal["exact", "shrink", "expand"]


def pad_pairs(pad: object, ndim: int) -> tuple[tuple[int, int], ...]:
    """Normalise a pad to per-axis ``(low, high)`` pairs (see the module docstring)."""
    if not isinstance(pad, Iterable) or isinstance(pad, str | bytes):
        p = as_int(pad, "pad")
        return ((p, p),) * ndim
    items = list(pad.tolist() if isinstance(pad, np.ndarray) else pad)
    if len(items) != ndim:
        raise ConfigError(
            f"pad {pad!r} has {len(items)} entries for a {ndim}-d box; give an int, "
            f"{ndim} ints, or {ndim} (low, high) pairs"
        )
    pairs: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, Iterable) and not isinstance(item, str | bytes):
            lo_hi = as_int_tuple(item, "pad pair", 2)
            pairs.append((lo_hi[0], lo_hi[1]))
        else:
            p = as_int(item, "pad")
            pairs.append((p, p))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class Box:
    """An n-d half-open integer box ``[start, stop)``.

    Args:
        start: The inclusive lower corner, one int per axis (any sequence or numpy array
            of integers).
        stop: The exclusive upper corner, as many ints as ``start``, each ``>= start``
            (equal on an axis: an empty box).

    Raises:
        ConfigError: When the corners are not integers, differ in length, or ``stop``
            is below ``start`` on some axis.

    >>> b = Box((0, 0), (4, 6))
    >>> b.shape, b.size
    ((4, 6), 24)
    >>> b.padded(1)
    Box(start=(-1, -1), stop=(5, 7))
    >>> b.intersection(Box((2, 5), (9, 9)))
    Box(start=(2, 5), stop=(4, 6))
    """

    start: tuple[int, ...]
    stop: tuple[int, ...]

    def __init__(self, start: Ints, stop: Ints) -> None:
        start_t = as_int_tuple(start, "Box start")
        stop_t = as_int_tuple(stop, "Box stop")
        if len(start_t) != len(stop_t):
            raise ConfigError(
                f"Box start {start_t} and stop {stop_t} have different numbers of axes "
                f"({len(start_t)} vs {len(stop_t)})"
            )
        bad = [d for d in range(len(start_t)) if stop_t[d] < start_t[d]]
        if bad:
            raise ConfigError(
                f"Box stop {stop_t} is below start {start_t} on axis {bad[0]} "
                f"(negative shape); stop must be >= start on every axis"
            )
        object.__setattr__(self, "start", start_t)
        object.__setattr__(self, "stop", stop_t)

    @classmethod
    def unchecked(cls, start: tuple[int, ...], stop: tuple[int, ...]) -> Box:
        """A box from corners already known valid (tuples of ints, start <= stop), unchecked.

        For hot paths that derive corners from valid boxes (chunk grids, say):
        it skips the coercion and checks of ``Box(start, stop)``, about 10x cheaper.

        Args:
            start: The lower corner, a tuple of Python ints.
            stop: The upper corner, a tuple of Python ints, ``stop[d] >= start[d]``.
        """
        box = object.__new__(cls)
        object.__setattr__(box, "start", start)
        object.__setattr__(box, "stop", stop)
        return box

    @classmethod
    def from_shape(cls, shape: Ints, start: Ints | None = None) -> Box:
        """The box of ``shape`` whose lower corner is ``start`` (default: the origin).

        Args:
            shape: The extent per axis (non-negative ints).
            start: The lower corner; None: the origin.

        >>> Box.from_shape((2, 3), start=(10, 10))
        Box(start=(10, 10), stop=(12, 13))
        """
        shape_t = as_int_tuple(shape, "shape")
        start_t = (0,) * len(shape_t) if start is None else as_int_tuple(start, "start")
        if len(start_t) != len(shape_t):
            raise ConfigError(f"start {start_t} and shape {shape_t} have different lengths")
        return cls(start_t, tuple(s + n for s, n in zip(start_t, shape_t, strict=True)))

    # -- properties ------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.start)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(map(operator.sub, self.stop, self.start))

    @property
    def size(self) -> int:
        n = 1
        for a, b in zip(self.start, self.stop, strict=True):
            n *= b - a
        return n

    @property
    def is_empty(self) -> bool:
        return any(map(operator.eq, self.start, self.stop))

    def _check_ndim(self, other: Box, op: str) -> None:
        if len(other.start) != len(self.start):
            raise ConfigError(
                f"cannot take {op} of a {self.ndim}-d box {self} and a {other.ndim}-d box {other}"
            )

    # -- set-like operations ---------------------------------------------------------------

    def intersection(self, other: Box) -> Box:
        """The common part; disjoint boxes give an empty box (shape 0 on some axis).

        Args:
            other: A box of the same number of axes.

        Raises:
            ConfigError: When the boxes differ in their number of axes.
        """
        self._check_ndim(other, "the intersection")
        # map() over builtins: this runs on every Volume read and write, keep it cheap.
        start = tuple(map(max, self.start, other.start))
        stop = tuple(map(max, start, map(min, self.stop, other.stop)))
        return Box.unchecked(start, stop)

    def union(self, other: Box) -> Box:
        """The bounding box of both; an empty box contributes nothing.

        Args:
            other: A box of the same number of axes.

        >>> Box((0,), (2,)).union(Box((5,), (6,)))
        Box(start=(0,), stop=(6,))
        """
        self._check_ndim(other, "the union")
        if other.is_empty:
            return self
        if self.is_empty:
            return other
        start = tuple(min(a, b) for a, b in zip(self.start, other.start, strict=True))
        stop = tuple(max(a, b) for a, b in zip(self.stop, other.stop, strict=True))
        return Box.unchecked(start, stop)

    def contains(self, other: Box | Ints) -> bool:
        """Whether a box (an empty one is contained everywhere) or a point lies inside.

        Args:
            other: A Box of the same number of axes, or a point (one int per axis).
        """
        if isinstance(other, Box):
            self._check_ndim(other, "containment")
            if other.is_empty:
                return True
            return all(
                a <= c and d <= b
                for a, b, c, d in zip(self.start, self.stop, other.start, other.stop, strict=True)
            )
        point = as_int_tuple(other, "point", self.ndim)
        return all(a <= p < b for a, b, p in zip(self.start, self.stop, point, strict=True))

    # -- moves and resizes -----------------------------------------------------------------

    def translated(self, offset: Ints | IntLike) -> Box:
        """Shifted by ``offset`` (an int for every axis, or per axis).

        Args:
            offset: The shift: an int for every axis, or one per axis (negative moves down).
        """
        off = per_axis(offset, self.ndim, "offset")
        return Box.unchecked(
            tuple(a + o for a, o in zip(self.start, off, strict=True)),
            tuple(b + o for b, o in zip(self.stop, off, strict=True)),
        )

    def padded(self, pad: Pad) -> Box:
        """Grown by ``pad`` on each side (negative values shrink).

        Args:
            pad: An int for every side, one int per axis (both sides of it), or one
                ``(low, high)`` pair per axis.

        >>> Box((0, 0), (4, 4)).padded([(1, 2), 0])
        Box(start=(-1, 0), stop=(6, 4))
        """
        pairs = pad_pairs(pad, self.ndim)
        start = tuple(a - lo for a, (lo, _) in zip(self.start, pairs, strict=True))
        stop = tuple(b + hi for b, (_, hi) in zip(self.stop, pairs, strict=True))
        if any(b < a for a, b in zip(start, stop, strict=True)):
            raise ConfigError(
                f"padding {self} by {pad!r} gives a negative shape (start {start}, stop {stop}); "
                f"a box of shape {self.shape} can shrink by at most its size per axis"
            )
        return Box.unchecked(start, stop)

    def cropped(self, pad: Pad) -> Box:
        """Shrunk by ``pad`` on each side: the exact inverse of ``padded(pad)``.

        Args:
            pad: As for ``padded``: an int, one int per axis, or ``(low, high)`` pairs.
        """
        pairs = pad_pairs(pad, self.ndim)
        return self.padded(tuple((-lo, -hi) for lo, hi in pairs))

    def snapped(
        self,
        grid: Ints | IntLike,
        offset: Ints | IntLike = 0,
        direction: SnapDirection = "outer",
    ) -> Box:
        """Corners moved onto the lattice ``offset + k * grid``.

        ``outer`` grows (start down, stop up), ``inner`` shrinks (start up, stop
        down; may become empty), ``down`` / ``up`` move both corners that way.

        Args:
            grid: The lattice spacing: an int for every axis, or one per axis.
            offset: The lattice origin: an int for every axis, or one per axis (default 0).
            direction: ``"outer"`` (the default), ``"inner"``, ``"down"`` or ``"up"``.

        >>> Box((3, 5), (9, 12)).snapped(4)
        Box(start=(0, 4), stop=(12, 12))
        >>> Box((3, 5), (9, 12)).snapped(4, offset=1, direction="inner")
        Box(start=(5, 5), stop=(9, 9))
        """
        g = per_axis(grid, self.ndim, "grid")
        if any(x <= 0 for x in g):
            raise ConfigError(f"snap grid must be positive on every axis, got {g}")
        o = per_axis(offset, self.ndim, "offset")
        if direction not in ("outer", "inner", "down", "up"):
            raise ConfigError(
                f"snap direction {direction!r} is not one of 'outer', 'inner', 'down', 'up'"
            )
        start_up = direction in ("inner", "up")
        stop_up = direction in ("outer", "up")
        start = tuple(
            _snap(a, gi, oi, start_up) for a, gi, oi in zip(self.start, g, o, strict=True)
        )
        stop = tuple(_snap(b, gi, oi, stop_up) for b, gi, oi in zip(self.stop, g, o, strict=True))
        # "inner" on a box smaller than one cell would cross over: collapse to empty.
        stop = tuple(max(a, b) for a, b in zip(start, stop, strict=True))
        return Box.unchecked(start, stop)

    # -- chunking ----------------------------------------------------------------------

    def split_arrays(
        self,
        chunk: Ints | IntLike,
        stride: Ints | IntLike | None = None,
        offset: Ints | IntLike | None = None,
        mode: SplitMode = "exact",
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], tuple[int, ...]]:
        """Chunk corners as ``(starts, stops, grid_shape)``; see ``chunkgraph.geometry._split``.

        Args:
            chunk: The chunk shape: an int for every axis, or one per axis (positive).
            stride: The step between chunk starts, as ``chunk``; None: ``chunk`` (chunks
                that tile).
            offset: The grid's origin; None: the box's ``start``.
            mode: ``"exact"`` (the chunks must tile the box, else ConfigError naming the
                axis), ``"shrink"`` (chunks clipped to the box) or ``"expand"`` (full chunks,
                past the box where they must).

        Returns:
            ``(starts, stops, grid_shape)``, int64 arrays of shape ``(n, ndim)`` in C
                order and the number of chunks per axis.
        """
        return split_arrays(self, chunk, stride, offset, mode)

    def split(
        self,
        chunk: Ints | IntLike,
        stride: Ints | IntLike | None = None,
        offset: Ints | IntLike | None = None,
        mode: SplitMode = "exact",
    ) -> list[Box]:
        """The chunks as boxes, in C order.

        Args:
            chunk: The chunk shape: an int for every axis, or one per axis (positive).
            stride: The step between chunk starts, as ``chunk``; None: ``chunk`` (chunks
                that tile).
            offset: The grid's origin; None: the box's ``start``.
            mode: ``"exact"`` (the chunks must tile the box, else ConfigError naming the
                axis), ``"shrink"`` (chunks clipped to the box) or ``"expand"`` (full chunks,
                past the box where they must).

        >>> [b.shape for b in Box((0, 0), (4, 5)).split((2, 3), mode="shrink")]
        [(2, 3), (2, 2), (2, 3), (2, 2)]
        """
        starts, stops, _ = self.split_arrays(chunk, stride, offset, mode)
        make = Box.unchecked
        return [
            make(tuple(a), tuple(b)) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
        ]

    def slices(self, relative_to: Box | None = None) -> tuple[slice, ...]:
        """Index slices of this box in an array whose element 0 sits at ``relative_to.start``.

        Args:
            relative_to: The box the array covers; None: an array whose element 0 is the
                origin.

        >>> Box((2, 3), (4, 7)).slices(relative_to=Box((1, 1), (9, 9)))
        (slice(1, 3, None), slice(2, 6, None))
        """
        if relative_to is None:
            origin: tuple[int, ...] = (0,) * self.ndim
        else:
            self._check_ndim(relative_to, "slices relative to")
            origin = relative_to.start
        return tuple(
            slice(a - o, b - o) for a, b, o in zip(self.start, self.stop, origin, strict=True)
        )


def _snap(x: int, grid: int, offset: int, up: bool) -> int:
    """Nearest lattice point ``offset + k * grid`` at or below ``x`` (or at or above if ``up``)."""
    if up:
        return offset - ((offset - x) // grid) * grid
    return offset + ((x - offset) // grid) * grid
