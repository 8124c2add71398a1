"""Splitting budgets for adaptive fork-join loops.

A loop over ``[start, stop)`` is cut recursively in two. Whether a range may
be cut again is decided by a *splitter* that travels with the range:

* ``Splitter(workers)`` starts with a budget of ``splits = 4 * workers``
  (``splits=`` overrides it).
* ``try_split()`` spends one split: while ``splits > 0`` it decrements and
  returns ``True``; at 0 it returns ``False`` and the range runs as one piece.
* ``clone()`` gives the child (the right half) ``splits // 2`` of the
  remaining splits; the parent (the left half) keeps ``splits - splits // 2``.
* ``rearm()``: a range that another worker *stole* re-arms its budget to
  ``max(splits, initial)``, so a straggler's range can again be cut into
  enough pieces for every idle worker.
* ``LengthSplitter(workers, min_len)`` also refuses to split a range of
  fewer than ``2 * min_len`` elements (it spends nothing then), so no piece
  is ever shorter than ``min_len``.

A budget of ``s`` splits that is spent in full yields ``s + 1`` pieces (every
split adds one), so a range is cut where the pieces its two halves will
become are balanced: the left half gets ``len * left_pieces // all_pieces``
elements, clamped so that both halves keep at least ``min_len``.

Worked numbers, workers=2 (8 splits), nothing stolen::

    n=10_000, min_len=100 -> 9 pieces of 1111 or 1112 elements
    n=1_000,  min_len=100 -> 1000 splits 555|445 (budgets 4|3), ... -> 9 pieces
    n=300,    min_len=100 -> 300 splits 166|134 (both < 200) -> 2 pieces
    n=199,    min_len=100 -> 199 < 2*100 -> 1 piece

Budgets are plain ints owned by one range at a time: a splitter is never
shared between threads, so it needs no lock.
"""

from __future__ import annotations

from typing import Self

from chunkgraph._errors import ConfigError

# Pieces per worker: enough that a worker finishing early finds work to
# steal, few enough that Python's tens-of-microseconds dispatch stays small.
SPLITS_PER_WORKER = 4


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive int; got {value!r}")
    return value


class Splitter:
    """A budget of splits; see the module docstring for the rules.

    Args:
        workers: The pool's workers (>= 1); the budget is ``SPLITS_PER_WORKER`` each.
        splits: The split budget instead (an int >= 0); None: from ``workers``.

    >>> s = Splitter(2)
    >>> s.splits
    8
    >>> s.try_split(), s.splits
    (True, 7)
    >>> child = s.clone()
    >>> s.splits, child.splits
    (4, 3)
    """

    __slots__ = ("initial", "splits")

    def __init__(self, workers: int, *, splits: int | None = None) -> None:
        _positive("workers", workers)
        budget = SPLITS_PER_WORKER * workers if splits is None else splits
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ConfigError(f"splits must be an int >= 0; got {splits!r}")
        self.initial = budget
        self.splits = budget

    def try_split(self) -> bool:
        """Spend one split; ``False`` when the budget is exhausted."""
        if self.splits > 0:
            self.splits -= 1
            return True
        return False

    def clone(self) -> Self:
        """Hand half of the remaining splits (rounded down) to a new splitter."""
        child = object.__new__(type(self))
        child._copy_from(self)
        child.splits = self.splits // 2
        self.splits -= child.splits
        return child

    def rearm(self) -> None:
        """Restore at least the initial budget (called when the range was stolen)."""
        self.splits = max(self.splits, self.initial)

    def _copy_from(self, other: Splitter) -> None:
        self.initial = other.initial
        self.splits = other.splits

    def __repr__(self) -> str:
        return f"{type(self).__name__}(splits={self.splits}, initial={self.initial})"


class LengthSplitter(Splitter):
    """A `Splitter` that also keeps every piece at least ``min_len`` long.

    Args:
        workers: The pool's workers (>= 1), as for ``Splitter``.
        min_len: The shortest piece (>= 1).
        splits: The split budget instead; None: from ``workers``.

    >>> s = LengthSplitter(2, min_len=100)
    >>> s.try_split_len(199), s.splits
    (False, 8)
    >>> s.try_split_len(200), s.splits
    (True, 7)
    """

    __slots__ = ("min_len",)

    def __init__(self, workers: int, min_len: int, *, splits: int | None = None) -> None:
        super().__init__(workers, splits=splits)
        self.min_len = _positive("min_len", min_len)

    def try_split_len(self, length: int) -> bool:
        """Spend one split unless ``length < 2 * min_len`` or the budget is spent.

        Args:
            length: The length of the range about to be cut in two.
        """
        if length < 2 * self.min_len:
            return False
        return self.try_split()

    def split(self, start: int, stop: int) -> tuple[int, LengthSplitter] | None:
        """Cut ``[start, stop)``: ``(mid, splitter_for_right_half)`` or ``None``.

        The caller keeps using ``self`` for ``[start, mid)``.

        Args:
            start: The range's first index.
            stop: The range's end (exclusive).

        >>> LengthSplitter(2, min_len=100).split(0, 1000)
        (555, LengthSplitter(splits=3, initial=8))
        """
        length = stop - start
        if not self.try_split_len(length):
            return None
        child = self.clone()
        left_pieces, right_pieces = self.splits + 1, child.splits + 1
        mid = start + length * left_pieces // (left_pieces + right_pieces)
        mid = min(max(mid, start + self.min_len), stop - self.min_len)
        return mid, child

    def _copy_from(self, other: Splitter) -> None:
        super()._copy_from(other)
        if isinstance(other, LengthSplitter):
            self.min_len = other.min_len


def plan_pieces(start: int, stop: int, splitter: LengthSplitter) -> list[tuple[int, int]]:
    """The pieces a loop cuts ``[start, stop)`` into when nothing is stolen.

    Args:
        start: The range's first index.
        stop: The range's end (exclusive).
        splitter: The splitter the loop starts with (its budget is spent by the call).

    >>> [b - a for a, b in plan_pieces(0, 300, LengthSplitter(2, min_len=100))]
    [166, 134]
    >>> len(plan_pieces(0, 10_000, LengthSplitter(2, min_len=100)))
    9
    """
    cut = splitter.split(start, stop)
    if cut is None:
        return [(start, stop)] if stop > start else []
    mid, child = cut
    return plan_pieces(start, mid, splitter) + plan_pieces(mid, stop, child)
