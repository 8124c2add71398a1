"""Block reductions' fast paths (sorting network, shift rounding, slabs) give the general
path's results bit for bit, hold a slab's temporaries rather than the region's, and the
pyramid's small trailing levels come in one pass."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from tests.flow.test_downsample import _source, reference

import chunkgraph.jobs._block_reduce as br
from chunkgraph import downsample, volume
from chunkgraph.jobs._block_reduce import block_reduce

FACTORS = [(2, 2, 2), (2, 2, 1), (3, 3, 3), (1, 2, 4)]


def _data(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return rng.normal(0, 1000, shape).astype(dtype)
    info = np.iinfo(kind)
    # Few distinct values near both ends of the range: ties for mode and median, sums
    # that need the wide accumulator, and the largest ids labels use.
    values = np.array([info.min, info.min + 1, 3, info.max - 1, info.max], dtype)
    return rng.choice(values, shape)


def _exact(data: np.ndarray, factor: tuple[int, ...], method: str) -> np.ndarray:
    """``reference``, with the mean of integers in Python integers: float64 loses the
    last digits of 64-bit sums, and the definition is the exact quotient rounded."""
    if method != "mean" or data.dtype.kind not in "iu":
        return reference(data, factor, method)
    shape = tuple(-(-n // f) for n, f in zip(data.shape, factor, strict=True))
    out = np.zeros(shape, data.dtype)
    for index in itertools.product(*(range(n) for n in shape)):
        block = data[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factor, strict=True))]
        total, count = sum(int(v) for v in block.ravel()), block.size
        quotient, rest = divmod(total, count)
        out[index] = quotient + (2 * rest > count or (2 * rest == count and quotient % 2 == 1))
    return out


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize(
    ("dtype", "method"),
    [
        ("uint8", "mean"), ("uint16", "mean"), ("int16", "mean"), ("float32", "mean"),
        ("int64", "mean"), ("uint32", "mode"), ("uint64", "mode"), ("int32", "mode"),
        ("uint8", "median"), ("float32", "median"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("slabs", [False, True])
def test_fast_paths_equal_the_per_block_definition(
    monkeypatch: pytest.MonkeyPatch, factor: tuple[int, ...], dtype: str, method: str, slabs: bool
) -> None:
    if slabs:  # every input taken in slabs of a block or two
        monkeypatch.setattr(br, "SLAB_BYTES", 64)
    # Whole blocks (the fast paths) and partial edge blocks (the general path).
    for shape in (tuple(6 * f for f in factor), (13, 7, 9)):
        data = _data(dtype, shape, seed=len(shape) + sum(factor))
        got = block_reduce(data, factor, method)
        want = _exact(data, factor, method)
        assert got.dtype == data.dtype
        assert got.tobytes() == want.tobytes(), (shape, factor, dtype, method)


def test_a_median_of_floats_with_nan_sorts_nan_last_as_before() -> None:
    data = np.arange(64, dtype=np.float32).reshape(4, 4, 4)
    data[0, 0, 0] = data[2, 2, 2] = data[3, 3, 3] = np.nan
    assert (
        block_reduce(data, (2, 2, 2), "median").tobytes()
        == reference(data, (2, 2, 2), "median").tobytes()
    )


def test_channels_pass_through_the_fast_paths() -> None:
    data = _data("uint32", (3, 8, 8, 4), seed=5)
    for method in ("mode", "mean", "median"):
        got = block_reduce(data, (2, 2, 2), method)
        for c in range(3):
            np.testing.assert_array_equal(got[c], reference(data[c], (2, 2, 2), method))


def test_mode_ties_go_to_the_smallest_value() -> None:
    # Two values twice each, and four singletons: 1 and 9 tie at two; 1 wins.
    block = np.array([9, 1, 5, 9, 1, 7, 8, 6], np.uint64).reshape(2, 2, 2)
    assert block_reduce(block, (2, 2, 2), "mode").item() == 1
    descending = np.arange(8, dtype=np.uint32)[::-1].reshape(2, 2, 2)
    assert block_reduce(descending, (2, 2, 2), "mode").item() == 0  # all once: the smallest


@pytest.mark.parametrize("k", range(1, 17))
def test_the_sorting_network_sorts_every_input_of_zeros_and_ones(k: int) -> None:
    # The 0-1 principle: a comparator network that sorts every 0/1 input sorts every input.
    network = br._network(k)
    for bits in itertools.product((0, 1), repeat=k):
        values = list(bits)
        for i, j in network:
            if values[i] > values[j]:
                values[i], values[j] = values[j], values[i]
        assert values == sorted(values), (k, bits)


@pytest.mark.parametrize(("dtype", "method"), [("uint8", "mean"), ("uint32", "mode")])
def test_a_large_region_is_reduced_holding_a_slab_not_the_region(dtype: str, method: str) -> None:
    data = _data(dtype, (128, 128, 128), seed=3)  # 2 MiB uint8, 8 MiB uint32
    output = data.nbytes // 8
    tracemalloc.start()
    try:
        block_reduce(data, (2, 2, 2), method)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The output plus about a slab's temporaries: summing the whole region in a wider
    # type, or sorting it as rows, holds several times the region.
    assert peak < output + 4 * br.SLAB_BYTES, f"peak {peak} for a {data.nbytes}-byte region"


def test_the_small_levels_at_the_top_come_from_one_pass(tmp_path: Path) -> None:
    data = _data("uint32", (128, 128, 64), seed=7)
    src = _source(tmp_path, data, (32, 32, 32))
    report = downsample(src, factor=2, levels=3, method="mode", workers=2)
    # Level 1 alone makes 4 tasks for 2 workers (fusing level 2 would leave 1); level 2
    # is one task either way, so level 3 comes with it.
    assert report.levels_per_pass == (1, 2)
    expected = data
    for path in report.paths:
        expected = reference(expected, (2, 2, 2), "mode")
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


def test_offset_odd_shaped_levels_are_exact_through_every_pass(tmp_path: Path) -> None:
    data = _data("uint16", (70, 46, 21), seed=9)
    src = volume.create(
        str(tmp_path / "o.zarr"), data.shape, (16, 16, 8), "uint16", offset=(8, 16, 4)
    )
    src.write(src.bounds, data)
    report = downsample(src, factor=(2, 2, 1), levels=3, method="mean", workers=2)
    expected = data
    for path in report.paths:
        expected = reference(expected, (2, 2, 1), "mean")
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


def test_a_fused_pass_writes_its_first_level_straight_to_it(tmp_path: Path) -> None:
    data = _data("uint8", (128, 128, 64), seed=11)
    src = _source(tmp_path, data, (16, 16, 16))
    report = downsample(src, factor=2, levels=3, method="mean", workers=2)
    assert report.levels_per_pass[0] >= 2
    # Not through temporary layers written, read back and written again.
    assert [p.temporary_bytes for p in report.passes] == [0] * len(report.passes)
    assert report.passes[0].bytes_written == data.nbytes // 8
    expected = data
    for path in report.paths:
        expected = reference(expected, (2, 2, 2), "mean")
        level = volume.open(path)
        np.testing.assert_array_equal(level.read(level.bounds), expected)


@pytest.mark.parametrize("method", ["median", "mode", "max", "min"])
@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 3, 2), (2, 2, 2)])
def test_a_read_only_block_is_reduced_without_writing_into_it(
    method: str, shape: tuple[int, ...]
) -> None:
    """A chunk from the cache is read-only; where a block's voxels are a contiguous view
    already (one block along every axis but the last) the sorting network must still work
    on copies, not write into the chunk."""
    data = _data("uint8", shape, 5)
    data.flags.writeable = False
    kept = data.copy()
    factor = (1, 1, 2)
    np.testing.assert_array_equal(block_reduce(data, factor, method), _exact(kept, factor, method))
    np.testing.assert_array_equal(data, kept)
