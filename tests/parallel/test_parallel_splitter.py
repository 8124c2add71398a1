"""Splitting budgets: exact split counts for given budgets and lengths."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.parallel import LengthSplitter, Splitter, plan_pieces


@pytest.mark.parametrize(("workers", "budget"), [(1, 4), (2, 8), (3, 12), (16, 64)])
def test_budget_is_four_splits_per_worker(workers: int, budget: int) -> None:
    assert Splitter(workers).splits == budget


def test_try_split_spends_one_until_exhausted() -> None:
    s = Splitter(1, splits=3)
    assert [s.try_split() for _ in range(5)] == [True, True, True, False, False]
    assert s.splits == 0


@pytest.mark.parametrize(
    ("remaining", "parent", "child"), [(0, 0, 0), (1, 1, 0), (7, 4, 3), (8, 4, 4)]
)
def test_clone_gives_half_of_the_remaining_to_the_child(
    remaining: int, parent: int, child: int
) -> None:
    s = Splitter(1, splits=remaining)
    c = s.clone()
    assert (s.splits, c.splits) == (parent, child)
    assert c.initial == s.initial == remaining


def test_rearm_restores_at_least_the_initial_budget() -> None:
    s = Splitter(2)
    for _ in range(8):
        s.try_split()
    assert s.splits == 0
    s.rearm()
    assert s.splits == 8
    big = Splitter(2)
    big.splits = 20
    big.rearm()
    assert big.splits == 20


def test_length_splitter_refuses_below_twice_min_len_without_spending() -> None:
    s = LengthSplitter(2, min_len=50)
    assert not s.try_split_len(99)
    assert s.splits == 8
    assert s.try_split_len(100)
    assert s.splits == 7


@pytest.mark.parametrize(
    ("workers", "min_len", "n", "sizes"),
    [
        (2, 100, 199, [199]),
        (2, 100, 300, [166, 134]),
        (2, 100, 1_000, [111] * 8 + [112]),
        (2, 100, 10_000, [1111] * 8 + [1112]),
        (1, 1, 10, [2, 2, 2, 2, 2]),
        (1, 3, 10, [3, 3, 4]),  # 10 -> 6|4 (budgets 2|1); 6 -> 4|2 clamped to 3|3
        (4, 1, 17, [1] * 16 + [1]),
    ],
)
def test_plan_pieces_exact_sizes(workers: int, min_len: int, n: int, sizes: list[int]) -> None:
    pieces = plan_pieces(0, n, LengthSplitter(workers, min_len))
    assert [b - a for a, b in pieces] == sizes


def test_a_clone_of_a_length_splitter_keeps_min_len() -> None:
    child = LengthSplitter(2, min_len=7).clone()
    assert isinstance(child, LengthSplitter)
    assert child.min_len == 7


@settings(max_examples=200, deadline=None)
@given(
    workers=st.integers(1, 8),
    min_len=st.integers(1, 50),
    n=st.integers(0, 5_000),
    offset=st.integers(-100, 100),
)
def test_plan_pieces_tile_the_range_and_respect_min_len(
    workers: int, min_len: int, n: int, offset: int
) -> None:
    pieces = plan_pieces(offset, offset + n, LengthSplitter(workers, min_len))
    if n == 0:
        assert pieces == []
        return
    assert pieces[0][0] == offset and pieces[-1][1] == offset + n
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(pieces))
    assert len(pieces) <= 4 * workers + 1
    if n >= min_len:
        assert all(b - a >= min_len for a, b in pieces)
    if n >= 2 * (4 * workers + 1) * min_len:  # long enough: the whole budget is spent
        assert len(pieces) == 4 * workers + 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"workers": 2, "splits": -1}, "splits"),
        ({"workers": True}, "workers"),
    ],
)
def test_bad_parameters_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        Splitter(**kwargs)


def test_bad_min_len_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="min_len"):
        LengthSplitter(2, min_len=0)
