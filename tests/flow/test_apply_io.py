"""Storage-level reads: amplification is reported, and locality plus a slab-sized cache
makes every source chunk be read exactly once."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.flow import ReadAmplificationWarning
from chunkgraph.flow.run import _probe_output
from chunkgraph.geometry import Box
from chunkgraph.volume import apply

SHAPE = (32, 32, 32)
STORAGE = (8, 8, 8)
CHUNK_BYTES = 8 * 8 * 8 * 4
# Top-level tasks are z-slabs one storage chunk thick; with a bottom crop of 2 each reads
# its own slab and one neighbouring slab on each side (16 chunks per slab).
FLOW: dict[str, Any] = dict(chunk_sizes=[(8, 32, 32), (8, 8, 8)], crop_pads=[(0, 0, 0), (2,) * 3])


def _source(files: Any, cache_bytes: int) -> Any:
    src = files.source(files.random(SHAPE, "float32"), STORAGE)
    return volume.open(src.path, cache_bytes=cache_bytes)


def test_without_cache_apply_owns_one_and_does_not_warn(files: Any) -> None:
    src = _source(files, 0)
    dst = files.empty(SHAPE, STORAGE, "float32")
    # 4 slabs: the two end slabs read 2 slabs each, the inner two read 3: without a cache,
    # 10 slabs of 16 chunks, 2.5x; apply reads through its own cache, sized for the two
    # slabs neighbours share (of which it keeps only what the next task takes), so each
    # chunk is read once, and a warning would say nothing wrong.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReadAmplificationWarning)
        report = apply(
            lambda src: src,
            src,
            dst,
            executor="sync",
            intermediates=files.root / "t",
            probe=False,  # the probe's own read of one bottom chunk is not the flow's pattern
            **FLOW,
        )
    assert report.plan is not None and report.plan.amplification_without_cache == 10 / 4
    assert report.plan.cache_bytes == 2 * 16 * CHUNK_BYTES * 5 // 4
    assert report.bytes_read == 64 * CHUNK_BYTES
    assert report.read_amplification == 1.0
    assert src.stats.bytes_read == 0  # the caller's handle was not read through


def test_a_budget_that_leaves_no_room_for_apply_s_cache_warns_with_the_figures(
    files: Any,
) -> None:
    """The same flow in 100 kB: no cache fits beside the superchunk, each halo slab is read
    again (2.5x), and that is what the warning says to expect."""
    src = _source(files, 0)
    dst = files.empty(SHAPE, STORAGE, "float32")
    expected = r"2\.50x the input; expected read amplification 2\.50x"
    with pytest.warns(ReadAmplificationWarning, match=expected):
        report = apply(lambda src: src, src, dst, executor="sync", intermediates=files.root / "t",
                       probe=False, memory_limit=100_000, **FLOW)  # fmt: skip
    assert report.plan is not None and report.plan.cache_bytes == 0
    assert report.read_amplification == 2.5


@pytest.mark.parametrize("executor", ["sync", "threads", "adaptive"])
def test_slab_cache_and_ordering_read_every_chunk_once(files: Any, executor: str) -> None:
    # room for three slabs of chunks: the one being finished and the two being started
    src = _source(files, 3 * 16 * CHUNK_BYTES)
    dst = files.empty(SHAPE, STORAGE, "float32")
    report = apply(
        lambda src: src, src, dst, executor=executor, intermediates=files.root / "t", **FLOW
    )
    assert report.read_amplification == 1.0
    assert src.stats.chunks_read == 64
    np.testing.assert_array_equal(
        dst.read(Box.from_shape(SHAPE)), volume.open(src.path).read(Box.from_shape(SHAPE))
    )


def test_the_probe_s_region_is_kept_for_the_one_top_task(files: Any) -> None:
    src = files.source(files.random((16, 16, 16), "uint8"), (4, 4, 4))
    dst = files.empty((16, 16, 16), (4, 4, 4), "uint8")
    seen: list[tuple[int, ...]] = []

    def record(src: np.ndarray) -> np.ndarray:
        seen.append(src.shape)
        return src

    args = dict(chunk_sizes=[(16, 16, 16), (4, 4, 4)], crop_pads=[0, 1], executor="sync")
    plain = apply(record, src, dst, probe=False, intermediates=files.root / "a", **args)
    probed = apply(record, src, dst, intermediates=files.root / "b", **args)
    # The probe's call stands in for the corner chunk's own call: 64 calls either way.
    assert len(seen) == 2 * 64 and seen[-64] == (6, 6, 6)
    # The probe reads the corner chunk with its 1-voxel halo (2x2x2 storage chunks of 64 B)
    # through apply's cache, which keeps them for the one top task: nothing is read twice.
    assert probed.bytes_read == plain.bytes_read == 16**3
    assert probed.plan is not None and probed.plan.cache_bytes >= 8 * 64
    assert plain.plan is not None and plain.plan.cache_bytes == 0


@pytest.mark.parametrize("executor", ["threads", "sync"])
def test_the_probe_call_is_the_first_chunks_call(files: Any, executor: str) -> None:
    """fn runs once per bottom chunk with the probe on, as with it off, and writes the
    same bytes: the probe's output is the first chunk's, not computed a second time."""
    src = files.source(files.random((16, 16, 16), "float32"), (4, 4, 4))
    boxes: list[Box] = []

    def smooth(src: np.ndarray, box: Box) -> np.ndarray:
        boxes.append(box)
        return (src[:-2, 1:-1, 1:-1] + src[2:, 1:-1, 1:-1]) / 2

    args = dict(chunk_sizes=[(16, 8, 8), (8, 4, 4)], crop_pads=[0, 1], executor=executor)
    out = {}
    for probe in (False, True):
        dst = files.empty((16, 16, 16), (4, 4, 4), "float32")
        apply(smooth, src, dst, probe=probe, intermediates=files.root / f"{probe}", **args)
        out[probe] = dst.read(dst.bounds)
    assert len(boxes) == 2 * 32 and len(set(boxes)) == 32
    np.testing.assert_array_equal(out[True], out[False])
    assert not _probe_output._KEPT


def test_a_resumed_run_whose_first_task_is_done_keeps_no_probe_output(files: Any) -> None:
    """The first top task was done before: nothing takes the probe's output, and the run
    drops it when it ends (it would hold a bottom chunk for the process's life)."""
    src = files.source(files.random((16, 16, 16), "uint8"), (4, 4, 4))
    dst = files.empty((16, 16, 16), (4, 4, 4), "uint8")
    flag = files.root / "fail"
    flag.touch()

    def flaky(src: np.ndarray, box: Box) -> np.ndarray:
        if flag.exists() and box.start[0] >= 8:
            raise RuntimeError("the second top task fails once")
        return src

    args = dict(chunk_sizes=[(8, 16, 16), (4, 4, 4)], intermediates=files.root / "t")
    with pytest.raises(ExceptionGroup):
        apply(flaky, src, dst, executor="sync", retries=0, **args)
    assert not _probe_output._KEPT
    flag.unlink()
    report = apply(flaky, src, dst, executor="threads", resume=True, **args)
    assert report.tasks_per_level[0] == 1  # the first top task was done
    assert not _probe_output._KEPT
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds))


