"""Box.split / split_arrays: the three modes, strides, offsets, C order, the vectorised path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box


@st.composite
def box_and_chunk(draw: st.DrawFn) -> tuple[Box, tuple[int, ...], tuple[int, ...]]:
    n = draw(st.integers(1, 3))
    start = draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n))
    shape = draw(st.lists(st.integers(0, 17), min_size=n, max_size=n))
    chunk = tuple(draw(st.lists(st.integers(1, 6), min_size=n, max_size=n)))
    offset = tuple(draw(st.lists(st.integers(-7, 7), min_size=n, max_size=n)))
    box = Box(start, [a + s for a, s in zip(start, shape, strict=True)])
    return box, chunk, offset


@settings(max_examples=100, deadline=None)
@given(box_and_chunk())
def test_shrink_covers_the_box_exactly_once(
    case: tuple[Box, tuple[int, ...], tuple[int, ...]],
) -> None:
    box, chunk, offset = case
    chunks = box.split(chunk, offset=offset, mode="shrink")
    counts = np.zeros(box.shape, dtype=int)
    for c in chunks:
        assert box.contains(c) and not c.is_empty
        # Grid alignment: every interior corner sits on offset + k * chunk.
        for d in range(box.ndim):
            if c.start[d] != box.start[d]:
                assert (c.start[d] - offset[d]) % chunk[d] == 0
        counts[c.slices(relative_to=box)] += 1
    assert np.all(counts == 1)
    assert sum(c.size for c in chunks) == box.size


@settings(max_examples=100, deadline=None)
@given(box_and_chunk())
def test_expand_keeps_full_chunks_and_covers(
    case: tuple[Box, tuple[int, ...], tuple[int, ...]],
) -> None:
    box, chunk, offset = case
    chunks = box.split(chunk, offset=offset, mode="expand")
    shrunk = box.split(chunk, offset=offset, mode="shrink")
    assert len(chunks) == len(shrunk)
    for big, small in zip(chunks, shrunk, strict=True):
        assert big.shape == chunk
        assert big.intersection(box) == small


def test_c_order_and_grid_shape() -> None:
    box = Box((0, 0, 0), (4, 6, 2))
    starts, stops, grid = box.split_arrays((2, 3, 1))
    assert grid == (2, 2, 2)
    expected = [
        tuple(x * c for x, c in zip(idx, (2, 3, 1), strict=True))
        for idx in itertools.product(range(2), range(2), range(2))
    ]
    assert [tuple(r) for r in starts.tolist()] == expected
    assert np.array_equal(stops - starts, np.tile([2, 3, 1], (8, 1)))
    assert starts.dtype == np.int64 and stops.dtype == np.int64


def test_stride_smaller_than_chunk_gives_overlapping_windows() -> None:
    windows = Box((0,), (10,)).split(4, stride=2, mode="exact")
    assert [b.start[0] for b in windows] == [0, 2, 4, 6]
    assert windows[-1].stop == (10,)


def test_stride_larger_than_chunk_leaves_gaps() -> None:
    assert Box((0,), (10,)).split(2, stride=5, mode="shrink") == [
        Box((0,), (2,)),
        Box((5,), (7,)),
    ]


def test_offset_moves_the_grid() -> None:
    got = Box((3,), (13,)).split(4, offset=1, mode="shrink")
    assert got == [Box((3,), (5,)), Box((5,), (9,)), Box((9,), (13,))]


def test_exact_errors_name_axis_and_suggest_sizes() -> None:
    with pytest.raises(ConfigError, match=r"axis 1 of size 10 .*\[1, 2, 5, 10\]"):
        Box((0, 0), (8, 10)).split((4, 4))
    with pytest.raises(ConfigError, match="not on the chunk grid"):
        Box((1,), (9,)).split(4, offset=0)
    with pytest.raises(ConfigError, match="box sizes that fit: 10 or 13"):
        Box((0,), (11,)).split(4, stride=3)


def test_bad_chunk_and_mode() -> None:
    with pytest.raises(ConfigError, match="positive"):
        Box((0,), (4,)).split(0)
    with pytest.raises(ConfigError, match="mode"):
        Box((0,), (4,)).split(2, mode="pad")  # type: ignore[arg-type]


def test_empty_axis_gives_no_chunks() -> None:
    starts, stops, grid = Box((0, 0), (0, 8)).split_arrays(2)
    assert grid == (0, 4) and starts.shape == (0, 2) and stops.shape == (0, 2)


def test_a_million_chunks_vectorised() -> None:
    starts, stops, grid = Box((0, 0, 0), (1000, 1000, 1000)).split_arrays(10)
    assert grid == (100, 100, 100) and starts.shape == (1_000_000, 3)
    assert starts[123_456].tolist() == [120, 340, 560]
    assert stops[-1].tolist() == [1000, 1000, 1000]


@settings(max_examples=100, deadline=None)
@given(
    st.integers(-20, 20),
    st.integers(1, 40),
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(-9, 9),
)
def test_strided_windows_follow_the_rule(
    start: int, size: int, chunk: int, stride: int, offset: int
) -> None:
    """1-d check of the documented rule for every stride (overlapping, tiling, gapped)."""
    box = Box((start,), (start + size,))
    starts, stops, (n,) = box.split_arrays(chunk, stride, offset, mode="expand")
    firsts = starts[:, 0].tolist()
    assert n == len(firsts) >= 1
    assert all((a - offset) % stride == 0 for a in firsts)
    assert firsts == sorted(firsts) and stops[:, 0].tolist() == [a + chunk for a in firsts]
    assert firsts[0] <= start < firsts[0] + stride  # the window whose cell holds the start
    assert all(a < start + size for a in firsts)  # no window begins past the box
    if stride <= chunk:  # windows overlap or tile: together they cover the box, the last ends it
        assert firsts[-1] + chunk >= start + size
        assert n == 1 or firsts[-2] + chunk < start + size
