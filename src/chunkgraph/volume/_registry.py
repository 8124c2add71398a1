"""``create`` / ``open`` / ``remove``: validate arguments, pick the backend, wrap a ``Volume``.

Backend choice on ``open(path, backend=None)``: a name registered in this
process's memory registry opens the memory volume; otherwise the path is a
Zarr v3 array, opened with the backend that created it (recorded in its
attributes; zarr for arrays made elsewhere, or when tensorstore is not
installed). Both on-disk backends read each other's volumes.

``create(..., exist_ok=True)`` on an existing volume opens it instead, after
checking that shape, chunks, dtype and placement match what was asked
(resuming a run must not silently reuse a different layer). Also when another
process creates it between the check and this creation (two runs starting on
one new output): the creation that fails because the volume now exists opens it.

URLs (``s3://bucket/a.zarr``, ``gs://…``) work as local paths do, with the
zarr backend over an object store (``_zarr``, ``_remote``); ``storage_options``
add to what the environment says (``_object_store``). TensorStore is refused
for URLs: partial-chunk writes there must be conditional (``_object_zarr``),
and TensorStore's s3 driver says of itself that it does not give the atomicity
its read-modify-writes need (a chunk merged into all fill value is deleted,
unconditionally); the zarr backend writes the same layout.

Other formats (``_formats``: a prefix such as ``precomputed://`` before the place,
or what is found at a bare path) are opened and created by ``_format_open``;
TensorStore serves precomputed and N5 on s3 too, their writes held to whole chunks.
"""

from __future__ import annotations

import copyreg
import dataclasses
import importlib.util
import json
import os
import shutil
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError, VolumeNotFoundError
from chunkgraph._util import as_int_tuple
from chunkgraph.volume import _remote
from chunkgraph.volume._format_open import create_format, open_format, scale_to_create
from chunkgraph.volume._format_open import exists as format_exists
from chunkgraph.volume._formats import (
    FORMATS,
    METADATA_FILES,
    BackendName,
    Format,
    by_prefix,
    format_of,
    split_format,
)
from chunkgraph.volume._location import Location
from chunkgraph.volume._memory import create_memory, memory_exists, open_memory, remove_memory
from chunkgraph.volume._object_store import (
    StoreOptions,
    is_object_url,
    no_bucket_error,
    normal_url,
    reaching,
)
from chunkgraph.volume._storage import ATTRS_KEY, Storage, VolumeMeta
from chunkgraph.volume._tensorstore import create_tensorstore, open_tensorstore
from chunkgraph.volume._volume import Volume
from chunkgraph.volume._zarr import create_zarr, open_zarr

# The backends ``create(backend=...)`` takes: the rows of plain Zarr v3 arrays.
_PLAIN = tuple(f.name for f in FORMATS if f.plain)


def _normalise_path(path: str | os.PathLike[str], backend: str) -> str:
    text = os.fspath(path)
    if Location.of(text, backend).local_dir is None:
        return normal_url(text)  # one spelling, so that identity compares the data
    # Absolute, so a volume pickled to a worker with another working directory still resolves.
    return os.path.abspath(text)


def _is_on_disk(path: str) -> bool:
    where = Location.of(path, "zarr").local_dir
    return where is not None and (where / "zarr.json").is_file()


def _exists(path: str, options: StoreOptions) -> bool:
    """Whether a Zarr array is stored at ``path`` (a directory or a URL)."""
    if is_object_url(path):
        with reaching(path, options):
            return _remote.exists(path, options)
    return _is_on_disk(path)


def _check_reaches(fmt: Format, path: str, field: str) -> None:
    """A ``ConfigError`` when no volume of ``fmt`` can live at ``path``; for a plain Zarr v3
    backend it names the one that reaches there (TensorStore's s3 driver does not give the
    atomicity its read-modify-writes need, so it serves local arrays only)."""
    if fmt.reaches(path):
        return
    other = next(f for f in FORMATS if f.plain and f.reaches(path))
    instead = (
        f"use backend={other.name!r} (the same Zarr v3 layout, reaching {other.places()}"
        + (", with the conditional writes that partial-chunk writes there need)")
        if field == "backend"
        else "copy the volume, or use Zarr (zarr://) there"
    )
    what = f"backend={fmt.name!r} reaches" if field == "backend" else f"{fmt.name} volumes reach"
    raise ConfigError(
        f"{path!r}: {what} {fmt.places()} here ({fmt.title} through {fmt.engine}); {instead}",
        field=field,
    )


