"""The rest of the flow's surface: fn_kwargs, reduction chunks as an upper bound."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError, volume
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


# --- dst=None: values per bottom chunk ----------------------------------------------------


def count_above(src: np.ndarray, *, level: int) -> int:
    return int((src > level).sum())


def test_dst_none_collects_one_value_per_bottom_chunk(files: Any) -> None:
    data = files.random((40, 36), "uint8")
    src = files.source(data, (8, 8))
    report = apply(
        count_above,
        src,
        None,
        fn_kwargs={"level": 100},
        chunk_sizes=[(20, 12), (10, 6)],
        intermediates=files.root / "t",
    )
    assert report.values is not None and len(report.values) == 4 * 6
    assert report.tasks_per_level == (6, 24) and report.bytes_written == 0
    assert sum(report.values.values()) == int((data > 100).sum())  # each voxel counted once
    for box, value in report.values.items():
        assert value == int((data[box.slices()] > 100).sum())
    assert not (files.root / "t").exists()  # nothing kept on disk
    assert "collected 24 values" in report.summary()


def test_dst_none_bottom_crop_and_past_the_edge(files: Any) -> None:
    """30 x 30 voxels in chunks of 8 (bbox expanded to 32): the last chunk on each axis is
    clipped to the volume, [24, 30); fn sees fill only in its crop context past the edge."""
    data = np.abs(files.random((30, 30), "int16")) // 2  # never -1, the fill value
    src = files.source(data, (8, 8), fill_value=-1)

    def context_sum(src: np.ndarray, box: Box) -> tuple[int, int, Box]:
        return int(src.size), int((src == -1).sum()), box

    report = apply(
        context_sum, src, None, chunk_sizes=[(16, 16), (8, 8)], crop_pads=[0, 2], expand_bbox=True
    )
    assert report.bbox == Box((0, 0), (32, 32)) and report.values is not None
    assert report.tasks_per_level == (4, 16)
    assert {size for size, _, _ in report.values.values()} == {12 * 12, 12 * 10, 10 * 10}
    for chunk, (size, _, box) in report.values.items():
        assert box == chunk.padded((2, 2)) and size == int(np.prod(box.shape))
    # the fill value is seen only where the read leaves the source (data holds -1 nowhere else)
    assert report.values[Box((0, 0), (8, 8))][1] == 12 * 12 - 10 * 10  # reads from -2
    assert report.values[Box((24, 24), (30, 30))][1] == 10 * 10 - 8 * 8  # reads to 32 > 30
    assert report.values[Box((8, 8), (16, 16))][1] == 0


def test_dst_none_past_the_edge_gives_fn_only_the_volume_s_voxels(files: Any) -> None:
    """Statistics over an expanded bbox count each real voxel once and no fill voxel: the
    chunks past the edge are clipped to the volume (wholly outside: not called)."""
    data = files.random((100, 60), "uint8")
    src = files.source(data, (10, 10), fill_value=255)
    report = apply(
        lambda x: (int(x.size), int(x.sum())),
        src,
        None,
        chunk_sizes=[(64, 64), (16, 32)],
        expand_bbox=True,
    )
    assert report.bbox == Box((0, 0), (128, 64)) and report.values is not None
    assert sum(size for size, _ in report.values.values()) == 100 * 60
    assert sum(total for _, total in report.values.values()) == int(data.sum(dtype=np.int64))
    # [96, 112) is cut to [96, 100); [112, 128) lies past the edge: 7 chunks a column, 2 columns
    assert Box((96, 32), (100, 60)) in report.values and len(report.values) == 7 * 2
    assert report.tasks_per_level == (2, 14)
    assert all(src.bounds.contains(box) for box in report.values)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(chunk_sizes=[(8, 8)], blend_pads=2), r"dst=None .* level 0 has blend pad"),
        (dict(chunk_sizes=[(16, 16), (8, 8)], crop_pads=[2, 0]), r"crop pad is allowed only"),
        (dict(), r"dst=None needs chunk_sizes"),
        (dict(chunk_sizes=[(8, 8)], resume=True), r"nothing to resume"),
        (dict(chunk_sizes=[(8, 8)], inputs={}), r"nothing to process"),
    ],
)
def test_refused_dst_none_flows(files: Any, kw: dict[str, Any], message: str) -> None:
    inputs = kw.pop("inputs", files.source(files.random((16, 16), "uint8"), (8, 8)))
    with pytest.raises(ConfigError, match=message):
        apply(lambda src: 0, inputs, None, intermediates=files.root / "t", **kw)
    assert not (files.root / "t").exists()


def test_dst_none_values_come_back_from_worker_processes(files: Any) -> None:
    data = files.random((16, 16), "uint8")
    src = files.source(data, (8, 8))
    report = apply(
        count_above,
        src,
        None,
        fn_kwargs={"level": 7},
        chunk_sizes=[(8, 16)],
        executor="processes",
        workers=2,
    )
    assert report.values == {
        Box((0, 0), (8, 16)): int((data[:8] > 7).sum()),
        Box((8, 0), (16, 16)): int((data[8:] > 7).sum()),
    }


# --- fn_resources: concurrency limits -------------------------------------------------------


class Concurrency:
    """Counts fn's calls in flight (threads share it) and remembers the most at once.

    A call waits (0.5 s at most) until ``meet`` calls are in flight: calls that may run
    together then do, however late a loaded machine starts their threads, and a limit
    kept lower than ``meet`` shows as a lower peak."""

    def __init__(self, meet: int) -> None:
        self.meet = meet
        self.changed = threading.Condition()
        self.now = 0
        self.peak = 0

    def __call__(self, src: np.ndarray) -> np.ndarray:
        with self.changed:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.now >= self.meet, timeout=0.5)
        with self.changed:
            self.now -= 1
        return src


@pytest.mark.parametrize("limit", [None, 1, 2])
def test_fn_resources_bound_the_calls_in_flight(files: Any, limit: int | None) -> None:
    data = files.random((32, 32), "uint8")
    src = files.source(data, (8, 8))
    dst = files.empty((32, 32), (8, 8), "uint8")
    fn = Concurrency(meet=3 if limit is None else limit)
    # the same flow whatever the limit (it changes when fn runs, not what it computes)
    unlimited = apply(fn, src, dst, chunk_sizes=[(8, 8)], dry_run=True)
    report = apply(
        fn,
        src,
        dst,
        chunk_sizes=[(8, 8)],
        fn_resources=None if limit is None else {"gpu": limit},
        workers=4,
        intermediates=files.root / "t",
    )
    np.testing.assert_array_equal(dst.read(dst.bounds), data)
    if limit is None:
        assert fn.peak > 2  # 16 tasks on 4 workers: the limits below have work to do
    else:
        assert fn.peak == limit
    assert report.flow_id == unlimited.flow_id


@pytest.mark.parametrize(
    ("fn_resources", "message"),
    [
        ({"gpu": 0}, r"fn_resources\['gpu'\] = 0 is not a positive int"),
        ({"gpu": True}, r"is not a positive int"),
        (["gpu"], r"fn_resources must be a dict"),
    ],
)
def test_refused_fn_resources_write_nothing(
    files: Any, tmp_path: Path, fn_resources: Any, message: str
) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError, match=message):
        apply(
            lambda src: src,
            src,
            dst,
            chunk_sizes=[(8, 8)],
            fn_resources=fn_resources,
            intermediates=tmp_path / "t",
        )
    assert not (tmp_path / "t").exists() and not dst.read(dst.bounds).any()


def test_a_keyword_naming_fn_s_array_parameter_is_a_clash_not_a_signature_error(
    tmp_path: Path,
) -> None:
    """``fn(x, *, mask=None)`` with ``fn_kwargs={'x': 3}``: the single input fills ``x``."""

    def one(x: np.ndarray, *, mask: object = None) -> np.ndarray:
        return x

    src = volume.create(str(tmp_path / "s.zarr"), (8, 8), (4, 4), "uint8")
    dst = volume.create(str(tmp_path / "d.zarr"), (8, 8), (4, 4), "uint8")
    with pytest.raises(ConfigError, match=r"fn_kwargs\['x'\] clashes with the input's array") as e:
        apply(one, src, dst, fn_kwargs={"x": 3}, chunk_sizes=[(4, 4)])
    assert e.value.field == "fn_kwargs.x"
    # Named inputs are passed by keyword: there the input's name is what may not be reused.
    assert apply(one, {"x": src}, dst, fn_kwargs={"mask": 3}, chunk_sizes=[(4, 4)])
