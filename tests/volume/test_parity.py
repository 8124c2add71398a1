"""Backend parity and interchange: same operations give the same arrays on every backend."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chunkgraph
from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

MakeVolume = Callable[..., Volume]

SHAPE = (9, 11)
OFFSET = (-3, 4)
BOUNDS = Box(OFFSET, (OFFSET[0] + SHAPE[0], OFFSET[1] + SHAPE[1]))


@st.composite
def boxes_near_bounds(draw: st.DrawFn) -> Box:
    """Boxes that may stick out of the bounds or miss them entirely."""
    start = [
        draw(st.integers(b - 4, e + 1)) for b, e in zip(BOUNDS.start, BOUNDS.stop, strict=True)
    ]
    shape = [draw(st.integers(0, 8)) for _ in start]
    return Box(start, [a + s for a, s in zip(start, shape, strict=True)])


OPS = st.lists(
    st.tuples(st.sampled_from(["write", "read"]), boxes_near_bounds(), st.integers(0, 1000)),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_same_sequence_same_arrays_on_every_backend(
    ops: list[tuple[str, Box, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("parity")
    paths = {"zarr": str(root / "z"), "tensorstore": str(root / "t"), "memory": f"parity-{id(ops)}"}
    vols = [
        volume.create(
            paths[be],
            SHAPE,
            (4, 3),
            "int32",
            fill_value=-1,
            backend=be,  # type: ignore[arg-type]
            offset=OFFSET,
            aligned_writes=False,
            cache_bytes=cache,  # the memory volume also exercises the cached read path
        )
        for be, cache in (("zarr", 0), ("tensorstore", 0), ("memory", 256))
    ]
    model = np.full(SHAPE, -1, "int32")  # the reference semantics, in plain numpy
    try:
        for op, box, seed in ops:
            if op == "write":
                data = np.random.default_rng(seed).integers(0, 99, box.shape, dtype="int32")
                for v in vols:
                    v.write(box, data)
                inner = box.intersection(BOUNDS)
                model[inner.translated([-o for o in OFFSET]).slices()] = data[
                    inner.slices(relative_to=box)
                ]
            else:
                expected = np.full(box.shape, -1, "int32")
                inner = box.intersection(BOUNDS)
                expected[inner.slices(relative_to=box)] = model[
                    inner.translated([-o for o in OFFSET]).slices()
                ]
                for v in vols:
                    np.testing.assert_array_equal(v.read(box), expected, err_msg=v.backend)
        final = [v.read(BOUNDS) for v in vols]
        for got in final:
            np.testing.assert_array_equal(got, model)
        assert len({v.stats.bytes_written for v in vols}) == 1
    finally:
        volume.remove(vols[2].path)


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("compressor", ["default", None])
@pytest.mark.parametrize(("writer", "reader"), [("zarr", "tensorstore"), ("tensorstore", "zarr")])
def test_one_backend_reads_the_others_volume(
    tmp_path: Path, writer: str, reader: str, compressor: str | None, checksum: bool
) -> None:
    path = str(tmp_path / "shared")
    v = volume.create(
        path,
        (2, 6, 8),
        (2, 3, 4),
        "float32",
        backend=writer,
        offset=(5, 6),
        spatial_ndim=2,  # type: ignore[arg-type]
        fill_value=0.5,
        compressor=compressor,
        checksum=checksum,
    )
    codecs = json.loads((tmp_path / "shared" / "zarr.json").read_text())["codecs"]
    assert (codecs[-1] == {"name": "crc32c"}) is checksum
    data = np.random.default_rng(0).random((2, 6, 8), dtype="float32")
    v.write(v.bounds, data)
    other = volume.open(path, "r+", backend=reader)
    assert other.backend == reader
    assert (other.offset, other.spatial_ndim, other.channel_shape, other.fill_value) == (
        (5, 6),
        2,
        (2,),
        0.5,
    )
    np.testing.assert_array_equal(other.read(other.bounds), data)
    other.write(Box((5, 6), (8, 10)), np.zeros((2, 3, 4), "float32"))
    data[:, :3, :4] = 0
    np.testing.assert_array_equal(v.read(v.bounds), data)


def test_open_defaults_to_the_creating_backend(tmp_path: Path) -> None:
    volume.create(str(tmp_path / "t"), (4,), (2,), "uint8", backend="tensorstore")
    volume.create(str(tmp_path / "z"), (4,), (2,), "uint8")
    assert volume.open(str(tmp_path / "t")).backend == "tensorstore"
    assert volume.open(tmp_path / "z").backend == "zarr"


@pytest.mark.parametrize("checksum", [True, False])
def test_uncompressed_volume_stores_raw_chunk_bytes(tmp_path: Path, checksum: bool) -> None:
    import google_crc32c

    payload = np.arange(16, dtype="<u2").tobytes()
    # The checksum is CRC-32C of the payload, appended little-endian (Zarr v3 crc32c codec).
    suffix = google_crc32c.value(payload).to_bytes(4, "little") if checksum else b""
    for backend in ("zarr", "tensorstore"):
        path = tmp_path / backend
        v = volume.create(
            str(path),
            (4, 4),
            (4, 4),
            "uint16",
            backend=backend,
            compressor=None,
            checksum=checksum,  # type: ignore[arg-type]
        )
        v.write(v.bounds, np.arange(16, dtype="uint16").reshape(4, 4))
        raw = (path / "c" / "0" / "0").read_bytes()
        assert raw == payload + suffix, backend


@pytest.mark.parametrize("backend", ["zarr", "tensorstore"])
def test_unknown_compressor_rejected(tmp_path: Path, backend: str) -> None:
    with pytest.raises(ConfigError, match="compressor 'lz9'"):
        volume.create(str(tmp_path / "x"), (4,), (2,), "uint8", backend=backend, compressor="lz9")  # type: ignore[arg-type]


def test_on_disk_volume_pickles_by_path(tmp_path: Path, backend: str) -> None:
    v = volume.create(
        str(tmp_path / "p") if backend != "memory" else "pickle-me",
        (4, 4),
        (2, 2),
        "int8",
        backend=backend,
        offset=(1, 1),
        cache_bytes=1024,  # type: ignore[arg-type]
    )
    try:
        if backend == "memory":
            with pytest.raises(ConfigError, match="cannot be pickled"):
                pickle.dumps(v)
            return
        v.write(v.bounds, np.ones((4, 4), "int8"))
        clone = pickle.loads(pickle.dumps(v))
        assert (clone.path, clone.backend, clone.mode, clone.cache_bytes) == (
            v.path,
            backend,
            "r+",
            1024,
        )
        assert np.all(clone.read(clone.bounds) == 1)
    finally:
        volume.remove(v.path)


def _run_python(code: str) -> str:
    src = str(Path(chunkgraph.__file__).parent.parent)
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("backend", ["zarr", "tensorstore"])
def test_reopen_a_volume_written_by_another_process(tmp_path: Path, backend: str) -> None:
    path = str(tmp_path / "from-child")
    _run_python(
        "import numpy as np\n"
        "from chunkgraph import volume\n"
        "from chunkgraph.geometry import Box\n"
        f"v = volume.create({path!r}, (3, 8, 8), (3, 4, 4), 'uint16', backend={backend!r},\n"
        "                  offset=(10, 20), spatial_ndim=2, fill_value=7, aligned_writes=False)\n"
        "v.write(Box((10, 20), (13, 23)), np.full((3, 3, 3), 42, 'uint16'))\n"
    )
    v = volume.open(path, "r+")
    assert (v.backend, v.offset, v.spatial_ndim, v.aligned_writes) == (backend, (10, 20), 2, False)
    got = v.read(Box((9, 19), (14, 24)))
    expected = np.full((3, 5, 5), 7, "uint16")
    expected[:, 1:4, 1:4] = 42
    np.testing.assert_array_equal(got, expected)
    # And back: this process writes, a fresh process reads through volume.open.
    v.write(Box((17, 27), (18, 28)), np.full((3, 1, 1), 9, "uint16"))
    out = _run_python(
        "from chunkgraph import volume\n"
        "from chunkgraph.geometry import Box\n"
        f"v = volume.open({path!r})\n"
        "print(v.read(Box((17, 27), (18, 28))).ravel().tolist())\n"
    )
    assert out.strip() == "[9, 9, 9]"


def test_create_validates_its_arguments(tmp_path: Path) -> None:
    p = str(tmp_path / "bad")
    with pytest.raises(ConfigError, match="backend 'hdf5'"):
        volume.create(p, (4,), (2,), "uint8", backend="hdf5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"chunks \(2,\) has 1 axes but shape \(4, 4\) has 2"):
        volume.create(p, (4, 4), (2,), "uint8")
    with pytest.raises(ConfigError, match="offset"):
        volume.create(p, (4, 4), (2, 2), "uint8", offset=(1,))
    with pytest.raises(ConfigError, match="spatial_ndim"):
        volume.create(p, (4, 4), (2, 2), "uint8", spatial_ndim=3)
    with pytest.raises(ConfigError, match="fill_value"):
        volume.create(p, (4,), (2,), "uint8", fill_value="lots")
    with pytest.raises(ConfigError, match="cache_bytes"):
        volume.create(p, (4,), (2,), "uint8", cache_bytes=-5)
    assert not os.path.exists(p)
    with pytest.raises(ConfigError, match="mode"):
        volume.open(p, "w")
    with pytest.raises(FileNotFoundError, match="no volume"):
        volume.open(p)
    volume.create(p, (4,), (2,), "uint8")
    with pytest.raises(ConfigError, match="cache_bytes"):
        volume.open(p, cache_bytes=-1)


@pytest.mark.parametrize("backend", ["zarr", "tensorstore"])
def test_a_pickled_volume_writes_from_a_spawned_process(tmp_path: Path, backend: str) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    v = volume.create(str(tmp_path / "spawned"), (8, 8), (4, 4), "int32", backend=backend)  # type: ignore[arg-type]
    boxes = v.bounds.split(4)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        # A bound method pickles its Volume, which the worker reopens by path.
        futures = [
            pool.submit(v.write, b, np.full(b.shape, i, "int32")) for i, b in enumerate(boxes)
        ]
        for f in futures:
            f.result()
    expected = np.repeat(np.repeat(np.arange(4).reshape(2, 2), 4, axis=0), 4, axis=1)
    np.testing.assert_array_equal(v.read(v.bounds), expected)


def test_missing_tensorstore_package_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulates an install without the optional extra: the import of tensorstore fails.
    monkeypatch.setitem(sys.modules, "tensorstore", None)
    with pytest.raises(ConfigError, match=r"pip install 'chunkgraph\[tensorstore\]'"):
        volume.create(str(tmp_path / "t"), (4,), (2,), "uint8", backend="tensorstore")


def test_a_subclass_of_volume_pickles_as_a_volume(tmp_path: Path) -> None:
    """The registry says how a Volume travels (``copyreg``); a subclass a user made, which
    copyreg's table does not name, travels the same way and comes back as a Volume."""

    class Tagged(Volume):
        pass

    v = volume.create(str(tmp_path / "s"), (4, 4), (2, 2), "int8")
    v.write(v.bounds, np.full((4, 4), 3, "int8"))
    tagged = Tagged(v._storage, "r+", 0)
    clone = pickle.loads(pickle.dumps(tagged))
    assert type(clone) is Volume and clone.path == v.path
    assert (clone.read(clone.bounds) == 3).all()
