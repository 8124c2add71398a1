"""A flow's job unpickled in a process is shared by the tasks of its run there."""

from __future__ import annotations

from dataclasses import dataclass

from chunkgraph.flow.run._shared_job import KEPT_RUNS, pickle_fields, shared_job


@dataclass
class Job:
    name: str


def test_a_run_token_gives_one_job_per_process_and_runs_stay_apart() -> None:
    fields = pickle_fields(("a",))
    first = shared_job(Job, "run-1", fields)
    assert shared_job(Job, "run-1", fields) is first
    assert shared_job(Job, "run-2", fields) is not first
    assert shared_job(Job, "", fields) is not shared_job(Job, "", fields)  # no token: no sharing
    for k in range(KEPT_RUNS):
        shared_job(Job, f"later-{k}", fields)
    again = shared_job(Job, "run-1", fields)  # pushed out by later runs: unpickled anew
    assert again is not first and again == first
