"""The table of formats says what each format can do; these tests hold every row to it by
making a real volume of the format and doing the thing: levels, partial-chunk writes, the
places it reaches, and on a real S3 server (moto) a stale conditional write refused."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import AlignmentError, ConfigError, volume
from chunkgraph.geometry import Box
from chunkgraph.volume import FORMATS, Format, Volume, format_of

SHAPE, CHUNKS = (16, 16, 8), (8, 8, 8)
VOLUME_DIR = Path(volume.__file__).parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "storage.md"


def _make(fmt: Format, root: str, aligned_writes: bool = True) -> Volume:
    """A new uint8 volume of ``fmt`` under ``root`` (a directory, a bucket URL or a name),
    made the way a user makes one: a plain backend, a path prefix, or a multiscale image."""
    if not fmt.prefixes and not fmt.plain:  # no prefix names it: made with its levels
        level = volume.Level(SHAPE, CHUNKS, (1, 1, 1))
        (base,) = volume.create_multiscale(f"{root}/img", [level], "uint8")
        return base
    path = f"{fmt.prefixes[0]}://{root}/v" if not fmt.plain else f"{root}/v"
    backend: Any = fmt.name if fmt.plain else "zarr"
    return volume.create(
        path, SHAPE, CHUNKS, "uint8", backend=backend, aligned_writes=aligned_writes
    )


@pytest.fixture
def place(tmp_path: Path) -> Any:
    made: list[Volume] = []

    def make(fmt: Format, aligned_writes: bool = True) -> Volume:
        made.append(_make(fmt, str(tmp_path / fmt.name), aligned_writes))
        return made[-1]

    yield make
    for v in made:
        if v.format.in_process:
            volume.remove(v.path)


def test_every_backend_a_volume_can_have_has_one_row(place: Any) -> None:
    names = [f.name for f in FORMATS]
    assert len(set(names)) == len(names)
    prefixes = [p for f in FORMATS for p in f.prefixes]
    assert len(set(prefixes)) == len(prefixes)
    # Each backend module names the backend its volumes carry.
    declared = {
        node.value.value
        for path in VOLUME_DIR.glob("_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "BACKEND" for t in node.targets)
        and isinstance(node.value, ast.Constant)
    }
    assert declared <= set(names), declared - set(names)
    made = {place(f).backend for f in FORMATS}
    assert made == set(names)  # zarr2 too, which _zarr names by its Zarr format
    for f in FORMATS:
        assert format_of(f.name) is f
    with pytest.raises(ConfigError, match=r"'hdf5' is not one of .*precomputed.*memory"):
        format_of("hdf5")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_multiscale_rows_grow_and_open_pyramids_and_the_others_refuse_levels(
    place: Any, fmt: Format
) -> None:
    base = place(fmt)
    assert base.format is fmt
    if fmt.multiscale:
        half = volume.add_level(base, 2)
        root, _ = base.level_of or ("", None)
        again = volume.open(volume.path_to_open(root, fmt.name), scale=1)
        assert again.resolution == half.resolution == (2, 2, 2)
        assert again.format is fmt
        return
    assert base.level_of is None
    with pytest.raises(ConfigError, match="multiscale") as refused:
        volume.add_level(base, 2)
    assert refused.value.field == "base"
    with pytest.raises(ConfigError, match="without scale"):
        volume.open(volume.path_to_open(base.path, fmt.name), backend=fmt.name, scale=1)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.prefixes or f.plain], ids=lambda f: f.name)
def test_whole_chunk_rows_refuse_partial_writes_and_the_others_take_them(
    place: Any, fmt: Format
) -> None:
    v = place(fmt, aligned_writes=False)
    part = Box((0, 0, 0), (4, 8, 8))
    data = np.full((4, 8, 8), 3, "uint8")
    assert v.aligned_writes is fmt.whole_chunk_writes
    if fmt.whole_chunk_writes:
        with pytest.raises(AlignmentError):
            v.write(part, data)
        return
    v.write(part, data)
    assert int(v.read(Box((0, 0, 0), CHUNKS)).sum()) == 3 * 4 * 8 * 8


@pytest.mark.parametrize("fmt", [f for f in FORMATS if not f.in_process], ids=lambda f: f.name)
def test_each_row_reaches_the_stores_it_names_and_is_refused_elsewhere(
    fmt: Format, tmp_path: Path, bucket: str
) -> None:
    assert _make(fmt, str(tmp_path)).location.kind == "disk"
    if fmt.reaches(f"s3://{bucket}"):
        assert _make(fmt, f"s3://{bucket}").location.kind == "remote"
    else:
        with pytest.raises(ConfigError, match=re.escape(fmt.places())):
            _make(fmt, f"s3://{bucket}")
    if not fmt.reaches("gs://bucket"):  # refused before any request (no gs server here)
        with pytest.raises(ConfigError, match=re.escape(fmt.places())):
            _make(fmt, "gs://no-such-bucket")


class _RacingPuts:
    """Around obstore's ``put_async``: remembers each chunk object first made, and once
    armed, just before the first conditional replace of a chunk puts that remembered
    version back, as another writer would between this writer's read and its write."""

    def __init__(self, real: Any) -> None:
        self.real, self.first, self.armed, self.raced = real, {}, False, 0

    async def __call__(self, store: Any, key: str, value: Any, **kw: Any) -> Any:
        import obstore

        mode = kw.get("mode")
        if self.armed and isinstance(mode, dict) and not self.raced:
            self.raced += 1
            obstore.put(store, key, self.first[key])
        result = await self.real(store, key, value, **kw)
        if mode == "create":
            self.first.setdefault(key, bytes(value))
        return result