def create(
    path: str | os.PathLike[str],
    shape: Any,
    chunks: Any,
    dtype: Any,
    *,
    fill_value: Any = 0,
    compressor: object = "default",
    checksum: bool = True,
    backend: BackendName = "zarr",
    offset: Any = None,
    exist_ok: bool = False,
    aligned_writes: bool = True,
    cache_bytes: int = 0,
    spatial_ndim: int | None = None,
    resolution: Any = None,
    storage_options: Any = None,
    shards: Any = None,
    encoding: str | None = None,
    write_chunks: Any = None,
    made_by: str = "",
) -> Volume:
    """Create a volume (see ``Volume`` for the coordinate model) and return it open ``r+``.

    A format prefix makes another format (``_formats``): ``precomputed://`` adds a
    scale (x, y, z), ``n5://`` an N5 dataset, ``zarr2://`` a Zarr v2 array.
    Multiscale images: ``create_multiscale``.

    Args:
        path: Where: a local path, an object-store URL (``s3://``, ``gs://``), a memory
            volume's name, or any of these after a format prefix (``precomputed://``,
            ``n5://``, ``zarr2://``).
        shape: The extent of every axis, channels first.
        chunks: The storage chunk of every axis (the inner chunk with ``shards``).
        dtype: A numpy dtype or its name.
        fill_value: What a voxel never written reads as.
        compressor: ``"default"`` (zstd for Zarr) or None (raw bytes).
        checksum: End the on-disk codec chain with crc32c, so a damaged chunk file
            raises ``CorruptChunkError`` instead of reading as wrong numbers (ignored
            by the memory backend).
        backend: ``"zarr"`` (zarr-python, the default), ``"tensorstore"`` or
            ``"memory"`` (this process only).
        offset: Where the spatial axes start in global space, one int per spatial axis;
            None: 0.
        exist_ok: Open a volume already there with the same shape, chunks, dtype,
            offset and resolution instead of refusing it.
        aligned_writes: Accept only writes that cover whole storage chunks (what makes
            concurrent writers of disjoint boxes race-free); False lets partial chunks
            be read, modified and written.
        cache_bytes: The size of the volume's chunk cache; 0 turns it off.
        spatial_ndim: How many trailing axes are spatial (the rest are channels);
            None: all.
        resolution: The physical size of a voxel per spatial axis (``(4, 4, 40)`` nm),
            kept in the attributes on disk; None: 1 on every axis.
        storage_options: Options of a URL's object store (credentials, endpoint,
            region: obstore's configuration keys); secret ones are never shown, written
            or pickled. None: the environment's.
        shards: The shard shape of a sharded Zarr v3 array (zarr backend; all axes,
            each a multiple of ``chunks``): ``chunks`` are then the inner chunks, and
            the volume's ``chunks`` its shards, the unit its writes align to. None:
            unsharded.
        encoding: A precomputed scale's encoding: ``"raw"``, ``"compressed_segmentation"``
            or ``"jpeg"``; None: raw.
        write_chunks: A sharded precomputed scale's shard extent (x, y, z); None:
            unsharded.
        made_by: What makes the volume, in the maker's own text (a job's identity),
            kept in chunkgraph's attributes where the format has them (Zarr v3 and v2,
            N5, memory; not precomputed) and read back as ``Volume.made_by``.

    Returns:
        The new Volume, open ``r+``.

    Raises:
        ConfigError: For an invalid parameter or combination, or a volume already at
            ``path`` without ``exist_ok`` (or not matching with it).

    >>> v = create("tmp-layer", (2, 8, 8), (2, 4, 4), "float32", backend="memory",
    ...            spatial_ndim=2, offset=(100, 0))
    >>> v.channel_shape, v.bounds
    ((2,), Box(start=(100, 0), stop=(108, 8)))
    >>> remove("tmp-layer")
    """
    fmt, place = _format_to_create(os.fspath(path), backend)
    if cache_bytes < 0:
        raise ConfigError(f"cache_bytes must be >= 0 (0 turns the cache off), got {cache_bytes}")
    if not isinstance(checksum, bool):
        raise ConfigError(
            f"checksum must be True (crc32c on every chunk, the default) or False, "
            f"got {checksum!r} of type {type(checksum).__name__}"
        )
    options = _format_options(fmt, encoding=encoding, write_chunks=write_chunks)
    inner = _check_shards(shards, chunks, fmt)
    # A format written by whole chunks takes no partial-chunk writes (``_ts_view``).
    aligned = aligned_writes or fmt.whole_chunk_writes
    meta = _build_meta(
        shape, chunks if shards is None else shards, dtype, fill_value, spatial_ndim, offset,
        aligned, fmt.name, resolution,
    )  # fmt: skip
    if made_by:
        meta = dataclasses.replace(meta, made_by=str(made_by))
    name = _normalise_path(place, fmt.name)
    _check_reaches(fmt, name, "backend" if fmt.plain else "path")
    opts = StoreOptions.of(storage_options)
    if fmt.plain:
        return _create_plain(
            name, fmt, meta, compressor, checksum, opts, inner, exist_ok, cache_bytes
        )
    return _create_format(
        name, fmt, meta, compressor, checksum, opts, options, exist_ok, cache_bytes
    )


