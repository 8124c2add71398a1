"""executor="adaptive": the thread backend whose workers are activated from CPU and I/O signals.

The ramp tests inject the signal readings (a sampler whose every window is
accepted), so the sequence of active workers is exact; the tasks sleep, so
each check finds work still waiting.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph import ConfigError
from chunkgraph.execute import Event, EventKind, LocalExecutor, _adaptive
from chunkgraph.parallel._signals import Reading
from chunkgraph.report import Recorder, summarize, write_report


@pytest.fixture(autouse=True)
def _check_at_every_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check at every driver poll (0.1 s) instead of every 0.25 s: short runs see the ramp."""
    monkeypatch.setattr(_adaptive, "CHECK_INTERVAL_S", 0.0)


class ScriptedSampler:
    """Storage bytes/s ``io(n)`` for the n-th check (1-based), no busy cores, no
    window guard. (I/O, since busy cores cannot rise past this machine's cores.)"""

    def __init__(self, io: object) -> None:
        self.io = io
        self.checks = 0

    def start(self) -> float:
        return 0.0

    def sample(self) -> Reading:
        self.checks += 1
        return Reading(float(self.checks), 0.0, self.io(self.checks))  # type: ignore[operator]


def _sleepy_graph(n: int, seconds: float) -> tuple[cg.Graph, list[int]]:
    g = cg.Graph()
    refs = [g.add(time.sleep, seconds, name=f"nap-{i}") for i in range(n)]
    return g, [r.id for r in refs]


def _activated(events: list[Event]) -> list[int]:
    return [e.total for e in events if e.kind is EventKind.ACTIVATED]


def test_results_equal_the_thread_executor_on_a_random_dag() -> None:
    rng = np.random.default_rng(7)
    g = cg.Graph()
    refs = [g.add(int, int(v)) for v in rng.integers(0, 100, 20)]
    for _ in range(300):
        picks = rng.choice(len(refs), size=3, replace=False)
        refs.append(g.add(sum, [refs[int(p)] for p in picks]))
    targets = [r.id for r in refs[-50:]]
    expected = LocalExecutor("threads").run(g, targets)
    assert LocalExecutor("adaptive").run(g, targets) == expected
    assert cg.run(g, refs[-1], executor="adaptive") == expected[refs[-1].id]


def test_growing_signals_ramp_by_an_eighth_of_the_cap_up_to_it() -> None:
    g, targets = _sleepy_graph(600, 0.02)
    events: list[Event] = []
    sampler = ScriptedSampler(lambda n: 2.0**n)  # throughput doubling: grow
    LocalExecutor("adaptive", workers=16, sampler=sampler).run(
        g, targets, subscribers=[events.append]
    )
    ramp = _activated(events)
    # A quarter of 16 at the start, then + 16 // 8 per check, never past 16.
    assert ramp[:7] == [4, 6, 8, 10, 12, 14, 16]
    assert set(ramp[7:]) <= {16}
    # The workers were really started: tasks ran on more than the initial four.
    assert len({e.worker for e in events if e.kind is EventKind.STARTED}) > 4


def test_flat_signals_never_grow_past_the_start() -> None:
    g, targets = _sleepy_graph(100, 0.02)
    events: list[Event] = []
    sampler = ScriptedSampler(lambda n: 4.0)  # flat after the first rate: stop
    LocalExecutor("adaptive", workers=16, sampler=sampler).run(
        g, targets, subscribers=[events.append]
    )
    ramp = _activated(events)
    assert ramp[0] == 4
    assert sampler.checks >= 2
    # The first non-zero rate is one step; the readings then stay flat: nothing more.
    assert ramp[1:] and set(ramp[1:]) == {6}
    assert len({e.worker for e in events if e.kind is EventKind.STARTED}) <= 6


def test_growth_is_capped_by_the_tasks_waiting() -> None:
    # A chain: at most one task is ready at a time, so a check adds at most one worker.
    g = cg.Graph()
    ref = g.add(time.sleep, 0.02)
    for _ in range(20):
        ref = g.add(lambda _previous: time.sleep(0.02), ref)
    events: list[Event] = []
    LocalExecutor("adaptive", workers=16, sampler=ScriptedSampler(lambda n: 2.0**n)).run(
        g, [ref.id], subscribers=[events.append]
    )
    ramp = _activated(events)
    assert all(b - a <= 1 for a, b in itertools.pairwise(ramp))


def test_every_failure_is_reported_and_the_pool_is_reusable() -> None:
    def boom(i: int) -> int:
        if i % 7 == 3:
            raise ValueError(f"bad {i}")
        return i

    g = cg.Graph()
    refs = [g.add(boom, i, name=f"boom-{i}") for i in range(10)]
    with pytest.raises(ExceptionGroup) as caught:
        LocalExecutor("adaptive", workers=4).run(g, [r.id for r in refs])
    assert all(isinstance(e, cg.TaskError) for e in caught.value.exceptions)
    assert "boom-3" in {e.task for e in caught.value.exceptions}
    # The shared thread pool is given back: a thread run afterwards still works.
    h = cg.Graph()
    assert cg.run(h, h.add(sum, [1, 2]), executor="threads") == 3


def test_a_sampler_is_refused_where_nothing_reads_it() -> None:
    with pytest.raises(ConfigError, match="sampler is read only by executor='adaptive'"):
        LocalExecutor("threads", sampler=ScriptedSampler(lambda n: 0.0))


def test_run_reports_record_and_summarize_the_ramp(tmp_path) -> None:
    g, targets = _sleepy_graph(400, 0.02)
    recorder = Recorder()
    LocalExecutor("adaptive", workers=8, sampler=ScriptedSampler(lambda n: 2.0**n)).run(
        g, targets, subscribers=[recorder]
    )
    write_report(tmp_path, recorder)
    document = json.loads((tmp_path / "report.json").read_text())
    ramp = [sum(step["active"]) for step in document["activation"]]
    assert ramp[:4] == [2, 3, 4, 5]
    assert document["activation"][1]["io_grows"] is True
    text = summarize(tmp_path)
    assert "adaptive: 2 workers active at the start, 8 at the end" in text
    assert (tmp_path / "utilisation.png").stat().st_size > 0


def test_declared_cpu_resources_count_cores_not_the_extra_threads() -> None:
    """workers=8 adaptive threads stand for 2 cores: tasks asking for 2 CPUs run one at a time."""
    lock = threading.Lock()
    running = peak = 0

    def heavy(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.03)
        with lock:
            running -= 1
        return i

    g = cg.Graph()
    parts = [g.add(heavy, i, resources={"cpu": 2}) for i in range(12)]
    total = g.add(sum, parts)
    executor = LocalExecutor("adaptive", workers=8, sampler=ScriptedSampler(lambda n: 2.0**n))
    assert cg.run(g, total, executor=executor) == sum(range(12))
    assert peak == 1
