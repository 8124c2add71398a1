"""GPU tasks in the local executor: one worker per GPU bound to its device, arrays
moved only where needed, device memory as a budget with spills, the no-GPU error.

These run on a ``FakeBackend``: no GPU runs here, so pretend devices stand for
CuPy (their arrays are a numpy subclass that knows its device, and every
crossing between host and device is counted). ``test_real_gpu.py`` runs a
graph on a real GPU where CuPy sees one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph.execute import Event, EventKind
from chunkgraph.gpu import FakeBackend, FakeDeviceArray, use_backend

GPU = {"gpu": 1}


class Seen:
    """Where each task ran: the device its thread was bound to (None: not bound) and
    whether its array input was a device array."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.lock = threading.Lock()
        self.where: dict[str, tuple[int | None, bool, int]] = {}

    def gpu(self, name: str, x: Any) -> Any:
        self._see(name, x)
        return x + 1  # stays on the device, as a CuPy operation would

    def cpu(self, name: str, *xs: Any) -> Any:
        for x in xs:
            self._see(name, x)
        return sum(np.asarray(x).sum() for x in xs)

    def _see(self, name: str, x: Any) -> None:
        on = x.fake_device if isinstance(x, FakeDeviceArray) else -1
        with self.lock:
            self.where[name] = (self.backend.bound_device(), isinstance(x, FakeDeviceArray), on)


@pytest.mark.parametrize("kind", ["threads", "adaptive", "sync"])
def test_gpu_tasks_run_bound_to_their_device_and_cpu_tasks_unbound(
    fake2: FakeBackend, kind: Any
) -> None:
    """
    a0 a1 a2 a3   (numpy inputs)
     |  |  |  |
    g0 g1 g2 g3   {"gpu": 1}
      \\ |  | /
        total     cpu
    """
    seen = Seen(fake2)
    g = cg.Graph()
    gpus = [g.add(seen.gpu, f"g{i}", np.full(4, i), resources=GPU, name=f"g{i}") for i in range(4)]
    g.add(seen.cpu, "total", *gpus, name="total")
    assert cg.run(g, "total", executor=kind) == sum(4 * (i + 1) for i in range(4))
    for i in range(4):
        bound, on_device, device = seen.where[f"g{i}"]
        assert bound in (0, 1) and on_device and device == bound
    assert seen.where["total"] == (None, False, -1)  # unbound, given host copies
    assert fake2.uploads == 4 and fake2.downloads == 4
    assert fake2.trims == 2  # every device's pool, once at the end of the run


def test_the_plan_puts_gpu_tasks_on_gpu_contexts_only(fake2: FakeBackend) -> None:
    g = cg.Graph()
    gpus = [g.add(np.add, np.ones(2), i, resources=GPU) for i in range(6)]
    cpus = [g.add(np.add, np.ones(2), i) for i in range(6)]
    g.add(sum, [*gpus, *cpus], name="total")
    plan = cg.plan(g)
    assert {plan.context_of(t).kind for t in gpus} == {"gpu"}  # type: ignore[union-attr]
    assert {plan.context_of(t).kind for t in cpus} == {"cpu"}  # type: ignore[union-attr]


def test_a_consumer_on_the_same_gpu_gets_the_same_device_array(fake2: FakeBackend) -> None:
    """first -> second -> third, all on gpu1 (costs name it)."""
    held: list[Any] = []
    made: list[Any] = []

    def step(x: Any) -> Any:
        held.append(x)
        made.append(x * 2)
        return made[-1]

    g = cg.Graph()
    first = g.add(step, np.arange(3), resources=GPU, cost=cg.Cost({"gpu1": 1.0}))
    second = g.add(step, first, resources=GPU, cost=cg.Cost({"gpu1": 1.0}))
    g.add(step, second, resources=GPU, cost=cg.Cost({"gpu1": 1.0}), name="third")
    got = cg.run(g, "third")
    assert type(got) is np.ndarray and got.tolist() == [0, 8, 16]
    assert [x.fake_device for x in held] == [1, 1, 1]
    assert held[1] is made[0] and held[2] is made[1]  # no copy between them
    assert fake2.uploads == 1 and fake2.downloads == 1  # in once, out once


