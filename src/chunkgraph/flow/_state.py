"""The flows beside a destination: what each is doing, and removing abandoned ones.

Every ``apply`` keeps its state under an intermediates directory, by default
``.<dst name>.chunkgraph`` beside dst (``_flow_dir.default_root``; the layout is
``_flow_dir``'s)::

    .smooth.zarr.chunkgraph/
        <flow id>/              temporaries: layers/ and markers/{top,reduce}/ (_markers)
        <flow id>/flow.json     optional totals: {"top_tasks": N, "reductions": M,
                                "deferred": bool, ...} (write_flow_info; a deferred
                                flow's geometry, _deferred)
        <flow id>.lock          while a run holds the flow (_lock; unlinked by its owner)
        <flow id>.done          the completion record (_markers.CompletionRecord)
        .<flow id>.deleted-*    tombstones of an interrupted deletion (discard_flow_dir)

The root may be a key prefix in an object store (``s3://bucket/.smooth.zarr.chunkgraph``):
every function here reads and writes through ``_state_store``, so the same names are
objects there, and the lock is a lease (``_lease``): running while it is unexpired and
its holder is not known dead (a holder on this host whose process is gone, ``_holder``).

States (``FlowStatus``), decided in this order:

* ``RUNNING``: someone holds ``<flow id>.lock``. Tested with a non-blocking
  *shared* ``flock`` on the file opened read-only, released at once, never
  creating the file: the same kernel lock ``_flow_dir.flow_lock`` takes, so a run on another
  host sharing an NFSv4 directory counts too. A run starting with
  ``lock_wait=0`` in the microseconds the probe holds the lock is refused
  (``FlowLockedError``, nothing written); with any ``lock_wait`` it just waits.
* ``DEFERRED``: ``flow.json`` says ``deferred`` and every top-level task is
  marked done (a deferred run that failed or was killed is ``INTERRUPTED``,
  like any other): its layers are the result
  (``blend_modes="defer"``), never removed by ``--stale``. ``reduce_deferred``
  turns it ``FINISHED`` (record written, ``deferred`` false): the layers are
  then leftovers of a finished flow, which ``--stale`` removes.
* ``FINISHED``: a completion record exists. Temporaries left beside it (a
  run killed while deleting them) are useless: a resume discards them.
* ``INTERRUPTED``: temporaries and no record: a run failed or was killed;
  ``resume=True`` continues it.

Stale (``FlowState.stale``): not running and either finished with temporaries
left, or interrupted and unmodified for ``older_than_hours``. Age is the last
modification of the flow's directories (a marker added, a layer created):
a few ``stat`` calls, so ``warn_if_stale`` costs nothing at the start of a flow.

A resume that finds no state of its own flow (``resume_mismatch``) looks for
the state of another flow into the same destination (same recorded ``dst``
digest, or, for state that records none, the same dst stamp): the flow id
changed, so some parameter did. ``flow.json`` and the completion record keep
``fingerprint`` (``_fingerprint.flow_id_parts``), which names the part that
differs; the warning says so and that the flow starts over, and leaves that
state where it is (``chunkgraph clean`` removes it).

Removing (``remove_flow``) takes the flow's own lock (``_flow_dir.flow_lock``,
refusing at once if held), so no run can start on the directory while it is
renamed to a tombstone and deleted (``discard_flow_dir``): an interruption
never leaves markers whose layers are gone.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkgraph.flow._flow_dir import (
    DONE_SUFFIX,
    IN_PLACE_MARK,
    INFO_NAME,
    LAYERS_NAME,
    LOCK_SUFFIX,
    MARKERS_NAME,
    dst_of_state_root,
)
from chunkgraph.flow._markers import REDUCE, TOP
from chunkgraph.flow._state_store import DirStore, StateStore, join, state_store

# A flow's state root: a folder, or an object-store URL (``_state_store``).
Root = Path | str

# A flow unmodified this long and not running counts as abandoned. Shorter flags a
# flow its user is about to resume; longer keeps dead temporaries (often larger than
# dst) on disk. A day leaves time to notice a failure and resume it.
STALE_AFTER_HOURS = 24.0

_DONE, _LOCK, _INFO = DONE_SUFFIX, LOCK_SUFFIX, INFO_NAME


class FlowStatus(enum.Enum):
    RUNNING = "running"
    DEFERRED = "deferred"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class FlowState:
    """One flow beside a destination, as found on disk.

    ``top_done`` / ``reductions_done``: done markers; ``top_total`` /
    ``reductions_total``: from ``flow.json`` or the completion record, else
    None; ``temporary_bytes``: disk use of the flow's directory (None when not
    measured); ``modified``: epoch seconds of the last modification;
    ``owner``: the lock file's pid, host and start time; ``finished``: the
    completion record's time; ``root``: the state root it lies under (``flow_dir`` is
    ``<root>/<flow id>``, a path or a URL).
    """

    flow_id: str
    flow_dir: Path | str
    status: FlowStatus
    has_temporaries: bool
    top_done: int
    top_total: int | None
    reductions_done: int
    reductions_total: int | None
    temporary_bytes: int | None
    modified: float
    owner: dict[str, Any] | None
    finished: str | None
    root: Path | str

    def age_hours(self, now: float | None = None) -> float:
        return max(0.0, ((time.time() if now is None else now) - self.modified) / 3600)

    def stale(self, older_than_hours: float = STALE_AFTER_HOURS, now: float | None = None) -> bool:
        """Abandoned temporaries: finished with leftovers, or interrupted and old enough."""
        if not self.has_temporaries:
            return False
        if self.status is FlowStatus.FINISHED:
            return True
        return self.status is FlowStatus.INTERRUPTED and self.age_hours(now) >= older_than_hours

    def progress(self) -> str:
        """``"top 3/8, reductions 0/4"`` (``?`` where no total is recorded)."""
        top = "?" if self.top_total is None else str(self.top_total)
        red = "?" if self.reductions_total is None else str(self.reductions_total)
        return f"top {self.top_done}/{top}, reductions {self.reductions_done}/{red}"

    def as_json(self) -> dict[str, Any]:
        return {
            "flow_id": self.flow_id,
            "status": self.status.value,
            "flow_dir": str(self.flow_dir),
            "has_temporaries": self.has_temporaries,
            "top_done": self.top_done,
            "top_total": self.top_total,
            "reductions_done": self.reductions_done,
            "reductions_total": self.reductions_total,
            "temporary_bytes": self.temporary_bytes,
            "modified": self.modified,
            "owner": self.owner,
            "finished": self.finished,
        }


def _root(root: Root) -> Root:
    """A root as the state code keeps it: a URL stays text, anything else is a Path."""
    return root if isinstance(root, str) and "://" in root else Path(root)


def flow_ids(root: Root) -> list[str]:
    """Ids of the flows under ``root`` (a directory, a record or a lock), sorted."""
    store = state_store(root)
    ids = set()
    folders = set(store.folders())
    for name in store.names():
        if name.startswith("."):
            continue  # tombstones, temporary files of atomic writes, the lease clock
        if name in folders:
            ids.add(name)
        elif name.endswith((_DONE, _LOCK)):
            ids.add(name.rsplit(".", 1)[0])
    return sorted(ids)


def read_flows(root: Root, *, sizes: bool = True) -> list[FlowState]:
    """The state of every flow under ``root``; ``sizes=False`` skips walking the layers."""
    return [read_flow(root, fid, sizes=sizes) for fid in flow_ids(root)]


def read_flow(root: Root, flow_id: str, *, sizes: bool = True) -> FlowState:
    root = _root(root)
    store = state_store(root)
    running, owner = store.lock_holder(f"{flow_id}{_LOCK}")
    record = _read_json(store, f"{flow_id}{_DONE}")
    info = _read_json(store, join(flow_id, _INFO)) or {}
    has_temps = store.exists(flow_id)
    top_total, red_total = _int_or_none(info.get("top_tasks")), _int_or_none(info.get("reductions"))
    top_done = _count_markers(store, flow_id, TOP)
    if running:
        status = FlowStatus.RUNNING
    elif info.get("deferred") and top_total is not None and top_done >= top_total:
        # flow.json says deferred from the start of the run: its layers are a result only
        # once every top-level task wrote its part (a failed or killed run is interrupted).
        status = FlowStatus.DEFERRED
    elif record is not None:
        status = FlowStatus.FINISHED
    else:
        status = FlowStatus.INTERRUPTED
    if record is not None:
        red_total = _int_or_none(record.get("reductions"))
    return FlowState(
        flow_id=flow_id,
        flow_dir=root / flow_id if isinstance(root, Path) else store.where(flow_id),
        status=status,
        has_temporaries=has_temps,
        top_done=top_done,
        top_total=top_total,
        reductions_done=_count_markers(store, flow_id, REDUCE),
        reductions_total=red_total,
        temporary_bytes=_temporary_bytes(store, root, flow_id, info)
        if sizes and has_temps
        else (0 if sizes else None),
        modified=_modified(store, flow_id),
        owner=owner,
        finished=None if record is None else str(record.get("finished", "")),
        root=root,
    )


def lock_holder(lock: Path) -> tuple[bool, dict[str, Any] | None]:
    """Whether the lock file ``lock`` is held, and its owner as written there (or None).

    Probes like ``_flow_dir._acquire`` but shared, read-only, never creating the file, and
    releases at once: a held lock is never taken over.
    """
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            held = True
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            owner = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        except ValueError:
            owner = None
    finally:
        os.close(fd)
    return held, owner if isinstance(owner, dict) else None


def remove_flow(root: Root, flow_id: str, *, record: bool = False) -> None:
    """Delete flow ``flow_id``'s temporaries (and, with ``record``, its completion record).

    Holds the flow's lock meanwhile; raises ``FlowLockedError`` (naming the holder) when
    a run holds it. Tombstones of earlier interrupted deletions go too.
    """
    from chunkgraph.flow._flow_dir import FlowDir

    state = FlowDir(_root(root), flow_id)
    with state.store.lock(f"{flow_id}{_LOCK}", 0.0):
        state.discard()
        if record:
            state.record.remove()


def write_flow_info(
    flow_dir: Root | StateStore,
    *,
    top_tasks: int,
    reductions: int,
    deferred: bool,
    dst: str | None = None,
    **extra: Any,
) -> None:
    """Record a flow's totals (and whether its layers are its result) in ``flow.json``.

    For ``apply`` to call once it knows them; ``status`` then shows ``top 3/8`` instead of
    ``top 3/?``, and a deferred flow's layers are never taken for abandoned temporaries.
    ``extra``: more JSON fields (a deferred flow's geometry, ``_deferred``). Written
    atomically (``StateStore.write``).
    """
    info = {
        "top_tasks": int(top_tasks),
        "reductions": int(reductions),
        "deferred": deferred,
        "dst": dst,  # markers/_markers.dst_stamp: the destination these markers wrote to
        **extra,
    }
    _store_of(flow_dir).write(_INFO, json.dumps(info).encode())


def read_flow_info(flow_dir: Root | StateStore) -> dict[str, Any]:
    """``flow.json`` of a flow directory ({} when missing or unreadable)."""
    return _read_json(_store_of(flow_dir), _INFO) or {}


def _store_of(where: Root | StateStore) -> StateStore:
    return state_store(where) if isinstance(where, str | os.PathLike) else where


def remove_root_if_empty(root: Root) -> bool:
    """Remove the intermediates directory when nothing is left in it; True if removed
    (an object-store prefix with nothing under it is gone already)."""
    if isinstance(root, str) and "://" in root:
        return not state_store(root).names()
    with contextlib.suppress(OSError):
        Path(root).rmdir()
        return True
    return False


def warn_if_stale(root: Root, current_flow_id: str) -> None:
    """Warn (``UserWarning``) when stale flows lie beside the flow now starting.

    Called by ``apply`` as it starts a new (not resumed) flow; reads no layers.
    """
    stale = [s for s in read_flows(root, sizes=False) if s.flow_id != current_flow_id and s.stale()]
    if not stale:
        return
    described = ", ".join(
        f"{s.flow_id} ({s.status.value}, {s.progress()}, {s.age_hours():.0f} h old)" for s in stale
    )
    warnings.warn(
        f"{len(stale)} stale flow(s) under {root} keep temporaries on disk: {described}. "
        f"A new flow ({current_flow_id}) starts beside them; to continue one instead, rerun it "
        f"with resume=True. To list them: {status_command(root)}; to delete them: "
        f"{clean_command(root)}",
        UserWarning,
        stacklevel=_caller_level(),
    )


def resume_mismatch(
    root: Root, flow_id: str, fingerprint: dict[str, str], stamp: str | None
) -> str | None:
    """What a resume of ``flow_id`` that found no state of its own should be told, when
    another flow under ``root`` wrote the same destination (None: no such flow)."""
    from chunkgraph.flow._fingerprint import PART_NAMES

    found = []
    for state in read_flows(root, sizes=False):
        if state.flow_id == flow_id:
            continue
        changed = _changed_parts(root, state, fingerprint, stamp)
        if changed is None:
            continue
        found.append((state.modified, state, [PART_NAMES[k] for k in changed]))
    if not found:
        return None
    _, state, changed = max(found, key=lambda f: f[0])
    what = (
        " and ".join(changed)
        if changed
        else "its parameters (function, fn_kwargs, inputs or sizes)"
    )
    if state.status is FlowStatus.FINISHED:
        earlier = f"flow {state.flow_id}, finished {state.finished}"
    else:
        earlier = f"flow {state.flow_id}, {state.status.value}, {state.progress()}"
    kept_note = (
        f" Its state is kept: to continue it, resume with the earlier parameters; to delete "
        f"it: `{clean_command(root, state.flow_id)}`."
        if state.has_temporaries
        else ""
    )
    others = (
        f" ({len(found) - 1} more such flow(s): `{status_command(root)}`)" if len(found) > 1 else ""
    )
    return (
        f"resume asked for, but the state under {root} is of an earlier run of this "
        f"destination with other parameters ({earlier}){others}: {what} changed, so the flow "
        f"id is now {flow_id} and this flow starts over from nothing.{kept_note}"
    )


def _changed_parts(
    root: Root, state: FlowState, fingerprint: dict[str, str], stamp: str | None
) -> list[str] | None:
    """The parts (``PART_NAMES`` keys) in which ``state``'s flow differs from the flow of
    ``fingerprint``, when both wrote the same destination; None when ``state`` wrote
    another one ([] for state written before parts were recorded: same dst, something else)."""
    from chunkgraph.flow._fingerprint import PART_NAMES

    record = _read_json(state_store(root), f"{state.flow_id}{_DONE}") or {}
    kept = read_flow_info(state.flow_dir) or record
    parts = kept.get("fingerprint")
    if isinstance(parts, dict):
        if parts.get("dst") != fingerprint.get("dst"):
            return None
        return [k for k in PART_NAMES if parts.get(k) != fingerprint.get(k)]
    if stamp is not None and kept.get("dst") == stamp:
        return []
    return None


def in_place_conflict(
    root: Root,
    flow_id: str,
    fingerprint: dict[str, str],
    stamp: str | None,
    *,
    resuming: bool,
    input_name: str,
) -> str | None:
    """Why an in-place flow (dst is its input ``input_name``) must not start: an unfinished
    flow under ``root`` has already written part of dst (done tasks; a reduction writes dst
    only after its tasks are done), so dst no longer holds the original input. None: it
    may start. Its own state does not count when ``resuming`` (the resume finishes it)."""
    for state in read_flows(root, sizes=False):
        # The caller holds flow_id's lock, so its own state reads as running.
        unfinished = state.status is FlowStatus.INTERRUPTED or (
            state.flow_id == flow_id and state.status is FlowStatus.RUNNING
        )
        if not unfinished or state.top_done == 0:
            continue
        if state.flow_id == flow_id:
            if resuming:
                continue
            return (
                f"an earlier run of this flow ({flow_id}, {state.progress()}) stopped after "
                f"writing part of dst, which is also its input {input_name!r}: starting over "
                "would apply fn again to what it wrote. Pass resume=True (chunkgraph run "
                "--resume) to finish it"
            )
        if _changed_parts(root, state, fingerprint, stamp) is None:
            continue
        return (
            f"an unfinished flow ({state.flow_id}, {state.status.value}, {state.progress()}) "
            f"has written part of dst, which is this flow's input {input_name!r} too, so dst "
            "no longer holds the original data. Finish that flow (resume it with its own "
            "function and options), or restore dst and then delete its state: "
            f"`{clean_command(root, state.flow_id)}`"
        )
    return None


def _mark_store(dst: Any) -> StateStore | None:
    """Where ``dst`` keeps the in-place mark: its folder on a disk, its prefix in an
    object store (reached with its storage_options); None for a memory volume."""
    where: Path | None = dst.location.local_dir
    if where is not None:
        return DirStore(where)
    if "://" in str(dst.path):
        return state_store(str(dst.path), dst.storage_options)
    return None


def in_place_mark(dst: Any) -> tuple[Root, str] | None:
    """``(intermediates root, flow id)`` of the in-place flow last started on ``dst`` that
    has not finished (None: no mark, or dst is a memory volume)."""
    store = _mark_store(dst)
    found = _read_json(store, IN_PLACE_MARK) if store is not None else None
    if not found:
        return None
    root, flow_id = found.get("intermediates"), found.get("flow_id")
    if not isinstance(root, str) or not isinstance(flow_id, str):
        return None
    return _root(root), flow_id


def mark_in_place(dst: Any, root: Root, flow_id: str) -> None:
    """Record in ``dst`` that in-place flow ``flow_id``, state under ``root``, rewrites it."""
    store = _mark_store(dst)
    if store is not None:
        where = root if isinstance(root, str) else str(Path(root).resolve())
        mark = {"intermediates": where, "flow_id": flow_id}
        store.write(IN_PLACE_MARK, json.dumps(mark).encode())


def lost_in_place_state(dst: Any) -> str | None:
    """When ``dst`` carries the mark of an in-place flow that did not finish and whose
    state is gone (removed with ``clean``, say): why no flow may start on it now. dst may
    be partly rewritten, and nothing says which part."""
    mark = in_place_mark(dst)
    store = _mark_store(dst)
    if mark is None or store is None:
        return None
    root, flow_id = mark
    state = state_store(root)
    if state.exists(flow_id) or state.exists(f"{flow_id}{_DONE}"):
        return None  # its state says what happened (in_place_conflict), or it finished
    return (
        f"dst carries the mark of in-place flow {flow_id}, which did not finish, and its state "
        f"under {root} is gone (removed?): part of dst may hold fn's output, not the input. "
        f"If dst holds the original data again (restored), delete {store.where(IN_PLACE_MARK)} "
        "and run again"
    )


def unmark_in_place(dst: Any) -> None:
    """The in-place flow finished: dst holds its result, nothing half-written."""
    store = _mark_store(dst)
    if store is not None:
        store.delete(IN_PLACE_MARK)


def warn_if_resume_mismatch(
    root: Root, flow_id: str, fingerprint: dict[str, str], stamp: str | None
) -> None:
    """Warn (``UserWarning``) with ``resume_mismatch``'s message, if there is one."""
    message = resume_mismatch(root, flow_id, fingerprint, stamp)
    if message:
        warnings.warn(message, UserWarning, stacklevel=_caller_level())


def clean_command(root: Root, flow_id: str | None = None) -> str:
    """The command that removes the stale flows under ``root`` (or one flow, by id).

    >>> clean_command(Path("data/.smooth.zarr.chunkgraph"))
    'chunkgraph clean data/smooth.zarr --stale'
    >>> clean_command(Path("data/.smooth.zarr.chunkgraph"), "f00d")
    'chunkgraph clean data/smooth.zarr f00d'
    >>> clean_command(Path("/scratch/tmp"), "f00d")
    'chunkgraph clean --intermediates /scratch/tmp f00d'
    >>> clean_command(Path("/scratch/tmp"))
    'chunkgraph clean --intermediates /scratch/tmp --stale'
    """
    dst = dst_of_state_root(root)
    if dst is None:
        return f"chunkgraph clean --intermediates {root} {flow_id or '--stale'}"
    return f"chunkgraph clean {dst} {flow_id}" if flow_id else f"chunkgraph clean {dst} --stale"


def status_command(root: Root) -> str:
    """The command that lists the flows under ``root``.

    >>> status_command(Path("data/.smooth.zarr.chunkgraph")), status_command(Path("/tmp/x"))
    ('chunkgraph status data/smooth.zarr', 'chunkgraph status --intermediates /tmp/x')
    """
    dst = dst_of_state_root(root)
    return f"chunkgraph status {dst}" if dst else f"chunkgraph status --intermediates {root}"


def kept_state_note(root: Root, flow_id: str, *, damaged: bool = False) -> str:
    """What a failed or interrupted run says about the state it leaves for a resume;
    ``damaged``: it failed on a layer chunk that does not decode, which a resume would
    read again (only a run without resume recomputes it)."""
    where = state_store(root).where(flow_id)
    if damaged:
        return (
            f"flow {flow_id}'s temporary layers under {where} are damaged: a resume "
            f"would read them again; rerun without resume=True, or delete the flow with "
            f"`{clean_command(root, flow_id)}` and apply again"
        )
    return (
        f"flow {flow_id} keeps its temporaries and done markers under {where}: "
        f"rerun with resume=True to continue it, list it with `{status_command(root)}`, or "
        f"delete it with `{clean_command(root, flow_id)}`"
    )


def _caller_level() -> int:
    """The ``stacklevel`` naming the first frame outside this package (the user's call)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _count_markers(store: StateStore, flow_id: str, kind: str) -> int:
    return sum(1 for n in store.names(join(flow_id, MARKERS_NAME, kind)) if not n.startswith("."))


def _modified(store: StateStore, flow_id: str) -> float:
    """Latest modification of the flow's directory, its first two levels of folders, lock
    and record (in an object store: of every object under the flow's prefix)."""
    keys = [flow_id, f"{flow_id}{_LOCK}", f"{flow_id}{_DONE}"]
    for sub in (MARKERS_NAME, LAYERS_NAME):
        keys.append(join(flow_id, sub))
        if isinstance(store, DirStore):
            keys += [join(flow_id, sub, n) for n in store.names(join(flow_id, sub))]
    return max((t for k in keys if (t := store.modified(k)) is not None), default=0.0)


def _temporary_bytes(store: StateStore, root: Root, flow_id: str, info: dict[str, Any]) -> int:
    """Bytes under the flow's folder, plus its layers on this machine's scratch (state in
    an object store whose run kept its layers locally, ``_flow_dir.layers_place``)."""
    layers = info.get("layers")
    scratch = isinstance(root, str) and isinstance(layers, str) and "://" not in layers
    return store.size(flow_id) + (DirStore(Path(str(layers))).size("") if scratch else 0)


def _read_json(store: StateStore, key: str) -> dict[str, Any] | None:
    data = store.read(key)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
