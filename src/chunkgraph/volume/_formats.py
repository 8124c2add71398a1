"""The table of formats, and the format prefixes of volume paths.

One ``Format`` row per backend a volume can have (``Volume.backend``); every question
about what a format can do is answered by its row, never by testing its name::

    name         prefixes     engine       stores      multiscale  conditional  whole chunks
    ome-zarr     -            zarr-python  disk s3 gs  yes         yes          -
    precomputed  precomputed  tensorstore  disk s3     yes         -            yes
    zarr2        zarr2        zarr-python  disk s3 gs  -           yes          -
    zarr         zarr3 zarr   zarr-python  disk s3 gs  -           yes          -
    n5           n5           tensorstore  disk s3     -           -            yes
    tensorstore  -            tensorstore  disk        -           -            -
    memory       -            numpy        memory      -           -            -

``conditional``: on an object store, a partial chunk is merged by a conditional
read-modify-write (``_object_zarr``), so writers sharing a chunk keep each other's
voxels; ``whole chunks``: every write covers whole chunks (TensorStore's drivers
rewrite a chunk unconditionally), whatever ``aligned_writes`` asked. ``memory``
volumes live in one process under a name, not at a place.

A path may start with a format: ``precomputed://``, ``zarr2://``, ``zarr3://``,
``zarr://`` (the version read from the metadata), ``n5://``; then a place: a
bare path, ``file://path`` or an object-store URL (``s3://bucket/key``). No
format prefix means a Zarr array or an OME-Zarr multiscale group, its version
read from the metadata found there::

    precomputed://s3://bucket/img   ->  ("precomputed", "s3://bucket/img")
    zarr2://file:///data/a.zarr     ->  ("zarr2", "/data/a.zarr")
    /data/a.zarr                    ->  (None, "/data/a.zarr")

Each format's own module reads and writes it: ``_zarr`` (zarr-python, Zarr v2 and
v3), ``_tensorstore``, ``_memory``, ``_precomputed`` and ``_n5`` (TensorStore's
drivers), ``_ome_zarr`` (multiscale groups over ``_zarr``); ``_format_open`` and
``_registry`` pick the module for a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chunkgraph._errors import ConfigError
from chunkgraph.volume._object_store import SCHEMES, broken_url

# The backends ``create(backend=...)`` makes a plain Zarr v3 array with (rows with ``plain``).
BackendName = Literal["zarr", "tensorstore", "memory"]
# Where a volume can be: this process's memory, a local disk, or an object store by scheme.
Store = Literal["memory", "disk", "s3", "gs"]


@dataclass(frozen=True)
class Format:
    """One volume format and what it can do (a row of the table above).

    Attributes:
        name: As ``Volume.backend`` and ``open(backend=...)`` spell it.
        title: What it is, for people.
        engine: What reads and writes it.
        stores: The places it reaches.
        prefixes: The path prefixes that choose it (``n5://``).
        plain: A plain Zarr v3 array, made by ``create(backend=name)``.
        multiscale: Levels: ``open(scale=...)``, ``create_multiscale``, ``add_level``.
        conditional_writes: Whether a partial-chunk write on an object store is a
            conditional put (see the module docstring).
        whole_chunk_writes: Every write covers whole chunks.
        sharded_by: The ``create`` argument that makes it sharded.
        found_by_prefix: At a local path, opened only through its prefix.
        create_options: ``create``'s arguments for this format alone.
        dtype_kinds: Numpy dtype kinds it stores and reads back as they were.
        dtypes: Where the format lists its dtypes one by one, that list (else all of
            ``dtype_kinds``).
        metadata: The files that say a volume of it is at a place.

    >>> format_of("precomputed").multiscale, format_of("zarr").reaches("s3://b/a.zarr")
    (True, True)
    """

    name: str
    title: str
    engine: str
    stores: tuple[Store, ...]
    prefixes: tuple[str, ...] = ()
    plain: bool = False
    multiscale: bool = False
    conditional_writes: bool = False
    whole_chunk_writes: bool = False
    sharded_by: str | None = None
    found_by_prefix: bool = False
    create_options: tuple[str, ...] = ()
    dtype_kinds: str = "biufc"
    dtypes: tuple[str, ...] = ()
    metadata: tuple[str, ...] = ()

    @property
    def in_process(self) -> bool:
        """Whether its volumes live in this process only, under a name, not at a place."""
        return "memory" in self.stores

    def reaches(self, place: str) -> bool:
        """Whether a volume of this format can live at ``place``.

        Args:
            place: A local path or an object-store URL.

        >>> format_of("tensorstore").reaches("/data/a.zarr"), format_of("n5").reaches("gs://b/a")
        (True, False)
        """
        scheme, sep, _ = place.partition("://")
        return self.in_process or (scheme if sep else "disk") in self.stores

    def places(self) -> str:
        """The places it reaches, in words: ``s3:// URLs and local paths``."""
        if self.in_process:
            return "names in this process"
        urls = [f"{s}://" for s in self.stores if s in SCHEMES]
        return f"{', '.join(urls)} URLs and local paths" if urls else "local paths"


_ZARR_JSON = ("zarr.json",)
# The data types a precomputed info may name (Neuroglancer's list).
PRECOMPUTED_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
_OBJECT_STORES: tuple[Store, ...] = ("disk", "s3", "gs")
# In the order messages list them.
FORMATS: tuple[Format, ...] = (
    Format("ome-zarr", "OME-Zarr image", "zarr-python", _OBJECT_STORES, multiscale=True,
           conditional_writes=True, metadata=("zarr.json", ".zgroup")),
    Format("precomputed", "Neuroglancer precomputed", "tensorstore", ("disk", "s3"),
           ("precomputed",), multiscale=True, whole_chunk_writes=True,
           sharded_by="write_chunks", found_by_prefix=True,
           create_options=("encoding", "write_chunks"), dtype_kinds="iuf",
           dtypes=PRECOMPUTED_DTYPES, metadata=("info",)),
    Format("zarr2", "Zarr v2", "zarr-python", _OBJECT_STORES, ("zarr2",),
           conditional_writes=True, metadata=(".zarray",)),
    Format("zarr", "Zarr v3", "zarr-python", _OBJECT_STORES, ("zarr3", "zarr"), plain=True,
           conditional_writes=True, sharded_by="shards", metadata=_ZARR_JSON),
    Format("n5", "N5", "tensorstore", ("disk", "s3"), ("n5",), whole_chunk_writes=True,
           dtype_kinds="iuf", metadata=("attributes.json",)),
    Format("tensorstore", "Zarr v3", "tensorstore", ("disk",), plain=True, dtype_kinds="biuf",
           metadata=_ZARR_JSON),
    Format("memory", "in-memory array", "numpy", ("memory",), plain=True),
)  # fmt: skip
_BY_NAME = {f.name: f for f in FORMATS}
_BY_PREFIX = {p: f for f in FORMATS for p in f.prefixes}
_PLACES = ("file", *SCHEMES)
# Every file that says a volume of some format is at a place (what ``remove`` looks for).
METADATA_FILES = tuple(dict.fromkeys(m for f in FORMATS for m in f.metadata))


def format_of(name: str) -> Format:
    """The row of the backend ``name``.

    Args:
        name: A backend's name, as ``Volume.backend`` spells it.

    Raises:
        ConfigError: Naming the valid ones, when ``name`` is none of them.
    """
    found = _BY_NAME.get(name)
    if found is None:
        raise ConfigError(f"backend {name!r} is not one of {', '.join(_BY_NAME)}", field="backend")
    return found


def by_prefix(prefix: str) -> Format:
    """The row a path prefix (``precomputed``, ``zarr3``, ...; see ``split_format``) names."""
    return _BY_PREFIX[prefix]


def plain_zarr_backend(backend: str) -> BackendName:
    """The backend of a new plain Zarr v3 volume made from one served by ``backend``: the
    same where it writes Zarr v3 (``zarr``, ``tensorstore``, ``memory``), else ``zarr`` (a
    format prefix on the new path chooses its own).

    Args:
        backend: The backend serving the volume copied from.

    >>> plain_zarr_backend("tensorstore"), plain_zarr_backend("precomputed")
    ('tensorstore', 'zarr')
    """
    found = _BY_NAME.get(backend)
    name = found.name if found is not None and found.plain else "zarr"
    return name  # type: ignore[return-value]  # a plain row's name is a BackendName


def path_to_open(place: str, backend: str) -> str:
    """The path ``open`` finds a volume of ``backend`` at ``place`` by: a local precomputed
    root needs its prefix (other formats are found by their metadata).

    Args:
        place: Where the volume is, without a format prefix.
        backend: The backend (a format's name) that serves it.

    >>> path_to_open("/data/img", "precomputed"), path_to_open("/data/a.zarr", "zarr")
    ('precomputed:///data/img', '/data/a.zarr')
    """
    if format_of(backend).found_by_prefix and "://" not in place:
        return f"{backend}://{place}"
    return place


def shards_by_write_chunks(backend: str) -> bool:
    """Whether a new volume of ``backend`` takes ``write_chunks`` as its shards' extent.

    Args:
        backend: A backend or a format's name.
    """
    return format_of(backend).sharded_by == "write_chunks"


def split_format(path: str) -> tuple[str | None, str]:
    """``(format prefix or None, the place)`` of a volume path; ``file://`` is dropped.

    Args:
        path: A volume path, with or without a format prefix.

    >>> split_format("precomputed://s3://bucket/img")
    ('precomputed', 's3://bucket/img')
    >>> split_format("zarr2://file:///data/a.zarr")
    ('zarr2', '/data/a.zarr')
    >>> split_format("/data/a.zarr")
    (None, '/data/a.zarr')
    """
    head, sep, rest = path.partition("://")
    if not sep:
        _check_not_broken(path)
        return None, path
    if head in _BY_PREFIX:
        inner_head, inner_sep, inner_rest = rest.partition("://")
        if not inner_sep:
            _check_not_broken(rest)
        if inner_sep and inner_head not in _PLACES:
            raise ConfigError(
                f"{path!r}: a {head}:// volume lives at a local path, file://path or "
                + ", ".join(f"{s}://BUCKET/path" for s in SCHEMES)
                + f", not {inner_head}://",
                field="path",
            )
        return head, inner_rest if inner_head == "file" else rest
    if head == "file":
        return None, rest
    if head in SCHEMES:
        return None, path
    raise ConfigError(
        f"{path!r} starts with {head}://, which chunkgraph does not read; valid prefixes: "
        + ", ".join(f"{f}://" for f in _BY_PREFIX)
        + " (a format), then a local path, file://path or "
        + ", ".join(f"{s}://BUCKET/path" for s in SCHEMES),
        field="path",
    )


def _check_not_broken(place: str) -> None:
    problem = broken_url(place, (*_BY_PREFIX, *_PLACES))
    if problem:
        raise ConfigError(
            f"{problem}; valid forms: a local path, file://path, "
            + ", ".join(f"{s}://BUCKET/path" for s in SCHEMES)
            + ", each after an optional format prefix ("
            + ", ".join(f"{f}://" for f in _BY_PREFIX)
            + ")",
            field="path",
        )


def relative_place(base: Path, path: str) -> str:
    """A path as written in a spec file, with a relative local place taken from the
    spec's directory: ``raw.zarr``, ``n5://raw.n5`` (the place after a format prefix);
    URLs (``s3://…``, ``precomputed://s3://…``, ``file:///…``) and absolute paths as they are.

    Args:
        base: The spec file's directory.
        path: The path as the spec file writes it.

    >>> relative_place(Path("/specs"), "n5://raw.n5"), relative_place(Path("/specs"), "s3://b/a.zarr")
    ('n5:///specs/raw.n5', 's3://b/a.zarr')
    """
    head, sep, rest = path.partition("://")
    if not sep:
        return path if broken_url(path, _PLACES) else str(base / path)
    if head in _PLACES or "://" in rest or rest.startswith("/"):
        return path
    return f"{head}://{base / rest}"
