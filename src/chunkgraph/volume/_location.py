"""Where a volume lives, and what that place can do: the one answer to "is this on disk?".

Callers above the storage layer ask a ``Location``; they never test a path for
``"://"`` or a backend for ``"memory"`` (zarr-python's stores declare their
capabilities the same way). Three places, and what each offers::

    kind     path               local_dir  shared by processes  lockable  conditional_writes
    memory   registered name    None       no (this process)    no        no (a process lock)
    disk     absolute dir       the dir    yes (this machine)   flock     no
    remote   s3://, gs:// URL   None       yes (any machine)    no        yes (zarr-python ones)

``lockable`` means advisory file locks (``flock``) on the volume's directory
order writers across the processes of this machine. ``conditional_writes``
means a chunk object can be replaced only if it is still the one read (ETag
match, or create-only when there was none): what makes a read-modify-write of a
partial chunk safe between processes and machines with no lock at all: a
remote place offers them to the formats whose row in ``_formats`` says so (those
zarr-python writes through obstore).

``identity`` is what the place means for a flow id: the resolved directory on
disk (symlinks and relative spellings of one array agree), the URL as given
(with the endpoint when the public storage options name one: the same bucket
name on another server is other data; never a secret), or the memory name with
the process id (a same-named memory volume elsewhere is other data).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from chunkgraph.volume._formats import format_of

LocationKind = Literal["memory", "disk", "remote"]


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether ``text`` is written as a URL (``scheme://...``: an object store, ``file://``
    or a format prefix such as ``precomputed://``), not a local path: the one test of a
    spelling that code above the storage layer asks for.

    Args:
        text: A path or URL, as given.

    >>> is_url("s3://b/a.zarr"), is_url("precomputed:///data/img"), is_url("data/a.zarr")
    (True, True, False)
    """
    return "://" in os.fspath(text)


def place_of(text: str | os.PathLike[str]) -> Path | str:
    """A place as the flow's state keeps it: a URL stays text, a local path is a Path.

    Args:
        text: A local path or a URL, as given.

    >>> place_of("s3://b/.a.chunkgraph"), place_of("data/.a.chunkgraph")
    ('s3://b/.a.chunkgraph', PosixPath('data/.a.chunkgraph'))
    """
    return os.fspath(text) if is_url(text) else Path(text)


@dataclass(frozen=True)
class Location:
    """The place of one stored array.

    Attributes:
        kind: ``"memory"`` (this process only), ``"disk"`` (this machine's file
            system) or ``"remote"`` (a URL: an object store).
        path: The path or URL as the backend opens it.
        backend: The backend that stores it.
        where: The public storage options that say where the data is (an endpoint),
            sorted ``(key, value)`` pairs.

    >>> Location.of("/data/a.zarr", "zarr").local_dir
    PosixPath('/data/a.zarr')
    >>> Location.of("s3://bucket/a.zarr", "zarr").kind, Location.of("x", "memory").lockable
    ('remote', False)
    """

    kind: LocationKind
    path: str
    backend: str = "zarr"
    # The public storage options that say where the data is (an endpoint), sorted.
    where: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def of(path: str, backend: str, public_options: dict[str, Any] | None = None) -> Location:
        """The location of a volume stored at ``path`` by ``backend``.

        Args:
            path: The volume's path or URL, as the backend opens it (a memory volume's name).
            backend: The backend that stores it (``"memory"``: this process only).
            public_options: The storage options that may be written down (never secrets);
                those naming the server (an endpoint) become part of the location. None:
                none.
        """
        if format_of(backend).in_process:
            return Location("memory", path, backend)
        if not is_url(path):
            return Location("disk", path, backend)
        where = tuple(sorted((k, v) for k, v in (public_options or {}).items() if k in _WHERE_KEYS))
        return Location("remote", path, backend, where)

    @property
    def local_dir(self) -> Path | None:
        """The volume's directory on this machine's file system, or None."""
        return Path(self.path) if self.kind == "disk" else None

    @property
    def in_process(self) -> bool:
        """Whether the data exists only in this process (other processes cannot open it)."""
        return self.kind == "memory"

    @property
    def lockable(self) -> bool:
        """Whether ``flock`` on files in the volume's directory orders this machine's writers."""
        return self.kind == "disk"

    @property
    def conditional_writes(self) -> bool:
        """Whether a chunk can be written only if unchanged since it was read (see above)."""
        return self.kind == "remote" and format_of(self.backend).conditional_writes

    def identity(self) -> str:
        """What the place means, stable across spellings of it (for flow ids)."""
        if self.kind == "memory":
            return f"memory:{self.path} pid={os.getpid()}"
        if self.kind == "remote":
            # "disk:" for URLs too: the flow ids of volumes on object stores stay what they were.
            return f"disk:{self.path}" + "".join(f" {k}={v}" for k, v in self.where)
        return f"disk:{os.path.realpath(self.path)}"

    def same_as(self, other: Location) -> bool:
        """Whether two locations hold the same stored array, however each was spelled.

        On disk that is the same directory (``samefile``: symlinks, relative paths);
        elsewhere the same name or URL.

        Args:
            other: Another location.
        """
        if self.kind != other.kind:
            return False
        if self.kind != "disk":
            return self.path == other.path and self.where == other.where
        try:
            return os.path.samefile(self.path, other.path)
        except OSError:  # one of them is gone: compare what is left, the resolved paths
            return os.path.realpath(self.path) == os.path.realpath(other.path)


# Storage options (obstore's config keys, any spelling) that change which server holds the data.
_WHERE_KEYS = frozenset(
    {"endpoint", "endpoint_url", "aws_endpoint", "aws_endpoint_url", "base_url", "google_base_url"}
)
