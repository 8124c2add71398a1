"""The flows beside a destination: what each is doing, and which are abandoned.

Every ``apply`` keeps its state under an intermediates directory, by default
``.<dst name>.chunkgraph`` beside dst (``_layout.default_root``; the layout is
``_layout``'s)::

    .smooth.zarr.chunkgraph/
        <flow id>/              temporaries: layers/ and markers/{top,reduce}[.records]/
                                (_markers)
        <flow id>/flow.json     optional totals: {"top_tasks": N, "reductions": M,
                                "deferred": bool, ...} (_info.write_flow_info; a deferred
                                flow's geometry, _deferred)
        <flow id>.lock          while a run holds the flow (_lock; unlinked by its owner)
        <flow id>.done          the completion record (_markers.CompletionRecord)
        .<flow id>.deleted-*    tombstones of an interrupted deletion (discard_flow_dir)

The root may be a key prefix in an object store (``s3://bucket/.smooth.zarr.chunkgraph``):
every function here reads and writes through ``_store``, so the same names are
objects there, and the lock is a lease (``_lease``): running while it is unexpired and
its holder is not known dead (a holder on this host whose process is gone, ``_holder``).

States (``FlowStatus``), decided in this order:

* ``RUNNING``: someone holds ``<flow id>.lock``. Tested with a non-blocking
  *shared* ``flock`` on the file opened read-only, released at once, never
  creating the file: the same kernel lock ``_lock.flow_lock`` takes, so a run on another
  host sharing an NFSv4 directory counts too. A run starting with
  ``lock_wait=0`` in the microseconds the probe holds the lock is refused
  (``FlowLockedError``, nothing written); with any ``lock_wait`` it just waits.
* ``DEFERRED``: ``flow.json`` says ``deferred`` and every top-level task is
  marked done (a deferred run that failed or was killed is ``FAILED`` or
  ``INTERRUPTED``, like any other): its layers are the result
  (``blend_modes="defer"``), never removed by ``--stale``. ``reduce_deferred``
  turns it ``FINISHED`` (record written, ``deferred`` false): the layers are
  then leftovers of a finished flow, which ``--stale`` removes.
* ``FINISHED``: a completion record exists. Temporaries left beside it (a
  run killed while deleting them) are useless: a resume discards them.
* ``FAILED``: temporaries, no record, and ``failed.json``: the last run ended with an
  error (fn raised, a store failed); ``FlowState.error`` is its first line.
  ``resume=True`` continues it once the cause is fixed.
* ``INTERRUPTED``: temporaries and no record, and no error recorded: a run was
  killed (it could record nothing) or stopped (Ctrl-C); ``resume=True`` continues it.

Stale (``FlowState.stale``): not running and either finished with temporaries
left, or unfinished (failed or interrupted) and unmodified for
``older_than_hours``. Age is the last modification of the flow's directories (a
marker added, a layer created): a few ``stat`` calls, so ``warn_if_stale`` costs
nothing at the start of a flow.

A resume that finds no state of its own flow (``resume_mismatch``) looks for
the state of another flow into the same destination (same recorded ``dst``
digest, or, for state that records none, the same dst stamp): the flow id
changed, so some parameter did. ``flow.json`` and the completion record keep
``fingerprint`` (``_fingerprint.flow_id_parts``), which names the part that
differs; the warning says so and that the flow starts over, and leaves that
state where it is (``chunkgraph clean`` removes it).

Removing a flow is ``_clean``'s.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkgraph.flow.state._fingerprint import PART_NAMES
from chunkgraph.flow.state._info import read_failure, read_flow_info
from chunkgraph.flow.state._layout import (
    DONE_SUFFIX,
    FLOW_PARTS,
    INFO_NAME,
    LAYERS_NAME,
    LOCK_SUFFIX,
    MARKERS_NAME,
    WHERE_SUFFIX,
    clean_command,
    default_state_root,
    is_flow_id,
    precomputed_scale_keys,
    status_command,
)
from chunkgraph.flow.state._lock import holder
from chunkgraph.flow.state._markers import REDUCE, TOP, read_done_keys
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import (
    DirStore,
    StateStore,
    at_once,
    join,
    read_json,
    state_store,
)
from chunkgraph.volume import is_object_url, is_url, split_format

# A flow unmodified this long and not running counts as abandoned. Shorter flags a
# flow its user is about to resume; longer keeps dead temporaries (often larger than
# dst) on disk. A day leaves time to notice a failure and resume it.
STALE_AFTER_HOURS = 24.0


class FlowStatus(enum.Enum):
    RUNNING = "running"
    DEFERRED = "deferred"
    FINISHED = "finished"
    FAILED = "failed"
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
    ``<root>/<flow id>``, a path or a URL); ``error``: a failed flow's error, its first
    line.
    """

    flow_id: str
    flow_dir: StateRoot
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
    root: StateRoot
    # flow.json's ``deferred``: its layers are its result until it is reduced.
    deferred: bool = False
    # The blend mode the completion record says a deferred flow was reduced with.
    reduced_with: str | None = None
    error: str | None = None

    @property
    def unfinished(self) -> bool:
        """Stopped before it finished (failed or interrupted): a resume continues it."""
        return self.status in (FlowStatus.FAILED, FlowStatus.INTERRUPTED)

    def age_hours(self, now: float | None = None) -> float:
        return max(0.0, ((time.time() if now is None else now) - self.modified) / 3600)

    def stale(self, older_than_hours: float = STALE_AFTER_HOURS, now: float | None = None) -> bool:
        """Abandoned temporaries: finished with leftovers, or unfinished and old enough."""
        if not self.has_temporaries:
            return False
        if self.status is FlowStatus.FINISHED:
            return True
        return self.unfinished and self.age_hours(now) >= older_than_hours

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
            "error": self.error,
        }