def test_a_flow_of_one_fn_call_is_its_own_probe(files: Any) -> None:
    """One top task of one bottom chunk: a probe would compute and read the whole flow a
    second time (read amplification 2.0 against the plan's 1.0); the one call is checked
    as the probe checks it."""
    src = files.source(files.random((16, 16, 16), "uint8"), (8, 8, 8))
    dst = files.empty((16, 16, 16), (8, 8, 8), "uint8")
    calls: list[tuple[int, ...]] = []

    def record(src: np.ndarray) -> np.ndarray:
        calls.append(src.shape)
        return src

    report = apply(record, src, dst, chunk_sizes=[(16, 16, 16)], executor="threads",
                   intermediates=files.root / "t")  # fmt: skip
    assert calls == [(16, 16, 16)]
    assert report.read_amplification == 1.0
    assert report.plan is not None and report.plan.read_amplification == 1.0
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds))


def test_superchunk_is_read_once_not_per_subchunk(files: Any) -> None:
    """Eight bottom chunks per top task, but one read of the padded superchunk per task."""
    src = files.source(files.random((16, 16, 16), "uint8"), (16, 16, 16))
    dst = files.empty((16, 16, 16), (16, 16, 16), "uint8")
    report = apply(
        lambda src: src,
        src,
        dst,
        chunk_sizes=[(16, 16, 16), (4, 4, 4)],
        crop_pads=[(0, 0, 0), (1, 1, 1)],
        executor="sync",
        intermediates=files.root / "t",
        probe=False,
    )
    assert report.tasks_per_level == (1, 64)
    assert src.stats.chunks_read == 1
