"""parallel_sort equals numpy.sort: duplicates, NaN, empty, many dtypes, n-d."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkgraph._errors import ConfigError
from chunkgraph.parallel import WorkStealingPool, parallel_sort

# grain=2 forces the parallel path (quantile partition + parallel leaf sorts)
# on the small arrays a test can afford; None takes the measured grain.
test_grains = st.sampled_from([None, 1, 2, 7])

sortable_dtypes = st.one_of(
    hnp.integer_dtypes(),
    hnp.unsigned_integer_dtypes(),
    hnp.floating_dtypes(),
    hnp.complex_number_dtypes(),
    hnp.boolean_dtypes(),
    hnp.datetime64_dtypes(),
    hnp.timedelta64_dtypes(),
    hnp.byte_string_dtypes(max_len=4),
    hnp.unicode_string_dtypes(max_len=4),
)


def assert_same_as_numpy(values: np.ndarray, grain: int | None) -> None:
    original = values.copy()
    result = parallel_sort(values, grain=grain)
    expected = np.sort(values)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(values, original)  # input untouched


@settings(max_examples=120, deadline=None)
@given(
    values=hnp.arrays(sortable_dtypes, st.integers(0, 300)),
    grain=test_grains,
)
def test_equals_numpy_sort_for_many_dtypes(values: np.ndarray, grain: int | None) -> None:
    assert_same_as_numpy(values, grain)


@settings(max_examples=60, deadline=None)
@given(
    values=hnp.arrays(
        np.float64,
        st.integers(0, 2_000),
        elements=st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 3.0]),
    ),
    grain=test_grains,
)
def test_heavy_duplicates_nan_and_infinities(values: np.ndarray, grain: int | None) -> None:
    assert_same_as_numpy(values, grain)


@settings(max_examples=30, deadline=None)
@given(
    values=hnp.arrays(np.int32, hnp.array_shapes(min_dims=2, max_dims=3, max_side=12)),
    grain=test_grains,
)
def test_nd_arrays_sort_along_the_last_axis(values: np.ndarray, grain: int | None) -> None:
    assert_same_as_numpy(values, grain)


@pytest.mark.parametrize("workers", [1, 3, 4])
def test_large_array_on_several_pool_sizes(
    use_pool: Callable[[int], WorkStealingPool], workers: int
) -> None:
    use_pool(workers)
    rng = np.random.default_rng(workers)
    values = rng.integers(0, 1_000, 200_000).astype(np.int64)  # many duplicates
    assert_same_as_numpy(values, 1_000)
    floats = rng.standard_normal(200_000)
    floats[::97] = np.nan
    assert_same_as_numpy(floats, None)


def test_objects_and_lists_are_accepted() -> None:
    assert parallel_sort([3, 1, 2]).tolist() == [1, 2, 3]
    assert parallel_sort(np.array(["b", None, "a"], dtype=object)[[0, 2]]).tolist() == ["a", "b"]


def test_zero_dimensional_input_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="at least one axis"):
        parallel_sort(np.float64(1.0))


def test_bad_grain_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="grain"):
        parallel_sort(np.arange(10), grain=0)