def flow_ids(root: StateRoot, *, skip: str = "") -> list[str]:
    """Ids of the flows under ``root`` (a flow's folder, a record or a lock), sorted, but
    ``skip`` (the flow asking, whose own state needs no look).

    Only a name spelled as a flow id counts, and a folder only when it holds a flow's own
    parts (``FLOW_PARTS``): an intermediates directory the user named may hold volumes and
    folders of theirs, which status never lists and clean never removes. One listing of
    ``root``, then the looks inside the folders together (``at_once``).
    """
    store = state_store(root)
    ids = set()
    names, listed = store.listing()  # one listing answers both
    folders = set(listed)
    candidates = []
    for name in names:
        if name.startswith("."):
            continue  # tombstones, temporary files of atomic writes, the lease clock
        if name in folders:
            if is_flow_id(name) and name != skip:
                candidates.append(name)
        elif name.endswith((DONE_SUFFIX, LOCK_SUFFIX)) and is_flow_id(name.rsplit(".", 1)[0]):
            ids.add(name.rsplit(".", 1)[0])
    parts = at_once(store, [functools.partial(store.names, name) for name in candidates])
    ids.update(name for name, held in zip(candidates, parts, strict=True) if FLOW_PARTS & set(held))
    ids.discard(skip)
    return sorted(ids)


def read_flows(root: StateRoot, *, sizes: bool = True, skip: str = "") -> list[FlowState]:
    """The state of every flow under ``root`` but ``skip`` (read together in an object
    store, ``at_once``); ``sizes=False`` skips walking the layers."""
    ids = flow_ids(root, skip=skip)
    return at_once(
        state_store(root), [functools.partial(read_flow, root, fid, sizes=sizes) for fid in ids]
    )


