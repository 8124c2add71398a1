"""``apply(cast=...)``: fn's output dtype against dst's, and the voxels that saturate.

By default a cast that can saturate (a narrower integer, a float into an integer,
anything into bool) is refused before anything is written; a float into a narrower
float and an integer into a float that holds its range are not. Allowed by
``cast="same_kind"`` or ``"unsafe"``, saturated voxels are counted and warned of.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError, FlowOutputError, volume
from chunkgraph.flow import SaturationWarning, apply, reduce_deferred
from chunkgraph.geometry import Box

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")

SHAPE = (32, 32)


def chunk_labels(mask: np.ndarray, box: Box) -> np.ndarray:
    """The apply flow page's labelling pattern: ids unique across chunks, the chunk's grid index in
    the high 32 bits (here each voxel is its own object). Chunk 0's ids fit 32 bits."""
    chunk = int(np.ravel_multi_index([s // 16 for s in box.start], (2, 2)))
    ids = np.arange(mask.size, dtype="uint64").reshape(mask.shape) + 1
    return np.where(mask, ids + (np.uint64(chunk) << np.uint64(32)), 0).astype("uint64")


def _mask(tmp_path: Path) -> Any:
    mask = volume.create(str(tmp_path / "mask.zarr"), SHAPE, (16, 16), "bool")
    mask.write(mask.bounds, np.ones(SHAPE, bool))
    return mask


def test_uint64_labels_into_a_uint32_dst_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    mask = _mask(tmp_path)
    ids = volume.create(str(tmp_path / "ids.zarr"), SHAPE, (16, 16), "uint32")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigError) as info:
        apply(chunk_labels, mask, ids, chunk_sizes=[(16, 16)])
    message = str(info.value)
    assert "cast='safe' (the default) refuses fn's output dtype uint64" in message
    assert "for dst's dtype uint32" in message and "[0, 4294967295]" in message
    assert "give dst dtype uint64, or pass cast='same_kind'" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not ids.read(ids.bounds).any()


def test_without_the_probe_the_first_chunk_refuses_it_in_the_run(tmp_path: Path) -> None:
    mask = _mask(tmp_path)
    ids = volume.create(str(tmp_path / "ids.zarr"), SHAPE, (16, 16), "uint32")
    with pytest.raises(ExceptionGroup) as info:
        apply(chunk_labels, mask, ids, chunk_sizes=[(16, 16)], probe=False, executor="sync",
              retries=0)  # fmt: skip
    cause = info.value.exceptions[0].__cause__
    assert isinstance(cause, FlowOutputError)
    assert "uint64 (on chunk Box(start=(0, 0), stop=(16, 16)))" in str(cause)
    assert "cast='same_kind'" in str(cause)


def test_a_dtype_that_changes_from_chunk_to_chunk_is_checked_on_every_chunk(
    tmp_path: Path,
) -> None:
    """The probe sees uint8 zeros (an empty first chunk); a later chunk returns uint64."""
    mask = _mask(tmp_path)
    ids = volume.create(str(tmp_path / "ids.zarr"), SHAPE, (16, 16), "uint32")

    def sometimes_wide(mask: np.ndarray, box: Box) -> np.ndarray:
        if box.start == (0, 0):
            return np.zeros(mask.shape, "uint8")
        return chunk_labels(mask, box)

    with pytest.raises(ExceptionGroup) as info:
        apply(sometimes_wide, mask, ids, chunk_sizes=[(16, 16)], executor="sync", retries=0)
    causes = [e.__cause__ for e in info.value.exceptions]
    assert all(isinstance(c, FlowOutputError) for c in causes)
    assert "refuses fn's output dtype uint64" in str(causes[0])


def test_allowed_narrowing_saturates_counts_and_warns(tmp_path: Path) -> None:
    mask = _mask(tmp_path)
    ids = volume.create(str(tmp_path / "ids.zarr"), SHAPE, (16, 16), "uint32")
    with pytest.warns(SaturationWarning) as caught:
        report = apply(chunk_labels, mask, ids, chunk_sizes=[(16, 16)], cast="same_kind")
    # Chunks 1, 2 and 3 (768 voxels) have ids past 2**32; chunk 0's fit.
    assert report.saturated_voxels == 768
    [message] = [str(w.message) for w in caught]
    assert message.startswith("768 voxel(s) of dst") and "uint32 ([0, 4294967295])" in message
    assert "cast='same_kind' allowed the cast" in message
    out = ids.read(ids.bounds)
    assert (out[:16, :16] == np.arange(1, 257).reshape(16, 16)).all()
    assert (out[16:] == 2**32 - 1).all() and (out[:, 16:] == 2**32 - 1).all()


@pytest.mark.parametrize(
    "flow",
    [
        dict(chunk_sizes=[(16, 16), (8, 8)]),
        dict(chunk_sizes=[(16, 16), (8, 8)], skip_intermediates=True),
        dict(chunk_sizes=[(16, 16), (10, 10)], crop_pads=[2, 1], blend_pads=[0, 1]),
        dict(chunk_sizes=[(16, 16), (10, 10)], blend_pads=[2, 0], blend_modes="linear"),
        dict(chunk_sizes=[(16, 16), (10, 10)], blend_pads=[2, 0], blend_modes="max"),
        dict(chunk_sizes=[(12, 12), (6, 6)], crop_pads=[0, 2], expand_bbox=True),
    ],
    ids=["levels", "direct", "lower-blend", "top-blend", "top-max", "past-the-edge"],
)
def test_every_voxel_that_saturates_is_counted_once(tmp_path: Path, flow: dict[str, Any]) -> None:
    """float * 2 of integers 0..255 into uint8: exactly the voxels >= 128 saturate, however
    the flow is cut (overlaps, crops and the margin past dst's edge count no voxel twice)."""
    data = np.random.default_rng(5).integers(0, 256, SHAPE).astype("uint8")
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "uint8")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "uint8")
    with pytest.warns(SaturationWarning):
        report = apply(lambda x: x * 2.0, src, dst, cast="unsafe", **flow)
    assert report.saturated_voxels == int((data >= 128).sum())
    expected = np.minimum(data.astype(int) * 2, 255)
    np.testing.assert_array_equal(dst.read(dst.bounds), expected)