@pytest.mark.parametrize("fmt", [f for f in FORMATS if "s3" in f.stores], ids=lambda f: f.name)
def test_conditional_rows_refuse_a_stale_write_and_keep_both_writers(
    fmt: Format, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore

    v = _make(fmt, f"s3://{bucket}")
    assert v.location.conditional_writes is fmt.conditional_writes
    seven, five = Box((0, 0, 0), (8, 2, 8)), Box((0, 4, 0), (8, 6, 8))
    if not fmt.conditional_writes:
        with pytest.raises(ConfigError, match="no conditional writes"):
            v.merge_write(five, np.full((8, 2, 8), 5, "uint8"))
        return
    racing = _RacingPuts(obstore.put_async)
    monkeypatch.setattr(obstore, "put_async", racing)
    v.merge_write(seven, np.full((8, 2, 8), 7, "uint8"))  # the chunk's first version
    v.merge_write(seven, np.zeros((8, 2, 8), "uint8"))  # read and replaced: all 0 now
    racing.armed = True
    v.merge_write(five, np.full((8, 2, 8), 5, "uint8"))  # meanwhile the 7s come back
    assert racing.raced == 1 and v.stats.write_conflicts >= 1
    chunk = v.read(Box((0, 0, 0), CHUNKS))
    assert (chunk[:, 0:2] == 7).all() and (chunk[:, 4:6] == 5).all()  # neither write lost
    assert int(chunk.sum()) == 7 * 8 * 2 * 8 + 5 * 8 * 2 * 8


def _docs_row(fmt: Format) -> str:
    yes = {True: "yes", False: "no"}
    prefixes = ", ".join(f"`{p}://`" for p in fmt.prefixes) or "-"
    names = {"disk": "local disk", "memory": "a name in this process"}
    stores = ", ".join(names.get(s, f"`{s}://`") for s in fmt.stores)
    return (
        f"| `{fmt.name}` | {fmt.title} | {prefixes} | {fmt.engine} | {stores} | "
        f"{yes[fmt.multiscale]} | {yes[fmt.conditional_writes]} | {yes[fmt.whole_chunk_writes]} |"
    )


def test_the_docs_and_the_module_show_the_table_as_it_is() -> None:
    docs = DOCS.read_text()
    missing = [_docs_row(f) for f in FORMATS if _docs_row(f) not in docs]
    assert not missing, "docs/storage.md lacks these rows of the table:\n" + "\n".join(missing)
    module = (VOLUME_DIR / "_formats.py").read_text()
    for f in FORMATS:
        yes = {True: "yes", False: "-"}
        cells = [f.name, " ".join(f.prefixes) or "-", f.engine, " ".join(f.stores)]
        cells += [yes[f.multiscale], yes[f.conditional_writes], yes[f.whole_chunk_writes]]
        assert re.search(r"\n    " + r"\s{2,}".join(map(re.escape, cells)) + r"\n", module), f
