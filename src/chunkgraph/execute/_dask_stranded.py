"""Units stranded on the Dask scheduler by a worker that died, and the watch that frees them.

``DaskExecutor`` pins each unit to its planned worker *loosely*
(``workers=[w], allow_other_workers=True``): Dask should run it elsewhere when
``w`` is gone. It does, while some worker is up when ``w`` dies. But when no
worker is running at that moment (all died at once, or the only one that held
the unit's inputs), the unit goes to ``no-worker``, and the scheduler moves a
``no-worker`` task on only when a worker joins that its restrictions name
(``bulk_schedule_unrunnable_after_adding_worker`` reads the worker
restrictions as hard ones). Restarted workers come back on new addresses, so
the unit would wait forever, and the run with it.

``watch_stranded`` runs, while a run waits, a thread that every
``CHECK_INTERVAL_S`` asks the scheduler to place this run's ``no-worker``
units whose pinned workers are all gone while other workers run: the
scheduler's own placement (``processing``) honours the loose restriction and
picks a running worker. A unit that keeps killing its worker then fails as
Dask means it to (``KilledWorker`` after ``allowed-failures`` deaths), instead
of hanging. Resource restrictions are left alone: a unit asking for a GPU still
waits for a worker offering one (``_check_resources`` refused a cluster with none).

The function sent to the scheduler is a closure, which cloudpickle sends by
value: the scheduler need not have chunkgraph installed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

# Seconds between looks at the scheduler while a run waits: one small RPC each.
CHECK_INTERVAL_S = 1.0


def _place_stranded_on(mark: str) -> Any:
    """The scheduler-side function: place this run's stranded units (their keys hold
    ``mark``); returns their keys."""

    def place(dask_scheduler: Any) -> list[str]:
        import time

        running = {ws.address for ws in dask_scheduler.running}
        if not running:
            return []  # nowhere to go yet: next time
        stranded = [
            ts.key
            for ts in list(dask_scheduler.unrunnable)
            if isinstance(ts.key, str)
            and mark in ts.key
            and ts.loose_restrictions
            and ts.worker_restrictions
            and not (set(ts.worker_restrictions) & running)
        ]
        if stranded:
            dask_scheduler.transitions(
                dict.fromkeys(stranded, "processing"),
                stimulus_id=f"chunkgraph-place-stranded-{time.time()}",
            )
        return stranded

    return place


@contextlib.contextmanager
def watch_stranded(client: Any, mark: str) -> Iterator[list[str]]:
    """While the block runs, place this run's stranded units every ``CHECK_INTERVAL_S``;
    yields the list of the keys placed so far (for tests and logs)."""
    placed: list[str] = []
    stop = threading.Event()
    place = _place_stranded_on(mark)

    def loop() -> None:
        while not stop.wait(CHECK_INTERVAL_S):
            try:
                placed.extend(client.run_on_scheduler(place))
            except Exception:  # the scheduler is gone or busy: the run's wait reports that
                continue

    thread = threading.Thread(target=loop, name="chunkgraph-dask-stranded", daemon=True)
    thread.start()
    try:
        yield placed
    finally:
        stop.set()
        thread.join(2 * CHECK_INTERVAL_S)  # a call stuck on a lost scheduler: left behind
