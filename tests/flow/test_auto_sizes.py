"""Automatic planning: the planner's choices (pure), and apply with automatic sizes."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkgraph import ConfigError, volume
from chunkgraph.flow import ReadAmplificationWarning
from chunkgraph.flow.plan._auto_sizes import (
    MAX_CROP_SHARE,
    StorageLayout,
    _redundancy,
    default_memory_limit,
    plan_sizes,
    read_plan,
    resolve_memory_limit,
)
from chunkgraph.flow.plan._divisibility import check_divisibility, check_top_divides
from chunkgraph.geometry import Box
from chunkgraph.volume import apply

GiB = 2**30


def _layout(shape: tuple[int, ...], chunks: tuple[int, ...], vb: int = 4, name: str = "src"):
    return StorageLayout(name, Box.from_shape(shape), chunks, vb)


def _plan(shape, chunks, pad=8, memory=GiB, dst_chunks=None, cores=2, **kw):
    src = _layout(shape, chunks)
    dst = _layout(shape, dst_chunks or chunks, name="dst")
    ndim = len(shape)
    return plan_sizes(
        src.bounds, [src], dst, crop=(pad,) * ndim, blend=(0,) * ndim, cores=cores,
        memory_limit=memory, direct_allowed=True, **kw,
    )  # fmt: skip


def _check_valid(plan, shape: tuple[int, ...]) -> None:
    """The divisibility rule and the bbox rule hold for what the planner chose."""
    check_divisibility(list(plan.chunk_sizes), list(plan.crop_pads), list(plan.blend_pads))
    check_top_divides(Box.from_shape(shape), plan.chunk_sizes[0])


@pytest.mark.parametrize(
    ("shape", "chunks", "top", "bottom", "sweep"),
    [
        # the benchmark's volume: whole across axes 0, 1; one 128-bottom thick along 2
        ((256, 512, 512), (64, 64, 64), (256, 512, 128), (128, 256, 128), 2),
        # deeper than wide: the sweep follows the longest axis, the smallest cross-section
        ((1024, 256, 256), (64, 64, 64), (128, 256, 256), (128, 128, 256), 0),
        # anisotropic storage chunks: the top chunk stays on their grid
        ((64, 512, 1024), (16, 128, 128), (64, 512, 128), (64, 256, 128), 2),
        # a thin axis smaller than the crop-derived bottom: the bottom spans it whole
        ((32, 256, 256), (32, 64, 64), (32, 256, 128), (32, 128, 128), 2),
    ],
)
def test_planner_chooses_aligned_sizes_that_divide(shape, chunks, top, bottom, sweep) -> None:
    plan = _plan(shape, chunks)
    assert plan.chunk_sizes == (top, bottom)
    assert plan.sweep_axis == sweep
    _check_valid(plan, shape)
    for t, c, n in zip(plan.chunk_sizes[0], chunks, shape, strict=True):
        assert t % c == 0 or t == n  # top chunks never split storage chunks
    assert plan.read_amplification == 1.0 and plan.amplification_without_cache > 1.2
    assert plan.cache_bytes > 0 and plan.direct_writes
    assert plan.memory_bytes <= plan.memory_limit
    assert plan.crop_pads == ((0,) * 3, (8,) * 3)  # pads at the bottom only
    assert any("bottom chunk" in r for r in plan.reasons)
    assert any("sweep along axis" in r or "tasks sweep" in r for r in plan.reasons)


def test_bottom_chunks_keep_the_crop_margin_small() -> None:
    for pad in (2, 8):
        plan = _plan((256, 512, 512), (64, 64, 64), pad=pad, memory=8 * GiB)
        bottom = plan.chunk_sizes[-1]
        assert all(2 * pad <= MAX_CROP_SHARE * b for b in bottom), (pad, bottom)
    # Crop 16 asks for 256^3 (288^3 voxels x 16 B = 364 MiB of buffers): over the budget,
    # so the budget wins and the margins are wider.
    plan = _plan((256, 512, 512), (64, 64, 64), pad=16, memory=8 * GiB)
    assert plan.chunk_sizes[-1] == (128, 256, 128)
    assert "no shape with margins 2 * pad (32, 32, 32) at most 0.125" in plan.reasons[0]


def test_the_bottom_chunk_is_the_least_redundant_shape_the_budget_holds() -> None:
    """256 x 512 x 512 in 64^3 chunks, crop 8. Bottom shapes on the 64 grid with margins
    <= 1/8: 128 or more per axis. (128, 256, 128) computes (144/128)^2 * 272/256 = 1.34x
    against 128^3's 1.42x; its buffers (144 * 272 * 144 voxels * 2 * 8 B = 86 MiB) fit
    BOTTOM_BYTES. 256 on an axis across the sweep, not along it: the superchunk is the
    whole cross-section times the bottom's length along the sweep."""
    plan = _plan((256, 512, 512), (64, 64, 64))
    bottom = plan.chunk_sizes[-1]
    assert bottom == (128, 256, 128) and plan.sweep_axis == 2
    assert _redundancy(bottom, (8, 8, 8)) == (144 / 128) ** 2 * 272 / 256
    why = plan.reasons[0]
    assert why.startswith("bottom chunk (128, 256, 128): the least redundant compute (1.34x)")
    assert "(128, 128, 128), computes 1.42x" in why
    assert "longer across the sweep (axis 1) than along it" in why
    assert why in plan.summary()
    # A small budget: an eighth of memory_limit (37.5 MiB) for the buffers. 128^3 takes
    # 144^3 x 16 B = 45.6 MiB, over it, so the budget wins over the margin rule: the
    # least redundant shape that fits, (128, 128, 64) (25.3 MiB, 1.58x), thin along the
    # sweep.
    small = _plan((256, 512, 512), (64, 64, 64), memory=300 * 2**20)
    assert small.chunk_sizes[-1] == (128, 128, 64)
    assert "(25.3 MiB) fit 37.5 MiB; no shape with margins" in small.reasons[0]
    assert "(128, 128, 128), needs 45.6 MiB" in small.reasons[0]
    # Never fewer pieces than the smallest sizes leave (here 4): the cores share them.
    thin = _plan((32, 256, 256), (32, 64, 64))
    assert thin.chunk_sizes[-1] == (32, 128, 128)


