"""Guards of apply: out-of-range outputs saturate; an unknown executor fails before any write."""

from __future__ import annotations

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.geometry import Box


@pytest.mark.parametrize("blend", [0, 2], ids=["copy", "blended"])
@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda x: x.astype("int32") * 2, 255),  # 400 would wrap to 144
        (lambda x: x.astype("int16") - 300, 0),  # -100 would wrap to 156
        (lambda x: x.astype("float64") * 10.0, 255),
    ],
    ids=["int-over", "int-under", "float-over"],
)
def test_out_of_range_outputs_saturate(fn: object, expected: int, blend: int) -> None:
    src = volume.create("sat-src", (16, 16), (8, 8), "uint8", backend="memory")
    src.write(src.bounds, np.full((16, 16), 200, np.uint8))
    dst = volume.create("sat-dst", (16, 16), (8, 8), "uint8", backend="memory")
    try:
        volume.apply(fn, src, dst, chunk_sizes=[8], blend_pads=blend, executor="sync")  # type: ignore[arg-type]
        assert np.all(dst.read(Box.from_shape((16, 16))) == expected)
    finally:
        volume.remove("sat-src")
        volume.remove("sat-dst")


def test_an_unknown_executor_is_refused_before_anything_is_written(tmp_path: object) -> None:
    from pathlib import Path

    from chunkgraph import ConfigError

    root = Path(str(tmp_path))
    src = volume.create(str(root / "s.zarr"), (16, 16), (8, 8), "uint8")
    dst = volume.create(str(root / "d.zarr"), (16, 16), (8, 8), "uint8")
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(ConfigError, match="executor must be one of"):
        volume.apply(lambda x: x, src, dst, chunk_sizes=[8], blend_pads=2, executor="gpu")  # type: ignore[arg-type]
    assert sorted(p.name for p in root.iterdir()) == before


@pytest.mark.parametrize(
    ("chunks", "blends", "crops"),
    [([16], 3, 0), ([16, 11], [3, 1], [0, 1])],
    ids=["one-level-blend", "two-level-blend-crop"],
)
def test_identity_keeps_negative_zero(chunks: list[int], blends: object, crops: object) -> None:
    """-0.0 and +0.0 differ in their bits; an identity flow must keep both."""
    data = np.random.default_rng(3).standard_normal((32, 32)).astype("float32")
    data[5, 5] = data[16, 16] = data[0, 31] = -0.0
    data[6, 6] = 0.0
    src = volume.create("nz-src", (32, 32), (8, 8), "float32", backend="memory")
    src.write(src.bounds, data)
    dst = volume.create("nz-dst", (32, 32), (8, 8), "float32", backend="memory")
    try:
        volume.apply(
            lambda x: x,
            src,
            dst,
            chunk_sizes=chunks,
            blend_pads=blends,
            crop_pads=crops,
            executor="sync",
        )
        out = dst.read(Box.from_shape((32, 32)))
        assert out.tobytes() == data.tobytes()
    finally:
        volume.remove("nz-src")
        volume.remove("nz-dst")
