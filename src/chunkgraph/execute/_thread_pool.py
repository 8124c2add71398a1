"""The persistent thread pool the thread backend runs on, lent to one run at a time.

The pool threads persist between runs, so a run pays no thread start-up. There
is one persistent pool, lent to one run at a time (``acquire_pool``): a run that
finds it lent out (a ``run()`` inside a task, from whichever thread, or runs
started concurrently from several threads) gets a private pool for its duration,
since waiting for the lent pool's threads could deadlock. Asking for another size
replaces the idle pool, so threads never accumulate per ``workers`` value.

A thread cannot be killed, so one stuck in a job (a task past its time limit,
or still running when a Ctrl-C's grace ends) is *replaced*: a fresh thread
takes its place in the pool, and the stuck one, a daemon that never delays the
interpreter's exit, exits as soon as its job returns.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable


class ThreadPool:
    """Daemon threads that run submitted callables; they live until ``shutdown()``.

    A thread stuck in a job can be ``replace``d: a fresh thread takes its place,
    and the stuck one exits as soon as its job returns.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._names = itertools.count()
        self._threads: list[threading.Thread] = []
        for _ in range(workers):
            self._start_thread()

    def _start_thread(self) -> None:
        name = f"chunkgraph-worker-{next(self._names)}"
        thread = threading.Thread(target=self._loop, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # the finished run (and its results) must not outlive it here
            with self._lock:
                if me not in self._threads:
                    return  # replaced while in that job: the fresh thread serves instead

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def replace(self, thread: threading.Thread) -> None:
        """Count ``thread`` (stuck in a job) out of the pool and start another in its place."""
        with self._lock:
            if thread not in self._threads:
                return
            self._threads.remove(thread)
        self._start_thread()

    def shutdown(self) -> None:
        """End the pool's threads once their jobs are done (abandoned ones end by themselves)."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()


_shared: ThreadPool | None = None  # the persistent pool; guarded by _shared_lock
_shared_lent = False  # True while one run uses it
_shared_lock = threading.Lock()


def acquire_pool(workers: int) -> tuple[ThreadPool, bool]:
    """``(pool, shared)``: the persistent pool when it is free, else a private one.

    Release with ``release_pool``. Contract: a shared pool is used by one run at a time.
    """
    global _shared, _shared_lent
    retired = None
    with _shared_lock:
        if _shared_lent:
            return ThreadPool(workers), False
        if _shared is not None and _shared.workers != workers:
            retired, _shared = _shared, None
        if _shared is None:
            _shared = ThreadPool(workers)
        _shared_lent = True
        pool = _shared
    if retired is not None:
        retired.shutdown()  # idle: its threads exit at once
    return pool, True


def release_pool(pool: ThreadPool, shared: bool) -> None:
    """Give back a pool from ``acquire_pool`` (a private one is shut down)."""
    global _shared_lent
    if not shared:
        pool.shutdown()
        return
    with _shared_lock:
        _shared_lent = False