def read_flow(root: StateRoot, flow_id: str, *, sizes: bool = True) -> FlowState:
    store = state_store(root)
    # Independent reads: together in an object store, one round trip instead of nine.
    reads: list[Callable[[], Any]] = [
        functools.partial(holder, store, f"{flow_id}{LOCK_SUFFIX}"),
        functools.partial(read_json, store, f"{flow_id}{DONE_SUFFIX}"),
        functools.partial(read_json, store, join(flow_id, INFO_NAME)),
        functools.partial(store.exists, flow_id),
        functools.partial(_count_markers, store, flow_id, TOP),
        functools.partial(_count_markers, store, flow_id, REDUCE),
        functools.partial(_modified, store, flow_id),
        functools.partial(read_failure, store, flow_id),
    ]
    (running, owner), record, info, has_temps, top_done, reductions_done, modified, error = at_once(
        store, reads
    )
    info = info or {}
    top_total, red_total = _int_or_none(info.get("top_tasks")), _int_or_none(info.get("reductions"))
    if running:
        status = FlowStatus.RUNNING
    elif info.get("deferred") and top_total is not None and top_done >= top_total:
        # flow.json says deferred from the start of the run: its layers are a result only
        # once every top-level task wrote its part (a failed or killed run is not).
        status = FlowStatus.DEFERRED
    elif record is not None:
        status = FlowStatus.FINISHED
    elif error is not None:
        status = FlowStatus.FAILED
    else:
        status = FlowStatus.INTERRUPTED
    if record is not None:
        red_total = _int_or_none(record.get("reductions"))
    return FlowState(
        flow_id=flow_id,
        flow_dir=root.join(flow_id),
        status=status,
        has_temporaries=has_temps,
        top_done=top_done,
        top_total=top_total,
        reductions_done=reductions_done,
        reductions_total=red_total,
        temporary_bytes=_temporary_bytes(store, root, flow_id, info)
        if sizes and has_temps
        else (0 if sizes else None),
        modified=modified,
        owner=owner,
        finished=None if record is None else str(record.get("finished", "")),
        root=root,
        deferred=bool(info.get("deferred")),
        reduced_with=_reduced_with(record),
        error=error if status is FlowStatus.FAILED else None,
    )


def warn_if_stale(root: StateRoot, current_flow_id: str) -> None:
    """Warn (``UserWarning``) when stale flows lie beside the flow now starting.

    Called by ``apply`` as it starts a new (not resumed) flow; reads no layers.
    """
    # Not the flow now starting (it is not stale): a root of no other flow is one listing.
    stale = [s for s in read_flows(root, sizes=False, skip=current_flow_id) if s.stale()]
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
    root: StateRoot, flow_id: str, fingerprint: dict[str, str], stamp: str | None
) -> str | None:
    """What a resume of ``flow_id`` that found no state of its own should be told, when
    another flow under ``root`` wrote the same destination (None: no such flow)."""
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
    # Automatic sizes come from memory_limit, whose default follows the free memory.
    sizes_note = (
        " Automatic sizes depend on memory_limit (by default half of the memory available "
        "at the start, rounded down to a power of two): to resume a flow whatever the free "
        "memory, give memory_limit=... or the sizes of its plan (report.plan.arguments())."
        if PART_NAMES["spec"] in changed
        else ""
    )
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
        f"id is now {flow_id} and this flow starts over from nothing.{sizes_note}{kept_note}"
    )


def _changed_parts(
    root: StateRoot, state: FlowState, fingerprint: dict[str, str], stamp: str | None
) -> list[str] | None:
    """The parts (``PART_NAMES`` keys) in which ``state``'s flow differs from the flow of
    ``fingerprint``, when both wrote the same destination; None when ``state`` wrote
    another one ([] for state written before parts were recorded: same dst, something else)."""
    record = read_json(state_store(root), f"{state.flow_id}{DONE_SUFFIX}") or {}
    kept = read_flow_info(state_store(state.flow_dir)) or record
    parts = kept.get("fingerprint")
    if isinstance(parts, dict):
        if parts.get("dst") != fingerprint.get("dst"):
            return None
        return [k for k in PART_NAMES if parts.get(k) != fingerprint.get(k)]
    if stamp is not None and kept.get("dst") == stamp:
        return []
    return None


