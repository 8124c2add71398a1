"""How the field's writers store a precomputed scale's chunks, and reading every way exactly.

One chunk of scale ``8_8_40`` covering voxels ``[0, 64)`` on each axis::

    writer                          stored as
    TensorStore, Neuroglancer       8_8_40/0-64_0-64_0-64        the encoding's bytes
    CloudVolume on a local disk     8_8_40/0-64_0-64_0-64.gz     gzip of them (its default
                                                                 for raw and
                                                                 compressed_segmentation)
    CloudVolume on s3 or gs         8_8_40/0-64_0-64_0-64        gzip, Content-Encoding: gzip
    any writer, sharded scale       8_8_40/<shard>.shard         chunks gzipped inside
                                                                 (the info's data_encoding)

TensorStore reads plain keys, shards, and objects served with ``Content-Encoding``
gzip, br or zstd (its HTTP client decodes them). A chunk file named ``.gz`` it
never looks for: it would read that chunk as missing, all fill. So:

* A scale whose folder (or key prefix) holds ``.gz`` chunk files (``open`` looks
  at the first ``SCAN`` names listed) is a **gzip scale**. A read fetches
  ``<key>.gz`` for each chunk it touches, gunzips it and hands the bytes to
  TensorStore inside a transaction that is never committed, so TensorStore
  decodes them exactly as it decodes plain chunks (raw, compressed_segmentation,
  jpeg). A chunk with no ``.gz`` file is read from its plain key, or is missing.
  Reads of other scales take TensorStore's path unchanged.
* A write to a gzip scale stays gzip: TensorStore encodes the chunks in a
  transaction, each is gzipped to ``<key>.gz`` (written whole, atomically) and a
  plain file of that chunk is removed after; a chunk left all fill removes both,
  as TensorStore removes a plain one.
* Refused at ``open`` with a ``ConfigError`` naming the suffix: chunk files of
  other compressions (``.br``, ``.zstd``, ``.xz``, ``.bz2``: CloudVolume's
  ``compress='br'``, ...) and gzipped shard files (``.shard.gz``, CloudVolume's
  ``compress=True`` on a sharded scale), which cannot be read by byte range
  (CloudVolume does not read them back either).
* Missing is not unreadable: a chunk that is stored but does not gunzip or
  decode raises ``CorruptChunkError`` naming its key, file and box; only an
  absent one reads as fill. A stored shard file too short for its index (an
  empty one included), which TensorStore reads as all fill, is corrupt too.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import math
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.volume._integrity import (
    ChunkLayout,
    corrupt_chunk_error,
    raise_corrupt_chunks,
)
from chunkgraph.volume._object_store import StoreOptions, is_object_url, object_store, reaching
from chunkgraph.volume._storage import Index
from chunkgraph.volume._ts_view import TensorStoreView, tensorstore_module

_T = TypeVar("_T")
GZIP = ".gz"
# The suffixes CloudVolume's local writer gives chunk files, by its ``compress`` name.
COMPRESSED_SUFFIXES = {".gz": "gzip", ".br": "br", ".zstd": "zstd", ".xz": "xz", ".bz2": "bzip2"}
# Names listed at open to tell a gzip scale: one directory read or one list request (a
# writer gzips all of a scale's chunks or none; more names would cost a huge folder more).
SCAN = 1000
# zlib's own default: CloudVolume's gzip files are of this order, and level 9 costs about
# three times the time for a few percent.
GZIP_LEVEL = 6
# TensorStore's statuses for stored bytes that do not decode: a short raw chunk, a garbled
# compressed_segmentation or jpeg chunk (FAILED_PRECONDITION), a shard whose index points
# past its end (OUT_OF_RANGE) or does not gunzip (DATA_LOSS). Reads stay inside the
# volume, so OUT_OF_RANGE is never an index error here.
_DECODE_STATUSES = ("FAILED_PRECONDITION", "DATA_LOSS", "OUT_OF_RANGE")
# ... and a minishard index that does not gunzip, which TensorStore words without a status.
_DECODE_WORDING = "Error decoding existing minishard index"
# curl's own decode error (CURLE_BAD_CONTENT_ENCODING): an object served with
# Content-Encoding gzip (br, zstd) whose body is not that. The bytes arrived whole and do
# not decode, like a garbled chunk, so it is damage, not a failed request to retry.
_BAD_CONTENT_ENCODING = "[curl_code='61']"


def stored_suffix(root: str, scale: dict[str, Any], options: StoreOptions) -> str:
    """``".gz"`` for a gzip scale, ``""`` for plain chunks; ConfigError for what is not read."""
    names = _first_names(root, str(scale["key"]), options)
    found = sorted({s for name in names for s in COMPRESSED_SUFFIXES if name.endswith(s)})
    if not found:
        return ""
    where = f"scale {scale['key']!r} of precomputed volume {root!r}"
    if scale.get("sharding"):
        raise ConfigError(
            f"{where} has shard files compressed whole (.shard{found[0]}, CloudVolume's "
            "compress=True on a sharded scale): a shard is read by byte ranges, which a "
            "compressed file does not have. Rewrite the scale with CloudVolume's "
            "compress=False or the default (its chunks are then gzipped inside the shard)",
            field="path",
        )
    other = [s for s in found if s != GZIP]
    if other:
        kinds = ", ".join(f"{s} ({COMPRESSED_SUFFIXES[s]})" for s in other)
        raise ConfigError(
            f"{where} has chunk files compressed as {kinds}; chunkgraph reads plain chunk "
            "files and .gz ones. Rewrite it with CloudVolume's compress='gzip' (its default) "
            "or compress=False, or serve it from a bucket, where such objects carry a "
            "Content-Encoding that is decoded",
            field="path",
        )
    return GZIP


def _first_names(root: str, key: str, options: StoreOptions) -> list[str]:
    if not is_object_url(root):
        try:
            with os.scandir(os.path.join(root, key)) as entries:
                return [entry.name for entry in itertools.islice(entries, SCAN)]
        except FileNotFoundError:  # a scale with no chunk written yet
            return []
    import obstore
    from obstore.exceptions import BaseError, PermissionDeniedError

    with reaching(root, options):
        store = object_store(root.rstrip("/") + "/" + key, options)
        try:
            batch = next(iter(obstore.list(store, chunk_size=SCAN)), [])
        except BaseError as err:
            # A bucket may grant reads but not ListBucket: no .gz key can be seen then, and
            # the scale reads as CloudVolume writes to buckets (plain keys, Content-Encoding).
            if isinstance(err, PermissionDeniedError) or "403 Forbidden" in str(err):
                return []
            raise
    return [str(item["path"]) for item in batch]


def chunk_layout(
    root: str,
    scale: dict[str, Any],
    shape: tuple[int, ...],
    grid: tuple[int, ...],
    suffix: str,
) -> ChunkLayout:
    """Where the stored objects of ``scale`` (TensorStore's ``scale_metadata``) are: ``grid``
    is a chunk (a shard when sharded), with the channel axis first when ``shape`` has one."""
    offset = tuple(int(o) for o in scale.get("voxel_offset", (0, 0, 0)))
    sharding = scale.get("sharding")
    if sharding:
        name = _ShardName(str(scale["key"]), scale, tuple(int(s) for s in scale["size"]))
        return ChunkLayout(root, shape, grid, {}, offset, 0, key_of=name)
    return ChunkLayout(
        root, shape, grid, {}, offset, 0, key_of=_ChunkName(str(scale["key"]), suffix)
    )


class _ChunkName:
    """``8_8_40/0-64_0-64_0-64`` (+ suffix) from a chunk's global box."""

    def __init__(self, key: str, suffix: str) -> None:
        self.key = key
        self.suffix = suffix

    def __call__(self, layout: ChunkLayout, coords: tuple[int, ...]) -> str:
        box = layout.box(coords)
        ranges = "_".join(f"{a}-{b}" for a, b in zip(box.start, box.stop, strict=True))
        return f"{self.key}/{ranges}{self.suffix}"


class _ShardName:
    """The shard file that holds the first chunk of a shard-sized cell (identity hash; the
    format's compressed Morton code of the chunk's grid position, shifted and masked)."""

    def __init__(self, key: str, scale: dict[str, Any], size: tuple[int, ...]) -> None:
        self.key = key
        self.sharding = scale["sharding"]
        self.chunk = tuple(int(c) for c in scale["chunk_size"])
        self.bits = tuple(
            max(0, math.ceil(math.log2(-(-n // c)))) for n, c in zip(size, self.chunk, strict=True)
        )
        # A shard file starts with its index: 16 bytes for each of its minishards.
        self.index_bytes = 16 << int(self.sharding["minishard_bits"])

    def __call__(self, layout: ChunkLayout, coords: tuple[int, ...]) -> str:
        spec = self.sharding
        box = layout.box(coords)
        cell = tuple(
            (a - o) // c for a, o, c in zip(box.start, layout.offset, self.chunk, strict=True)
        )
        if spec.get("hash", "identity") != "identity":
            return f"{self.key}/(the shard holding chunk {cell}, {spec['hash']} hash)"
        code, out = 0, 0
        for bit in range(max(self.bits, default=0)):
            for axis, width in enumerate(self.bits):
                if bit < width:
                    code |= ((cell[axis] >> bit) & 1) << out
                    out += 1
        shard_bits = int(spec["shard_bits"])
        shard = (code >> int(spec["preshift_bits"]) >> int(spec["minishard_bits"])) & (
            (1 << shard_bits) - 1
        )
        digits = -(-shard_bits // 4)
        return f"{self.key}/{shard:0{digits}x}.shard" if digits else f"{self.key}/0.shard"


def is_decode_error(error: BaseException) -> bool:
    if not isinstance(error, ValueError):
        return False
    text = str(error)
    return (
        text.startswith(_DECODE_STATUSES)
        or _DECODE_WORDING in text
        or _BAD_CONTENT_ENCODING in text
    )


class PrecomputedView(TensorStoreView):
    """One precomputed scale: TensorStore's view, plus gzip chunk files and damaged chunks
    named (``CorruptChunkError``) instead of TensorStore's bare error."""

    def __init__(
        self, *args: Any, layout: ChunkLayout, suffix: str, kvstore: Any, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.layout = layout
        self.suffix = suffix
        self._kvstore = kvstore  # the volume root's key-value store, TensorStore's own

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        if self.suffix != GZIP:
            return self._named(index, self._view)
        txn = tensorstore_module("precomputed").Transaction()
        try:
            self._stage(txn, index)
            return self._named(index, self._view.with_transaction(txn))
        finally:
            txn.abort()

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        if self.suffix != GZIP:
            super().write(index, data)
            return
        txn = tensorstore_module("precomputed").Transaction()
        try:
            self._view.with_transaction(txn)[index].write(data).result()
            staged = self._kvstore.with_transaction(txn)
            keys = [self.layout.key(coords) for coords, _ in self.layout.cells(index)]
            encoded = [staged.read(key[: -len(GZIP)]) for key in keys]
            found = [(key, future.result()) for key, future in zip(keys, encoded, strict=True)]
            # A chunk left all fill is not stored by TensorStore, so neither may its .gz be.
            filled = [self._kvstore.write(key, None) for key, f in found if f.state != "value"]
            stored = [(key, bytes(f.value)) for key, f in found if f.state == "value"]
            packed = _in_threads(_gzip, [raw for _, raw in stored])
            pending = filled + [
                self._kvstore.write(key, data)
                for (key, _), data in zip(stored, packed, strict=True)
            ]
            for future in pending:
                future.result()
            # Only now: a crash before leaves the old plain file beside the new .gz, read first.
            for future in [self._kvstore.write(key[: -len(GZIP)], None) for key in keys]:
                future.result()
        finally:
            txn.abort()

    def _named(self, index: Index, view: Any) -> np.ndarray[Any, Any]:
        def read(cell: Index) -> np.ndarray[Any, Any]:
            return np.asarray(view[cell].read().result())

        try:
            data = read(index)
        except ValueError as error:
            if not is_decode_error(error):
                raise
            raise_corrupt_chunks(self.layout, index, read, is_decode_error, error, "read")
        if isinstance(self.layout.key_of, _ShardName):
            self._check_short_shards(index, data)
        return data

    def _check_short_shards(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        """TensorStore reads a stored shard file too short to hold its index (an empty one
        included) as all fill: one ranged read of the index of each shard that read as all
        fill tells that from a shard that is absent or really holds fill."""
        assert isinstance(self.layout.key_of, _ShardName)
        size = self.layout.key_of.index_bytes
        shards = []
        for coords, cell in self.layout.cells(index):
            part = tuple(
                slice(max(c.start, i.start) - i.start, min(c.stop, i.stop) - i.start)
                for c, i in zip(cell, _starts(index, self.layout.shape), strict=True)
            )
            if not np.any(data[part] != self.layout.fill_value):
                shards.append(coords)
        heads = [
            (coords, self._kvstore.read(self.layout.key(coords), byte_range=slice(0, size)))
            for coords in shards
        ]
        short: list[tuple[tuple[int, ...], BaseException]] = []
        for coords, future in heads:
            try:
                future.result()
            except ValueError as error:
                if not str(error).startswith("OUT_OF_RANGE"):
                    raise
                short.append((coords, ValueError(f"shorter than its {size}-byte shard index")))
        if short:
            raise corrupt_chunk_error(self.layout, short, "read")

    def _stage(self, txn: Any, index: Index) -> None:
        """Put the gunzipped bytes of each ``.gz`` chunk ``index`` touches under its plain key,
        in ``txn`` only (other reads never see them; the transaction is never committed)."""
        cells = [coords for coords, _ in self.layout.cells(index)]
        fetched = [self._kvstore.read(self.layout.key(coords)) for coords in cells]
        found = [(coords, future.result()) for coords, future in zip(cells, fetched, strict=True)]
        # No .gz: TensorStore reads the plain key, or finds the chunk missing.
        stored = [(coords, bytes(f.value)) for coords, f in found if f.state == "value"]
        plain = _in_threads(_gunzip, [packed for _, packed in stored])
        broken = [
            (coords, result)
            for (coords, _), result in zip(stored, plain, strict=True)
            if isinstance(result, Exception)
        ]
        if broken:
            raise corrupt_chunk_error(self.layout, broken, "read") from broken[0][1]
        staged = self._kvstore.with_transaction(txn)
        writes = [
            staged.write(self.layout.key(coords)[: -len(GZIP)], result)
            for (coords, _), result in zip(stored, plain, strict=True)
        ]
        for write in writes:
            write.result()


def _starts(index: Index, shape: tuple[int, ...]) -> list[slice]:
    return [slice(*s.indices(n)[:2]) for s, n in zip(index, shape, strict=True)]


def _gunzip(packed: bytes) -> bytes | Exception:
    try:
        return gzip.decompress(packed)
    except (OSError, EOFError, zlib.error) as err:  # not gzip, truncated, bad CRC
        return err


def _gzip(raw: bytes) -> bytes:
    return gzip.compress(raw, GZIP_LEVEL, mtime=0)


def _in_threads(fn: Callable[[bytes], _T], items: list[bytes]) -> list[_T]:
    """``fn`` over ``items``, on every core when there are several (zlib lets go of the GIL)."""
    if len(items) < 2:
        return [fn(item) for item in items]
    return list(_codec_pool(os.getpid()).map(fn, items))


@functools.cache
def _codec_pool(pid: int) -> ThreadPoolExecutor:
    # One per process (by pid: a forked child's copy of its parent's pool has no threads).
    return ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix=f"chunkgraph-gzip-{pid}")