def _format_to_create(path: str, backend: str) -> tuple[Format, str]:
    """The row a ``create`` makes (a format prefix's, else ``backend``'s) and the place."""
    if backend not in _PLAIN:
        prefixes = [f"{p}://" for f in FORMATS if not f.plain for p in f.prefixes]
        raise ConfigError(
            f"backend {backend!r} is not one of {_PLAIN}; other formats are chosen by a "
            f"path prefix ({', '.join(prefixes)})",
            field="backend",
        )
    asked = format_of(backend)
    prefix, place = split_format(path)
    found = None if prefix is None else by_prefix(prefix)
    if found is not None and not found.plain and asked.in_process:
        raise ConfigError(
            f"backend={backend!r} lives in this process, but {path!r} asks for "
            f"{found.title} at a place ({prefix}://); leave backend out to make it there, "
            "or give a name without a prefix for a memory volume",
            field="backend",
        )
    # zarr3:// says the format (made by ``backend``), file:// only that it is a path.
    return (asked if found is None or found.plain else found), place


def _format_options(fmt: Format, **given: Any) -> dict[str, Any]:
    """The arguments of ``create`` that only some formats take, as given to ``fmt``'s."""
    options = {k: v for k, v in given.items() if v is not None}
    unused = sorted(set(options) - set(fmt.create_options))
    if unused:
        takers = [f"{f.prefixes[0]}://" for f in FORMATS if unused[0] in f.create_options]
        raise ConfigError(
            f"{' and '.join(unused)} {'are' if len(unused) > 1 else 'is'} for "
            f"{' and '.join(takers)} volumes only, not for {fmt.name} ones; leave it out",
            field=unused[0],
        )
    return options


def _create_plain(
    name: str,
    fmt: Format,
    meta: VolumeMeta,
    compressor: object,
    checksum: bool,
    opts: StoreOptions,
    inner: tuple[int, ...] | None,
    exist_ok: bool,
    cache_bytes: int,
) -> Volume:
    """A new plain Zarr v3 volume, or with ``exist_ok`` the same one already there."""
    exists = memory_exists(name) if fmt.in_process else _exists(name, opts)
    if exists:
        if not exist_ok:
            raise ConfigError(
                f"a volume already exists at {name!r}; pass exist_ok=True to reuse it, "
                f"or volume.remove({name!r}) first"
            )
        return _open_same(name, meta, cache_bytes, fmt.name, opts)
    try:
        storage = _new_plain(name, fmt, meta, compressor, checksum, opts, inner)
    except Exception as err:  # each backend says "exists" its own way: asked again below
        if exist_ok and not fmt.in_process and _exists(name, opts):  # created meanwhile
            return _open_same(name, meta, cache_bytes, fmt.name, opts)
        if isinstance(err, OSError) and is_object_url(name):
            raise no_bucket_error(name, opts) or err from None
        raise
    return Volume(storage, "r+", cache_bytes)


