"""Format prefixes of volume paths, spelled as Neuroglancer spells them.

A path may start with a format: ``precomputed://``, ``zarr2://``, ``zarr3://``,
``zarr://`` (the version read from the metadata), ``n5://``; then a place: a
bare path, ``file://path`` or an object-store URL (``s3://bucket/key``). No
format prefix means a Zarr array or an OME-Zarr multiscale group, its version
read from the metadata found there::

    precomputed://s3://bucket/img   ->  ("precomputed", "s3://bucket/img")
    zarr2://file:///data/a.zarr     ->  ("zarr2", "/data/a.zarr")
    /data/a.zarr                    ->  (None, "/data/a.zarr")

The backend that serves each format is its own module: ``_precomputed`` and
``_n5`` (TensorStore's drivers), ``_zarr`` (zarr-python, Zarr v2 and v3) and
``_ome_zarr`` (multiscale groups over ``_zarr``).
"""

from __future__ import annotations

from pathlib import Path

from chunkgraph._errors import ConfigError
from chunkgraph.volume._object_store import SCHEMES, broken_url

# The format prefixes a path may carry, and the backend each one means.
FORMATS: dict[str, str] = {
    "precomputed": "precomputed",
    "zarr2": "zarr2",
    "zarr3": "zarr",
    "zarr": "zarr",
    "n5": "n5",
}
_PLACES = ("file", *SCHEMES)
# Backends whose volumes ``open`` finds at a local path only by their prefix.
_FOUND_BY_PREFIX = frozenset({"precomputed"})
# Backends whose ``create(write_chunks=...)`` makes shards of that extent.
_SHARDS_BY_WRITE_CHUNKS = frozenset({"precomputed"})


def path_to_open(place: str, backend: str) -> str:
    """The path ``open`` finds a volume of ``backend`` at ``place`` by: a local precomputed
    root needs its prefix (other formats are found by their metadata).

    Args:
        place: Where the volume is, without a format prefix.
        backend: The backend (a format's name) that serves it.

    >>> path_to_open("/data/img", "precomputed"), path_to_open("/data/a.zarr", "zarr")
    ('precomputed:///data/img', '/data/a.zarr')
    """
    if backend in _FOUND_BY_PREFIX and "://" not in place:
        return f"{backend}://{place}"
    return place


def shards_by_write_chunks(backend: str) -> bool:
    """Whether a new volume of ``backend`` takes ``write_chunks`` as its shards' extent.

    Args:
        backend: A backend or a format's name.
    """
    return backend in _SHARDS_BY_WRITE_CHUNKS


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
    if head in FORMATS:
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
        + ", ".join(f"{f}://" for f in FORMATS)
        + " (a format), then a local path, file://path or "
        + ", ".join(f"{s}://BUCKET/path" for s in SCHEMES),
        field="path",
    )


def _check_not_broken(place: str) -> None:
    problem = broken_url(place, (*FORMATS, *_PLACES))
    if problem:
        raise ConfigError(
            f"{problem}; valid forms: a local path, file://path, "
            + ", ".join(f"{s}://BUCKET/path" for s in SCHEMES)
            + ", each after an optional format prefix ("
            + ", ".join(f"{f}://" for f in FORMATS)
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
