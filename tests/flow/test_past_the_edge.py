"""Processing past dst's edge: an expanded bbox may leave dst.

Reads outside an input give its fill value, writes are clipped at dst's
bounds, so any chunk sizes work on any volume shape. Each identity case
pre-fills dst with other data and checks every voxel: inside the bbox the
source, outside it what was there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkgraph import ConfigError
from chunkgraph.flow.plan._spec import validate_flow
from chunkgraph.geometry import Box
from chunkgraph.volume import apply

# Small odd chunks split storage chunks on purpose; the warning is about speed only.
pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")


def identity(src: np.ndarray) -> np.ndarray:
    return src


def run_identity(
    files: Any, shape: tuple[int, ...], storage: tuple[int, ...], seed: int = 0, **kwargs: Any
) -> Any:
    data = files.random(shape, "uint16", seed)
    before = files.random(shape, "uint16", seed + 1)
    src = files.source(data, storage)
    dst = files.source(before, storage)
    report = apply(identity, src, dst, intermediates=files.root / "tmp", **kwargs)
    expected = before.copy()
    inside = report.bbox.intersection(dst.bounds)
    expected[inside.slices()] = data[inside.slices()]
    np.testing.assert_array_equal(dst.read(Box.from_shape(shape)), expected)
    assert dst.shape == shape  # nothing grew: writes past the edge were clipped
    kept = list((files.root / "tmp").iterdir())
    assert not any(p.is_dir() for p in kept)  # temporaries gone, as for any flow
    return report


CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    # 512^3 with a top chunk of 112, scaled down by 8: 64 with 14 -> bbox 70
    "512 with top 112, scaled": ((64, 64, 64), (16, 16, 16), dict(chunk_sizes=[(14,) * 3])),
    "two levels, crop, top not dividing": (
        (40, 36),
        (8, 8),
        dict(chunk_sizes=[(24, 16), (8, 8)], crop_pads=[(4, 4), (2, 2)]),
    ),
    "blend at the top, weighted, past the edge": (
        (30, 33),
        (8, 8),
        dict(chunk_sizes=[(16, 16), (10, 12)], crop_pads=[0, 1], blend_pads=[(2, 4), 0]),
    ),
    "max blend past the edge": (
        (30, 26),
        (8, 8),
        dict(chunk_sizes=[(12, 12)], blend_pads=2, blend_modes="max"),
    ),
    "direct writes past the edge": (
        (36, 30),
        (8, 8),
        dict(chunk_sizes=[(32, 32), (16, 16)], crop_pads=[0, 3], skip_intermediates=True),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_identity_with_expand_bbox_past_dst(files: Any, case: str) -> None:
    shape, storage, kwargs = CASES[case]
    report = run_identity(files, shape, storage, expand_bbox=True, **kwargs)
    assert not Box.from_shape(shape).contains(report.bbox)  # the case leaves dst


def test_auto_divisibility_may_leave_dst(files: Any) -> None:
    # 30 + 2*1 = 32 holds 5 chunks of 6 -> top 28; the bbox grows from 64 to 84
    report = run_identity(
        files, (64, 64), (16, 16), chunk_sizes=[30, 6], crop_pads=[1, 0], auto_divisibility=True
    )
    assert report.bbox == Box((0, 0), (84, 84))


def test_snap_moves_start_and_stop_onto_the_top_grid(files: Any) -> None:
    report = run_identity(
        files,
        (50, 44),
        (8, 8),
        chunk_sizes=[(16, 16), (8, 8)],
        crop_pads=[0, 2],
        bbox=Box((5, 20), (37, 43)),
        expand_bbox="snap",
    )
    assert report.bbox == Box((0, 16), (48, 48))  # 48 > 44: past the edge on axis 1


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=st.tuples(st.integers(9, 40), st.integers(9, 40)),
    storage=st.sampled_from([(4, 8), (8, 8), (16, 5)]),
    top=st.tuples(st.integers(5, 24), st.integers(5, 24)),
    bottom_split=st.integers(1, 3),
    crop=st.integers(0, 3),
    blend=st.integers(0, 2),
    mode=st.sampled_from(["linear", "quadratic", "max"]),
    snap=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_random_configurations_past_the_edge_are_exact(
    files: Any,
    shape: tuple[int, int],
    storage: tuple[int, int],
    top: tuple[int, int],
    bottom_split: int,
    crop: int,
    blend: int,
    mode: str,
    snap: bool,
    seed: int,
) -> None:
    # the bottom tiles the top's padded region: pick its size from that region's divisors
    region = [t + 2 * crop + 2 * blend for t in top]
    bottom = tuple(
        max(d for d in range(1, r + 1) if r % d == 0 and d <= r // bottom_split) for r in region
    )
    top = tuple(max(t, 2 * blend) for t in top)
    region = [t + 2 * crop + 2 * blend for t in top]
    bottom = tuple(b if r % b == 0 else r for b, r in zip(bottom, region, strict=True))
    start = tuple(s // 3 for s in shape)
    run_identity(
        files,
        shape,
        storage,
        seed=seed,
        chunk_sizes=[top, bottom],
        crop_pads=[crop, 0],
        blend_pads=[blend, 0],
        blend_modes=mode,
        bbox=Box(start, shape),
        expand_bbox="snap" if snap else True,
    )


def test_fn_sees_the_fill_value_outside_the_input(files: Any) -> None:
    data = files.random((20, 20), "int16")
    src = files.source(data, (8, 8), fill_value=-7)
    dst = files.empty((20, 20), (8, 8), "int16")
    outside_seen: list[np.ndarray] = []

    def check(src: np.ndarray, box: Box) -> np.ndarray:
        inside = box.intersection(Box((0, 0), (20, 20)))
        mask = np.ones(src.shape, dtype=bool)
        mask[inside.slices(relative_to=box)] = False
        outside_seen.append(src[mask])
        return src

    apply(
        check,
        src,
        dst,
        chunk_sizes=[(12, 12)],
        crop_pads=2,
        expand_bbox=True,
        intermediates=files.root / "tmp",
    )
    seen = np.concatenate(outside_seen)
    # the bbox grew to 24 and the crop reads 2 more on each side: 8 voxels per axis outside
    assert seen.size >= 28 * 28 - 20 * 20 and set(seen.tolist()) == {-7}
    np.testing.assert_array_equal(dst.read(Box((0, 0), (20, 20))), data)


def test_resume_past_the_edge_reruns_only_the_unfinished_chunks(files: Any) -> None:
    data = files.random((20, 20), "uint8")
    src = files.source(data, (8, 8))
    dst = files.empty((20, 20), (8, 8), "uint8")
    broken = files.root / "broken"
    broken.touch()
    calls: list[Box] = []

    def flaky(src: np.ndarray, box: Box) -> np.ndarray:
        calls.append(box)
        if broken.exists() and box.stop[0] > 20:
            raise RuntimeError("chunk past the edge fails this time")
        return src

    kw: dict[str, Any] = dict(
        chunk_sizes=[(12, 12)], blend_pads=1, expand_bbox=True, intermediates=files.root / "t"
    )
    with pytest.raises(Exception) as info:
        apply(flaky, src, dst, retries=0, workers=1, probe=False, **kw)
    assert "past the edge fails" in _all_messages(info.value)
    broken.unlink()
    calls.clear()
    report = apply(flaky, src, dst, resume=True, probe=False, **kw)
    assert report.top_tasks_skipped >= 1
    assert report.tasks_per_level[0] + report.top_tasks_skipped == 4 == len(calls) + 2
    np.testing.assert_array_equal(dst.read(Box((0, 0), (20, 20))), data)


def _all_messages(err: BaseException) -> str:
    """Every message in an exception and the groups and causes under it."""
    parts = [str(err)]
    for inner in getattr(err, "exceptions", ()):
        parts.append(_all_messages(inner))
    if err.__cause__ is not None:
        parts.append(_all_messages(err.__cause__))
    return "\n".join(parts)


# --- refusals: suggestions that work, nothing written -----------------------------------


def _suggested(message: str, pattern: str) -> list[list[int]]:
    return [[int(x) for x in m.split(" or ")] for m in re.findall(pattern, message)]


def test_top_chunk_error_names_every_axis_with_sizes_that_work(files: Any) -> None:
    src = files.source(files.random((60, 50), "uint8"), (10, 10))
    dst = files.empty((60, 50), (10, 10), "uint8")
    kw: dict[str, Any] = dict(crop_pads=[1, 0])
    with pytest.raises(ConfigError) as info:
        apply(
            identity, src, dst, chunk_sizes=[(22, 14), (8, 4)], intermediates=files.root / "t", **kw
        )
    message = str(info.value)
    assert "on axis 0, 60 % 22" in message and "on axis 1, 50 % 14" in message
    assert not (files.root / "t").exists()  # refused before anything was written
    assert not dst.read(dst.bounds).any()
    tops = _suggested(message, r"top chunk of ([\d ]+(?:or \d+)?) on axis")
    assert len(tops) == 2
    for axis, sizes in enumerate(tops):
        for size in sizes:
            top = [22, 14]
            top[axis] = size
            other = 1 - axis
            top[other] = {0: 30, 1: 10}[other]  # valid on the other axis: 32 = 4*8, 12 = 3*4
            validate_flow(identity, src, dst, chunk_sizes=[tuple(top), (8, 4)], **kw)


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.tuples(st.integers(4, 60), st.integers(2, 30), st.integers(1, 12)),
    crop=st.tuples(st.integers(0, 4), st.integers(0, 4)),
    blend=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
)
def test_divisibility_suggestions_all_validate(
    chunks: tuple[int, int, int], crop: tuple[int, int], blend: tuple[int, int, int]
) -> None:
    from chunkgraph.flow.plan._divisibility import check_divisibility

    sizes = [(c,) for c in chunks]
    crops, blends = [(crop[0],), (crop[1],), (0,)], [(b,) for b in blend]
    if any(2 * b > c for b, c in zip(blend, chunks, strict=True)):
        return
    try:
        check_divisibility(sizes, crops, blends)
        return
    except ConfigError as err:
        message = str(err)
    for level in (1, 2):
        found = re.findall(rf"valid level-{level} sizes on axis 0: ([\d ]+(?:or \d+)?);", message)
        parents = re.findall(
            rf"make level {level - 1}'s chunk ([\d ]+(?:or \d+)?) on axis", message
        )
        for text, at in [(t, level) for t in found] + [(t, level - 1) for t in parents]:
            for size in (int(x) for x in text.split(" or ")):
                changed = [list(s) for s in sizes]
                changed[at] = [size]
                fixed = [tuple(s) for s in changed]
                assert 2 * blend[at] <= size
                # the suggestion repairs its own level pair without breaking a neighbour pair
                for i in (at, at + 1):
                    if 1 <= i <= 2:
                        region = fixed[i - 1][0] + 2 * crops[i - 1][0] + 2 * blends[i - 1][0]
                        assert region % fixed[i][0] == 0, (message, at, size)


def test_refused_expand_bbox_spelling_writes_nothing(files: Any, tmp_path: Path) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError, match="expand_bbox must be"):
        apply(
            identity,
            src,
            dst,
            chunk_sizes=[(12, 12)],
            expand_bbox="yes",
            intermediates=tmp_path / "t",
        )
    assert not (tmp_path / "t").exists() and not dst.read(dst.bounds).any()