def test_a_result_goes_to_another_gpu_through_the_host(fake2: FakeBackend) -> None:
    got: list[int] = []

    def on(x: Any) -> Any:
        got.append(x.fake_device)
        return x + 1

    g = cg.Graph()
    a = g.add(on, np.zeros(2), resources=GPU, cost=cg.Cost({"gpu0": 1.0}))
    g.add(on, a, resources=GPU, cost=cg.Cost({"gpu1": 1.0}), name="b")
    assert cg.run(g, "b").tolist() == [2.0, 2.0]
    assert got == [0, 1]
    assert fake2.uploads == 2 and fake2.downloads == 2


def test_inputs_one_level_inside_lists_tuples_and_dicts_move(fake2: FakeBackend) -> None:
    kinds: list[tuple[bool, bool, bool, bool]] = []

    def look(xs: list[Any], pair: tuple[Any, Any], named: dict[str, Any]) -> int:
        on = [isinstance(x, FakeDeviceArray) for x in (*xs, *pair, named["k"])]
        kinds.append((on[0], on[1], on[2], on[4]))
        return 1

    g = cg.Graph()
    a = g.add(np.ones, 2)
    g.add(look, [a, np.ones(2)], (np.ones(1), 3), {"k": a}, resources=GPU, name="look")
    assert cg.run(g, "look") == 1
    assert kinds == [(True, True, True, True)]


def test_device_results_over_the_budget_spill_to_host(fake2: FakeBackend) -> None:
    """p0..p5 each keep a 800-byte result on gpu0 for `total` (also on gpu0); the
    device keeps at most 2,000 bytes of results, so the oldest go to host."""
    events: list[Event] = []
    g = cg.Graph()
    parts = [
        g.add(np.multiply, np.ones(100), i, resources=GPU, cost=cg.Cost({"gpu0": 1.0}))
        for i in range(6)
    ]
    g.add(lambda *xs: sum(float(x.sum()) for x in xs), *parts, resources=GPU,
          cost=cg.Cost({"gpu0": 1.0}), name="total")  # fmt: skip
    contexts = [cg.Context("cpu", slots=2), cg.Context("gpu0", "gpu", memory=2000)]
    plan = cg.plan(g, contexts, fuse=False)
    got = cg.run(g, "total", plan=plan, subscribers=[events.append], executor="sync")
    assert got == 100 * sum(range(6))
    summary = [e for e in events if e.kind is EventKind.TRANSFERS]
    assert len(summary) == 1
    spills = int(summary[0].name.split(", ")[-1].split()[0])
    assert spills >= 4  # 6 * 800 bytes held against 2,000: at most two stay
    assert summary[0].total == fake2.bytes_moved
    assert fake2.downloads >= spills


def test_no_spill_while_the_results_fit(fake2: FakeBackend) -> None:
    events: list[Event] = []
    g = cg.Graph()
    parts = [g.add(np.multiply, np.ones(100), i, resources=GPU) for i in range(4)]
    g.add(sum, parts, name="total")
    cg.run(g, "total", subscribers=[events.append])
    (summary,) = [e.name for e in events if e.kind is EventKind.TRANSFERS]
    assert summary.endswith(", 0 spill(s)") and "4 upload(s), 4 download(s)" in summary


def test_a_task_needing_more_than_the_device_memory_is_refused(fake2: FakeBackend) -> None:
    with use_backend(FakeBackend(1, memory=1000)):
        g = cg.Graph()
        g.add(np.ones, 10, resources=GPU, cost=cg.Cost(memory=5000), name="big")
        with pytest.raises(cg.PlanError, match="big"):
            cg.run(g, "big")


def test_processes_refuse_gpu_tasks_naming_threads(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="on_gpu")
    with pytest.raises(cg.ConfigError, match=r"'on_gpu'.*executor='threads'"):
        cg.run(g, "on_gpu", executor="processes")


