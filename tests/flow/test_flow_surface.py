"""The rest of the flow's surface: fn_kwargs, reduction chunks as an upper bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import apply

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")


def scaled(src: np.ndarray, *, factor: int, offset: int = 0) -> np.ndarray:
    return src * factor + offset


# --- fn_kwargs -------------------------------------------------------------------------


def test_fn_kwargs_reach_fn_and_name_the_flow(files: Any) -> None:
    data = files.random((16, 16), "uint8") // 4
    src = files.source(data, (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint16")
    kw: dict[str, Any] = dict(chunk_sizes=[(8, 8)], intermediates=files.root / "t")
    first = apply(scaled, src, dst, fn_kwargs={"factor": 3}, **kw)
    np.testing.assert_array_equal(dst.read(dst.bounds), data.astype("uint16") * 3)
    # the same values: the same flow, which resume finds finished
    again = apply(scaled, src, dst, fn_kwargs={"factor": 3}, resume=True, **kw)
    assert again.flow_id == first.flow_id and again.finished_before
    # another value: another flow, which runs
    other = apply(scaled, src, dst, fn_kwargs={"factor": 2, "offset": 1}, resume=True, **kw)
    assert other.flow_id != first.flow_id and not other.finished_before
    np.testing.assert_array_equal(dst.read(dst.bounds), data.astype("uint16") * 2 + 1)


@pytest.mark.parametrize(
    ("fn_kwargs", "message"),
    [
        ({"src": 1}, r"fn_kwargs\['src'\] clashes with input 'src''s array"),
        ({"box": 1}, r"fn_kwargs\['box'\] clashes with the chunk's box"),
        ({"factor": 2, "gain": 1}, r"does not accept fn_kwargs \['factor', 'gain'\]"),
        ([("factor", 2)], r"fn_kwargs must be a dict"),
    ],
)
def test_refused_fn_kwargs_write_nothing(
    files: Any, tmp_path: Path, fn_kwargs: Any, message: str
) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint16")
    with pytest.raises(ConfigError, match=message):
        apply(
            scaled,
            src,
            dst,
            fn_kwargs=fn_kwargs,
            chunk_sizes=[(8, 8)],
            intermediates=tmp_path / "t",
        )
    assert not (tmp_path / "t").exists() and not dst.read(dst.bounds).any()


# --- max_reduction_chunk_size: an upper bound -------------------------------------------


def test_reduction_chunk_rounds_down_to_whole_dst_chunks(files: Any) -> None:
    data = files.random((48, 40), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((48, 40), (8, 8), "float32")
    report = apply(
        lambda src: src,
        src,
        dst,
        chunk_sizes=[(24, 20)],
        blend_pads=2,
        max_reduction_chunk_size=(20, 13),  # -> (16, 8): 3 x 5 reduction boxes
        intermediates=files.root / "t",
    )
    assert report.reductions == 3 * 5
    np.testing.assert_array_equal(dst.read(Box((0, 0), (48, 40))), data)


# --- generators: no inputs --------------------------------------------------------------


def coordinates(box: Box) -> np.ndarray:
    """Each voxel's flat index in a 30 x 26 volume: a generator that needs only its box."""
    rows, cols = np.indices(box.shape) + np.reshape(box.start, (2, 1, 1))
    return (rows * 26 + cols).astype("int32")


@pytest.mark.parametrize(
    "kw",
    [
        dict(chunk_sizes=[(10, 13)]),
        dict(chunk_sizes=[(12, 12), (8, 8)], crop_pads=[0, 2], blend_pads=[2, 0], expand_bbox=True),
        dict(),  # automatic sizes from dst alone
    ],
    ids=["one level", "blend past the edge", "automatic"],
)
def test_generator_without_inputs_fills_dst(files: Any, kw: dict[str, Any]) -> None:
    dst = files.empty((30, 26), (8, 8), "int32")
    report = apply(coordinates, {}, dst, intermediates=files.root / "t", **kw)
    expected = np.arange(30 * 26, dtype="int32").reshape(30, 26)
    np.testing.assert_array_equal(dst.read(dst.bounds), expected)
    assert report.bytes_read == 0
