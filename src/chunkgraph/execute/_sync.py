"""The sync backend: every task in the calling thread, one at a time, in priority order.

The reference behaviour, for debugging and deterministic tests: no thread, no
process, so a breakpoint or a traceback lands in the task itself. A task's
KeyboardInterrupt propagates from where it was raised. Nothing can stop a
running task here, so ``LocalExecutor`` refuses a time limit with it.

With GPU tasks (a ``Residency``), each call is bound to its context's device
for its duration and its arguments are moved as the thread backend moves them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chunkgraph.execute._driver import Driver
from chunkgraph.execute._threads import finish_residency

if TYPE_CHECKING:
    from chunkgraph.gpu._residency import Residency


class SyncBackend:
    """Runs one ready task per turn of the driver's loop, inside ``start()``."""

    tasks_in_caller = True

    def __init__(self, driver: Driver, residency: Residency | None = None) -> None:
        self.driver = driver
        self.residency = residency

    def open(self) -> None:
        pass

    def start(self) -> None:
        driver = self.driver
        heaps = driver.scheduler.heaps
        batch: list[int] = []
        # One thread serves every context: the plan's order across them.
        for context in sorted(
            (c for c in range(len(heaps)) if heaps[c]), key=lambda c: heaps[c][0]
        ):
            batch = driver.take(1, context)
            if batch:
                break
        if not batch:
            return
        t = batch[0]
        if driver.events is not None:
            driver.started(t)
        residency = self.residency
        try:
            if residency is None:
                fn, args, kwargs = driver.call_of(t)
                value = fn(*args, **kwargs)
            else:
                value = self._call_placed(t, residency)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # SystemExit too: a failed try, not the end of the program
            driver.report([], [(t, error)])
        else:
            if residency is None:
                driver.report([(t, value)])
                return
            device, nbytes = residency.device_bytes(value)
            driver.report([(t, value)])
            if device >= 0:
                residency.kept(t, device, nbytes)

    def _call_placed(self, t: int, residency: Residency) -> Any:
        """Call ``t`` bound to its context's device, its arguments where it runs."""
        driver = self.driver
        placement = driver.scheduler.placement
        assert placement is not None  # a run with GPU tasks follows its plan
        c = placement.context[t]
        with residency.bound(c):
            fn, args, kwargs = residency.resolver(c, driver.graph.resolve)(
                t, driver.scheduler.results
            )
            return fn(*args, **kwargs)

    def done(self) -> bool:
        return self.driver.scheduler.finished

    def drop_queued(self) -> None:
        pass  # nothing is queued: a task starts the moment it is taken

    def wait(self, seconds: float) -> None:
        pass  # the outcome of the task start() ran is already reported

    def collect(self) -> None:
        pass

    def abort(self) -> None:
        self.driver.scheduler.cancel()

    def close(self) -> None:
        if self.residency is not None:
            finish_residency(self.driver, self.residency)