def test_a_cpu_only_graph_moves_nothing_and_ignores_the_gpus(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(sum, [g.add(np.ones, 3) for _ in range(3)], name="total")
    assert cg.run(g, "total").tolist() == [3.0, 3.0, 3.0]
    assert fake2.uploads == fake2.downloads == fake2.trims == 0


def test_without_a_gpu_a_gpu_task_is_a_config_error_saying_how_to_fix() -> None:
    with use_backend(FakeBackend(0)):
        g = cg.Graph()
        g.add(np.ones, 2, resources=GPU, name="needs_gpu")
        with pytest.raises(cg.ConfigError) as caught:
            cg.run(g, "needs_gpu")
    message = str(caught.value)
    assert "'needs_gpu'" in message and "no GPU was found" in message
    assert "chunkgraph[gpu]" in message and "gpu_fallback=True" in message


def test_gpu_fallback_runs_gpu_tasks_on_cpu_workers() -> None:
    backend = FakeBackend(0)
    bound: list[int | None] = []

    def twice(x: Any) -> Any:
        bound.append(backend.bound_device())
        assert type(x) is np.ndarray
        return x * 2

    with use_backend(backend):
        g = cg.Graph()
        g.add(twice, np.ones(2), resources=GPU, name="twice")
        assert cg.run(g, "twice", gpu_fallback=True).tolist() == [2.0, 2.0]
    assert bound == [None]


def test_gpu_fallback_is_checked_and_refused_beside_an_executor() -> None:
    with pytest.raises(cg.ConfigError, match="gpu_fallback"):
        cg.LocalExecutor(gpu_fallback="yes")  # type: ignore[arg-type]
    g = cg.Graph()
    g.add(abs, 1, name="a")
    with pytest.raises(cg.ConfigError, match="gpu_fallback=True"):
        cg.run(g, "a", executor=cg.LocalExecutor(), gpu_fallback=True)


def test_a_plan_naming_a_missing_device_is_refused(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="x")
    plan = cg.plan(g, [cg.Context("cpu"), cg.Context("gpu5", "gpu")])
    with pytest.raises(cg.ConfigError, match=r"'gpu5'.*sees 2 device"):
        cg.run(g, "x", plan=plan)


def test_a_task_not_asking_for_a_gpu_gets_host_arrays_even_on_a_gpu_worker(
    fake2: FakeBackend,
) -> None:
    """up (gpu) -> io ({"io": 1}: any context, here gpu0 by its costs)."""
    got: list[type] = []

    def io(x: Any) -> int:
        got.append(type(x))
        return 0

    g = cg.Graph()
    up = g.add(np.negative, np.ones(2), resources=GPU, cost=cg.Cost({"gpu0": 1.0}))
    g.add(io, up, resources={"io": 1}, cost=cg.Cost({"gpu0": 1.0}), name="io")
    plan = cg.plan(g, [cg.Context("cpu"), cg.Context("gpu0", "gpu")])
    assert plan.context_of(g.task_id("io")).name == "gpu0"  # type: ignore[union-attr]
    cg.run(g, "io", plan=plan)
    assert got == [np.ndarray]


def test_pool_threads_are_unbound_again_after_a_gpu_run(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="on_gpu")
    cg.run(g, "on_gpu", workers=2)
    later = cg.Graph()
    for i in range(8):
        later.add(lambda i: fake2.bound_device(), i, name=f"t{i}")
    assert set(cg.run(later, workers=4).values()) == {None}  # the same 4 pool threads


def test_plan_explains_a_gpu_task_without_gpus_and_falls_back_when_asked() -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="on_gpu")
    with pytest.raises(cg.PlanError, match=r"chunkgraph\[gpu\].*gpu_fallback=True"):
        cg.plan(g, [cg.Context("cpu", slots=2)])
    plan = cg.plan(g, [cg.Context("cpu", slots=2)], gpu_fallback=True)
    assert plan.context_of(g.task_id("on_gpu")).name == "cpu"  # type: ignore[union-attr]
    with_gpu = cg.plan(g, [cg.Context("cpu"), cg.Context("gpu0", "gpu")], gpu_fallback=True)
    assert with_gpu.context_of(g.task_id("on_gpu")).name == "gpu0"  # type: ignore[union-attr]


