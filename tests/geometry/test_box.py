"""Box: construction, set operations, padding, snapping, slicing (properties with hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box

COORD = st.integers(-50, 50)
EXTENT = st.integers(0, 30)


@st.composite
def boxes(draw: st.DrawFn, ndim: int | None = None, min_extent: int = 0) -> Box:
    n = draw(st.integers(1, 3)) if ndim is None else ndim
    start = draw(st.lists(COORD, min_size=n, max_size=n))
    shape = draw(st.lists(st.integers(min_extent, 30), min_size=n, max_size=n))
    return Box(start, [a + s for a, s in zip(start, shape, strict=True)])


@st.composite
def box_pairs(draw: st.DrawFn) -> tuple[Box, Box]:
    n = draw(st.integers(1, 3))
    return draw(boxes(n)), draw(boxes(n))


@st.composite
def box_and_pad(draw: st.DrawFn) -> tuple[Box, object]:
    box = draw(boxes())
    n = box.ndim
    pad = draw(
        st.one_of(
            st.integers(0, 5),
            st.lists(st.integers(0, 5), min_size=n, max_size=n),
            st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=n, max_size=n),
        )
    )
    return box, pad


def test_coerces_numpy_and_lists_to_python_ints() -> None:
    b = Box(np.array([1, 2]), [np.int32(3), 4])
    assert b.start == (1, 2) and b.stop == (3, 4)
    assert all(type(x) is int for x in b.start + b.stop)
    assert b == Box((1, 2), (3, 4))
    assert hash(b) == hash(Box((1, 2), (3, 4)))
    assert len({b, Box((1, 2), (3, 4))}) == 1


def test_is_frozen() -> None:
    b = Box((0,), (1,))
    with pytest.raises(AttributeError):
        b.start = (5,)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("start", "stop", "fragment"),
    [
        ((0, 0), (1,), "different numbers of axes"),
        ((0, 5), (1, 4), "axis 1"),
        ((0.5,), (1,), r"start\[0\] must be an integer, got 0.5 \(float\)"),
        ((True,), (1,), "bool"),
        ("ab", (1, 2), "sequence"),
    ],
)
def test_invalid_boxes_raise_config_error(start: object, stop: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        Box(start, stop)  # type: ignore[arg-type]


def test_properties_and_from_shape() -> None:
    b = Box.from_shape((2, 3, 4), start=(1, 1, 1))
    assert b.stop == (3, 4, 5)
    assert (b.shape, b.size, b.ndim, b.is_empty) == ((2, 3, 4), 24, 3, False)
    assert Box((0, 0), (0, 5)).is_empty and Box((0, 0), (0, 5)).size == 0


def test_padded_cropped_examples() -> None:
    b = Box((10, 10), (20, 20))
    assert b.padded(2) == Box((8, 8), (22, 22))
    assert b.padded((1, 2)) == Box((9, 8), (21, 22))
    assert b.padded([(1, 0), (0, 3)]) == Box((9, 10), (20, 23))
    assert b.cropped(5) == Box((15, 15), (15, 15))
    with pytest.raises(ConfigError, match="negative shape"):
        b.cropped(6)
    with pytest.raises(ConfigError, match="3 entries"):
        b.padded((1, 2, 3))


@settings(max_examples=80, deadline=None)
@given(box_and_pad())
def test_padded_then_cropped_is_identity(bp: tuple[Box, object]) -> None:
    box, pad = bp
    grown = box.padded(pad)  # type: ignore[arg-type]
    assert grown.contains(box)
    assert grown.cropped(pad) == box  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(box_pairs())
def test_intersection_commutes_and_is_contained(pair: tuple[Box, Box]) -> None:
    a, b = pair
    i = a.intersection(b)
    assert i == b.intersection(a)
    assert a.contains(i) and b.contains(i)
    # Every point of both boxes is in the intersection, checked on a dense grid.
    ma, mb, mi = (_mask(x, -50, 80) for x in (a, b, i))
    assert np.array_equal(ma & mb, mi)


@settings(max_examples=80, deadline=None)
@given(box_pairs())
def test_union_contains_both_and_is_tight(pair: tuple[Box, Box]) -> None:
    a, b = pair
    u = a.union(b)
    assert u.contains(a) and u.contains(b)
    if not (a.is_empty and b.is_empty):  # two empty boxes: either one is a valid answer
        assert u == b.union(a)
    if not a.is_empty and not b.is_empty:
        for d in range(a.ndim):
            assert u.start[d] == min(a.start[d], b.start[d])
            assert u.stop[d] == max(a.stop[d], b.stop[d])


def test_disjoint_intersection_is_empty() -> None:
    i = Box((0, 0), (2, 2)).intersection(Box((5, 0), (6, 2)))
    assert i.is_empty and i.size == 0


def test_contains_points_and_mismatched_dims() -> None:
    b = Box((0, 0), (2, 2))
    assert b.contains((1, 1)) and not b.contains((2, 0))
    assert b.contains(Box((5, 5), (5, 9)))  # empty boxes are everywhere
    with pytest.raises(ConfigError, match="3-d"):
        b.intersection(Box((0, 0, 0), (1, 1, 1)))


@settings(max_examples=80, deadline=None)
@given(boxes(), st.integers(1, 9), st.integers(-10, 10))
def test_snapped_directions(box: Box, grid: int, offset: int) -> None:
    outer = box.snapped(grid, offset, "outer")
    inner = box.snapped(grid, offset, "inner")
    assert outer.contains(box) and box.contains(inner)
    for snapped in (
        outer,
        inner,
        box.snapped(grid, offset, "down"),
        box.snapped(grid, offset, "up"),
    ):
        assert all((x - offset) % grid == 0 for x in snapped.start + snapped.stop)
    down, up = box.snapped(grid, offset, "down"), box.snapped(grid, offset, "up")
    for d in range(box.ndim):
        assert down.start[d] <= box.start[d] < down.start[d] + grid
        assert up.stop[d] - grid < box.stop[d] <= up.stop[d]
        assert outer.stop[d] - outer.start[d] - box.shape[d] < 2 * grid


def test_snapped_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="positive"):
        Box((0,), (4,)).snapped(0)
    with pytest.raises(ConfigError, match="direction"):
        Box((0,), (4,)).snapped(2, direction="sideways")  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None)
@given(boxes(), st.lists(COORD, min_size=3, max_size=3))
def test_translated_round_trip(box: Box, off: list[int]) -> None:
    moved = box.translated(off[: box.ndim])
    assert moved.shape == box.shape
    assert moved.translated([-x for x in off[: box.ndim]]) == box
    assert box.translated(2) == box.translated([2] * box.ndim)


def test_slices_index_the_right_region() -> None:
    data = np.arange(100).reshape(10, 10)
    region = Box((1, 1), (9, 9))
    b = Box((2, 3), (4, 7))
    sub = data[region.slices()]
    assert np.array_equal(sub[b.slices(relative_to=region)], data[b.slices()])


def _mask(box: Box, lo: int, hi: int) -> np.ndarray:
    """Boolean mask of ``box`` on the grid ``[lo, hi)^ndim``."""
    shape = (hi - lo,) * box.ndim
    mask = np.zeros(shape, dtype=bool)
    clip = box.intersection(Box((lo,) * box.ndim, (hi,) * box.ndim))
    mask[clip.translated(-lo).slices()] = True
    return mask


def test_pickles_and_copies_as_a_value() -> None:
    import copy
    import pickle

    b = Box((1, -2), (3, 4))
    for clone in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
        assert clone == b and hash(clone) == hash(b)
