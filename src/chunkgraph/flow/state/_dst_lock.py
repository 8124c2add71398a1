"""One flow at a time on each region of a destination: the destination's claims.

Policy. A flow's own lock (``_lock.flow_lock``, a lease in an object store)
is per flow id: it keeps one flow from running twice, but two *different* flows
(another ``sigma``, another ``fn``) into one dst would each write their chunks
and both end "successfully" with a mix of the two results. So a run also
*claims* the region of dst it writes (its bbox) for as long as it runs, in dst
itself, whatever its ``intermediates``::

    <dst>/.chunkgraph-writers.lock            the guard: held a moment while a run reads the
                                              claims and adds its own (flock, or a lease)
    <dst>/.chunkgraph-writers/<token>.lock    a claim, held for the whole run (flock, or a
                                              lease renewed every ttl/3): its record names
                                              the flow, its fn, its region and its holder

Claiming, under the guard: a claim whose holder is gone is removed (its ``flock``
is free; its lease expired, or its holder is dead on this host,
``_holder.dead_here``); a live claim whose region overlaps this flow's is a
conflict: ``FlowLockedError`` naming that flow, or with ``lock_wait`` a look again
every ``_POLL_SECONDS`` until the deadline. Without a conflict the run's own
claim is held before the guard is let go, so the next run to look sees it.

Regions, not whole destinations: flows over *disjoint* regions of one dst run at
once, as they always could (each writes the chunks inside its bbox once, whole;
the partial chunks an unaligned edge shares are merged under ``_edge_locks`` or
by conditional writes). Two regions that share a voxel never run at once.

Releasing: the claim goes (unlinked while held / deleted), and on a disk the
claims' folder too when empty (under the guard), so a finished run leaves
nothing in dst. A killed run leaves its claim file or object, which is taken for
what it is by the next run (above). A memory dst lives in one process and is not
claimed.

Readers. A flow reading a volume that another flow is writing would read half-written
chunks and end "successfully" (a downsample of a run's output while it runs: zeros).
So a flow also looks at the claims of each volume it reads, over the box it reads
there (its bbox padded by the pads, at that input's resolution): a live claim that
overlaps it refuses the flow naming the writer (``FlowLockedError`` with ``reads``:
the input's name), or with ``lock_wait`` it looks again until the deadline
(``refuse_if_written``). One listing per input, after the flow's own lock and claim
are held: of two flows each reading what the other writes, the later to look sees
the other's claim. A reader leaves no claim (inputs may be read-only), so a writer
that starts after a reader began is not refused; an input that is dst itself (in
place) is this flow's own to read.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from chunkgraph._errors import FlowLockedError, StoreError
from chunkgraph.flow.state._holder import describe
from chunkgraph.flow.state._lease import CLOCK_SLACK, lapse_note, lease_ttl
from chunkgraph.flow.state._lock import hold, holder
from chunkgraph.flow.state._store import DirStore, StateStore, join, volume_store
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

GUARD = ".chunkgraph-writers.lock"
CLAIMS = ".chunkgraph-writers"
# How often a run waiting for an overlapping flow looks again: a handful of small
# requests on an object store, so not much more often than a flow could end.
_POLL_SECONDS = 0.25
# Beyond the ttl of a lease, how long a run waits for the guard: it is held for a
# moment, and a guard whose holder died lapses within the ttl (at once on this host).
_GUARD_EXTRA_SECONDS = 5.0


def region_text(start: Any, stop: Any) -> str:
    """``[0:32, 0:48]``.

    >>> region_text((0, 8), (32, 48))
    '[0:32, 8:48]'
    """
    return "[" + ", ".join(f"{a}:{b}" for a, b in zip(start, stop, strict=False)) + "]"


def _region_of(record: dict[str, Any], ndim: int) -> Box | None:
    """The region a claim names; None when its record does not say (counts as all of dst)."""
    region = record.get("region")
    try:
        start, stop = region  # type: ignore[misc]
        box = Box(tuple(int(x) for x in start), tuple(int(x) for x in stop))
    except (TypeError, ValueError):
        return None
    return box if box.ndim == ndim else None


def _overlaps(record: dict[str, Any], region: Box) -> bool:
    theirs = _region_of(record, region.ndim)
    return theirs is None or not theirs.intersection(region).is_empty


@contextlib.contextmanager
def claimed(dst: Volume, region: Box, about: dict[str, Any], wait: float) -> Iterator[None]:
    """Hold a claim on ``region`` of ``dst`` for the body (see the module docstring).

    Args:
        dst: The destination; a memory volume is not claimed.
        region: The box of dst the flow writes (its bbox), in dst's voxels.
        about: What the claim's record says of the flow (``flow``: its id, ``fn``: its
            function's name).
        wait: Seconds to wait for an overlapping flow to end (0: refuse at once,
            ``math.inf``: wait for as long as it runs).

    Raises:
        FlowLockedError: When a live claim of another flow overlaps ``region`` past
            ``wait``.
    """
    store = volume_store(dst)  # claims: in dst's folder or prefix
    if store is None:
        yield
        return
    made = isinstance(store, DirStore) and not store.root.exists()
    record = {**about, "region": [list(region.start), list(region.stop)], "dst": str(dst.path)}
    deadline = time.monotonic() + wait
    try:
        with contextlib.ExitStack() as holding:
            while not _try_claim(
                store, dst, region, record, wait, holding, last=time.monotonic() >= deadline
            ):
                time.sleep(_POLL_SECONDS)
            yield
    finally:
        _tidy(store)
        if made and isinstance(store, DirStore):
            with contextlib.suppress(OSError):
                store.root.rmdir()  # only when empty: a dst folder this claim made


def _try_claim(
    store: StateStore,
    dst: Volume,
    region: Box,
    record: dict[str, Any],
    wait: float,
    holding: contextlib.ExitStack,
    *,
    last: bool = False,
) -> bool:
    """Under the guard: sweep dead claims, then claim ``region`` unless a live claim
    overlaps it (True: claimed). ``last``: raise naming the holder instead of False."""
    guard_wait = lease_ttl() + CLOCK_SLACK + _GUARD_EXTRA_SECONDS
    with hold(store, GUARD, guard_wait, busy=_guard_busy(store, dst)) as guard:
        conflict = _live_overlap(store, region)
        if conflict is None:
            key = join(CLAIMS, f"{uuid.uuid4().hex}.lock")
            holding.enter_context(hold(store, key, 0.0, about=record))
            guard.check()  # a guard lease held past its ttl: another run may have looked
            return True
    if not last:
        return False
    owner, lapses_in = conflict
    raise _busy(dst, region, owner, wait, lapses_in)


def _live_overlap(store: StateStore, region: Box) -> tuple[dict[str, Any], float | None] | None:
    """The record of a live claim overlapping ``region`` (and when its lease lapses), after
    removing the claims whose holders are gone; None when there is none."""
    found = None
    for name in store.names(CLAIMS):
        if name.startswith(".") or not name.endswith(".lock"):
            continue
        key = join(CLAIMS, name)
        held, owner = holder(store, key)
        if not held:
            store.delete(key)  # its holder is gone (a run killed while holding it)
            continue
        if found is None and _overlaps(owner or {}, region):
            lapses = (owner or {}).get("lapses_in")  # a lease's (_lock.holder)
            found = (owner or {}, float(lapses) if isinstance(lapses, int | float) else None)
    return found


def refuse_if_written(reads: Mapping[str, tuple[Volume, Box]], wait: float) -> None:
    """Refuse a flow whose inputs another flow is writing (see the module docstring).

    A live claim of another flow that overlaps the box this flow reads of an input is a
    conflict.

    Args:
        reads: ``{input name: (volume, box)}``: the box this flow reads of each input,
            in that input's voxels.
        wait: Seconds to look again until no claim overlaps (0: refuse at once).

    Raises:
        FlowLockedError: Naming the writer and the input.
    """
    deadline = time.monotonic() + wait
    for name, (vol, box) in reads.items():
        store = volume_store(vol)
        if store is None or box.is_empty:
            continue
        while (conflict := _live_writer(store, box)) is not None:
            if time.monotonic() >= deadline:
                owner, lapses_in = conflict
                raise _being_written(vol, name, box, owner, wait, lapses_in)
            time.sleep(_POLL_SECONDS)


def _live_writer(store: StateStore, box: Box) -> tuple[dict[str, Any], float | None] | None:
    """The record of a live claim overlapping ``box`` (and when its lease lapses); read
    only: a dead claim is the next writer's to remove (under the guard)."""
    try:
        names = store.names(CLAIMS)
    except StoreError as err:
        if err.code == "AccessDenied":
            return None  # a volume this flow may read but not list: no claim can be seen
        raise
    for name in names:
        if name.startswith(".") or not name.endswith(".lock"):
            continue
        held, owner = holder(store, join(CLAIMS, name))
        if held and _overlaps(owner or {}, box):
            lapses = (owner or {}).get("lapses_in")
            return owner or {}, float(lapses) if isinstance(lapses, int | float) else None
    return None