def test_a_given_plan_does_not_bypass_the_no_gpu_check() -> None:
    """A plan made where a GPU was seen, run where none is: the GPU task must not run
    on a CPU worker unless gpu_fallback=True."""
    ran_on: list[type] = []

    def twice(x: Any) -> Any:
        ran_on.append(type(x))
        return x * 2

    g = cg.Graph()
    g.add(twice, np.ones(2), resources=GPU, name="twice")
    with use_backend(FakeBackend(1)):
        plan = cg.plan(g)
    assert plan.context_of(g.task_id("twice")).name == "gpu0"  # type: ignore[union-attr]
    with use_backend(FakeBackend(0)):  # no device here (a real GPU elsewhere must not matter)
        with pytest.raises(cg.ConfigError, match=r"'twice'.*no GPU was found"):
            cg.run(g, "twice", plan=plan)
        assert ran_on == []
        assert cg.run(g, "twice", plan=plan, gpu_fallback=True).tolist() == [2.0, 2.0]
    assert ran_on == [np.ndarray]


def test_a_given_plan_placing_a_gpu_task_on_a_cpu_needs_gpu_fallback(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="on_gpu")
    plan = cg.plan(g, [cg.Context("cpu", slots=2)], gpu_fallback=True)
    with pytest.raises(cg.ConfigError, match=r"'on_gpu'.*CPU context 'cpu'.*gpu_fallback=True"):
        cg.run(g, "on_gpu", plan=plan)
    assert cg.run(g, "on_gpu", plan=plan, gpu_fallback=True).tolist() == [1.0, 1.0]
    assert fake2.uploads == 0


def test_a_given_plan_may_put_tasks_not_asking_for_a_gpu_on_gpu_contexts() -> None:
    g = cg.Graph()
    g.add(abs, -3, cost=cg.Cost({"gpu0": 1.0}), resources={"io": 1}, name="anywhere")
    plan = cg.plan(g, [cg.Context("cpu"), cg.Context("gpu0", "gpu")])
    assert plan.context_of(g.task_id("anywhere")).name == "gpu0"  # type: ignore[union-attr]
    with use_backend(FakeBackend(0)):
        assert cg.run(g, "anywhere", plan=plan) == 3


def test_a_gpu_task_too_big_for_its_gpus_names_the_largest_gpu_not_the_cpu() -> None:
    with use_backend(FakeBackend(2, memory=1 << 20)):
        g = cg.Graph()
        g.add(np.ones, 2, resources=GPU, cost=cg.Cost(memory=2 << 20), name="big")
        with pytest.raises(cg.PlanError) as caught:
            cg.run(g, "big")
    message = str(caught.value)
    assert "needs 2.0 MiB" in message and "'gpu0' with 1.0 MiB" in message
    assert "'cpu'" not in message and "numa" not in message


def test_gpu_fallback_runs_a_task_costed_for_gpus_alone_on_cpus() -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, cost=cg.Cost({"gpu": 2.0}), name="costed")
    with use_backend(FakeBackend(0)):
        assert cg.run(g, "costed", gpu_fallback=True).tolist() == [1.0, 1.0]
    plan = cg.plan(g, [cg.Context("cpu", slots=2)], gpu_fallback=True)
    assert plan.context_of(g.task_id("costed")).name == "cpu"  # type: ignore[union-attr]
    assert plan.makespan == 2.0  # the GPU seconds are the estimate on the CPU


def test_a_plan_error_never_suggests_gpu_fallback_when_it_was_passed() -> None:
    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, cost=cg.Cost({"gpu3": 1.0}), name="only_gpu3")
    with pytest.raises(cg.PlanError) as caught:
        cg.plan(g, [cg.Context("cpu", slots=2)], gpu_fallback=True)
    assert "'only_gpu3'" in str(caught.value) and "gpu_fallback" not in str(caught.value)


