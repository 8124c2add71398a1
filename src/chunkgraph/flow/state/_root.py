"""Where a flow's state lives, as one value: a folder on this machine, or a key prefix in
an object store with the options that reach it.

Policy. What a person gave (``intermediates=``, ``--intermediates``, a note beside dst,
the mark in an in-place dst) is read once, by ``StateRoot.of``, and the value is passed
on; nothing downstream looks at the spelling again. Whether a spelling is an object-store
URL is ``chunkgraph.volume``'s answer (``is_object_url``); anything else is a local path
(a relative one stays relative: messages name it as it was given).

    place                          remote  local
    data/.out.zarr.chunkgraph      no      Path("data/.out.zarr.chunkgraph")
    s3://bucket/.out.zarr.chunkgraph  yes  None (``options``: its endpoint, credentials)

Two roots are equal when they name the same place as spelled (``same_place`` also
resolves a local path); the options say how to reach a place, not which it is, so they
take no part in equality, and their secrets are never pickled (``StoreOptions``).
A place below a root (a flow's folder, its layers) is a ``StateRoot`` too (``join``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chunkgraph._errors import ConfigError
from chunkgraph.volume import is_object_url, split_format
from chunkgraph.volume._object_store import SCHEMES, StoreOptions, broken_url


@dataclass(frozen=True)
class StateRoot:
    """A folder on this machine or an object-store prefix, where flow state lives.

    >>> StateRoot.of("s3://bucket/flows/") == StateRoot.of("s3://bucket/flows")
    True
    >>> root = StateRoot.of("data/.out.zarr.chunkgraph")
    >>> root.remote, str(root.join("f00d", "layers")), root.join("f00d").name
    (False, 'data/.out.zarr.chunkgraph/f00d/layers', 'f00d')
    >>> str(StateRoot.of("s3://bucket/flows").join("f00d").parent)
    's3://bucket/flows'
    """

    # The folder (``str`` of its Path) or the URL, without a trailing slash.
    place: str
    # In an object store (``place`` is its URL), not on this machine's file system.
    remote: bool
    # How to reach an object store (dst's storage_options); None: as ``_store.reach`` last
    # said for the URL, else the environment. Not part of the place (see above).
    options: StoreOptions | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, given: str | os.PathLike[str] | StateRoot, options: Any = None) -> StateRoot:
        """The root a person or a record named: an object-store URL, else a local path.
        ``options``: the storage options that reach it (for a URL; a mapping or
        ``StoreOptions``), kept when ``given`` is a root already and none are given."""
        if isinstance(given, StateRoot):
            return given if options is None else given.reached_with(options)
        text = os.fspath(given)
        if is_object_url(text):
            reach = StoreOptions.of(options) if options is not None else None
            return cls(text.rstrip("/"), True, reach)
        # file:///abs/dir names a folder on this machine, as for a volume (not a folder
        # "file:"): the volume's own reading of a path says so
        return cls(str(Path(split_format(text)[1])), False)

    @classmethod
    def given(cls, text: str) -> StateRoot:
        """The root a command line names (``--intermediates``); ConfigError for a URL with a
        slash lost (``s3:/bucket/x``), which would otherwise be a local folder ``s3:``."""
        problem = broken_url(text, (*SCHEMES, "file"))
        if problem:
            raise ConfigError(
                f"{problem}; give a directory or s3://BUCKET/path", field="intermediates"
            )
        return cls.of(text)

    def __str__(self) -> str:
        return self.place

    @property
    def local(self) -> Path | None:
        """The folder on this machine, or None for a prefix in an object store."""
        return None if self.remote else Path(self.place)

    @property
    def url(self) -> str | None:
        """The object-store URL, or None for a folder on this machine."""
        return self.place if self.remote else None

    @property
    def name(self) -> str:
        """The last part of the place (a flow's folder: its id)."""
        return self.place.rpartition("/")[2] if self.remote else Path(self.place).name

    @property
    def parent(self) -> StateRoot:
        """The place one level up (reached alike)."""
        if self.remote:
            return replace(self, place=self.place.rpartition("/")[0])
        return replace(self, place=str(Path(self.place).parent))

    def join(self, *keys: str) -> StateRoot:
        """The place ``keys`` below this one (``/``-separated, as the state's keys are)."""
        parts = [k.strip("/") for k in keys if k]
        if self.remote:
            return replace(self, place="/".join([self.place, *parts]))
        return replace(self, place=str(Path(self.place, *parts)))

    def resolved(self) -> StateRoot:
        """A local path made absolute, symlinks resolved (as notes and marks record it);
        a URL as it is."""
        local = self.local
        return self if local is None else replace(self, place=str(local.resolve()))

    def same_place(self, other: StateRoot) -> bool:
        """Whether two roots name the same place, however each local path was spelled."""
        return self.resolved() == other.resolved()

    def reached_with(self, options: Any) -> StateRoot:
        """This root, reached with ``options`` (a mapping or ``StoreOptions``; None: unset)."""
        return replace(self, options=None if options is None else StoreOptions.of(options))
