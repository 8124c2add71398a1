"""An identity ``fn`` must reproduce the source byte for byte in every valid configuration.

Each case also pre-fills the destination with other data and checks that the
voxels outside the bbox are untouched (reductions at an unaligned bbox edge
read-modify-write whole destination chunks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkgraph.geometry import Box
from chunkgraph.volume import apply


def identity(src: np.ndarray) -> np.ndarray:
    return src


def run_identity(
    files: Any,
    shape: tuple[int, ...],
    storage: tuple[int, ...],
    dtype: Any,
    backend: str = "zarr",
    seed: int = 0,
    **kwargs: Any,
) -> None:
    data = files.random(shape, dtype, seed)
    before = files.random(shape, dtype, seed + 1)
    src = files.source(data, storage, backend=backend)
    dst = files.source(before, storage, backend=backend)
    report = apply(identity, src, dst, intermediates=files.root / "tmp", **kwargs)
    out = dst.read(Box.from_shape(shape))
    region = report.bbox.slices()
    expected = before.copy()
    expected[region] = data[region]
    assert out.dtype == data.dtype
    np.testing.assert_array_equal(out, expected)
    top = kwargs["chunk_sizes"][0]
    grid = [s // c for s, c in zip(report.bbox.shape, top, strict=True)]
    assert report.tasks_per_level[0] == int(np.prod(grid))
    assert report.top_tasks_skipped == 0
    # temporaries are gone after success; only the completion record is kept
    kept = list((files.root / "tmp").iterdir())
    assert f"{report.flow_id}.done" in {p.name for p in kept} and not any(p.is_dir() for p in kept)


CASES_2D: dict[str, dict[str, Any]] = {
    "one level, no pads": dict(chunk_sizes=[(20, 18)]),
    "one level, crop": dict(chunk_sizes=[(10, 12)], crop_pads=3),
    "one level, linear blend": dict(chunk_sizes=[(10, 12)], blend_pads=3, blend_modes="linear"),
    "two levels, crop+blend quadratic": dict(
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 3)],
        blend_modes="quadratic",
    ),
    "two levels, blend only, bump, odd": dict(
        chunk_sizes=[(20, 18), (7, 13)], blend_pads=[(4, 4), (2, 3)], blend_modes="bump"
    ),
    "two levels, max": dict(
        chunk_sizes=[(20, 18), (8, 11)], blend_pads=[(2, 2), (1, 2)], blend_modes="max"
    ),
    "two levels, crop only at top": dict(
        chunk_sizes=[(10, 12), (6, 7)], crop_pads=[(1, 1), (0, 0)]
    ),
    "three levels, sizes differ per level": dict(
        chunk_sizes=[(20, 18), (13, 12), (17, 8)],
        crop_pads=[(1, 1), (1, 1), (0, 0)],
        blend_pads=[(2, 2), (1, 1), (0, 2)],
        blend_modes=["linear", "quadratic", "bump"],
    ),
    "bbox not aligned to storage": dict(
        chunk_sizes=[(10, 12), (8, 9)],
        crop_pads=[(1, 1), (0, 0)],
        blend_pads=[(2, 2), (1, 1)],
        bbox=Box((3, 5), (33, 29)),
    ),
    "skip intermediates, bottom crop": dict(
        chunk_sizes=[(8, 16), (8, 8)],
        crop_pads=[(0, 0), (3, 3)],
        skip_intermediates=True,
        bbox=Box((0, 0), (40, 32)),
    ),
    "max reduction chunk": dict(
        chunk_sizes=[(20, 18)], blend_pads=2, max_reduction_chunk_size=(8, 8)
    ),
}


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "float32"])
@pytest.mark.parametrize("case", sorted(CASES_2D))
def test_identity_2d(files: Any, case: str, dtype: str) -> None:
    run_identity(files, (40, 36), (8, 8), dtype, **CASES_2D[case])


def test_identity_auto_divisibility_non_divisible(files: Any) -> None:
    data = files.random((40, 36), "uint16")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "uint16")
    report = apply(
        identity,
        src,
        dst,
        chunk_sizes=[(16, 16), (6, 6)],
        crop_pads=[(1, 1), (0, 0)],
        blend_pads=[(2, 2), (1, 1)],
        bbox=Box((0, 0), (22, 23)),
        auto_divisibility=True,
        intermediates=files.root / "tmp",
    )
    assert report.bbox.contains(Box((0, 0), (22, 23)))
    out = dst.read(report.bbox)
    np.testing.assert_array_equal(out, data[report.bbox.slices()])


CASES_3D: dict[str, dict[str, Any]] = {
    "two levels, crop+blend linear": dict(
        chunk_sizes=[(12, 10, 14), (9, 8, 10)],
        crop_pads=[(1, 1, 1), (0, 0, 0)],
        blend_pads=[(2, 2, 2), (1, 1, 1)],
        blend_modes="linear",
    ),
    "three levels, quadratic": dict(
        chunk_sizes=[(12, 10, 14), (8, 7, 9), (4, 11, 13)],
        crop_pads=[(1, 1, 1), (1, 1, 1), (0, 0, 0)],
        blend_pads=[(1, 1, 1), (1, 1, 1), (1, 1, 1)],
    ),
    "one level, max blend": dict(chunk_sizes=[(12, 10, 14)], blend_pads=3, blend_modes="max"),
}


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("case", sorted(CASES_3D))
def test_identity_3d(files: Any, case: str, dtype: str) -> None:
    run_identity(files, (24, 20, 28), (8, 8, 8), dtype, **CASES_3D[case])


def test_identity_memory_backend_and_processes_free(files: Any) -> None:
    run_identity(
        files,
        (40, 36),
        (8, 8),
        "int16",
        backend="memory",
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 3)],
    )


def test_identity_with_channels(files: Any) -> None:
    data = files.random((3, 40, 36), "uint8")
    src = files.source(data, (3, 8, 8), spatial_ndim=2)
    dst = files.empty((3, 40, 36), (3, 8, 8), "uint8", spatial_ndim=2)
    apply(
        identity,
        src,
        dst,
        chunk_sizes=[(20, 18), (7, 13)],
        blend_pads=[(4, 4), (2, 3)],
        intermediates=files.root / "tmp",
    )
    np.testing.assert_array_equal(dst.read(Box((0, 0), (40, 36))), data)


def test_identity_dict_inputs_keyword(files: Any) -> None:
    data = files.random((40, 36), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "float32")

    def pick(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return image

    apply(
        pick,
        {"image": src, "mask": src},
        dst,
        chunk_sizes=[(10, 12)],
        blend_pads=2,
        intermediates=files.root / "tmp",
    )
    np.testing.assert_array_equal(dst.read(Box((0, 0), (40, 36))), data)


# --- random valid configurations ------------------------------------------------------------


@st.composite
def flow_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid flow built bottom-up: C[l-1] = k * C[l] - 2 crop - 2 blend, blend <= C/2."""
    ndim = draw(st.sampled_from([2, 3]))
    n_levels = draw(st.integers(1, 3 if ndim == 2 else 2))
    mode = draw(st.sampled_from(["linear", "quadratic", "bump", "max"]))
    bottom = tuple(draw(st.integers(3, 8)) for _ in range(ndim))
    levels = [(bottom, tuple(draw(st.integers(0, 2)) for _ in range(ndim)), None)]
    for _ in range(n_levels - 1):
        child = levels[0][0]
        crop = tuple(draw(st.integers(0, 2)) for _ in range(ndim))
        blend = tuple(draw(st.integers(0, 2)) for _ in range(ndim))
        k = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
        chunk = tuple(
            ki * c - 2 * cr - 2 * b for ki, c, cr, b in zip(k, child, crop, blend, strict=True)
        )
        if any(c < max(1, 2 * b) for c, b in zip(chunk, blend, strict=True)):
            chunk = tuple(ki * c for ki, c in zip(k, child, strict=True))
            crop = blend = (0,) * ndim
        levels.insert(0, (chunk, crop, blend))
    # blend of the bottom level must fit its chunk
    b_blend = tuple(draw(st.integers(0, c // 2)) for c in bottom)
    levels[-1] = (levels[-1][0], levels[-1][1], b_blend)
    top = levels[0][0]
    reps = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    bbox_shape = tuple(r * t for r, t in zip(reps, top, strict=True))
    lead = tuple(draw(st.integers(0, 5)) for _ in range(ndim))
    tail = tuple(draw(st.integers(0, 5)) for _ in range(ndim))
    return dict(
        shape=tuple(a + s + b for a, s, b in zip(lead, bbox_shape, tail, strict=True)),
        storage=tuple(draw(st.integers(4, 9)) for _ in range(ndim)),
        dtype=draw(st.sampled_from(["uint8", "int16", "uint32", "float32"])),
        chunk_sizes=[lv[0] for lv in levels],
        crop_pads=[lv[1] for lv in levels],
        blend_pads=[lv[2] for lv in levels],
        blend_modes=mode,
        bbox=Box(lead, tuple(a + s for a, s in zip(lead, bbox_shape, strict=True))),
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(config=flow_configs())
def test_identity_random_configs(files: Any, config: dict[str, Any]) -> None:
    shape, storage, dtype = config.pop("shape"), config.pop("storage"), config.pop("dtype")
    run_identity(files, shape, storage, dtype, **config)


def test_identity_volumes_placed_at_an_offset(files: Any) -> None:
    """Global coordinates: dst's storage grid starts at its offset, not at 0."""
    data = files.random((40, 36), "int16")
    src = files.source(data, (8, 8), offset=(5, -3))
    dst = files.empty((40, 36), (8, 8), "int16", offset=(5, -3))
    report = apply(
        identity,
        src,
        dst,
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 3)],
        intermediates=files.root / "tmp",
    )
    assert report.bbox == Box((5, -3), (45, 33))
    np.testing.assert_array_equal(dst.read(report.bbox), data)
