"""Where a flow's state lives: a folder on a disk or a key prefix in an object store.

Policy. The flow's state (``_layout``'s names: lock, completion record,
``flow.json``, done markers, notes) is a handful of small named things under one
root. ``StateStore`` is what the state code needs of that root, given twice:

* ``DirStore``: a local (or NFS) folder. Writes go through a temporary file
  renamed into place, except an empty file (``touch``: a done marker), whole once
  it exists; its lock is a ``flock`` (``_lock.flow_lock``).
* ``ObjectStateStore``: a prefix in an object store (``s3://bucket/path``). A
  PUT is atomic by itself (a reader sees the old object or the new one); its
  lock is a lease (``_lease``). Folders do not exist: a key prefix "exists" when
  an object lies under it.

Keys are ``/``-separated and relative to the root (``"f00d/markers/top/0_1"``),
so the layout is written once, in ``_layout``, for both. A store only reads and
writes: ``_lock.hold`` takes the lock of either kind, above it. ``where(key)`` names a
key as a person types it (a path or a URL) for messages and commands.

Requests one after another each cost a round trip (20 ms in a cloud region), so
what an object store's state code asks without one answer depending on another
goes together: ``at_once`` runs such reads on threads (in order of the calls, one
after another on a disk, where a thread costs more than the read); a listing
answers both ``names`` and ``folders`` (``listing``); a tree goes in one listing
and bulk deletes of up to 1000 keys each, sent together (``delete_tree``).

A request to an object store that fails (after the client's bounded retries) is
a ``StoreError`` naming the key's URL and the endpoint (``_named_failures``).

Both are cheap values that may be pickled into worker processes (a process
executor's tasks write markers): an ``ObjectStateStore`` carries its URL and
public ``StoreOptions`` and opens its client on first use.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from chunkgraph._util import named_os_error
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.volume import Volume
from chunkgraph.volume._object_store import StoreOptions, object_store, reaching


class StateStore(Protocol):
    def where(self, key: str = "") -> str: ...
    def read(self, key: str) -> bytes | None: ...
    def write(self, key: str, data: bytes) -> None: ...
    def touch(self, key: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def delete_tree(self, prefix: str, first: str = "") -> None: ...
    def names(self, prefix: str = "") -> list[str]: ...
    def folders(self, prefix: str = "") -> list[str]: ...
    def listing(self, prefix: str = "") -> tuple[list[str], list[str]]: ...
    def exists(self, key: str) -> bool: ...
    def modified(self, key: str) -> float | None: ...
    def size(self, prefix: str) -> int: ...
    def make_folder(self, key: str) -> None: ...


def state_store(root: StateRoot) -> StateStore:
    """The store of ``root``: a local folder or an object-store prefix. A prefix whose root
    carries no options is reached as ``reach`` last said for it (else from the environment)."""
    local = root.local
    if local is not None:
        return DirStore(local)
    return ObjectStateStore(root.place, root.options if root.options else _reached(root.place))


def volume_store(dst: Volume) -> StateStore | None:
    """The store of a volume's own place, for what the flow keeps in it (claims on its
    regions, the in-place mark): its folder on a disk, its prefix in an object store
    (reached with its storage_options); None for a memory volume (one process)."""
    where = dst.location.local_dir
    if where is not None:
        return DirStore(where)
    if dst.location.kind == "remote":
        return state_store(StateRoot.of(str(dst.path), dst.storage_options))
    return None


# How this process reaches each state root in an object store: a flow's state beside
# dst goes where dst's storage_options say (an endpoint, credentials), and the state
# code that names only the URL (status, stale warnings, notes) must go there too.
# Per process: secrets never leave it (workers get the public options by pickle).
_REACH: dict[str, StoreOptions] = {}


def reach(root: StateRoot) -> None:
    """Reach the state under ``root`` (and below it) with its options from now on, where a
    root names the place alone (a note, a mark, ``chunkgraph status``)."""
    if root.remote and root.options:
        _REACH[root.place] = root.options


def _reached(url: str) -> StoreOptions:
    found = [k for k in _REACH if url == k or url.startswith(f"{k}/")]
    return _REACH[max(found, key=len)] if found else StoreOptions()


def flow_location(root: StateRoot, flow_id: str) -> str:
    """The folder (a path or a URL) of flow ``flow_id``'s state under ``root``."""
    return state_store(root).where(flow_id)


