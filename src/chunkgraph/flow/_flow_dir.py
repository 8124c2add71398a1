"""``FlowDir``: the one owner of a flow's state, behind methods rather than paths.

Policy. The lifecycle (``_flow_run``) and the deferred reduction ask a
``FlowDir`` to lock the flow, read and write its completion record, its
``flow.json`` and its done markers, to name its layers folder, to mark an
in-place dst and to discard what a finished run leaves; they never build a
path of the flow's state themselves. The layout below is spelled here and
nowhere else, so that the same interface can be given over another store
without touching the flow::

    <root>/                       intermediates (default: .<dst name>.chunkgraph beside dst)
      <flow id>.lock              held while a run holds the flow (flow_lock, below)
      <flow id>.done              completion record (_markers.CompletionRecord)
      <flow id>/flow.json         totals, dst stamp, fingerprint (_state)
      <flow id>/markers/<kind>/   done markers (_markers.MarkerStore)
      <flow id>/layers/           the checkerboard's temporary layers (_checkerboard)
    <dst>/.chunkgraph-in-place.json   an in-place flow is rewriting dst (_state)
    <default root>/<flow id>.where    where a flow of dst keeps state elsewhere (_where)

The root may be a folder or an object-store prefix (``s3://bucket/.out.zarr.chunkgraph``
beside a dst in a bucket, or ``intermediates="s3://..."``): the same names, as keys
(``_state_store``), the lock a lease object (``_lease``) instead of ``flock``. The
layers of state in an object store go to local scratch (``scratch_layers``).

State. A ``FlowDir`` is a value: ``root`` and ``flow_id``; it creates nothing
until a method is called. ``held`` makes ``root`` (and removes it again when
the call made it and left it empty) and holds the lock for as long as it is
entered.

Lock (``flow_lock``): one run at a time per flow directory. Two runs of the
same flow (same id: same fn, volumes and settings) share one directory of
layers and done markers. Unguarded, the second run clears the first's markers
and the first to finish deletes the directory under the other, and both exit
successfully with holes in dst. So a run holds ``<root>/<flow id>.lock``
from before it touches the directory until after it has cleaned up:
an advisory ``flock`` on that file, taken without blocking. The kernel
releases it when its holder dies, however it dies (SIGKILL included), so a
lock can never be stale: a dead owner's file is simply lockable again. The
file's content (owner pid, host, start time) only serves the message a refused
run prints. ``flock`` works across hosts on NFSv4 (Linux maps it to byte-range
locks there). The owner unlinks the file while still holding the lock, then
closes it. A run that was waiting on the old file may then hold a lock on an
unlinked inode; it therefore checks, once it holds a lock, that the path still
names the same file, and starts over if not. So at most one run holds the lock
of a path, and no lock file outlives its run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError, CorruptChunkError, FlowLockedError
from chunkgraph._util import named_os_error, write_problem
from chunkgraph.flow._holder import describe, this_process
from chunkgraph.flow._state_store import StateStore, state_store
from chunkgraph.volume._formats import split_format
from chunkgraph.volume._object_store import StoreOptions, is_object_url, split_url

if TYPE_CHECKING:
    from chunkgraph.flow._lease import Busy
    from chunkgraph.flow._markers import CompletionRecord, MarkerStore
    from chunkgraph.volume import Volume

LOCK_SUFFIX = ".lock"
DONE_SUFFIX = ".done"
INFO_NAME = "flow.json"
LAYERS_NAME = "layers"
MARKERS_NAME = "markers"
# Beside dst, in its default root: <flow id>.where names the root of state kept elsewhere.
WHERE_SUFFIX = ".where"
# Inside an on-disk dst that an in-place flow is rewriting: where that flow keeps its
# state. A run with other intermediates finds the interrupted flow through it.
IN_PLACE_MARK = ".chunkgraph-in-place.json"
# The folder of the temp dir under which flows with state in an object store keep their
# layers on this machine (scratch_layers); emptied folders go again (FlowDir.tidy_scratch).
SCRATCH_NAME = "chunkgraph-layers"
# The default root beside a file-backed dst: .<dst name>.chunkgraph
ROOT_PREFIX, ROOT_SUFFIX = ".", ".chunkgraph"


def default_root(dst_dir: str | os.PathLike[str]) -> Path:
    """Where a flow into the on-disk ``dst_dir`` keeps its state by default: beside it, or
    for a precomputed scale's folder (beside the volume's ``info``), beside the volume, in
    a subfolder named by the scale, so that no state is left inside the volume.

    >>> default_root("data/smooth.zarr/")
    PosixPath('data/.smooth.zarr.chunkgraph')
    """
    where = Path(dst_dir)
    if _is_precomputed_scale(where):
        return default_root(where.parent) / where.name
    return where.parent / f"{ROOT_PREFIX}{where.name}{ROOT_SUFFIX}"


def _is_precomputed_scale(where: Path) -> bool:
    """Whether ``where`` is a scale's folder that its volume's ``info`` lists."""
    try:
        info = json.loads((where.parent / "info").read_text())
        return any(scale.get("key") == where.name for scale in info.get("scales", ()))
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def dst_of_default_root(root: Path) -> Path | None:
    """The dst whose default root ``root`` is, or None when it is not one.

    >>> dst_of_default_root(Path("data/.smooth.zarr.chunkgraph"))
    PosixPath('data/smooth.zarr')
    """
    volume = dst_of_default_root(root.parent) if root.parent != root else None
    if volume is not None and _is_precomputed_scale(volume / root.name):
        return volume / root.name
    name = root.name
    if (
        name.startswith(ROOT_PREFIX)
        and name.endswith(ROOT_SUFFIX)
        and len(name) > len(ROOT_PREFIX) + len(ROOT_SUFFIX)
    ):
        return root.parent / name[len(ROOT_PREFIX) : -len(ROOT_SUFFIX)]
    return None


def default_state_root(dst_path: str | os.PathLike[str]) -> Path | str:
    """``default_root`` of a dst on a disk or in an object store (a URL beside it).

    A format prefix names how the volume is stored, not where: the root goes beside
    the place it names (``precomputed://s3://b/img`` keeps its state in ``s3://b/``).

    >>> default_state_root("s3://bucket/data/smooth.zarr/")
    's3://bucket/data/.smooth.zarr.chunkgraph'
    >>> default_state_root("precomputed://s3://bucket/img")
    's3://bucket/.img.chunkgraph'
    >>> default_state_root("zarr2://file:///data/a.zarr")
    PosixPath('/data/.a.zarr.chunkgraph')
    """
    text = split_format(os.fspath(dst_path))[1]
    if is_object_url(text):
        scheme, bucket, prefix = split_url(text)
        if not prefix:
            raise ConfigError(
                f"{text!r} is a bucket's root, and a flow keeps its state beside its dst "
                f"by default: put the volume under a prefix ({scheme}://{bucket}/NAME.zarr), "
                "or give intermediates= a URL elsewhere",
                field="intermediates",
            )
        parent, _, name = text.rstrip("/").rpartition("/")
        return f"{parent}/{ROOT_PREFIX}{name}{ROOT_SUFFIX}"
    return default_root(text)


def dst_of_state_root(root: Path | str) -> Path | str | None:
    """``dst_of_default_root`` for a root on a disk or in an object store.

    >>> dst_of_state_root("s3://bucket/data/.smooth.zarr.chunkgraph")
    's3://bucket/data/smooth.zarr'
    """
    if isinstance(root, str) and is_object_url(root):
        parent, _, name = root.rstrip("/").rpartition("/")
        found = dst_of_default_root(Path(name))
        return f"{parent}/{found}" if found is not None else None
    return dst_of_default_root(Path(root))


def scratch_layers(root: str, flow_id: str) -> Path:
    """Where the layers of a flow whose state is in the object store ``root`` live while
    one machine runs it: local scratch, named by a digest of ``root`` so that a resume on
    this machine finds them (``flow.json`` records it; a resume elsewhere finds none).

    >>> scratch_layers("s3://b/.x.chunkgraph", "f00d").parts[-2:]
    ('f00d', 'layers')
    """
    digest = hashlib.sha256(root.encode()).hexdigest()[:16]
    # <flow id>/layers, as under a root on a disk: a damaged layer's path names its flow
    return Path(tempfile.gettempdir()) / SCRATCH_NAME / digest / flow_id / LAYERS_NAME


def layers_place(
    root: Path | str, flow_id: str, *, given: bool, remote_workers: bool
) -> Path | str:
    """Where a flow's top-level layers go (the lower levels stay in memory).

    In the flow's folder when that is on a disk (as ever: workers that share no disk
    are refused there, ``ChecksPaths``). State in an object store: beside it in the
    store when ``intermediates`` named it (``given``) or the workers share no disk
    with this process (``remote_workers``: a Dask cluster); otherwise on this
    machine's scratch (``scratch_layers``), where writes cost no requests.

    >>> layers_place("s3://b/.x.chunkgraph", "f00d", given=True, remote_workers=False)
    's3://b/.x.chunkgraph/f00d/layers'
    """
    if not isinstance(root, str):
        return root / flow_id / LAYERS_NAME
    if given or remote_workers:
        return f"{root}/{flow_id}/{LAYERS_NAME}"
    return scratch_layers(root, flow_id)


def state_root(intermediates: Path | str | None, dst: Volume) -> Path | str:
    """Where a flow keeps its state: ``intermediates`` as given (a folder or an
    object-store URL), else beside dst (on its disk, or in its object store), else the temp
    dir. Deterministic, so that a resumed run finds the previous one's.

    ConfigError (``field="intermediates"``) when a file stands where a folder must be.
    """
    if isinstance(intermediates, str):
        return intermediates.rstrip("/")
    if intermediates is not None:
        # The nearest existing path decides: a file there (the path itself or a parent)
        # would fail only at mkdir, as a bare NotADirectoryError.
        existing = next((p for p in (intermediates, *intermediates.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            what = (
                "is a file" if existing == intermediates else f"is under {str(existing)!r}, a file"
            )
            raise ConfigError(
                f"intermediates={str(intermediates)!r} {what}; give a directory (created if "
                "missing) where the flow may keep its temporary layers and markers, or None for "
                "the default beside dst",
                field="intermediates",
            )
        return intermediates
    where = dst.location.local_dir
    if where is not None:
        return default_root(where)
    if is_object_url(dst.path):
        return default_state_root(dst.path)
    return Path(tempfile.gettempdir()) / "chunkgraph-intermediates"


@dataclass(frozen=True)
class FlowDir:
    """The state of flow ``flow_id`` under ``root`` (see the module's layout): a folder,
    or an object-store URL (``_state_store``; its lock is then a lease, ``_lease``)."""

    root: Path | str
    flow_id: str
    # Where this run puts the layers (``layers_place``); None: the default for ``root``.
    layers_at: Path | str | None = None
    # An object store's settings (dst's storage_options: its endpoint, say); None: the
    # environment's. Secrets are never pickled (``StoreOptions``).
    options: StoreOptions | None = None

    @classmethod
    def of(cls, flow_dir: Path | str) -> FlowDir:
        """The ``FlowDir`` of a flow directory ``<root>/<flow id>`` (a report's
        ``intermediates``)."""
        if isinstance(flow_dir, str) and is_object_url(flow_dir):
            root, _, flow_id = flow_dir.rstrip("/").rpartition("/")
            return cls(root, flow_id)
        return cls(Path(flow_dir).parent, Path(flow_dir).name)

    @property
    def store(self) -> StateStore:
        return state_store(self.root, self.options)

    @property
    def own_store(self) -> StateStore:
        """The store rooted at the flow's own folder (``flow.json``, markers)."""
        return state_store(self.location, self.options)

    @property
    def remote(self) -> bool:
        """Whether the state is in an object store rather than on a disk."""
        return isinstance(self.root, str)

    @property
    def location(self) -> str:
        """The flow's own folder (markers, ``flow.json``): a path or a URL."""
        return self.store.where(self.flow_id)

    @property
    def layers_dir(self) -> Path | str:
        """Where the checkerboard's layers are (``layers_place``): a folder or a URL."""
        if self.layers_at is not None:
            return self.layers_at
        return layers_place(self.root, self.flow_id, given=False, remote_workers=False)

    @property
    def lock_key(self) -> str:
        return f"{self.flow_id}{LOCK_SUFFIX}"

    def exists(self) -> bool:
        return self.store.exists(self.flow_id)

    def check_writable(self, dst: Volume) -> None:
        """A ConfigError naming the path when the flow's state folder (or where it will be
        made) or an on-disk dst cannot be written: before anything runs, dry runs too.

        A run needs both: it locks the flow and records its progress under ``root``, and
        writes dst's chunks. Found later, this would be a bare ``OSError`` from a mkdir.
        An object store answers for itself at the first write (its error names the key).
        """
        if dst.location.local_dir is not None:
            problem = write_problem(dst.path)
            if problem:
                raise ConfigError(
                    f"dst {dst.path!r} cannot be written: {problem}, so nothing was run. Is it "
                    "on a read-only mount, or without write permission? Make it writable, or "
                    "write to a dst on a writable file system",
                    field="dst",
                )
        if isinstance(self.root, str):
            return
        problem = write_problem(self.root)
        if problem:
            raise ConfigError(
                f"intermediates {str(self.root)!r} cannot be written: {problem}. The flow keeps "
                "its lock, done markers and temporary layers there, so nothing was run. Is it "
                "on a read-only mount, or without write permission? Give intermediates= (a "
                "spec's intermediates:) a directory on a writable file system",
                field="intermediates",
            )

    @contextlib.contextmanager
    def held(self, wait: float) -> Iterator[None]:
        """Hold the flow's lock (``FlowLockedError`` after ``wait`` seconds), making
        ``root`` if needed; a root this made is removed again if left empty (a completion
        record is worth keeping). A lease that is lost meanwhile stops marker writes
        (``_markers.fenced``)."""
        from chunkgraph.flow._markers import fenced

        if isinstance(self.root, str):
            with self.store.lock(self.lock_key, wait) as fence, fenced(self.location, fence):
                try:
                    yield
                finally:
                    self.tidy_scratch()  # under the lock: no run of this flow is making them
            return
        made_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with flow_lock(self.root / self.lock_key, wait):
                yield
        finally:
            if made_root:
                with contextlib.suppress(OSError):
                    self.root.rmdir()  # only when empty

    @property
    def record(self) -> CompletionRecord:
        from chunkgraph.flow._markers import CompletionRecord

        return CompletionRecord(self.root, self.flow_id, self.options)

    def markers(self) -> MarkerStore:
        """The done markers (their folders made if missing)."""
        from chunkgraph.flow._markers import MarkerStore

        return MarkerStore(self.location, self.options)

    def read_info(self) -> dict[str, Any]:
        from chunkgraph.flow._state import read_flow_info

        return read_flow_info(self.own_store)

    def write_info(self, **fields: Any) -> None:
        from chunkgraph.flow._state import write_flow_info

        write_flow_info(self.own_store, **fields)

    def discard(self) -> None:
        """Delete the flow's folder (``_markers.discard_flow``), and its layers where they
        live apart from it (local scratch)."""
        from chunkgraph.flow._markers import check_fence, discard_flow, discard_flow_dir

        check_fence(self.location)  # a run that lost its lease deletes nothing of the next's
        discard_flow(self.root, self.flow_id, self.options)
        layers = self.layers_dir
        if isinstance(self.root, str) and isinstance(layers, Path):
            discard_flow_dir(layers.parent)  # scratch: <digest>/<flow id>/layers
            self.tidy_scratch()

    def tidy_scratch(self) -> None:
        """Remove the folders of this machine's scratch that held the flow's layers
        (``scratch_layers``: ``chunkgraph-layers/<digest>/<flow id>/layers``), innermost
        first, each only while empty: a finished flow leaves none behind, a failed one
        only the layers a resume reads."""
        layers = self.layers_dir
        if not (isinstance(self.root, str) and isinstance(layers, Path)):
            return
        folders = [layers, *layers.parents[:3]]  # up to chunkgraph-layers itself
        if folders[-1].name != SCRATCH_NAME:
            return  # layers placed elsewhere: not this machine's scratch
        for folder in folders:
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                return  # not empty: in use (this flow's layers, or another flow's)

    def note_beside(self, dst: Volume) -> None:
        """Tell ``chunkgraph status DST`` where this state is (a dst on a disk or in an
        object store)."""
        if dst.location.local_dir is not None or is_object_url(dst.path):
            from chunkgraph.flow._where import note_state

            note_state(dst.path, self.root, self.flow_id)

    def mark_in_place(self, dst: Volume) -> None:
        from chunkgraph.flow._state import mark_in_place

        mark_in_place(dst, self.root, self.flow_id)

    def unmark_in_place(self, dst: Volume) -> None:
        from chunkgraph.flow._state import unmark_in_place

        unmark_in_place(dst)

    def written_for_other(self, stamp: str | None) -> bool:
        """True when the record or markers were written for a destination that has since
        been deleted and created again (see ``Volume.stamp``)."""
        if stamp is None:
            return False
        finished = self.record.read()
        before = finished.get("dst") if finished else self.read_info().get("dst")
        return before is not None and before != stamp

    def layer_corrupt(self, error: BaseException) -> bool:
        """Whether ``error`` (a group of task errors, or one) is a corrupt chunk of one of
        the flow's own layers (``_reduce.damaged_layer_error``)."""
        seen: list[BaseException] = [error]
        where = self.layers_dir
        layers = str(where.resolve() if isinstance(where, Path) else where).rstrip("/") + "/"
        while seen:
            e = seen.pop()
            volume = e.volume if isinstance(e, CorruptChunkError) else ""
            if volume and not is_object_url(volume):
                volume = str(Path(volume).resolve())
            if volume and f"{volume}/".startswith(layers):
                return True
            if isinstance(e, BaseExceptionGroup):
                seen.extend(e.exceptions)
            if e.__cause__ is not None:
                seen.append(e.__cause__)
        return False


# How often a run that waits for a lock tries again; short next to any flow.
_POLL_SECONDS = 0.1


@contextlib.contextmanager
def flow_lock(
    path: Path,
    wait: float = 0.0,
    *,
    about: dict[str, Any] | None = None,
    busy: Busy | None = None,
) -> Iterator[None]:
    """Hold the lock file ``path`` for the body; refuse (or wait ``wait`` seconds) if held.

    ``about``: more fields for the owner record; ``busy``: the refusal (default: this
    flow is already running).

    >>> import tempfile
    >>> lock = Path(tempfile.mkdtemp()) / "f.lock"
    >>> with flow_lock(lock):
    ...     with flow_lock(lock):
    ...         pass
    Traceback (most recent call last):
      ...
    chunkgraph.FlowLockedError: ...
    >>> lock.exists()
    False
    """
    fd = _acquire(path, wait, busy)
    try:
        _write_owner(fd, path, about)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock, after the unlink (see the module docstring)


def _acquire(path: Path, wait: float, busy: Busy | None) -> int:
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                raise _busy_error(path, wait, busy) from None
            time.sleep(_POLL_SECONDS)
            continue
        if _same_file(fd, path):
            return fd
        os.close(fd)  # the holder we waited for unlinked it: lock the new file instead


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _write_owner(fd: int, path: Path, about: dict[str, Any] | None) -> None:
    owner = {**(about or {}), **this_process()}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
    except OSError as err:  # a full disk: the error names no file by itself
        raise named_os_error(err, path, "writing the flow's lock") from err


def _busy_error(path: Path, wait: float, busy: Busy | None) -> FlowLockedError:
    try:
        owner = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        owner = {}
    if not isinstance(owner, dict):
        owner = {}
    if busy is not None:
        return busy(owner, wait, None)
    who = describe(owner) if owner else "another run"
    waited = f" after waiting {wait:g} s" if wait > 0 else ""
    return FlowLockedError(
        f"this flow is already running{waited}: {who} holds {path}. Two runs of one flow would "
        "overwrite each other's temporaries; wait for it to finish (then rerun with resume=True "
        "to reuse its work), pass lock_wait=<seconds> to wait, or stop that process. The lock "
        "is released by the operating system when its holder exits, even if killed",
        lock=str(path),
        holder=who,
    )
