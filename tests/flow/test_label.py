"""``label``: the same ids as ``scipy.ndimage.label`` on the whole array, whatever the
chunks; components joined across faces, edges and corners as the connectivity says; the
same bytes twice; bad input refused before anything is written."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from chunkgraph import ConfigError, label, volume
from chunkgraph.execute import EventKind
from chunkgraph.geometry import Box
from chunkgraph.jobs._label_chunk import SourceChangedError


def _smoothed(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian-smoothed noise: blobs of every size, many of them crossing chunks."""
    rng = np.random.default_rng(seed)
    return ndimage.gaussian_filter(rng.standard_normal(shape).astype("float32"), 1.5)


def _source(tmp_path: Path, data: np.ndarray, chunks: tuple[int, ...], **kw: Any) -> Path:
    path = tmp_path / "src.zarr"
    src = volume.create(path, data.shape, chunks, data.dtype, **kw)
    src.write(src.bounds, data)
    return path


def _scipy(mask: np.ndarray, connectivity: int) -> tuple[np.ndarray, int]:
    structure = ndimage.generate_binary_structure(mask.ndim, connectivity)
    ids, count = ndimage.label(mask, structure=structure)
    return ids, int(count)


def _read(path: Path) -> np.ndarray:
    out = volume.open(path)
    return out.read(out.bounds)


@pytest.mark.parametrize("connectivity", [1, 2, 3])
def test_ids_are_scipys_on_the_whole_array_for_each_connectivity(
    tmp_path: Path, connectivity: int
) -> None:
    """37 x 45 x 50 (no axis a multiple of the 8 x 16 x 16 chunk): 5 x 3 x 4 chunks, the
    last on each axis cut by the volume's edge."""
    data = _smoothed((37, 45, 50))
    src = _source(tmp_path, data, (8, 16, 16))
    report = label(src, tmp_path / "dst.zarr", threshold=0.1, connectivity=connectivity,
                   chunk=(8, 16, 16))  # fmt: skip
    expected, count = _scipy(data > 0.1, connectivity)
    assert report.components == count > 80
    out = _read(tmp_path / "dst.zarr")
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, expected)
    assert report.passes[0].tasks_per_level == (60,)


def _corner_and_edge() -> np.ndarray:
    """Chunks 4^3. Voxels meeting only at a chunk corner (3,3,3)-(4,4,4) and only along a
    chunk edge (3,3,9)-(4,4,9), each pair in different chunks: joined by connectivity 3
    (corner) and 2 (edge), apart under 1; (0,0,0) alone; a bar across a face (one
    component under every connectivity)."""
    mask = np.zeros((8, 8, 12), np.uint8)
    mask[3, 3, 3] = mask[4, 4, 4] = 1
    mask[3, 3, 9] = mask[4, 4, 9] = 1
    mask[0, 0, 0] = 1
    mask[7, 0:8, 6] = 1
    return mask


@pytest.mark.parametrize(("connectivity", "components"), [(1, 6), (2, 5), (3, 4)])
def test_components_meeting_at_chunk_corners_and_edges(
    tmp_path: Path, connectivity: int, components: int
) -> None:
    mask = _corner_and_edge()
    src = _source(tmp_path, mask, (4, 4, 4))
    report = label(src, tmp_path / "dst.zarr", connectivity=connectivity, chunk=(4, 4, 4))
    assert report.components == components
    np.testing.assert_array_equal(_read(tmp_path / "dst.zarr"), _scipy(mask, connectivity)[0])


@pytest.mark.parametrize(
    ("name", "fill"),
    [("empty", 0), ("everything", 1)],
)
def test_an_empty_volume_and_one_component_spanning_every_chunk(
    tmp_path: Path, name: str, fill: int
) -> None:
    data = np.full((20, 24, 9), fill, np.uint8)
    src = _source(tmp_path, data, (4, 8, 3))
    report = label(src, tmp_path / "dst.zarr", chunk=(4, 8, 3))
    assert report.components == fill
    assert (_read(tmp_path / "dst.zarr") == fill).all()


def test_one_chunk_a_2d_bool_mask_and_an_offset(tmp_path: Path) -> None:
    data = _smoothed((40, 30)) > 0
    src = _source(tmp_path, data, (64, 64), offset=(100, -7))
    report = label(src, tmp_path / "dst.zarr", connectivity=2)
    out = volume.open(tmp_path / "dst.zarr")
    assert out.bounds == Box((100, -7), (140, 23))
    assert report.passes[0].tasks_per_level == (1,)
    np.testing.assert_array_equal(out.read(out.bounds), _scipy(data, 2)[0])


