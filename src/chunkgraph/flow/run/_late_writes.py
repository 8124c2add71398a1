"""No writes from a task whose run has already ended.

A thread cannot be killed: when a flow task overruns its ``timeout`` (or the
run is interrupted), the thread executor abandons it and the run goes on or
returns, while the abandoned call may still be running. If it woke up later
and wrote, it would write into temporaries that were deleted (recreating
them) or into a dst that another flow owns by then. So every write of a flow
task first checks that its run is still going, by the run's token; the
driver ends the token when the run returns, however it returns. (A process
worker that overruns is killed instead, so its process never sees its run
end: the check only matters in the driver's own process, where threads run.)
"""

from __future__ import annotations

import threading

from chunkgraph._errors import RunEndedError

_ENDED: set[str] = set()
_GUARD = threading.Lock()


def end_run(token: str) -> None:
    """Refuse every later write of the tasks of run ``token`` in this process."""
    with _GUARD:
        _ENDED.add(token)


def check_run_live(token: str) -> None:
    """Raise ``RunEndedError`` if run ``token`` has ended (call before each write)."""
    if token and token in _ENDED:
        raise RunEndedError(
            f"a task of flow run {token} woke up after its run had ended (timed out or "
            "interrupted); its late write was dropped"
        )
