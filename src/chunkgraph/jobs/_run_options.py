"""The run options of a job: ``apply``'s ``RunOptions``, less what a job decides itself.

Policy. A job takes its run options as ``apply`` does, as keywords or as one
``run=RunOptions(...)`` (``RunOptions.of``'s rule when both are given), and passes
the value on to each flow it runs. What a job decides itself is not an option: its
function is fixed and tested, so it is never probed (a probe would read a bottom
chunk twice); each flow's state goes beside what it writes; the function runs on the
CPU. A ``run`` that sets either of the last two is refused, not ignored. Before it
makes anything, a job plans itself over stand-ins in memory (``planning``): a dry
run with the same workers, retries and memory budget. A stand-in exists only in this
process, so a dry run over stand-ins (the plan first, or ``dry_run=True``) runs on this
process's threads where the job runs in other processes (``processes``, a Dask
scheduler): the plan depends on how many workers run, not where.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chunkgraph.execute import is_scheduler_address
from chunkgraph.flow import RunOptions

# What a job does not take, and why (``RunOptions.refuse_unused``).
UNUSED = {
    "intermediates": "each flow's state goes beside the volume it writes",
    "device": "its function runs on the CPU",
}


def job_options(job: str, run: RunOptions | None, **keywords: Any) -> RunOptions:
    """The run options of one call of ``job``: ``run`` and the keywords as ``apply``
    takes them, checked; never probed."""
    options = RunOptions.of(run=run, **keywords)
    options.refuse_unused(job, UNUSED)
    executor = _here(options) if options.dry_run else options.executor
    return dataclasses.replace(options, probe=False, executor=executor)


def planning(options: RunOptions) -> RunOptions:
    """The options of a job's plan over stand-ins: a dry run with the same workers and
    retries (refused there beside an Executor), in this process (``_here``), within the
    same memory budget, nothing shown or resumed."""
    return RunOptions(
        executor=_here(options),
        workers=options.workers,
        retries=options.retries,
        timeout=options.timeout,
        memory_limit=options.memory_limit,
        dry_run=True,
        probe=False,
    )


def _here(options: RunOptions) -> Any:
    """The executor of a dry run over stand-ins in memory: threads where ``options`` run
    tasks in other processes, else its own. An Executor given with settings beside it
    stays, for the flow to refuse."""
    executor = options.executor
    if isinstance(executor, str):
        elsewhere = executor == "processes" or is_scheduler_address(executor)
    else:
        beside = (options.workers, options.retries, options.timeout)
        elsewhere = getattr(executor, "in_process", True) is False and beside == (None,) * 3
    return "threads" if elsewhere else executor