def test_the_same_bytes_twice_and_the_same_ids_whatever_the_chunks(tmp_path: Path) -> None:
    data = (_smoothed((32, 32, 32), seed=3) > 0.1).astype(np.uint8)
    src = _source(tmp_path, data, (8, 8, 8))
    label(src, tmp_path / "a.zarr", connectivity=3, chunk=(8, 8, 8))
    label(src, tmp_path / "b.zarr", connectivity=3, chunk=(8, 8, 8), executor="sync")
    label(src, tmp_path / "c.zarr", connectivity=3, chunk=(16, 32, 8), workers=1)

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert files(tmp_path / "a.zarr") == files(tmp_path / "b.zarr")
    np.testing.assert_array_equal(_read(tmp_path / "a.zarr"), _read(tmp_path / "c.zarr"))


def test_on_worker_processes(tmp_path: Path) -> None:
    data = _smoothed((24, 24, 24), seed=5)
    src = _source(tmp_path, data, (8, 8, 8))
    report = label(src, tmp_path / "dst.zarr", threshold=0.0, chunk=(8, 8, 8),
                   executor="processes", workers=2)  # fmt: skip
    np.testing.assert_array_equal(_read(tmp_path / "dst.zarr"), _scipy(data > 0.0, 1)[0])
    assert report.components is not None


def test_a_dtype_too_small_is_refused_after_counting_with_nothing_written(
    tmp_path: Path,
) -> None:
    """300 isolated voxels: uint8 holds ids up to 255."""
    data = np.zeros((20, 30, 10), np.uint8)
    data[::2, ::2, ::2] = 1
    src = _source(tmp_path, data, (10, 10, 10))
    with pytest.raises(ConfigError, match=r"uint8 holds ids up to 255.* 750 components") as err:
        label(src, tmp_path / "dst.zarr", dtype="uint8")
    assert err.value.field == "dtype"
    assert not (tmp_path / "dst.zarr").exists()
    report = label(src, tmp_path / "dst.zarr", dtype="uint16")
    assert report.components == 750 and _read(tmp_path / "dst.zarr").dtype == np.uint16


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({}, "threshold", "float32 and no threshold"),
        ({"threshold": 0.0, "connectivity": 4}, "connectivity", r"1 \(6 neighbours\), 2 \(18"),
        ({"threshold": 0.0, "connectivity": True}, "connectivity", "3 \\(26 neighbours\\)"),
        ({"threshold": "high"}, "threshold", "must be a number"),
        ({"threshold": 0.0, "dtype": "float32"}, "dtype", "cannot hold label ids"),
        ({"threshold": 0.0, "chunk": (12, 8, 8)}, "chunk", r"multiples of the source's chunks"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    tmp_path: Path, kwargs: dict[str, Any], field: str, words: str
) -> None:
    src = _source(tmp_path, _smoothed((16, 16, 16)), (8, 8, 8))
    with pytest.raises(ConfigError, match=words) as err:
        label(src, tmp_path / "dst.zarr", **kwargs)
    assert err.value.field == field
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_an_existing_dst_is_refused_unless_resumed(tmp_path: Path) -> None:
    data = np.ones((8, 8), np.uint8)
    src = _source(tmp_path, data, (4, 4))
    label(src, tmp_path / "dst.zarr")
    with pytest.raises(ConfigError, match="already exists") as err:
        label(src, tmp_path / "dst.zarr")
    assert err.value.field == "dst"
    with pytest.raises(ConfigError, match="is the source"):
        label(src, src, resume=True)
    report = label(src, tmp_path / "dst.zarr", resume=True)
    assert report.passes[1].top_tasks_skipped == 1


def test_a_source_with_channels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "src.zarr"
    volume.create(path, (2, 8, 8), (2, 4, 4), "uint8", spatial_ndim=2)
    with pytest.raises(ConfigError, match="channel axes") as err:
        label(path, tmp_path / "dst.zarr")
    assert err.value.field == "src"


def test_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    src = _source(tmp_path, np.ones((16, 16), np.uint8), (8, 8))
    report = label(src, tmp_path / "dst.zarr", dry_run=True)
    assert report.dry_run and report.components is None
    assert "would write" in report.summary()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_label_into_an_object_store(bucket: str) -> None:
    """Source and dst in a bucket (moto's S3 server on loopback); the relabel flow's state
    beside dst there."""
    data = (_smoothed((16, 24, 16), seed=9) > 0.1).astype(np.uint8)
    src = volume.create(f"s3://{bucket}/src.zarr", data.shape, (8, 8, 8), "uint8")
    src.write(src.bounds, data)
    report = label(src, f"s3://{bucket}/labels.zarr", connectivity=3, chunk=(8, 8, 8))
    out = volume.open(f"s3://{bucket}/labels.zarr")
    assert report.components == _scipy(data, 3)[1]
    np.testing.assert_array_equal(out.read(out.bounds), _scipy(data, 3)[0])
    with pytest.raises(ConfigError, match="bucket's root"):
        label(src, f"s3://{bucket}")


