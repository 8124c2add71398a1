"""Done markers of the tasks that run in the driver's process, written in bulk.

Policy. A task run by the driver's own threads hands its key to the run's
``MarkerJournal`` after its data is written, instead of writing one marker of
its own. The journal writes the keys handed to it since its last write as one
new record (``MarkerStore.mark_done_many``, named ``<run>-<n>``) at most once
per ``interval`` seconds (a timer thread), and the rest when the run ends,
however it ends. A marker per task cost a file creation on a disk (0.1-0.15 ms,
a fifth of a one-chunk task) and a PUT in a bucket; a record costs one write
per second of the run.

What it gives up. A process killed with SIGKILL loses the keys handed over
since the last write (at most ``interval`` seconds of finished tasks): those
tasks run again on resume and write the same voxels. Nothing is ever marked
before its data is written, so a marker still proves its data complete.

Tasks in other processes (the processes executor) find no journal of their
run there (``journal_of`` is None) and mark as before: their process can die
between two writes of a journal the driver cannot flush.

One growing record. A batch of a Dask flow (``flow/run/_batch_run``) keeps one
journal of its own with ``grow=True``: each write rewrites the batch's one
record with every key so far, starting with those an earlier try of the batch
recorded, so a batch run again reads one record to know what to skip.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Collection

from chunkgraph.flow.state._markers import MarkerStore

# Seconds between two records of a run: what a killed process may lose, and how
# stale `chunkgraph status` may be while the run goes on.
INTERVAL = 1.0


class MarkerJournal:
    """Keys of ``kind`` finished in this process, written as one record per ``interval``.

    >>> import tempfile
    >>> from chunkgraph.flow.state import TOP, StateRoot
    >>> markers = MarkerStore(StateRoot.of(tempfile.mkdtemp()))
    >>> journal = MarkerJournal(markers, TOP, "run1")
    >>> journal.add("0_0"); journal.add("0_1")
    >>> journal.close()
    >>> sorted(markers.done_keys(TOP))
    ['0_0', '0_1']
    """

    def __init__(
        self,
        markers: MarkerStore,
        kind: str,
        name: str,
        interval: float = INTERVAL,
        *,
        grow: bool = False,
        before: Collection[str] = (),
    ) -> None:
        """``grow``: every write rewrites one record named ``name`` with all the keys so
        far, ``before`` (an earlier try's) first; else each write is a new record
        ``<name>-<n>`` of the keys handed over since the last."""
        self.markers = markers
        self.kind = kind
        self.name = name
        self.interval = interval
        self.grow = grow
        self._kept: list[str] = list(before)  # grow: the keys the record already holds
        self._pending: list[str] = []
        self._numbers = itertools.count()
        self._lock = threading.Lock()  # guards _pending, _timer, _error
        self._write_lock = threading.Lock()  # one record written at a time
        self._timer: threading.Timer | None = None
        self._error: BaseException | None = None
        self._last = time.monotonic() - interval  # the first key is written at once
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called: no more keys are taken."""
        return self._closed

    def add(self, key: str) -> None:
        """Hand over ``key``, whose data is written; raises the error of an earlier
        write (such as ``FlowLockedError``: this run lost its lock)."""
        with self._lock:
            self._raise_error()
            if self._closed:
                raise AssertionError(f"journal {self.name} got {key!r} after it was closed")
            self._pending.append(key)
            wait = self._last + self.interval - time.monotonic()
            if self._timer is None:
                self._timer = threading.Timer(max(wait, 0.0), self._flush_from_timer)
                self._timer.daemon = True
                self._timer.start()

    def close(self, *, quiet: bool = False) -> None:
        """Write what is pending and stop; raise a write's error unless ``quiet`` (the
        run is failing already: its own error is the one to see)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        try:
            self._write()
            with self._lock:
                self._raise_error()
        except BaseException:
            if not quiet:
                raise

    def _flush_from_timer(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._write()
        except BaseException as err:  # raised in the next add() or close()
            with self._lock:
                self._error = self._error or err

    def _write(self) -> None:
        with self._write_lock:
            with self._lock:
                keys, self._pending = self._pending, []
                self._last = time.monotonic()
            if not keys:
                return
            if self.grow:  # one record, rewritten whole with every key so far
                self._kept.extend(keys)
                self.markers.mark_done_many(self.kind, self._kept, self.name)
            else:
                self.markers.mark_done_many(self.kind, keys, f"{self.name}-{next(self._numbers)}")

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error


# The journals of the runs whose tasks run in this process's threads, by (run, kind).
_JOURNALS: dict[tuple[str, str], MarkerJournal] = {}
_GUARD = threading.Lock()


def open_journal(markers: MarkerStore, kind: str, run: str) -> MarkerJournal:
    """Start the journal of run ``run``'s ``kind`` markers in this process."""
    journal = MarkerJournal(markers, kind, run)
    with _GUARD:
        _JOURNALS[run, kind] = journal
    return journal


def journal_of(run: str, kind: str) -> MarkerJournal | None:
    """The journal of ``run``'s ``kind`` markers in this process, if it has one."""
    return _JOURNALS.get((run, kind))


def close_journal(run: str, kind: str, *, quiet: bool = False) -> None:
    """Write the rest of ``run``'s ``kind`` journal and forget it (see ``close``)."""
    with _GUARD:
        journal = _JOURNALS.pop((run, kind), None)
    if journal is not None:
        journal.close(quiet=quiet)