def test_no_halo_needs_no_cache_and_one_level_when_top_is_bottom() -> None:
    plan = _plan((128, 128, 128), (64, 64, 64), pad=0)
    assert plan.cache_bytes == 0 and plan.read_amplification == 1.0
    assert "no halo" in plan.summary()
    small = _plan((64, 64, 128), (32, 32, 32))
    assert len(small.chunk_sizes) == 1 and small.crop_pads == ((8, 8, 8),)


def test_a_tight_budget_cuts_bands_and_says_what_it_costs() -> None:
    roomy = _plan((1024, 512, 512), (64, 64, 64))
    tight = _plan((1024, 512, 512), (64, 64, 64), memory=200 * 2**20)
    assert tight.memory_bytes <= 200 * 2**20 < roomy.memory_bytes
    assert math.prod(tight.chunk_sizes[0]) < math.prod(roomy.chunk_sizes[0])
    assert tight.read_amplification > roomy.read_amplification
    assert any("cut into bands" in r for r in tight.reasons)
    _check_valid(tight, (1024, 512, 512))


def test_a_budget_nothing_fits_is_refused_with_the_figure() -> None:
    with pytest.raises(ConfigError, match=r"no automatic plan fits memory_limit=1000000 .*"
                       r"give a memory_limit of at least \d+"):  # fmt: skip
        _plan((256, 512, 512), (64, 64, 64), memory=10**6)


def test_the_default_budget_plans_the_same_flow_when_free_memory_moves_a_little() -> None:
    """Half of 700 MiB and of 800 MiB (350 and 400 MiB) plan 1024 x 512 x 512, crop 8,
    differently, so a resume with a little less free memory would start over; the default,
    rounded down to a power of two, plans both for 256 MiB, and so plans one flow."""
    MiB = 2**20
    raw = [_plan((1024, 512, 512), (64, 64, 64), memory=m * MiB) for m in (350, 400)]
    assert raw[0].chunk_sizes != raw[1].chunk_sizes
    limits = [default_memory_limit(a * MiB) for a in (700, 800)]
    assert limits == [256 * MiB, 256 * MiB]
    plans = [_plan((1024, 512, 512), (64, 64, 64), memory=m) for m in limits]
    assert plans[0] == plans[1] and plans[0].memory_bytes <= 256 * MiB
    limit, source = resolve_memory_limit(None)
    assert limit & (limit - 1) == 0 and "rounded down to a power of two" in source


