"""Where a volume lives, and what that place can do: the one answer to "is this on disk?".

Callers above the storage layer ask a ``Location``; they never test a path for
``"://"`` or a backend for ``"memory"`` (zarr-python's stores declare their
capabilities the same way). Three places, and what each offers::

    kind      path              local_dir   shared_by_processes   lockable (flock)
    memory    registered name   None        no (this process)     no: a process lock
    disk      absolute dir      the dir     yes (this machine)    yes
    remote    URL (s3://, ...)  None        yes (any machine)     no

``lockable`` means advisory file locks (``flock``) on the volume's directory
order writers across the processes of this machine. ``identity`` is what the
place means for a flow id: the resolved directory on disk (symlinks and
relative spellings of one array agree), the URL as given, or the memory name
with the process id (a same-named memory volume elsewhere is other data).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

LocationKind = Literal["memory", "disk", "remote"]


@dataclass(frozen=True)
class Location:
    """The place of one stored array.

    >>> Location.of("/data/a.zarr", "zarr").local_dir
    PosixPath('/data/a.zarr')
    >>> Location.of("s3://bucket/a.zarr", "zarr").kind, Location.of("x", "memory").lockable
    ('remote', False)
    """

    kind: LocationKind
    path: str

    @staticmethod
    def of(path: str, backend: str) -> Location:
        """The location of a volume stored at ``path`` by ``backend``."""
        if backend == "memory":
            return Location("memory", path)
        return Location("remote" if "://" in path else "disk", path)

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

    def identity(self) -> str:
        """What the place means, stable across spellings of it (for flow ids)."""
        if self.kind == "memory":
            return f"memory:{self.path} pid={os.getpid()}"
        return f"disk:{os.path.realpath(self.path) if self.kind == 'disk' else self.path}"

    def same_as(self, other: Location) -> bool:
        """Whether two locations hold the same stored array, however each was spelled.

        On disk that is the same directory (``samefile``: symlinks, relative paths);
        elsewhere the same name or URL.
        """
        if self.kind != other.kind:
            return False
        if self.kind != "disk":
            return self.path == other.path
        try:
            return os.path.samefile(self.path, other.path)
        except OSError:  # one of them is gone: compare what is left, the resolved paths
            return os.path.realpath(self.path) == os.path.realpath(other.path)
