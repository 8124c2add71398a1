"""The sync backend: every task in the calling thread, one at a time, in priority order.

The reference behaviour, for debugging and deterministic tests: no thread, no
process, so a breakpoint or a traceback lands in the task itself. A task's
KeyboardInterrupt propagates from where it was raised. Nothing can stop a
running task here, so ``LocalExecutor`` refuses a time limit with it.
"""

from __future__ import annotations

from chunkgraph.execute._driver import Driver


class SyncBackend:
    """Runs one ready task per turn of the driver's loop, inside ``start()``."""

    tasks_in_caller = True

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

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
        try:
            fn, args, kwargs = driver.call_of(t)
            value = fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # SystemExit too: a failed try, not the end of the program
            driver.report([], [(t, error)])
        else:
            driver.report([(t, value)])

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
        pass