def test_given_sizes_read_model_matches_the_measured_issue_figure() -> None:
    """The issue's hand-picked configuration read 3.9x the input without a cache."""
    src = _layout((256, 512, 512), (64, 64, 64))
    kw: dict[str, Any] = dict(
        chunk_sizes=[(64, 256, 256), (64, 64, 64)],
        crop_pads=[(0,) * 3, (8,) * 3],
        blend_pads=[(0,) * 3] * 2,
        cores=2,
    )
    roomy = read_plan(src.bounds, [src], src, memory_limit=4 * GiB, **kw)
    assert roomy.amplification_without_cache == pytest.approx(3.91, abs=0.01)
    assert roomy.read_amplification == 1.0 and roomy.cache_bytes > 0
    tight = read_plan(src.bounds, [src], src, memory_limit=GiB // 8, **kw)
    assert 1.0 < tight.read_amplification < roomy.amplification_without_cache
    assert "read again" in tight.summary()
    cached = read_plan(src.bounds, [src], src, memory_limit=4 * GiB, cached=True, **kw)
    assert cached.cache_bytes == 0


# --- apply with automatic sizes ------------------------------------------------------------


def identity(src: np.ndarray) -> np.ndarray:
    return src


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.tuples(*[st.sampled_from([16, 24, 32, 40, 64]) for _ in range(3)]),
    chunks=st.tuples(*[st.sampled_from([4, 8, 16]) for _ in range(3)]),
    crop=st.integers(0, 5),
    blend=st.integers(0, 3),
    dtype=st.sampled_from(["uint8", "float32", "int16"]),
    bbox_cut=st.booleans(),
)
def test_identity_is_exact_with_automatic_sizes(
    files: Any, shape, chunks, crop, blend, dtype, bbox_cut
) -> None:
    data = files.random(shape, dtype)
    src = files.source(data, chunks)
    dst = files.empty(shape, chunks, dtype)
    bbox = Box((0, 0, 0), shape)
    if bbox_cut:  # a bbox on the dst grid but not the whole volume
        bbox = Box(chunks, tuple(max(c, s - c) for c, s in zip(chunks, shape, strict=True)))
        if bbox.is_empty:
            bbox = Box((0, 0, 0), shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReadAmplificationWarning)  # automatic sizes never warn
        report = apply(
            identity, src, dst, crop_pads=crop, blend_pads=blend, bbox=bbox, executor="sync",
            intermediates=files.root / "t",
            probe=False,  # the probe's (counted) read of one bottom chunk is not the plan's
        )  # fmt: skip
    assert report.plan is not None and report.plan.automatic
    np.testing.assert_array_equal(dst.read(bbox), data[bbox.slices()])
    if crop + blend and len(report.plan.chunk_sizes) > 1:
        assert report.read_amplification <= report.plan.amplification_without_cache


def test_auto_run_reads_each_chunk_once_and_reports_the_plan(files: Any) -> None:
    shape = (32, 64, 128)
    data = files.random(shape, "float32")
    src = files.source(data, (8, 16, 16))
    dst = files.empty(shape, (8, 16, 16), "float32")
    # (the probe reads one bottom chunk again before the run: not the flow's pattern)
    report = apply(identity, src, dst, crop_pads=2, probe=False, intermediates=files.root / "t")
    plan = report.plan
    assert plan is not None and plan.automatic and plan.direct_writes
    assert report.read_amplification == plan.read_amplification == 1.0
    assert plan.cache_bytes > 0 and src.cache_bytes == 0  # the caller's handle is untouched
    assert "plan (automatic)" in report.summary() and "cache" in report.summary()
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_the_probe_and_parallel_pieces_do_not_cost_the_sweep_its_reuse(files: Any) -> None:
    """The probe reads the first bottom chunk's region through the cache before the run,
    and a task's pieces arrive in any order: the shared halo layers must survive both,
    so the run reads each storage chunk once, as the plan predicts, on every executor."""
    shape = (128, 256, 256)
    data = files.random(shape, "float32")
    src = files.source(data, (64, 64, 64))
    for k, executor in enumerate(("sync", "threads")):
        dst = files.empty(shape, (64, 64, 64), "float32")
        report = apply(identity, src, dst, crop_pads=8, executor=executor,
                       intermediates=files.root / f"t{k}")  # fmt: skip
        assert report.plan is not None and report.plan.read_amplification == 1.0
        assert report.read_amplification == 1.0, (executor, report.plan.summary())
        np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_dry_run_shows_the_plan_and_writes_nothing(files: Any) -> None:
    src = files.source(files.random((32, 64, 64), "uint8"), (16, 16, 16))
    dst = files.empty((32, 64, 64), (16, 16, 16), "uint8")
    report = apply(identity, src, dst, chunk_sizes="auto", crop_pads=4, dry_run=True,
                   memory_limit=GiB)  # fmt: skip
    text = report.summary()
    assert "(dry run)" in text and "plan (automatic)" in text
    assert "of 1.0 GiB (given)" in text
    assert report.plan is not None and report.plan.reasons
    assert dst.stats.bytes_written == 0 and src.stats.bytes_read == 0