def test_device_arrays_nested_deep_come_back_to_the_caller_and_cpu_tasks_on_the_host(
    fake2: FakeBackend,
) -> None:
    """The graph's container rule, at every depth: {"x": [arr]} and deeper."""
    got: list[Any] = []

    def on_cpu(nested: Any) -> int:
        got.append(nested)
        return 0

    def on_gpu(nested: Any) -> Any:
        got.append(nested)
        (inner,) = nested["x"]
        return {"x": [inner + 1], "y": ({"z": [inner * 2]},)}

    g = cg.Graph()
    up = g.add(on_gpu, {"x": [np.ones(2)]}, resources=GPU, name="up")
    g.add(on_cpu, up, name="cpu")
    out = cg.run(g, ["up", "cpu"], workers=2)
    deep_in, on_host = got if isinstance(got[0]["x"][0], FakeDeviceArray) else got[::-1]
    assert isinstance(deep_in["x"][0], FakeDeviceArray)  # uploaded at depth two too
    for value in (out[0], on_host):
        assert type(value["x"][0]) is np.ndarray and value["x"][0].tolist() == [2.0, 2.0]
        assert type(value["y"][0]["z"][0]) is np.ndarray


@pytest.mark.parametrize("kind", ["threads", "adaptive"])
def test_a_task_stolen_by_another_gpu_runs_bound_to_the_thief_with_its_inputs_there(
    fake2: FakeBackend, kind: Any
) -> None:
    """Every consumer is planned on gpu1; gpu0's idle worker steals some. A stolen
    task must run bound to device 0 with its input moved there (through the host)."""
    import time

    stolen_ran = threading.Event()
    deadline = time.monotonic() + 60

    def consume(x: Any, i: int) -> Any:
        if fake2.bound_device() == 0:
            stolen_ran.set()
        else:  # gpu1 holds on to its tasks until gpu0 has stolen one
            stolen_ran.wait(max(0.0, deadline - time.monotonic()))
        return (fake2.bound_device(), fake2.device_of(x), x + i)

    g = cg.Graph()
    up = g.add(np.zeros, 2, resources=GPU, cost=cg.Cost({"gpu1": 1.0}), name="up")
    uses = [
        g.add(consume, up, i, resources=GPU, cost=cg.Cost({"gpu1": 1.0, "gpu0": 100.0}))
        for i in range(8)
    ]
    ctx = [cg.Context("cpu", slots=2), cg.Context("gpu0", "gpu"), cg.Context("gpu1", "gpu")]
    plan = cg.plan(g, ctx, targets=uses)
    assert {plan.context_of(t).name for t in uses} == {"gpu1"}  # type: ignore[union-attr]
    events: list[Event] = []
    got = cg.run(g, uses, plan=plan, executor=kind, workers=2, subscribers=[events.append])
    stolen = [e.name for e in events if e.kind is EventKind.STOLEN]
    assert stolen and all(name.endswith("gpu1 -> gpu0") for name in stolen)
    bound = [device for device, _, _ in got]
    assert 0 in bound and 1 in bound
    assert all(device == on for device, on, _ in got)  # its input is where it runs
    assert [value.tolist() for _, _, value in got] == [[float(i)] * 2 for i in range(8)]


def test_a_given_plan_with_no_device_backend_at_all_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The user's case: nvidia-smi lists a GPU (the plan has gpu0) but CuPy is absent."""
    import chunkgraph.execute._local as local

    g = cg.Graph()
    g.add(np.ones, 2, resources=GPU, name="on_gpu")
    plan = cg.plan(g, [cg.Context("cpu", slots=2), cg.Context("gpu0", "gpu")])
    monkeypatch.setattr(local, "active_backend", lambda: None)
    with pytest.raises(cg.ConfigError, match=r"'on_gpu'.*no GPU was found"):
        cg.run(g, "on_gpu", plan=plan)
    assert cg.run(g, "on_gpu", plan=plan, gpu_fallback=True).tolist() == [1.0, 1.0]


def test_a_cost_for_gpus_on_a_task_not_asking_for_one_says_to_ask(fake2: FakeBackend) -> None:
    g = cg.Graph()
    g.add(np.ones, 3, cost=cg.Cost(seconds={"gpu": 1.0}), name="costed")
    with pytest.raises(cg.PlanError, match=r"resources=\{'gpu': 1\}"):
        cg.run(g, "costed")