def _new_plain(
    name: str, fmt: Format, meta: VolumeMeta, compressor: object, checksum: bool,
    opts: StoreOptions, inner: tuple[int, ...] | None,
) -> Storage:  # fmt: skip
    """A new plain Zarr v3 array, made by the engine of its row."""
    if fmt.in_process:
        return create_memory(name, meta)
    if fmt.engine == "tensorstore":
        return create_tensorstore(name, meta, compressor, checksum, overwrite=False)
    return create_zarr(name, meta, compressor, checksum, overwrite=False, options=opts, inner=inner)


def _check_shards(shards: Any, chunks: Any, fmt: Format) -> tuple[int, ...] | None:
    """The inner chunks of a sharded volume (None: unsharded), or a ConfigError."""
    if shards is None:
        return None
    if fmt.sharded_by != "shards":
        takes = f"takes {fmt.sharded_by}" if fmt.sharded_by else "is not sharded"
        raise ConfigError(
            f"shards make a sharded Zarr v3 array of the zarr backend; a {fmt.name} volume "
            f"{takes}; use backend='zarr', or leave shards out",
            field="shards",
        )
    shards_t = as_int_tuple(shards, "shards")
    chunks_t = as_int_tuple(chunks, "chunks")
    if len(shards_t) != len(chunks_t) or any(
        s < 1 or s % c for s, c in zip(shards_t, chunks_t, strict=False)
    ):
        raise ConfigError(
            f"shards {shards_t} must give every axis of chunks {chunks_t} a positive "
            "multiple of its chunk, e.g. shards="
            f"{tuple(4 * c for c in chunks_t)}",
            field="shards",
        )
    return chunks_t


def _create_format(
    place: str,
    fmt: Format,
    meta: VolumeMeta,
    compressor: object,
    checksum: bool,
    opts: StoreOptions,
    format_options: dict[str, Any],
    exist_ok: bool,
    cache_bytes: int,
) -> Volume:
    if not format_exists(place, fmt, meta, opts):
        storage = create_format(place, fmt, meta, compressor, checksum, opts, format_options)
        return Volume(storage, "r+", cache_bytes)
    if not exist_ok:
        raise ConfigError(
            f"a {fmt.name} volume already exists at {place!r}; pass exist_ok=True to reuse "
            f"it, or remove it first"
        )
    opened = open_volume(
        place, "r+", cache_bytes=cache_bytes, backend=fmt.name, storage_options=opts,
        scale=scale_to_create(fmt, meta),
    )  # fmt: skip
    shard = format_options.get("write_chunks")
    if shard is not None:  # a sharded scale's chunks are its shards (``_precomputed``)
        spatial = tuple(min(w, n) for w, n in zip(shard, meta.shape[-3:], strict=False))
        meta = dataclasses.replace(meta, chunks=meta.chunks[: meta.channel_ndim] + spatial)
    _check_same(opened, meta)
    return opened


def _open_same(
    name: str, meta: VolumeMeta, cache_bytes: int, backend: str, opts: StoreOptions
) -> Volume:
    opened = open_volume(name, "r+", cache_bytes=cache_bytes, backend=backend, storage_options=opts)
    _check_same(opened, meta)
    return opened