def _grown(mask: np.ndarray) -> np.ndarray:
    """``mask`` with one more voxel on a component of each 4^3 chunk's, beside a voxel it
    has: every chunk's pieces and how they join stay the same, its voxels do not."""
    grown = mask.copy()
    for corner in np.ndindex(*(n // 4 for n in mask.shape)):
        inner = tuple(slice(4 * c, 4 * c + 4) for c in corner)
        block = grown[inner]
        spots = np.argwhere(block[:, :, :-1] & ~block[:, :, 1:].astype(bool))
        if len(spots):
            z, y, x = spots[0]
            block[z, y, x + 1] = 1
    return grown


def test_a_resume_after_the_source_changed_relabels_and_unchanged_skips(tmp_path: Path) -> None:
    data = (_smoothed((16, 16, 16), seed=11) > 0.3).astype(np.uint8)
    src = _source(tmp_path, data, (4, 4, 4))
    dst = tmp_path / "dst.zarr"
    first = label(src, dst, chunk=(4, 4, 4))
    again = label(src, dst, chunk=(4, 4, 4), resume=True)
    assert again.passes[1].top_tasks_skipped == 64  # unchanged: nothing to do
    grown = _grown(data)
    expected, count = _scipy(grown, 1)
    assert count == first.components and not np.array_equal(expected, _read(dst))
    writable = volume.open(src, mode="r+")
    writable.write(writable.bounds, grown)
    with pytest.warns(UserWarning, match=r"fn_kwargs\) changed"):
        changed = label(src, dst, chunk=(4, 4, 4), resume=True)
    assert changed.passes[1].top_tasks_skipped == 0  # another source: another flow
    np.testing.assert_array_equal(_read(dst), expected)


def test_a_source_changed_during_the_relabel_pass_is_refused(tmp_path: Path) -> None:
    """The source is rewritten as the relabel pass starts, each chunk keeping its piece
    count (two pieces no longer joined): the chunk is refused, not written wrong."""
    before = np.zeros((4, 4, 16), np.uint8)
    before[1, 1, 6:10] = 1
    after = np.zeros_like(before)
    after[1, 1, 6:8] = after[1, 1, 12:14] = 1
    src = volume.create(tmp_path / "src.zarr", before.shape, (4, 4, 8), "uint8")
    src.write(src.bounds, before)
    started = []

    def rewrite(event: Any) -> None:
        if event.kind == EventKind.RUN_STARTED:
            started.append(event)
            if len(started) == 2:
                src.write(src.bounds, after)

    with pytest.raises(ExceptionGroup) as err:
        label(src, tmp_path / "dst.zarr", chunk=(4, 4, 8), subscribers=[rewrite],
              executor="sync")  # fmt: skip
    (failed,) = err.value.exceptions
    cause = failed.__cause__
    while cause is not None and not isinstance(cause, SourceChangedError):
        cause = cause.__cause__
    assert cause is not None, failed
    assert re.search(r"chunk Box.*: the source changed during the label run.*--resume", str(cause))
    with pytest.warns(UserWarning, match=r"fn_kwargs\) changed"):
        report = label(src, tmp_path / "dst.zarr", chunk=(4, 4, 8), resume=True)
    assert report.components == 2 and report.passes[1].top_tasks_skipped == 0
    np.testing.assert_array_equal(_read(tmp_path / "dst.zarr"), _scipy(after, 1)[0])


@pytest.mark.parametrize(
    ("dtype", "out"),
    [("int8", None), ("int16", None), ("int64", None), ("uint64", None), ("uint16", "uint8")],
)
def test_integer_sources_of_any_width_give_ids_of_the_dtype_asked(
    tmp_path: Path, dtype: str, out: str | None
) -> None:
    """The ids are counted, not cast from the source: any integer source gives uint32 ids
    by default, and a narrower dtype than the source's when the components fit it."""
    mask = _smoothed((16, 16, 16), seed=2) > 0.3
    data = np.where(mask, -3 if dtype.startswith("int") else 1000, 0).astype(dtype)
    src = _source(tmp_path, data, (8, 8, 8))
    report = label(src, tmp_path / "dst.zarr", dtype=out)
    result = _read(tmp_path / "dst.zarr")
    assert result.dtype == np.dtype(out or "uint32") == report.dtype
    np.testing.assert_array_equal(result, _scipy(mask, 1)[0])


@pytest.mark.parametrize(("size", "chunk"), [(100, 8), (37, 4)])
def test_a_1d_volume_of_many_chunks(tmp_path: Path, size: int, chunk: int) -> None:
    data = (np.random.default_rng(size).random(size) < 0.6).astype(np.uint8)
    src = _source(tmp_path, data, (chunk,))
    report = label(src, tmp_path / "dst.zarr", chunk=(chunk,))
    expected, count = _scipy(data.astype(bool), 1)
    assert report.components == count > 5
    np.testing.assert_array_equal(_read(tmp_path / "dst.zarr"), expected)


def test_the_report_keeps_no_chunk_faces(tmp_path: Path) -> None:
    """The find pass's values (every chunk's faces) are dropped after the merge; the
    report keeps its figures."""
    data = (_smoothed((16, 16, 16), seed=4) > 0.2).astype(np.uint8)
    src = _source(tmp_path, data, (8, 8, 8))
    report = label(src, tmp_path / "dst.zarr", chunk=(8, 8, 8))
    assert report.passes[0].values is None
    assert report.passes[0].tasks_per_level == (8,) and report.passes[0].bytes_read > 0


def test_a_resume_with_another_threshold_is_refused_in_labels_words(tmp_path: Path) -> None:
    """Not apply's warning about fn_kwargs, and not a new label over the old one: the
    settings dst was started with, and what to do."""
    data = _smoothed((16, 16, 16), seed=6)
    src = _source(tmp_path, data, (8, 8, 8))
    label(src, tmp_path / "dst.zarr", threshold=0.2)
    before = _read(tmp_path / "dst.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the refusal says it all
        with pytest.raises(ConfigError) as err:
            label(src, tmp_path / "dst.zarr", threshold=0.1, resume=True)
    text = str(err.value)
    assert "started by a label with threshold 0.2, and this one has threshold 0.1" in text
    assert "resume=True continues only the label that started dst" in text
    assert "fn_kwargs" not in text and err.value.field == "threshold"
    np.testing.assert_array_equal(_read(tmp_path / "dst.zarr"), before)
    with pytest.raises(ConfigError, match="with connectivity 1, and this one has connectivity 2"):
        label(src, tmp_path / "dst.zarr", threshold=0.2, connectivity=2, resume=True)
    report = label(src, tmp_path / "dst.zarr", threshold=0.2, resume=True)  # the same label
    assert report.passes[1].top_tasks_skipped == 1  # one chunk of 16^3: written before


def test_a_resume_into_a_volume_label_did_not_make_is_refused(tmp_path: Path) -> None:
    """A volume of the same shape and dtype that label did not make (another tool's, or
    another source's labels) is refused, not written over."""
    data = (_smoothed((16, 16, 16), seed=8) > 0.2).astype(np.uint8)
    src = _source(tmp_path, data, (8, 8, 8))
    foreign = volume.create(tmp_path / "foreign.zarr", data.shape, (8, 8, 8), "uint32")
    foreign.write(foreign.bounds, np.full(data.shape, 99, np.uint32))
    with pytest.raises(ConfigError, match="was not made by label") as err:
        label(src, tmp_path / "foreign.zarr", resume=True)
    assert err.value.field == "dst" and "foreign.zarr" in str(err.value)
    assert (_read(tmp_path / "foreign.zarr") == 99).all()
    other = volume.create(tmp_path / "other.zarr", data.shape, (8, 8, 8), "uint8")
    other.write(other.bounds, data)
    label(other, tmp_path / "labels.zarr")
    with pytest.raises(ConfigError, match=r"made by a label of another source \(.*other.zarr\)"):
        label(src, tmp_path / "labels.zarr", resume=True)


def test_the_time_counts_the_merge_and_a_memory_limit_below_one_task_is_refused(
    tmp_path: Path,
) -> None:
    src = _source(tmp_path, np.ones((16, 16, 16), np.uint8), (8, 8, 8))
    report = label(src, tmp_path / "dst.zarr")
    passes = sum(r.wall_seconds for r in report.passes)
    assert report.merge_seconds > 0 and report.wall_seconds == passes + report.merge_seconds
    assert f"merge and making dst: {report.merge_seconds:.2f} s" in report.summary()
    with pytest.raises(ConfigError, match=r"below what one label task holds.*57344 bytes") as e:
        label(src, tmp_path / "other.zarr", memory_limit=50_000)  # 4096 voxels x 14 B
    assert e.value.field == "memory_limit" and not (tmp_path / "other.zarr").exists()