def _being_written(
    vol: Volume, name: str, box: Box, owner: dict[str, Any], wait: float, lapses_in: float | None
) -> FlowLockedError:
    who, where, waited, lapse = _writer(owner, box.ndim, wait, lapses_in)
    return FlowLockedError(
        f"the input {name!r} ({vol.path}) is being written by another flow{waited}: {who} "
        f"writes {where}, which overlaps the region this flow reads "
        f"{region_text(box.start, box.stop)}. Reading it meanwhile would read half-written "
        "chunks, so this flow did nothing: wait for that flow to finish, pass "
        "lock_wait=<seconds> (`--lock-wait SECONDS` on the command line) to wait for it, "
        f"or stop that process.{lapse}",
        lock=f"{vol.path}/{CLAIMS}",
        holder=who,
        destination=str(vol.path),
        lapses_in=lapses_in,
        reads=name,
    )


def _tidy(store: StateStore) -> None:
    """On a disk, the claims' folder goes when no claim is left in it (under the guard, so
    that no run is adding one meanwhile); an object store has no folders."""
    if not isinstance(store, DirStore):
        return
    with (
        contextlib.suppress(FlowLockedError, OSError),
        hold(store, GUARD, 1.0),
    ):
        store.path(CLAIMS).rmdir()  # OSError when not empty: a claim of another run