def _build_meta(
    shape: Any,
    chunks: Any,
    dtype: Any,
    fill_value: Any,
    spatial_ndim: int | None,
    offset: Any,
    aligned_writes: bool,
    backend: str,
    resolution: Any = None,
) -> VolumeMeta:
    shape_t = as_int_tuple(shape, "shape")
    n_spatial = len(shape_t) if spatial_ndim is None else int(spatial_ndim)
    try:
        np_dtype = np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"dtype {dtype!r} is not a numpy dtype: {err}") from err
    _check_dtype(np_dtype, dtype, backend)
    try:
        fill = np_dtype.type(fill_value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ConfigError(
            f"dtype {dtype!r} / fill_value {fill_value!r} are not usable: {err}"
        ) from err
    offset_t = (0,) * n_spatial if offset is None else as_int_tuple(offset, "offset")
    return VolumeMeta(
        shape=shape_t,
        chunks=as_int_tuple(chunks, "chunks"),
        dtype=np_dtype,
        fill_value=fill,
        spatial_ndim=n_spatial,
        offset=offset_t,
        aligned_writes=bool(aligned_writes),
        backend=backend,
        resolution=() if resolution is None else resolution,
    )


# dtype kinds a volume holds: numbers, each format's ``dtype_kinds``. Strings, objects,
# records, datetimes and raw bytes would otherwise fail deep inside zarr or TensorStore (or
# be stored as something else); TensorStore cannot write a complex fill value into Zarr v3
# metadata; a format that lists its dtypes one by one (precomputed) is held to that list.
_KIND_WORDS = {
    "b": "bool",
    "i": "int8..int64",
    "u": "uint8..uint64",
    "f": "float16..float64",
    "c": "complex64, complex128",
}


def _check_dtype(np_dtype: np.dtype[Any], asked: Any, backend: str) -> None:
    """ConfigError before the backend sees a dtype it cannot store (see above).

    >>> try:
    ...     _check_dtype(np.dtype("U4"), "U4", "tensorstore")
    ... except ConfigError as err:
    ...     print(str(err).split("; ")[1])
    valid: bool, int8..int64, uint8..uint64, float16..float64
    """
    fmt = format_of(backend)
    kinds = fmt.dtype_kinds
    listed = not fmt.dtypes or np_dtype.name in fmt.dtypes
    if np_dtype.kind in kinds and listed and np_dtype.fields is None and np_dtype.subdtype is None:
        return
    valid = ", ".join(fmt.dtypes or [_KIND_WORDS[k] for k in kinds])
    takers = [f.name for f in FORMATS if f.plain and np_dtype.kind in f.dtype_kinds]
    hint = f"; complex volumes need backend={takers[0]!r}" if np_dtype.kind == "c" else ""
    what = _DTYPE_KIND_NAMES.get(np_dtype.kind, "not a number")
    if np_dtype.kind in kinds:
        what = f"not one of {fmt.title}'s data types"
    if np_dtype.fields is not None:
        what = "a record of fields"
    elif np_dtype.subdtype is not None:
        what = "a sub-array"
    raise ConfigError(
        f"dtype {asked!r} ({np_dtype.str}, {what}) cannot be stored in a volume with "
        f"backend={backend!r}; valid: {valid}{hint}",
        field="dtype",
    )


_DTYPE_KIND_NAMES = {
    "O": "Python objects",
    "U": "a unicode string",
    "S": "a byte string",
    "V": "raw bytes",
    "M": "a datetime",
    "m": "a time delta",
    "c": "complex",
    "b": "a boolean",
}


def _check_same(volume: Volume, meta: VolumeMeta) -> None:
    fields = (volume.shape, volume.chunks, volume.dtype, volume.spatial_ndim, volume.offset)
    have = (*fields, volume.resolution)
    want = (meta.shape, meta.chunks, meta.dtype, meta.spatial_ndim, meta.offset, meta.resolution)
    if have != want:
        raise ConfigError(
            f"existing volume {volume.path!r} has (shape, chunks, dtype, spatial_ndim, offset, "
            "resolution) "
            f"{have}, but {want} was asked for; remove it or create with matching parameters"
        )


def open_volume(
    path: str | os.PathLike[str],
    mode: str = "r",
    *,
    cache_bytes: int = 0,
    backend: str | None = None,
    storage_options: Any = None,
    scale: int | str | None = None,
) -> Volume:
    """Open an existing volume.

    Args:
        path: Where, as for ``create``: a local path, a URL, a memory volume's name,
            with or without a format prefix.
        mode: ``"r"`` (read only) or ``"r+"`` (read and write).
        cache_bytes: The size of this handle's chunk cache; 0 turns it off.
        backend: Which backend opens it: ``"zarr"``, ``"tensorstore"``, ``"memory"``,
            or a format's (``"precomputed"``, ``"n5"``, ``"zarr2"``, ``"ome-zarr"``);
            None: found from the path and the metadata there.
        storage_options: Options of a URL's object store (credentials, endpoint,
            region: obstore's configuration keys); secret ones are never shown, written
            or pickled. None: the environment's.
        scale: A level of a multiscale volume (an OME-Zarr image, a precomputed
            volume), by index or key; None: 0.

    Returns:
        The Volume.

    Raises:
        VolumeNotFoundError: When no volume is at ``path``.
        ConfigError: For a bad mode or backend, or a URL scheme not read here.
    """
    if mode not in ("r", "r+"):
        raise ConfigError(f"mode must be 'r' or 'r+', got {mode!r}")
    asked = None if backend is None else format_of(backend)
    text = os.fspath(path)
    if asked.in_process if asked is not None else memory_exists(text):
        if scale is not None:
            raise ConfigError(f"memory volume {text!r} has no levels; open it without scale")
        return Volume(open_memory(text), mode, cache_bytes)
    prefix, place = split_format(text)
    name = _normalise_path(place, "zarr")
    opts = StoreOptions.of(storage_options)
    chosen = by_prefix(prefix) if prefix else asked if asked and not asked.plain else None
    if chosen is not None or scale is not None:
        if chosen is not None:
            _check_reaches(chosen, name, "path")
        with reaching(name, opts):  # TensorStore's failed requests too
            storage = open_format(name, mode, chosen.name if chosen else None, scale, opts)
        if storage is not None:
            return _as_asked(Volume(storage, mode, cache_bytes), chosen, text)
    if asked is not None:
        _check_reaches(asked, name, "backend")
    opened = _open_remote if is_object_url(name) else _open_local
    return _as_asked(
        Volume(opened(name, mode, backend, scale, opts), mode, cache_bytes), chosen, text
    )


def _as_asked(vol: Volume, chosen: Format | None, text: str) -> Volume:
    """``vol``, unless ``zarr3://`` asked for Zarr v3 and found another format (``zarr://``
    takes the version the metadata says)."""
    prefix, place = split_format(text)
    if chosen is None or prefix != "zarr3" or vol.format.plain:
        return vol
    how = f"{vol.format.prefixes[0]}://{place}" if vol.format.prefixes else place
    raise ConfigError(
        f"{text!r} asks for Zarr v3 ({prefix}://), but the volume there is "
        f"{vol.format.title}: open it as {how!r}",
        field="path",
    )


def _open_local(
    name: str, mode: str, backend: str | None, scale: int | str | None, opts: StoreOptions
) -> Storage:
    """The storage of the volume in the local directory ``name``: a plain Zarr v3 array
    with the engine asked for (else its creator's), or what ``open_format`` finds there."""
    if not _is_on_disk(name) or _is_group(name):
        found = open_format(name, mode, None, scale, opts)
        if found is None:
            raise VolumeNotFoundError(f"no volume at {name!r} (no zarr.json there)")
        return found
    if format_of(backend or _creator_backend(name)).engine == "tensorstore":
        return open_tensorstore(name, mode)
    return open_zarr(name, mode, opts)


def _open_remote(
    name: str, mode: str, backend: str | None, scale: int | str | None, opts: StoreOptions
) -> Storage:
    """The storage of the volume at the URL ``name`` (with zarr, whatever ``backend``
    made it), found by what is there.

    One request (GET zarr.json), not a HEAD first: every process a pickled volume
    reaches opens it again.
    """
    with reaching(name, opts):  # a store that does not answer: a StoreError
        try:
            return open_zarr(name, mode, opts)
        except ConfigError:  # no credentials, a bad option: not a group to look into
            raise
        except FileNotFoundError as err:  # zarr's ArrayNotFoundError is one
            found = open_format(name, mode, None, scale, opts)
            if found is None:
                missing = VolumeNotFoundError(f"no volume at {name!r} (no zarr.json there)")
                raise no_bucket_error(name, opts) or missing from err
            return found
        except ValueError:  # a group (a multiscale image, say) where an array was expected
            found = open_format(name, mode, None, scale, opts)
            if found is None:
                raise
            return found


def _is_group(path: str) -> bool:
    with open(os.path.join(path, "zarr.json")) as f:
        return bool(json.load(f).get("node_type") == "group")


def _pickled(vol: Volume) -> tuple[Any, ...]:
    """How a ``Volume`` travels to another process: its place and options, reopened
    there by ``reopen`` (registered with ``copyreg``, so that the registry, which knows
    how to open a volume, is the one that says how it is sent)."""
    if vol.format.in_process:
        raise ConfigError(
            f"memory volume {vol.path!r} exists only in this process and cannot be pickled; "
            f"create it with backend='zarr' to use it from other processes"
        )
    options = vol.storage_options
    # The secrets' names travel (to say what the receiver lacks), their values do not.
    dropped = options.secret_names()
    # A level of a multiscale format is reached again through its image's root.
    path, scale = getattr(vol._storage, "reopen", None) or (vol.path, None)
    args = (path, vol._mode, vol._cache_bytes, vol.backend, options, dropped, scale)
    return (reopen, args)


def reopen(
    path: str,
    mode: str,
    cache_bytes: int,
    backend: str,
    options: StoreOptions | None = None,
    dropped_secrets: tuple[str, ...] = (),
    scale: int | str | None = None,
) -> Volume:
    """Unpickling hook of ``Volume``: open the same volume again, where it is unpickled.

    ``options`` arrive with their public keys only; ``dropped_secrets`` names the
    secret ones the sender had, so a receiver without credentials says what to set.
    """
    if "://" in path:
        _remote.check_credentials_shipped(path, dropped_secrets)
    return open_volume(
        path, mode, cache_bytes=cache_bytes, backend=backend, storage_options=options, scale=scale
    )


def _creator_backend(path: str) -> str:
    """The backend recorded at creation in a local array, if it can be used here; zarr
    otherwise. (Volumes on object stores are always opened with zarr: TensorStore does not
    reach them, see _check_reaches.)"""
    with open(os.path.join(path, "zarr.json")) as f:
        attrs = json.load(f).get("attributes", {})
    wanted = attrs.get(ATTRS_KEY, {}).get("backend", "zarr")
    if wanted == "tensorstore" and importlib.util.find_spec("tensorstore") is not None:
        return "tensorstore"
    return "zarr"


def _holds_volume(name: str, opts: StoreOptions) -> bool:
    if is_object_url(name):
        return _remote.exists(name, opts, METADATA_FILES)
    return any(os.path.isfile(os.path.join(name, f)) for f in METADATA_FILES)


def remove(
    path: str | os.PathLike[str], *, missing_ok: bool = False, storage_options: Any = None
) -> None:
    """Delete a volume: a memory registry entry, a local directory, or every object under a
    URL, that holds a volume of any format (a Zarr array, an OME-Zarr image with all its
    levels, a precomputed volume with all its scales, an N5 dataset).

    Args:
        path: Where, as for ``create`` (a format prefix is ignored).
        missing_ok: Do nothing when no volume is there, instead of raising.
        storage_options: Options of a URL's object store (credentials, endpoint,
            region: obstore's configuration keys); secret ones are never shown, written
            or pickled. None: the environment's.

    Raises:
        VolumeNotFoundError: When no volume is there and ``missing_ok`` is False.
    """
    text = os.fspath(path)
    if remove_memory(text):
        return
    _, place = split_format(text)
    name = _normalise_path(place, "zarr")
    opts = StoreOptions.of(storage_options)
    if not _holds_volume(name, opts):
        if missing_ok:
            return
        raise VolumeNotFoundError(
            f"no volume at {name!r} (neither a memory volume nor the metadata of a format: "
            f"{', '.join(METADATA_FILES)})"
        )
    if is_object_url(name):
        _remote.remove_objects(name, opts)
    else:
        shutil.rmtree(name)


copyreg.pickle(Volume, _pickled)