def in_place_conflict(
    root: StateRoot,
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
        unfinished = state.unfinished or (
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


def warn_if_resume_mismatch(
    root: StateRoot, flow_id: str, fingerprint: dict[str, str], stamp: str | None
) -> None:
    """Warn (``UserWarning``) with ``resume_mismatch``'s message, if there is one."""
    message = resume_mismatch(root, flow_id, fingerprint, stamp)
    if message:
        warnings.warn(message, UserWarning, stacklevel=_caller_level())


def kept_state_note(root: StateRoot, flow_id: str, *, damaged: bool = False) -> str:
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
    package = str(Path(__file__).resolve().parents[2])
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _count_markers(store: StateStore, flow_id: str, kind: str) -> int:
    """The keys of ``kind`` marked done: plain markers and the keys in records, as a
    resume counts them (``read_done_keys``)."""
    return len(read_done_keys(store, join(flow_id, MARKERS_NAME), kind))


def _modified(store: StateStore, flow_id: str) -> float:
    """Latest modification of the flow's directory, its first two levels of folders, lock
    and record (in an object store: of every object under the flow's prefix)."""
    keys = [flow_id, f"{flow_id}{LOCK_SUFFIX}", f"{flow_id}{DONE_SUFFIX}"]
    if isinstance(store, DirStore):  # a folder's time is its own entries', not theirs
        for sub in (MARKERS_NAME, LAYERS_NAME):
            keys.append(join(flow_id, sub))
            keys += [join(flow_id, sub, n) for n in store.names(join(flow_id, sub))]
    # In an object store the flow's prefix already answers for every object under it.
    times = at_once(store, [functools.partial(store.modified, k) for k in keys])
    return max((t for t in times if t is not None), default=0.0)


def _temporary_bytes(store: StateStore, root: StateRoot, flow_id: str, info: dict[str, Any]) -> int:
    """Bytes under the flow's folder, plus its layers on this machine's scratch (state in
    an object store whose run kept its layers locally, ``_layout.layers_place``)."""
    layers = info.get("layers")
    scratch = root.remote and isinstance(layers, str) and not is_url(layers)
    return store.size(flow_id) + (DirStore(Path(str(layers))).size("") if scratch else 0)


def _reduced_with(record: dict[str, Any] | None) -> str | None:
    reduced = (record or {}).get("reduced")
    mode = reduced.get("blend_mode") if isinstance(reduced, dict) else None
    return mode if isinstance(mode, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def noted(dst_path: str | os.PathLike[str]) -> list[tuple[StateRoot, str]]:
    """``(intermediates, flow id)`` of each note beside dst whose flow still has state."""
    store = state_store(default_state_root(dst_path))
    found: list[tuple[StateRoot, str]] = []
    for name in store.names():
        if not name.endswith(WHERE_SUFFIX) or name.startswith("."):
            continue
        try:
            text = json.loads(store.read(name) or b"")["intermediates"]
        except (ValueError, KeyError, TypeError):
            continue  # half written by a run killed meanwhile, or not ours
        if not isinstance(text, str):
            continue
        root = StateRoot.of(text)
        flow_id = name[: -len(WHERE_SUFFIX)]
        if flow_id in flow_ids(root):
            found.append((root, flow_id))
    return found


def flows_of(dst_path: str | os.PathLike[str], *, sizes: bool = True) -> list[FlowState]:
    """Every flow of dst: those under its default directory, then those noted elsewhere."""
    states: list[FlowState] = []
    for place in _written_places(dst_path):
        states += read_flows(default_state_root(place), sizes=sizes)
        states += [read_flow(root, flow_id, sizes=sizes) for root, flow_id in noted(place)]
    return states


def _written_places(dst_path: str | os.PathLike[str]) -> list[str | os.PathLike[str]]:
    """The places flows into ``dst_path`` write: itself, or for the root of a precomputed
    volume on a disk each of its scales' folders (a flow writes one scale, and keeps its
    state under that scale's name, ``_layout.default_root``: the root's own default
    directory holds scales, not flows)."""
    text = split_format(os.fspath(dst_path))[1]
    if is_object_url(text):
        return [dst_path]
    keys = precomputed_scale_keys(Path(text))
    return [Path(text) / key for key in keys] if keys else [dst_path]


def flows_for(
    dst: str | os.PathLike[str] | None, intermediates: StateRoot | None, *, sizes: bool = True
) -> list[FlowState]:
    """The flows a command about ``dst`` and/or ``intermediates`` shows: dst's
    (``flows_of``), then those under ``intermediates`` not seen already."""
    states = flows_of(dst, sizes=sizes) if dst else []
    if intermediates is not None:
        seen = {s.flow_dir for s in states}
        states += [s for s in read_flows(intermediates, sizes=sizes) if s.flow_dir not in seen]
    return states