def test_float64_into_float32_is_allowed_and_only_overflow_is_counted(tmp_path: Path) -> None:
    data = np.linspace(-2, 2, 32 * 32).reshape(SHAPE).astype("float32")
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (16, 16), "float32")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, (16, 16), "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float64 -> float32 rounds: nothing to say
        report = apply(lambda x: x.astype("float64") / 3.0, src, dst, chunk_sizes=[(16, 16)])
    assert report.saturated_voxels == 0
    np.testing.assert_array_equal(dst.read(dst.bounds), (data.astype("float64") / 3.0).astype("f4"))
    # Past float32's largest value (3.4e38) a float64 becomes inf: counted.
    with pytest.warns(SaturationWarning, match=r"512 voxel.* written as \+-inf, past the limits"):
        report = apply(lambda x: np.where(x > 0, 1e39, x.astype("float64")), src, dst,
                       chunk_sizes=[(16, 16)])  # fmt: skip
    assert report.saturated_voxels == 512 and np.isinf(dst.read(dst.bounds)).sum() == 512


@pytest.mark.parametrize(
    ("src_dtype", "dst_dtype", "fn", "needed"),
    [
        ("uint16", "float32", lambda x: x, None),  # integers float32 holds exactly
        ("int64", "float64", lambda x: x, None),  # numpy's "safe": rounds past 2**53
        ("int32", "float32", lambda x: x, "same_kind"),  # rounds past 2**24
        ("uint8", "bool", lambda x: x % 2, "unsafe"),  # a 0/1 uint8 is not a mask
        ("uint8", "bool", lambda x: x % 2 == 1, None),
        ("uint8", "int16", lambda x: x.astype("float32") - 100, "unsafe"),
        ("int16", "int8", lambda x: x // 256, "same_kind"),
    ],
)
def test_which_casts_each_rule_allows(
    tmp_path: Path, src_dtype: str, dst_dtype: str, fn: Any, needed: str | None
) -> None:
    data = (np.arange(32 * 32) % 200).reshape(SHAPE).astype(src_dtype)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (16, 16), src_dtype)
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, (16, 16), dst_dtype)
    # An integer input wider than dst is refused up front unless cast allows narrowing.
    kw: dict[str, Any] = dict(chunk_sizes=[(16, 16)], executor="sync")
    if needed is not None:
        with pytest.raises(ConfigError, match=f"cast={needed!r}"):
            apply(fn, src, dst, **kw)
        kw["cast"] = needed
    apply(fn, src, dst, **kw)
    expected = np.asarray(fn(data))
    if expected.dtype.kind == "f" and np.dtype(dst_dtype).kind in "iu":
        expected = np.rint(expected)
    np.testing.assert_array_equal(dst.read(dst.bounds), expected.astype(dst_dtype))


def test_a_deferred_reduction_counts_what_saturates_as_apply_does(tmp_path: Path) -> None:
    data = np.random.default_rng(6).integers(0, 256, SHAPE).astype("uint8")
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "uint8")
    src.write(src.bounds, data)
    kw: dict[str, Any] = dict(chunk_sizes=[(16, 16)], blend_pads=4, cast="unsafe")
    direct = volume.create(str(tmp_path / "direct.zarr"), SHAPE, (8, 8), "uint8")
    later = volume.create(str(tmp_path / "later.zarr"), SHAPE, (8, 8), "uint8")
    with pytest.warns(SaturationWarning):
        applied = apply(lambda x: x * 2.0, src, direct, blend_modes="linear", **kw)
    deferred = apply(lambda x: x * 2.0, src, later, blend_modes="defer", **kw)
    assert deferred.saturated_voxels == 0  # nothing is cast into dst yet
    with pytest.warns(SaturationWarning, match=f"{applied.saturated_voxels} voxel"):
        reduced = reduce_deferred(deferred, later, blend_mode="linear")
    assert reduced.saturated_voxels == applied.saturated_voxels == int((data >= 128).sum())
    np.testing.assert_array_equal(later.read(later.bounds), direct.read(direct.bounds))


def test_without_dst_nothing_is_cast(tmp_path: Path) -> None:
    src = _mask(tmp_path)
    report = apply(chunk_labels, src, None, chunk_sizes=[(16, 16)])
    assert all(v.dtype == np.uint64 for v in report.values.values())
    with pytest.raises(ConfigError, match="cast must be one of"):
        apply(chunk_labels, src, None, chunk_sizes=[(16, 16)], cast="no")
