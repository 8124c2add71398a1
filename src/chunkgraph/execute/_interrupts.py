"""Ctrl-C during a run is never lost, even when some code swallows the KeyboardInterrupt.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be
when the signal is handled. Inside a finalizer (a ``weakref.finalize``
callback, a ``__del__``, a weakref callback) the exception cannot propagate:
Python prints "Exception ignored in ..." and carries on, and the run would
finish as if no one had pressed Ctrl-C. chunkgraph's own finalizers run no
Python code (see ``_shm``), but others' may, so a run also keeps a record:

    SIGINT ─> handler: seen = True, raise KeyboardInterrupt ─> propagates (usual)
                                                         └──> swallowed somewhere
    driver loop, every wake-up: check() ── seen? ─> raise KeyboardInterrupt
    end of the run:             seen and nothing raised?  ─> raise KeyboardInterrupt

The handler is installed only while a run is active, only from the main thread,
and only over Python's default handler (a program with a SIGINT handler of its
own keeps it untouched). A run nested in another (a task that calls ``run()``
in sync mode) shares the outer run's record.

``Deferred`` is the other half: a short section that acquires resources (starts
worker processes and the thread that owns them, lends a thread pool) must not
be cut in the middle, or what it acquired would have no owner to release it.
Inside it a SIGINT is only recorded; it is raised when the section ends, where
the caller's ``except`` can release everything.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType


class _Record:
    """SIGINTs seen while a guard was installed; ``seen`` is read by ``check()``."""

    def __init__(self) -> None:
        self.seen = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt


_active: _Record | None = None  # the installed record; set and cleared by the main thread


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived during this run (and was swallowed)."""
    if _active is not None and _active.seen:
        raise KeyboardInterrupt


class InterruptGuard:
    """``with InterruptGuard(): ...``: a SIGINT in the block ends it with KeyboardInterrupt."""

    def __init__(self) -> None:
        self._record: _Record | None = None
        self._previous: object = None

    def __enter__(self) -> InterruptGuard:
        global _active
        if (
            _active is None
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            record = _Record()
            self._previous = signal.signal(signal.SIGINT, record.handle)
            self._record = _active = record
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        record = self._record
        if record is None:
            return
        # Restore first: a SIGINT from now on is the default handler's, and one
        # that came before is in the record.
        signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
        _active = self._record = None
        if record.seen and (exc_type is None or not issubclass(exc_type, KeyboardInterrupt)):
            raise KeyboardInterrupt


class Deferred:
    """``with Deferred(): ...``: a SIGINT inside the block raises KeyboardInterrupt at its end.

    Only in the main thread and over the default handler or a run's guard; a
    Deferred inside another lets the outer one hold the signal.
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous: Callable[[int, FrameType | None], object] | None = None

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True

    def __enter__(self) -> Deferred:
        if threading.current_thread() is not threading.main_thread():
            return self
        current = signal.getsignal(signal.SIGINT)
        if current is signal.default_int_handler or (
            _active is not None and current == _active.handle
        ):
            signal.signal(signal.SIGINT, self._hold)
            self._previous = current
        return self

    def __exit__(self, *_: object) -> None:
        previous = self._previous
        if previous is None:
            return
        self._previous = None
        signal.signal(signal.SIGINT, previous)
        if self.seen:
            previous(signal.SIGINT, None)  # raises KeyboardInterrupt (a guard records it)
