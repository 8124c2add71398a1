"""The flow's own input cache keeps exactly the halo chunks neighbours share, and the
probe's, each until its last reader; a run then reads every storage chunk once."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from chunkgraph.execute._breakdown import TaskTimer
from chunkgraph.flow.plan import validate_flow
from chunkgraph.flow.run._probe import probe_read_box
from chunkgraph.flow.run._reader_counts import ChunkReaders
from chunkgraph.flow.run._top_task import _read_in_slabs
from chunkgraph.geometry import Box
from chunkgraph.volume import apply


def identity(x: np.ndarray) -> np.ndarray:
    return x


def _keys(box: Box, chunks: tuple[int, ...], shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    """The storage chunk keys ``box`` touches inside a volume of ``shape``."""
    inner = box.intersection(Box.from_shape(shape))
    ranges = (
        range(a // c, -(-b // c)) for a, b, c in zip(inner.start, inner.stop, chunks, strict=True)
    )
    return set(itertools.product(*ranges))


def test_the_cache_holds_the_shared_halo_and_drops_it_after_its_last_reader(files: Any) -> None:
    """(32, 64, 128) in 16^3 chunks; top tasks (32, 64, 32) along axis 2, crop 4.

    Task t reads [32t - 4, 32t + 36) on axis 2: chunks 2t - 1 .. 2t + 2, of which
    2t + 1 and 2t + 2 are read by task t + 1 too. After each task the cache holds
    exactly the chunks a later task still reads; the probe's go after the first."""
    shape, chunks = (32, 64, 128), (16, 16, 16)
    data = files.random(shape, "float32")
    src = files.source(data, chunks)
    dst = files.empty(shape, chunks, "float32")
    spec = validate_flow(identity, src, dst, chunk_sizes=[(32, 64, 32), (32, 32, 32)],
                         crop_pads=[0, 4], skip_intermediates=True)  # fmt: skip
    vol = src.with_cache(1 << 30)
    vol.plan_reads(ChunkReaders(spec, vol, "src", probe=True))
    probe = probe_read_box(spec)
    vol.read(probe)
    cache = vol._cache
    assert cache is not None and cache.pinned_keys == _keys(probe, chunks, shape)
    tasks = list(spec.bbox.split(spec.levels[0].chunk))
    reads = [t.padded(spec.context_pad) for t in tasks]
    for i, region in enumerate(reads):
        np.testing.assert_array_equal(_read_in_slabs(vol, region, 2, TaskTimer()), src.read(region))
        later = set().union(*(_keys(r, chunks, shape) for r in reads[i + 1 :]))
        assert cache.pinned_keys == _keys(region, chunks, shape) & later, i
    assert len(cache) == 0
    # At most: the two shared layers of chunks across the whole cross-section, or the
    # probe's 2 x 3 x 3 chunks before the first task, whichever is more.
    chunk_bytes = 16**3 * 4
    assert cache.peak == max(2 * 2 * 4 * chunk_bytes, 2 * 3 * 3 * chunk_bytes)
    assert vol.stats.bytes_read == data.nbytes  # every chunk fetched once, the probe's too


def test_a_run_reads_every_chunk_once_through_less_cache_than_a_task_s_read(files: Any) -> None:
    """Automatic sizes with the probe on, on threads: exact bytes, and the cache the plan
    sizes is below one task's read (what an LRU needed to keep the shared layers)."""
    shape, chunks = (64, 128, 256), (32, 32, 32)
    data = files.random(shape, "float32")
    src = files.source(data, chunks)
    dst = files.empty(shape, chunks, "float32")
    report = apply(identity, src, dst, crop_pads=4, executor="threads",
                   intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan is not None and plan.chunk_sizes[0] == (64, 128, 64)
    assert report.bytes_read == data.nbytes and report.read_amplification == 1.0
    # A task reads [-4, 68) along the sweep: 3 chunk layers of 64 x 128 x 32.
    task_read = 64 * 128 * 3 * 32 * 4
    assert plan.cache_bytes < task_read
    # The probe's region (64 x 96 x 96 of chunks) is the most held at once, with slack.
    assert plan.cache_bytes == math.floor(64 * 96 * 96 * 4 * 1.25)
    np.testing.assert_array_equal(dst.read(dst.bounds), data)


def test_the_cache_keeps_of_a_shared_chunk_only_what_later_tasks_take(files: Any) -> None:
    """(32, 64, 128) in 16^3 chunks; top tasks (32, 64, 32) along axis 2, crop 4, no probe.

    Task t reads [32t - 4, 32t + 36): it reads chunk 2t + 1 whole, of which task t + 1
    takes only [32t + 28, 32t + 32), and 4 layers of chunk 2t + 2, which task t + 1 takes
    whole. So between tasks the cache holds 16 + 4 layers of the cross-section, not the
    two whole layers (32) a count alone keeps, and every chunk is still fetched once."""
    shape, chunks = (32, 64, 128), (16, 16, 16)
    data = files.random(shape, "float32")
    src = files.source(data, chunks)
    dst = files.empty(shape, chunks, "float32")
    spec = validate_flow(identity, src, dst, chunk_sizes=[(32, 64, 32), (32, 32, 32)],
                         crop_pads=[0, 4], skip_intermediates=True)  # fmt: skip
    vol = src.with_cache(1 << 30)
    readers = ChunkReaders(spec, vol, "src", probe=False)
    vol.plan_reads(readers, readers.parts)
    cache = vol._cache
    assert cache is not None
    layer = 32 * 64 * 4  # one voxel layer of the cross-section, bytes
    reads = [t.padded(spec.context_pad) for t in spec.bbox.split(spec.levels[0].chunk)]
    for i, region in enumerate(reads):
        np.testing.assert_array_equal(_read_in_slabs(vol, region, 2, TaskTimer()), src.read(region))
        if i < len(reads) - 1:
            assert cache.nbytes == (16 + 4) * layer, i
            shared = cache.kept_box((0, 0, 2 * i + 1))
            assert shared is not None and shared.start[2] == 32 * i + 28, shared
    assert len(cache) == 0 and cache.peak == (16 + 4) * layer
    assert vol.stats.bytes_read == data.nbytes  # every chunk fetched once


def test_a_gaussian_flow_reads_once_and_matches_the_whole_array_filter(files: Any) -> None:
    """Automatic sizes (two levels, the cache keeping parts of chunks), the probe on, on
    threads: every chunk fetched once, and the output equals the filter of the whole
    array (zeros outside, as the flow reads past the edge)."""
    from scipy.ndimage import gaussian_filter

    def gaussian(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = gaussian_filter(x, sigma=1.0, mode="constant")
        return out

    shape, chunks = (64, 128, 256), (16, 16, 16)
    data = files.random(shape, "float32")
    src = files.source(data, chunks)
    dst = files.empty(shape, chunks, "float32")
    report = apply(gaussian, src, dst, crop_pads=4, executor="threads",
                   intermediates=files.root / "t")  # fmt: skip
    plan = report.plan
    assert plan is not None and plan.sweep_axis == 2 and len(plan.chunk_sizes) == 2
    assert plan.cache_bytes > 0
    assert report.bytes_read == data.nbytes and report.read_amplification == 1.0
    np.testing.assert_array_equal(dst.read(dst.bounds), gaussian(data))
