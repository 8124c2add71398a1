"""Stream order: GPU work is asynchronous, so a result is read from another stream
only after its producer's event was waited for, and an upload lives until the
call that reads it is done.

``FakeBackend`` models stream order without a GPU: every array remembers the
stream (one per thread and device) and the point on it where it was made, its
events are never done until waited for, and reading an array from another
stream too early raises ``FakeStreamOrderError``. The tests that remove a wait
show that the model catches the race the wait prevents.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph.gpu import FakeBackend
from chunkgraph.gpu._backend import FakeStreamOrderError
from chunkgraph.gpu._residency import Residency

GPU = {"gpu": 1}


def _gpu_then_cpu() -> cg.Graph:
    g = cg.Graph()
    made = g.add(lambda x: x * 2, np.arange(4.0), resources=GPU, name="made")
    g.add(lambda x: float(np.asarray(x).sum()), made, name="read")
    return g


@pytest.mark.parametrize("kind", ["threads", "sync"])
def test_a_cpu_task_reads_a_gpu_result_after_waiting_for_its_event(
    fake: FakeBackend, kind: Any
) -> None:
    assert cg.run(_gpu_then_cpu(), "read", executor=kind) == 12.0
    assert fake.waits >= 1


def test_without_the_wait_the_fake_catches_the_early_read(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Residency, "_wait_inputs", lambda self, t, device: None)
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(_gpu_then_cpu(), "read", executor="threads", retries=0)
    assert "FakeStreamOrderError" in str(caught.value.exceptions[0])


def test_a_chain_on_one_gpu_waits_only_once_at_the_end(fake: FakeBackend) -> None:
    """Its worker's stream orders its own results: no host wait between the steps, and
    the run waits for each call's event once before handing results back."""
    g = cg.Graph()
    x = g.add(lambda a: a + 1, np.zeros(3), resources=GPU)
    for _ in range(4):
        x = g.add(lambda a: a * 2, x, resources=GPU)
    assert cg.run(g, x).tolist() == [16.0] * 3
    assert fake.waits == 5  # finish(): the five calls' events, nothing before


def test_the_caller_gets_results_only_after_the_run_waited_for_them(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = cg.Graph()
    g.add(lambda a: a + 1, np.zeros(3), resources=GPU, name="out")
    assert cg.run(g, "out", executor="threads").tolist() == [1.0] * 3

    monkeypatch.setattr(FakeBackend, "synchronize", lambda self, event: None)
    with pytest.raises(FakeStreamOrderError):
        cg.run(g, "out", executor="threads")


def test_uploads_are_parked_until_their_calls_event_is_done(fake: FakeBackend) -> None:
    results: list[Any] = [None, None]
    indptr, indices = np.array([0, 0, 0]), np.array([], np.int64)
    res = Residency(fake, [-1, 0], [math.inf, math.inf], results, None, (indptr, indices))

    def resolve(t: int, _: list[Any]) -> Any:
        return (lambda a: a + 1), (np.ones(4),), {}

    with fake.using(0):
        fn, args, kwargs = res.resolver(1, resolve)(0, results)
        fn(*args, **kwargs)
        ((event, uploads),) = res.parked[0]
        assert uploads[0] is args[0]  # held while its kernel may still read it
        fake.synchronize(event)
        fn, args, kwargs = res.resolver(1, resolve)(1, results)
        fn(*args, **kwargs)
    assert [u[0] is args[0] for _, u in res.parked[0]] == [True]  # the done one was let go
    res.finish()
    assert res.parked == {} and res.ready == {}


@pytest.mark.parametrize("kind", ["threads", "sync"])
def test_a_spilled_result_is_waited_for_before_it_is_copied(fake: FakeBackend, kind: Any) -> None:
    """A spill runs in the thread that keeps a new result (sync: the caller's, unbound):
    it waits for the old result's event first."""
    g = cg.Graph()
    parts = [g.add(np.multiply, np.ones(100), i, resources=GPU) for i in range(6)]
    g.add(lambda *xs: sum(float(x.sum()) for x in xs), *parts, resources=GPU, name="total")
    contexts = [cg.Context("cpu", slots=2), cg.Context("gpu0", "gpu", memory=2000)]
    plan = cg.plan(g, contexts, fuse=False)
    assert cg.run(g, "total", plan=plan, executor=kind) == 100 * sum(range(6))
    assert fake.downloads >= 4  # the spills happened


def test_a_try_abandoned_past_its_time_limit_does_not_stand_for_its_retry(
    fake: FakeBackend,
) -> None:
    """The first try overruns and is abandoned; the retry's result is what consumers and
    the caller read, and only its event is waited for (the late try's would not order it).

    The first try returns once its retry has started; a chain of short waits (each well
    under the time limit) keeps the run going until then, so the late try returns while
    the run still runs, before the reader."""
    calls = [0]
    retried, late = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_first(a: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            retried.wait(60)  # abandoned at the time limit; returns after its retry started
            order.append("late try")
            late.set()
        else:
            retried.set()
        return a + 1

    def wait_for_late(*_: Any) -> None:
        late.wait(0.25)

    def reader(a: Any, _: Any) -> float:
        order.append("reader")
        return float(np.asarray(a).sum())

    g = cg.Graph()
    y = g.add(slow_first, np.ones(10), resources=GPU, name="gpu_task")
    w = g.add(wait_for_late, name="w0")
    for k in range(1, 40):  # up to 10 s
        w = g.add(wait_for_late, w, name=f"w{k}")
    z = g.add(reader, y, w, name="cpu_reader")  # after
    got = cg.run(g, [y, z], timeout=1.0, retries=1)
    assert got[0].tolist() == [2.0] * 10 and got[1] == 20.0 and calls[0] == 2
    assert order == ["late try", "reader"]


def test_a_task_asking_for_a_gpu_and_a_cpu_is_a_gpu_task(fake: FakeBackend) -> None:
    g = cg.Graph()
    x = g.add(np.ones, 4, name="x")
    ys = [
        g.add(
            lambda a: (type(a).__name__, fake.bound_device()),
            x,
            resources={"gpu": 1, "cpu": 1},
            name=f"y{i}",
        )
        for i in range(4)
    ]
    assert cg.run(g, ys) == [("FakeDeviceArray", 0)] * 4
    given = cg.plan(g, cg.local_contexts())
    assert {given.context_of(t).kind for t in ys} == {"gpu"}  # type: ignore[union-attr]
    assert cg.run(g, ys, plan=given) == [("FakeDeviceArray", 0)] * 4


def test_the_transfers_event_counts_the_callers_downloads(fake: FakeBackend) -> None:
    events: list[cg.Event] = []
    g = cg.Graph()
    y = g.add(lambda a: a * 2, np.ones(1000), resources=GPU, name="y")
    assert cg.run(g, y, subscribers=[events.append]).sum() == 2000.0
    (summary,) = [e.name for e in events if e.kind is cg.EventKind.TRANSFERS]
    assert summary.startswith("gpu: 1 upload(s), 1 download(s), 16,000 bytes moved")
    assert fake.downloads == 1