def test_given_sizes_are_kept_and_read_through_apply_s_cache_without_a_warning(
    files: Any,
) -> None:
    shape = (32, 64, 64)
    data = files.random(shape, "float32")
    src = files.source(data, (16, 16, 16))
    dst = files.empty(shape, (16, 16, 16), "float32")
    sizes = [(8, 32, 32), (8, 8, 8)]  # top chunks split the 16^3 storage chunks
    with warnings.catch_warnings():
        # apply's cache keeps what neighbours share: nothing is read twice, nothing to say
        warnings.simplefilter("error", ReadAmplificationWarning)
        report = apply(identity, src, dst, chunk_sizes=sizes, crop_pads=[0, 2],
                       executor="threads", intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and not report.plan.automatic
    assert report.plan.chunk_sizes == tuple(sizes)
    assert report.read_amplification == report.plan.read_amplification == 1.0
    assert report.plan.amplification_without_cache > 6
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_given_sizes_that_amplify_even_through_apply_s_cache_warn(files: Any) -> None:
    """300 kB leave no room for a cache beside the superchunks: each split chunk and halo
    is decoded again, and the probe's region too, and the warning names both causes and
    the figure to expect (6.75x for the tasks, the probe's second read of 2 x 2 x 2
    storage chunks on top)."""
    shape = (32, 64, 64)
    data = files.random(shape, "float32")
    src = files.source(data, (16, 16, 16))
    dst = files.empty(shape, (16, 16, 16), "float32")
    sizes = [(8, 32, 32), (8, 8, 8)]
    expected = r"splits input 'src'.*6\.75x the input; expected read amplification 6\.78x"
    with pytest.warns(ReadAmplificationWarning, match=expected):
        report = apply(identity, src, dst, chunk_sizes=sizes, crop_pads=[0, 2],
                       memory_limit=300_000, intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and report.plan.cache_bytes == 0
    assert report.read_amplification == pytest.approx(report.plan.read_amplification)
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_aligned_given_sizes_with_a_cache_do_not_warn(files: Any) -> None:
    shape = (32, 64, 64)
    src = files.source(files.random(shape, "uint8"), (16, 16, 16))
    cached = volume.open(src.path, cache_bytes=2**20)
    dst = files.empty(shape, (16, 16, 16), "uint8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReadAmplificationWarning)
        report = apply(identity, cached, dst, chunk_sizes=[(16, 64, 64), (16, 16, 16)],
                       crop_pads=[0, 2], intermediates=files.root / "t")  # fmt: skip
    assert report.plan is not None and report.plan.cache_bytes == 0  # the user's cache serves


def test_the_plan_names_the_caller_s_cache_and_predicts_without_apply_s(files: Any) -> None:
    """Inputs opened with their own cache (here 1 byte: none in effect): apply owns no
    cache, so the plan says whose cache it is and predicts the read without apply's."""
    shape = (32, 64, 128)
    data = files.random(shape, "float32")
    src = files.source(data, (8, 16, 16))
    cached = volume.open(src.path, cache_bytes=1)
    dst = files.empty(shape, (8, 16, 16), "float32")
    report = apply(identity, cached, dst, crop_pads=2, probe=False, intermediates=files.root / "t")
    plan = report.plan
    assert plan is not None and plan.automatic and plan.cache_bytes == 0
    assert plan.inputs_cache == 1 and plan.cache_per_input == ()
    assert plan.read_amplification == plan.amplification_without_cache > 1.1
    assert report.read_amplification == pytest.approx(plan.read_amplification, abs=0.01)
    text = report.summary() + plan.summary()
    assert "owned by apply" not in text and "the inputs' own cache (1 B" in text
    assert "the inputs carry their own cache (1 B), so apply adds none" in plan.summary()
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_auto_pads_must_be_one_levels_spelling(files: Any) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError, match=r"crop_pads = \[0, 2\] lists 2 levels.*bottom level"):
        apply(identity, src, dst, crop_pads=[0, 2])
    with pytest.raises(ConfigError, match="memory_limit must be a positive number of bytes"):
        apply(identity, src, dst, crop_pads=2, memory_limit=-1)
    assert dst.stats.bytes_written == 0


def test_a_large_pad_takes_the_bottom_chunk_its_budget_holds() -> None:
    """2048 x 2048 x 1024 float32 in 64^3 chunks, crop 20, 2 GiB: the margin rule asks for
    512^3 bottom chunks (2.5 GiB of buffers each, over the 128 MiB budget). The plan takes
    the least redundant shape whose buffers fit instead, so its bands stay wide and each
    storage chunk is read about once, within the memory limit."""
    plan = _plan((2048, 2048, 1024), (64, 64, 64), pad=20, memory=2 * GiB)
    bottom = plan.chunk_sizes[-1]
    assert bottom == (128, 128, 256)
    padded = math.prod(b + 40 for b in bottom)
    assert padded * 2 * 8 <= 128 * 2**20  # FN_BUFFERS x float64 accumulation
    assert plan.memory_bytes <= 2 * GiB
    assert plan.read_amplification <= 1.5
    why = plan.reasons[0]
    assert "(127 MiB) fit 128 MiB" in why and "(512, 512, 512), needs 2.5 GiB" in why
    assert "over that budget" not in plan.summary()
    # A budget not even the smallest shape on the grid fits: said, never "fit".
    tiny = _plan((2048, 2048, 1024), (64, 64, 64), pad=20, memory=2 * GiB, dst_chunks=(256,) * 3)
    assert tiny.chunk_sizes[-1] == (256, 256, 256)
    assert " fit " not in tiny.reasons[0]
    assert "are over the budget of 128 MiB" in tiny.reasons[0]


def test_the_memory_bound_does_not_grow_with_the_length_along_the_sweep() -> None:
    """512 x 512 cross-sections 1024, 2048 and 4096 deep (1, 2, 4 GiB of float32): the
    same sizes, cache and memory. The cache's budget is the two whole layers of 512 x 512
    x 4 B neighbours share (128 MiB x 1.25), what an LRU needs (a worker process's); apply's
    own cache in this process holds only their parts (tests/flow/test_reader_counts.py).
    The summary says what the bound is made of."""
    plans = [_plan((n, 512, 512), (64, 64, 64), memory=8 * GiB) for n in (1024, 2048, 4096)]
    first = plans[0]
    assert first.chunk_sizes == ((128, 512, 512), (128, 128, 256)) and first.sweep_axis == 0
    for plan in plans[1:]:
        assert plan.chunk_sizes == first.chunk_sizes
        assert (plan.cache_bytes, plan.memory_bytes) == (first.cache_bytes, first.memory_bytes)
        assert plan.read_amplification == 1.0
    assert first.cache_bytes == 2 * 64 * 512 * 512 * 4 * 5 // 4
    assert first.memory_bytes == (
        first.cache_bytes + first.superchunks_in_flight * first.superchunk_bytes
        + first.bottom_bytes
    )  # fmt: skip
    words = first.memory_words()
    assert words in first.summary()
    assert "512x512 cross-section" in words and "none grows with the bbox's length" in words


def test_the_cache_bound_is_the_shared_layers_or_the_probe_s_region() -> None:
    """256 x 512 x 512: the shared layers take 2 x 64 x 256 x 512 x 4 B = 64 MiB, more
    than the probe's region (the first bottom chunk padded, 3 x 5 x 3 chunks of 1 MiB,
    45 MiB), so the cache is 64 MiB x 1.25."""
    plan = _plan((256, 512, 512), (64, 64, 64))
    assert plan.chunk_sizes == ((256, 512, 128), (128, 256, 128))
    assert plan.cache_bytes == 64 * 2**20 * 5 // 4


def test_the_memory_bound_says_when_one_task_spans_the_sweep(files: Any) -> None:
    """A bbox on the storage grid plans a sweep whose memory does not grow with its
    length; one whose stop is off the grid (1010 along the sweep, 16³ chunks) with
    expand_bbox=True (the caller grows it: it is not grown to the grid and clipped) is
    tiled by one task along it, and the plan's memory line says the superchunk grows with
    it instead of claiming that nothing does."""
    src = files.source(np.zeros((64, 96, 1024), "float32"), (16, 16, 16))
    dst = files.empty((64, 96, 1024), (16, 16, 16), "float32")
    aligned = apply(lambda x: x, src, dst, crop_pads=2, dry_run=True,
                    intermediates=files.root / "a").plan  # fmt: skip
    assert aligned is not None and aligned.sweep_tasks > 1
    assert "none grows with the bbox's length" in aligned.memory_words()
    off = apply(lambda x: x, src, dst, crop_pads=2, bbox=Box((0, 0, 7), (64, 96, 1017)),
                expand_bbox=True, dry_run=True, intermediates=files.root / "b").plan  # fmt: skip
    assert off is not None and off.sweep_tasks == 1
    words = off.memory_words()
    assert "one task spans the bbox's 1010 along axis 2" in words and "none grows" not in words
