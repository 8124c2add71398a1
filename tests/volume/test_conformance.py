"""Storage conformance: every backend (zarr, tensorstore, memory) passes the same tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from chunkgraph._errors import AlignmentError, ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

MakeVolume = Callable[..., Volume]


def _ramp(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 251 + 1).reshape(shape).astype(dtype)


class TestBackendConformance:
    """Semantics every backend must share; ``backend`` is parametrised by the fixture."""

    def test_describes_itself(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (10, 12), (4, 5), "int16", fill_value=-1, offset=(3, -2))
        assert (v.shape, v.chunks, v.dtype, v.ndim, v.spatial_ndim) == (
            (10, 12),
            (4, 5),
            np.dtype("int16"),
            2,
            2,
        )
        assert v.fill_value == -1 and v.backend == backend and v.mode == "r+"
        assert v.bounds == Box((3, -2), (13, 10)) and v.offset == (3, -2)
        assert v.channel_shape == () and v.aligned_writes is True

    def test_new_volume_reads_fill_value(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (6, 6), (3, 3), "float32", fill_value=7.5)
        assert np.all(v.read(Box((0, 0), (6, 6))) == 7.5)

    def test_round_trip_in_global_coordinates(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (8, 12), (4, 4), offset=(100, 200))
        data = _ramp((8, 12))
        v.write(v.bounds, data)
        np.testing.assert_array_equal(v.read(v.bounds), data)
        np.testing.assert_array_equal(v.read(Box((102, 205), (107, 211))), data[2:7, 5:11])

    def test_outside_bounds_is_fill_value(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (4, 4), (2, 2), "uint8", fill_value=9, offset=(10, 10))
        v.write(v.bounds, np.ones((4, 4), "uint8"))
        got = v.read(Box((8, 12), (12, 16)))
        expected = np.full((4, 4), 9, "uint8")
        expected[2:4, 0:2] = 1
        np.testing.assert_array_equal(got, expected)
        assert np.all(v.read(Box((0, 0), (3, 3))) == 9)  # entirely outside
        assert v.read(Box((11, 11), (11, 13))).shape == (0, 2)

    def test_writes_outside_bounds_are_cropped(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (4, 4), (2, 2), "int32")
        data = _ramp((8, 8), "int32")
        v.write(Box((-2, -2), (6, 6)), data)
        np.testing.assert_array_equal(v.read(v.bounds), data[2:6, 2:6])
        v.write(Box((50, 50), (52, 52)), np.zeros((2, 2), "int32"))  # fully outside: no-op
        assert v.stats.bytes_written == 4 * 4 * 4

    def test_misaligned_write_raises_and_writes_nothing(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (8, 8), (4, 4), offset=(1, 1))
        with pytest.raises(AlignmentError, match=r"chunk grid \(4, 4\) at offset \(1, 1\)") as err:
            v.write(Box((1, 2), (5, 5)), np.ones((4, 3), "float32"))
        assert "Box(start=(1, 1), stop=(5, 5))" in str(err.value)  # the nearest aligned box
        assert np.all(v.read(v.bounds) == 0)
        assert v.stats.bytes_written == 0

    def test_edge_chunks_clipped_by_the_volume_count_as_whole(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (6, 7), (4, 4))
        v.write(Box((4, 4), (6, 7)), np.ones((2, 3), "float32"))
        v.write(Box((4, 4), (9, 9)), np.full((5, 5), 2, "float32"))  # cropped to the edge chunk
        assert float(v.read(v.bounds).sum()) == 2 * 6

    def test_unaligned_volume_read_modify_writes(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (8, 8), (4, 4), aligned_writes=False)
        v.write(v.bounds, _ramp((8, 8)))
        v.write(Box((1, 3), (3, 6)), np.zeros((2, 3), "float32"))
        expected = _ramp((8, 8))
        expected[1:3, 3:6] = 0
        np.testing.assert_array_equal(v.read(v.bounds), expected)

    def test_unsafe_dtype_rejected_safe_cast_accepted(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (4, 4), (2, 2), "float32")
        with pytest.raises(ConfigError, match=r"float64 data to float32.*safe casts"):
            v.write(v.bounds, np.ones((4, 4), "float64"))
        with pytest.raises(ConfigError, match=r"int64 data"):
            v.write(v.bounds, np.ones((4, 4), "int64"))
        assert np.all(v.read(v.bounds) == 0)
        v.write(v.bounds, np.full((4, 4), 3, "int16"))
        assert v.read(v.bounds).dtype == np.float32 and np.all(v.read(v.bounds) == 3)

    def test_wrong_shape_rejected_before_writing(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (4, 4), (2, 2))
        with pytest.raises(ConfigError, match=r"expected channel_shape \(\) \+ box.shape"):
            v.write(Box((0, 0), (4, 4)), np.ones((4, 2), "float32"))
        with pytest.raises(ConfigError, match="3 axes"):
            v.read(Box((0, 0, 0), (1, 1, 1)))
        assert np.all(v.read(v.bounds) == 0)

    def test_channel_axes_are_carried_whole(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (3, 8, 8), (3, 4, 4), "uint16", spatial_ndim=2, offset=(4, 4))
        assert v.channel_shape == (3,) and v.bounds == Box((4, 4), (12, 12))
        data = _ramp((3, 8, 8), "uint16")
        v.write(v.bounds, data)
        got = v.read(Box((10, 2), (14, 6)))
        assert got.shape == (3, 4, 4)
        np.testing.assert_array_equal(got[:, :2, 2:], data[:, 6:, :2])
        assert np.all(got[:, 2:, :] == 0) and np.all(got[:, :, :2] == 0)
        with pytest.raises(ConfigError, match="channel axes must be chunked whole"):
            make_volume(backend, (3, 8, 8), (1, 4, 4), spatial_ndim=2)

    def test_read_only_volume_refuses_writes(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (4,), (2,))
        from chunkgraph import volume

        ro = volume.open(v.path, "r", backend=backend)
        with pytest.raises(ConfigError, match="read-only"):
            ro.write(ro.bounds, np.ones(4, "float32"))

    def test_read_stats_count_whole_chunks(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (10, 10), (4, 4), "float32")
        v.read(Box((3, 3), (5, 5)))  # touches 4 chunks of 4x4
        s = v.stats
        assert (s.chunks_read, s.bytes_read) == (4, 4 * 16 * 4)
        assert s.read_amplification(2 * 2 * 4) == 16.0
        v.reset_stats()
        v.read(Box((0, 0), (10, 10)))  # whole volume: edge chunks count clipped, no waste
        assert v.stats.chunks_read == 9 and v.stats.read_amplification(400) == 1.0
        v.read(Box((-5, -5), (0, 0)))  # outside: nothing fetched
        assert v.stats.chunks_read == 9

    def test_stats_difference_isolates_one_read(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        v = make_volume(backend, (8, 8), (4, 4), "uint8")
        v.read(v.bounds)
        before = v.stats
        v.read(Box((0, 0), (2, 2)))
        delta = v.stats - before
        assert (delta.chunks_read, delta.bytes_read, delta.bytes_written) == (1, 16, 0)

    def test_write_stats(self, backend: str, make_volume: MakeVolume) -> None:
        v = make_volume(backend, (8, 8), (4, 4), "uint8")
        v.write(Box((0, 0), (4, 8)), np.ones((4, 8), "uint8"))
        assert (v.stats.bytes_written, v.stats.chunks_written) == (32, 2)

    def test_exist_ok_and_remove(self, backend: str, make_volume: MakeVolume) -> None:
        from chunkgraph import volume

        v = make_volume(backend, (4, 4), (2, 2))
        v.write(v.bounds, np.ones((4, 4), "float32"))
        with pytest.raises(ConfigError, match="already exists"):
            volume.create(v.path, (4, 4), (2, 2), "float32", backend=backend)  # type: ignore[arg-type]
        again = volume.create(v.path, (4, 4), (2, 2), "float32", backend=backend, exist_ok=True)  # type: ignore[arg-type]
        assert np.all(again.read(again.bounds) == 1)
        with pytest.raises(ConfigError, match="has \\(shape"):
            volume.create(v.path, (4, 5), (2, 2), "float32", backend=backend, exist_ok=True)  # type: ignore[arg-type]
        volume.remove(v.path)
        with pytest.raises(FileNotFoundError):
            volume.open(v.path, backend=backend)
        volume.remove(v.path, missing_ok=True)

    def test_concurrent_disjoint_writes_and_reads(
        self, backend: str, make_volume: MakeVolume
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        v = make_volume(backend, (16, 16), (4, 4), "int32")
        data = _ramp((16, 16), "int32")
        boxes = v.bounds.split(4)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda b: v.write(b, data[b.slices()]), boxes))
            got = list(pool.map(v.read, boxes))
        for b, part in zip(boxes, got, strict=True):
            np.testing.assert_array_equal(part, data[b.slices()])


def test_volume_repr_names_backend(make_volume: MakeVolume) -> None:
    v: Volume = make_volume("memory", (2,), (2,))
    assert "backend='memory'" in repr(v) and "bounds=Box" in repr(v)


def test_description_is_read_only(make_volume: MakeVolume) -> None:
    v: Volume = make_volume("memory", (4, 4), (2, 2))
    for name in ("bounds", "mode", "shape", "chunks", "offset", "channel_shape", "cache_bytes"):
        with pytest.raises(AttributeError):
            setattr(v, name, None)