def _busy(
    dst: Volume, region: Box, owner: dict[str, Any], wait: float, lapses_in: float | None
) -> FlowLockedError:
    who, where, waited, lapse = _writer(owner, region.ndim, wait, lapses_in)
    return FlowLockedError(
        f"the destination {dst.path} is being written by another flow{waited}: {who} "
        f"writes {where}, which overlaps this flow's region "
        f"{region_text(region.start, region.stop)}. Two flows writing one region would mix "
        "their results, so this flow did nothing: wait for that flow to finish, pass "
        "lock_wait=<seconds> (`--lock-wait SECONDS` with `chunkgraph run`) to wait for it, "
        f"or stop that process.{lapse}",
        lock=f"{dst.path}/{CLAIMS}",
        holder=who,
        destination=str(dst.path),
        lapses_in=lapses_in,
    )


def _writer(
    owner: dict[str, Any], ndim: int, wait: float, lapses_in: float | None
) -> tuple[str, str, str, str]:
    """What a refusal says of the flow writing: who, the region it claims, how long this
    one waited (or ""), and when its lease lapses (or "")."""
    fn = f" (fn {owner['fn']})" if owner.get("fn") else ""
    theirs = _region_of(owner, ndim)
    where = region_text(theirs.start, theirs.stop) if theirs is not None else "all of it"
    waited = f" after waiting {wait:g} s" if wait > 0 and math.isfinite(wait) else ""
    lapse = f" {lapse_note(lapses_in)}." if lapses_in is not None else ""
    return f"flow {owner.get('flow', '?')}{fn} in {describe(owner)}", where, waited, lapse


def _guard_busy(store: StateStore, dst: Volume) -> Any:
    def busy(owner: dict[str, Any], wait: float, lapses_in: float | None) -> FlowLockedError:
        who = describe(owner) if owner else "another run"
        return FlowLockedError(
            f"the register of flows writing {dst.path} ({store.where(GUARD)}) stayed held "
            f"for {wait:.0f} s by {who}, where a run holds it for a moment: is that process "
            "stuck? Stop it, or delete that lock if its host is gone, and run again",
            lock=store.where(GUARD),
            holder=who,
            destination=str(dst.path),
            lapses_in=lapses_in,
        )

    return busy