def join(*parts: str) -> str:
    """Keys joined by ``/`` (empty parts skipped)."""
    return "/".join(p.strip("/") for p in parts if p)


_T = TypeVar("_T")

# Requests an object store's state code sends together at most: far below what a
# store serves, enough that a status of a root of many flows is a few round trips.
_AT_ONCE = 16


def at_once(store: StateStore, calls: Sequence[Callable[[], _T]]) -> list[_T]:
    """What each of ``calls`` returns, in order: at the same time on threads for an object
    store (each waits on its own request), one after another on a disk. The first
    error raised is raised (after every call has returned)."""
    if isinstance(store, DirStore) or len(calls) < 2:
        return [call() for call in calls]
    with ThreadPoolExecutor(min(len(calls), _AT_ONCE), "chunkgraph-state") as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


class DirStore:
    """State under the local folder ``root`` (today's layout, byte for byte)."""

    def __init__(self, folder: Path) -> None:
        self.root = Path(folder)

    def __repr__(self) -> str:
        return f"DirStore({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirStore) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def path(self, key: str = "") -> Path:
        return self.root / key if key else self.root

    def where(self, key: str = "") -> str:
        return str(self.path(key))

    def read(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write(self, key: str, data: bytes) -> None:
        """Through a temporary file renamed into place: a reader sees the old file or the
        new one, never part of one. A write that fails names the file (a full disk's own
        error names none)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise named_os_error(err, path, "writing the flow's state") from err
        os.replace(tmp, path)

    def touch(self, key: str) -> None:
        """An empty file at ``key`` (kept if there): one ``open``, no temporary or rename. A
        file with no bytes is whole as soon as it exists, so a reader never sees part of
        one; the rename ``write`` needs costs 0.03 to 2 ms on a busy ext4 disk, once per
        task for a done marker (``_markers``)."""
        path = self.path(key)
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            try:
                fd = os.open(path, flags, 0o644)
            except FileNotFoundError:  # its folder went (or never was): made, then once more
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, flags, 0o644)
        except OSError as err:
            raise named_os_error(err, path, "writing the flow's state") from err
        os.close(fd)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str, first: str = "") -> None:
        """Remove ``prefix``'s folder, its subfolder ``first`` before the rest."""
        if first:
            shutil.rmtree(self.path(join(prefix, first)), ignore_errors=True)
        shutil.rmtree(self.path(prefix), ignore_errors=True)

    def names(self, prefix: str = "") -> list[str]:
        try:
            return sorted(os.listdir(self.path(prefix)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def folders(self, prefix: str = "") -> list[str]:
        """The names under ``prefix`` that are folders."""
        return [n for n in self.names(prefix) if self.path(join(prefix, n)).is_dir()]

    def listing(self, prefix: str = "") -> tuple[list[str], list[str]]:
        """``(names, folders)`` under ``prefix``."""
        return self.names(prefix), self.folders(prefix)

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def modified(self, key: str) -> float | None:
        try:
            return self.path(key).stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None

    def size(self, prefix: str) -> int:
        """Bytes allocated under ``prefix`` (like ``du``), not following links."""
        total, stack = 0, [str(self.path(prefix))]
        while stack:
            with contextlib.suppress(FileNotFoundError), os.scandir(stack.pop()) as entries:
                for e in entries:
                    with contextlib.suppress(FileNotFoundError):
                        st = e.stat(follow_symlinks=False)
                        total += getattr(st, "st_blocks", 0) * 512 or st.st_size
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
        return total

    def make_folder(self, key: str) -> None:
        self.path(key).mkdir(parents=True, exist_ok=True)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _named_failures(method: _Method) -> _Method:
    """``method(key, ...)`` with a failed request raised as a one-line ``StoreError``
    naming ``key``'s URL, not as the client's error and its debug dump."""

    @functools.wraps(method)
    def named(self: ObjectStateStore, key: str = "", *args: Any, **kwargs: Any) -> Any:
        with reaching(self.where(key), self.options):
            return method(self, key, *args, **kwargs)

    return cast(_Method, named)


class ObjectStateStore:
    """State under the object-store prefix ``url`` (``s3://bucket/path``)."""

    def __init__(self, url: str, options: StoreOptions | None = None) -> None:
        self.url = url.rstrip("/")
        self.options = options or StoreOptions()
        self._store: Any = None

    def __repr__(self) -> str:
        return f"ObjectStateStore({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectStateStore) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __getstate__(self) -> dict[str, Any]:
        # The client is rebuilt where it is unpickled (from that process's environment).
        return {"url": self.url, "options": self.options, "_store": None}

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = object_store(self.url, self.options)
        return self._store

    def where(self, key: str = "") -> str:
        return f"{self.url}/{key}" if key else self.url

    @_named_failures
    def read(self, key: str) -> bytes | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except (NotFoundError, FileNotFoundError):
            return None

    @_named_failures
    def write(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, key, data)

    def touch(self, key: str) -> None:
        """An empty object at ``key`` (a PUT is atomic by itself)."""
        self.write(key, b"")

    @_named_failures
    def delete(self, key: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        with contextlib.suppress(NotFoundError, FileNotFoundError):
            obstore.delete(self.store, key)

    def _keys(self, prefix: str) -> list[Any]:
        import obstore

        found: list[Any] = []
        for batch in obstore.list(self.store, prefix=f"{prefix.rstrip('/')}/" if prefix else None):
            found.extend(batch)
        return found

    @_named_failures
    def delete_tree(self, prefix: str, first: str = "") -> None:
        """Every object under ``prefix`` in one listing and bulk deletes (S3 takes up to
        1000 keys a request), sent together; those under ``prefix/first`` all go before
        any other (what vouches for other objects, a flow's markers, goes first)."""
        import obstore

        paths = [str(meta["path"]) for meta in self._keys(prefix)]
        head = f"{join(prefix, first)}/"  # keys are relative to the store's prefix
        vouching = [p for p in paths if first and p.startswith(head)]
        rest = [p for p in paths if not (first and p.startswith(head))]
        for group in (vouching, rest):
            batches = [group[i : i + 1000] for i in range(0, len(group), 1000)]
            at_once(self, [functools.partial(obstore.delete, self.store, b) for b in batches])

    @_named_failures
    def names(self, prefix: str = "") -> list[str]:
        return self.listing(prefix)[0]

    @_named_failures
    def folders(self, prefix: str = "") -> list[str]:
        """The names under ``prefix`` that have objects under them."""
        return self.listing(prefix)[1]

    @_named_failures
    def listing(self, prefix: str = "") -> tuple[list[str], list[str]]:
        """``(names, folders)`` under ``prefix``, from one listing."""
        import obstore

        listed = obstore.list_with_delimiter(
            self.store, prefix=f"{prefix.rstrip('/')}/" if prefix else None
        )
        folders = {p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"]}
        names = folders | {o["path"].rsplit("/", 1)[-1] for o in listed["objects"]}
        return sorted(names), sorted(folders)

    @_named_failures
    def exists(self, key: str) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError

        if key:
            try:
                obstore.head(self.store, key)
                return True
            except (NotFoundError, FileNotFoundError):
                pass
        under = obstore.list(self.store, prefix=f"{key}/" if key else None, chunk_size=1)
        return bool(next(iter(under), None))

    @_named_failures
    def modified(self, key: str) -> float | None:
        """The object's last modification, or the latest of those under ``key/``."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return float(obstore.head(self.store, key)["last_modified"].timestamp())
        except (NotFoundError, FileNotFoundError):
            pass
        times = [float(m["last_modified"].timestamp()) for m in self._keys(key)]
        return max(times) if times else None

    @_named_failures
    def size(self, prefix: str) -> int:
        return sum(int(m["size"]) for m in self._keys(prefix))

    def make_folder(self, key: str) -> None:
        """Nothing: a prefix exists once an object lies under it."""


def read_json(store: StateStore, key: str) -> dict[str, Any] | None:
    """The JSON object stored under ``key`` (None when missing, unreadable or no object)."""
    data = store.read(key)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
