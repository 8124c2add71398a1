"""DaskExecutor on a real LocalCluster (2 worker processes): results, placement,
resources, failures, events, a worker killed mid-run, connecting.

Tests that kill, restart or add workers run on a cluster of their own (``own_cluster``),
the others on the session's shared one (``healthy``)."""

from __future__ import annotations

import os
import re
import signal
import threading
from typing import Any

import numpy as np
import pytest
from tests.dask._cluster import START_DEADLINE_S, wait_until
from tests.dask._tasks import (
    announce_then_sleep,
    divide,
    fail_once,
    kill_worker_first,
    make_generator,
    make_lock,
    mix,
    mix_nested,
    nested_pool_workers,
    slow_mix,
    where,
)

import chunkgraph as cg
from chunkgraph.execute import DaskExecutor, EventKind, dask_contexts, dask_links
from chunkgraph.execute._dask_contexts import LOOPBACK
from chunkgraph.graph import Graph, TaskRef

distributed = pytest.importorskip("distributed")


def mixed_graph() -> tuple[Graph, list[TaskRef]]:
    """Chains, a diamond, nested and keyword arguments, a fan-in::

    c0 -> c1 -> c2 -> c3 ─┐
    d0 ─┬> d1 ─┐          ├─> zeta (fan-in of every tail)
        └> d2 ─┴> d3 ─────┤
    nest(d1, c1) ─────────┘
    """
    g = Graph()
    c = g.add(mix, 0, name="c0")
    for i in range(1, 4):
        c = g.add(mix, i, c, name=f"c{i}")
    d0 = g.add(mix, 10, name="d0")
    d1, d2 = g.add(mix, 11, d0, name="d1"), g.add(mix, 12, d0, name="d2")
    d3 = g.add(mix, 13, d2, d1, name="d3")
    nest = g.add(mix_nested, 20, {"in": [(d1, g.ref("c1"))]}, scale=3, name="nest")
    tails = [g.add(mix, 30 + k, x, name=f"tail{k}") for k, x in enumerate((c, d3, nest))]
    zeta = g.add(mix, 40, *tails, name="zeta")
    return g, [zeta, d1]


def test_results_equal_the_local_executors(healthy: Any) -> None:
    g, targets = mixed_graph()
    expected = cg.run(g, targets, executor="sync")
    assert cg.run(g, targets, executor=DaskExecutor(healthy)) == expected
    # one Dask task per planned unit, never one per graph task
    with distributed.get_task_stream(healthy) as stream:
        cg.run(g, targets, executor=DaskExecutor(healthy))
    assert 1 <= len(stream.data) < len(g)


def test_a_chain_heavy_graph_of_arrays_equals_local_and_runs_as_few_dask_tasks(
    healthy: Any,
) -> None:
    g = Graph()
    tails = []
    for i in range(40):
        x = g.add(np.full, 64, float(i))
        for _ in range(5):
            x = g.add(np.multiply, x, 1.5)
        tails.append(x)
    total = g.add(np.sum, tails)
    with distributed.get_task_stream(healthy) as stream:
        got = cg.run(g, total, executor=DaskExecutor(healthy))
    assert got == cg.run(g, total, executor="threads")
    assert len(stream.data) * 6 <= len(g)  # the chains are fused at least


def test_address_string_resolves_to_a_dask_executor(healthy: Any, cluster: Any) -> None:
    g, targets = mixed_graph()
    expected = cg.run(g, targets, executor="sync")
    assert cg.run(g, targets, executor=cluster.scheduler_address) == expected
    with pytest.raises(cg.ConfigError, match="do not apply to a Dask cluster"):
        cg.run(g, targets, executor=cluster.scheduler_address, workers=2)


def test_tasks_run_on_the_workers_their_plan_names(healthy: Any) -> None:
    g = Graph()
    chains = []
    for k in range(4):
        x = g.add(slow_mix, 0.05, k, name=f"start{k}")
        chains.append(g.add(where, x, name=f"where{k}"))
    contexts = dask_contexts(healthy)
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")
    assert {plan.context_of(t).name for t in chains} == {c.name for c in contexts}
    got = cg.run(g, chains, executor=DaskExecutor(healthy), plan=plan)
    placed = [plan.context_of(t).name for t in chains]
    # pins are loose (an idle worker may steal), so most, not necessarily all, hold
    assert sum(a == b for a, b in zip(got, placed, strict=True)) >= 3


def test_loops_nested_in_a_task_use_the_workers_threads_not_every_core(healthy: Any) -> None:
    # The fixture's workers have 1 thread each, fewer than this machine's cores (the
    # default pool's size): a pool sized by cores would report more.
    g = Graph()
    refs = [g.add(nested_pool_workers, i, name=f"pool{i}") for i in range(4)]
    contexts = dask_contexts(healthy)
    plan = cg.plan(g, contexts, links=dask_links(contexts), targets=refs, strategy="heft")
    assert cg.run(g, refs, executor=DaskExecutor(healthy), plan=plan) == [1] * 4


def test_dask_contexts_describe_the_workers(healthy: Any) -> None:
    info = healthy.scheduler_info()["workers"]
    contexts = dask_contexts(healthy)
    assert [c.name for c in contexts] == sorted(info)
    for ctx in contexts:
        assert (ctx.kind, ctx.slots, ctx.host) == ("cpu", 1, "127.0.0.1")
        assert ctx.memory == info[ctx.name]["memory_limit"]
    a, b = contexts
    assert dask_links(contexts) == {(a.name, b.name): LOOPBACK}


def worker_named(client: Any, name: str) -> str:
    """The address of the worker ``own_cluster`` started as ``name``."""
    workers = client.scheduler_info()["workers"]
    (address,) = [a for a, info in workers.items() if info["name"] == name]
    return str(address)


def test_gpu_tasks_go_only_to_the_worker_with_a_gpu(own_cluster: Any) -> None:
    _, client = own_cluster(cpu={}, gpu={"resources": {"GPU": 1}})
    gpu_worker = worker_named(client, "gpu")
    contexts = dask_contexts(client)
    assert [c.name for c in contexts if c.kind == "gpu"] == [gpu_worker + "#gpu"]
    g = Graph()
    gpu = [g.add(where, g.add(mix, k), resources={"gpu": 1}) for k in range(6)]
    cpu = [g.add(where, g.add(mix, k)) for k in range(6)]
    got = cg.run(g, [*gpu, *cpu], executor=DaskExecutor(client))
    assert got[:6] == [gpu_worker] * 6
    # the same without a plan of the cluster: Dask's resources alone keep them there
    local = cg.plan(g, [cg.Context("cpu", slots=2), cg.Context("gpu", "gpu")], targets=gpu)
    again = cg.run(g, gpu, executor=DaskExecutor(client), plan=local)
    assert again == [gpu_worker] * 6


def test_gpu_units_queued_on_the_gpu_worker_are_never_stolen_by_a_worker_without_one(
    own_cluster: Any,
) -> None:
    """Eight slow GPU units wait for the one GPU worker while the CPU worker idles. Dask's
    work stealing, given a loose pin, ignored the units' resources: a unit stolen by the
    CPU worker failed its state machine (KeyError: 'GPU'), which closed the worker."""
    _, client = own_cluster(cpu={}, gpu={"resources": {"GPU": 1}})
    gpu_worker = worker_named(client, "gpu")
    pids = client.run(os.getpid)
    g = Graph()
    gpu = [
        g.add(where, g.add(slow_mix, 0.2, k, resources={"gpu": 1}), resources={"gpu": 1})
        for k in range(8)
    ]
    assert cg.run(g, gpu, executor=DaskExecutor(client)) == [gpu_worker] * 8
    assert client.run(os.getpid) == pids  # no worker failed (and came back as another)


def failing_graph() -> tuple[Graph, list[TaskRef]]:
    """``one -> ratio (divides by zero) -> after``; ``fine`` stands alone."""
    g = Graph()
    one = g.add(mix, 1, name="one")
    ratio = g.add(divide, one, 0, name="ratio")
    after = g.add(mix, 2, ratio, name="after")
    fine = g.add(mix, 3, name="fine")
    return g, [after, fine, one]


def test_failures_are_grouped_as_the_local_executor_groups_them(healthy: Any) -> None:
    g, targets = failing_graph()
    groups = []
    for executor in (cg.LocalExecutor("sync", retries=1), DaskExecutor(healthy, retries=1)):
        with pytest.raises(ExceptionGroup) as caught:
            cg.run(g, targets, executor=executor)
        groups.append(caught.value)
    local, dask = groups
    assert len(dask.exceptions) == len(local.exceptions) == 1
    mine, theirs = dask.exceptions[0], local.exceptions[0]
    assert isinstance(mine, cg.TaskError)
    assert (mine.task, mine.inputs, mine.attempts, str(mine)) == (
        theirs.task,
        theirs.inputs,
        theirs.attempts,
        str(theirs),
    )
    assert type(mine.__cause__) is ZeroDivisionError
    assert isinstance(mine.__cause__.__cause__, cg.RemoteTraceback)
    assert "divide" in str(mine.__cause__.__cause__)  # the worker's traceback


def test_a_failed_task_is_tried_again_up_to_retries(healthy: Any, tmp_path: Any) -> None:
    g = Graph()
    flaky = g.add(fail_once, str(tmp_path / "tried"), 7)
    assert cg.run(g, flaky, executor=DaskExecutor(healthy, retries=1)) == 7
    g2 = Graph()
    again = g2.add(fail_once, str(tmp_path / "tried-again"), 7)
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g2, again, executor=DaskExecutor(healthy))
    assert caught.value.exceptions[0].attempts == 1


def test_subscribers_see_each_task_start_and_finish_in_dependency_order(healthy: Any) -> None:
    g, targets = mixed_graph()
    events: list[cg.Event] = []
    cg.run(g, targets, executor=DaskExecutor(healthy), subscribers=[events.append])
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.RUN_STARTED and kinds[-1] is EventKind.RUN_FINISHED
    assert events[0].total == events[-1].total == len(g)
    finished = {e.task: i for i, e in enumerate(events) if e.kind is EventKind.FINISHED}
    started = {e.task: i for i, e in enumerate(events) if e.kind is EventKind.STARTED}
    assert set(finished) == set(started) == set(range(len(g)))
    dep_ptr, dep_idx = g.dependencies()
    for t in range(len(g)):
        for d in dep_idx[dep_ptr[t] : dep_ptr[t + 1]].tolist():
            assert finished[d] < finished[t]
            assert started[d] < started[t]

    g2, targets2 = failing_graph()
    events.clear()
    with pytest.raises(ExceptionGroup):
        cg.run(g2, targets2, executor=DaskExecutor(healthy), subscribers=[events.append])
    failed = [e for e in events if e.kind is EventKind.FAILED]
    assert [e.name for e in failed] == ["ratio"]
    assert isinstance(failed[0].error, ZeroDivisionError)
    assert events[-1].kind is EventKind.RUN_FINISHED
    cancelled = {e.name for e in events if e.kind is EventKind.CANCELLED}
    assert "after" in cancelled


def test_a_worker_killed_mid_run_loses_nothing(own_cluster: Any) -> None:
    """Chains of slow tasks; at the first finished unit one worker is SIGKILLed. Dask
    reruns what it held or ran on the other worker (and on its restart)."""
    _, client = own_cluster()
    g = Graph()
    tails = []
    for k in range(8):
        x = g.add(slow_mix, 0.1, k)
        for i in range(3):
            x = g.add(slow_mix, 0.1, i, x)
        tails.append(x)
    total = g.add(mix, 99, *tails)
    expected = cg.run(g, total, executor="sync")
    pids = client.run(os.getpid)
    victim = pids[sorted(pids)[0]]
    killed: list[int] = []

    def kill_once(event: cg.Event) -> None:
        if event.kind is EventKind.FINISHED and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    contexts = dask_contexts(client)
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")
    got = cg.run(g, total, executor=DaskExecutor(client), plan=plan, subscribers=[kill_once])
    assert killed == [victim]
    assert got == expected
    client.wait_for_workers(2, timeout=START_DEADLINE_S)
    assert victim not in client.run(os.getpid).values()


def test_a_wrong_address_fails_quickly_and_says_what_to_do() -> None:
    with pytest.raises(
        cg.ConfigError, match=r"cannot reach a Dask scheduler at 'tcp://127\.0\.0\.1:9'"
    ):
        DaskExecutor("tcp://127.0.0.1:9", connect_timeout=1)
    with pytest.raises(cg.ConfigError, match="protocol://host:port"):
        DaskExecutor("nonsense://somewhere:1", connect_timeout=1)
    with pytest.raises(cg.ConfigError, match=r"distributed\.Client or a scheduler address"):
        DaskExecutor(42)


def test_close_closes_only_a_client_it_opened(healthy: Any, cluster: Any) -> None:
    with DaskExecutor(cluster.scheduler_address) as owned:
        assert owned.client.status == "running"
        assert not owned.in_process
    assert owned.client.status == "closed"
    DaskExecutor(healthy).close()
    assert healthy.status == "running"


def test_a_plan_of_the_whole_graph_runs_only_what_the_targets_need(healthy: Any) -> None:
    g, targets = mixed_graph()
    contexts = dask_contexts(healthy)
    # "merge" makes few coarse units, so d1's unit holds tasks d1 does not need.
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="merge")
    d1 = targets[1]
    for executor in (cg.LocalExecutor("threads"), DaskExecutor(healthy)):
        events: list[cg.Event] = []
        got = cg.run(g, d1, executor=executor, plan=plan, subscribers=[events.append])
        assert got == cg.run(g, d1, executor="sync")
        ran = {e.name for e in events if e.kind is EventKind.FINISHED}
        assert ran == {"d0", "d1"}, executor


def test_resources_no_worker_offers_fail_before_anything_is_submitted(healthy: Any) -> None:
    ex = DaskExecutor(healthy)
    g = Graph()
    g.add(mix, 1, name="plain")
    io = g.add(where, 1, resources={"io": 1}, name="reads")
    with pytest.raises(cg.ConfigError, match=r"task 'reads' asks for \{'io': 1\}.*no resources"):
        cg.run(g, io, executor=ex)
    # A plan made on contexts with a GPU, run on this cluster (none): Dask would wait forever.
    g2 = Graph()
    gpu = g2.add(where, g2.add(mix, 1), resources={"gpu": 1}, name="on-gpu")
    plan = cg.plan(g2, [cg.Context("cpu", slots=2), cg.Context("gpu", "gpu")], targets=[gpu])
    with pytest.raises(cg.ConfigError, match=r"task 'on-gpu' asks for \{'gpu': 1\}.*'GPU'"):
        cg.run(g2, gpu, executor=ex, plan=plan)
    assert cg.run(g, "plain", executor=ex) == mix(1)  # the cluster is unharmed


def test_a_cluster_without_workers_fails_at_once() -> None:
    with (
        distributed.LocalCluster(
            n_workers=0,
            processes=False,
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": ":0"},
        ) as empty,
        distributed.Client(empty, set_as_default=False) as client,
    ):
        g = Graph()
        one = g.add(mix, 1)
        plan = cg.plan(g, [cg.Context("cpu", slots=1)], targets=[one])
        with pytest.raises(cg.ConfigError, match="has no workers"):
            cg.run(g, one, executor=DaskExecutor(client), plan=plan)


def test_a_unit_cancelled_on_the_cluster_is_a_failure_of_that_unit(own_cluster: Any) -> None:
    _, client = own_cluster()
    g = Graph()
    tails = [g.add(slow_mix, 0.3, k, g.add(slow_mix, 0.3, k)) for k in range(6)]
    total = g.add(mix, 99, *tails)
    contexts = dask_contexts(client)
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")

    def restart_once(event: cg.Event) -> None:
        if event.kind is EventKind.FINISHED and not restarted:
            restarted.append(True)
            client.restart(timeout=START_DEADLINE_S)  # cancels every future of the cluster

    restarted: list[bool] = []
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, total, executor=DaskExecutor(client), plan=plan, subscribers=[restart_once])
    errors = caught.value.exceptions
    assert errors and all(isinstance(e, cg.TaskError) for e in errors)
    assert all("cancelled on the cluster" in str(e.__cause__) for e in errors)


def test_an_interrupt_while_waiting_cancels_the_whole_run(healthy: Any) -> None:
    g = Graph()
    tails = [g.add(slow_mix, 0.2, k, g.add(slow_mix, 0.2, k)) for k in range(8)]
    total = g.add(mix, 99, *tails)
    contexts = dask_contexts(healthy)
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")

    def interrupt(event: cg.Event) -> None:
        if event.kind is EventKind.FINISHED:
            raise KeyboardInterrupt

    def ours(dask_scheduler: Any) -> list[str]:
        return [str(k) for k in dask_scheduler.tasks if str(k).startswith("chunkgraph-")]

    with pytest.raises(KeyboardInterrupt) as caught:
        cg.run(g, total, executor=DaskExecutor(healthy), plan=plan, subscribers=[interrupt])
    # its traceback holds the run's frames, still: the keys go all the same
    wait_until(
        lambda: caught.value is not None and not healthy.run_on_scheduler(ours),
        START_DEADLINE_S,
        "the interrupted run's keys are still on the scheduler",
    )


def test_a_task_that_cannot_be_pickled_fails_before_any_task_runs(healthy: Any) -> None:
    g = Graph()
    parts = [g.add(mix, i) for i in range(6)]
    locked = g.add(where, threading.Lock(), *parts, name="locked")
    events: list[cg.Event] = []
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, locked, executor=DaskExecutor(healthy), subscribers=[events.append])
    (error,) = caught.value.exceptions
    assert isinstance(error, cg.TaskError)
    assert (error.task, error.attempts) == ("locked", 1)
    assert isinstance(error.__cause__, TypeError)
    assert not [e for e in events if e.kind in (EventKind.STARTED, EventKind.FINISHED)]


def clients_of(client: Any) -> set[str]:
    """The ids of the Clients the scheduler has now."""

    def ids(dask_scheduler: Any) -> list[str]:
        return list(dask_scheduler.clients)

    return set(client.run_on_scheduler(ids))


def wait_for_clients(client: Any, base: set[str], what: str) -> None:
    """Wait until the scheduler has no Client beyond ``base``: a closed one leaves it soon
    after (one of ``base`` closing meanwhile cannot hide one left open)."""
    wait_until(lambda: clients_of(client) <= base, START_DEADLINE_S, what)


def test_the_client_opened_for_an_address_is_closed_when_the_call_ends(
    healthy: Any, cluster: Any, tmp_path: Any
) -> None:
    import dask
    import dask.array as da

    base = clients_of(healthy)
    g, targets = failing_graph()
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, targets, executor=cluster.scheduler_address)
    wait_for_clients(healthy, base, "run() left its Client open")
    src = cg.volume.create("dask-close-src", (8, 8), (4, 4), "uint8", backend="memory")
    try:
        with pytest.raises(cg.ConfigError, match="memory volumes") as refused:
            cg.apply(where, src, src, chunk_sizes=[(4, 4)], executor=cluster.scheduler_address)
    finally:
        cg.volume.remove("dask-close-src")
    wait_for_clients(healthy, base, "apply() left its Client open")
    # dask's num_workers setting sizes local threads; a cluster's workers are its own
    with dask.config.set(num_workers=2):
        total = (
            da.ones(10, chunks=5)
            .sum()
            .compute(scheduler=cg.dask_scheduler, executor=cluster.scheduler_address)
        )
    assert total == 10
    wait_for_clients(healthy, base, "dask_scheduler left its Client open")
    assert caught.value and refused.value  # held until here, as a caller may hold them


def test_options_beside_a_dask_executor_are_refused_with_its_own_hint(healthy: Any) -> None:
    g, targets = failing_graph()
    with pytest.raises(cg.ConfigError, match=r"retries=1 given.*DaskExecutor\(client, retries=1\)"):
        cg.run(g, targets, executor=DaskExecutor(healthy), retries=1)


def test_a_share_of_a_gpu_is_a_gpu_context_and_repr_outlives_close(
    healthy: Any, cluster: Any
) -> None:
    class Shared:
        def scheduler_info(self) -> dict[str, Any]:
            info = {"host": "10.0.0.5", "nthreads": 2, "resources": {"GPU": 0.5}}
            return {"workers": {"tcp://10.0.0.5:4000": info}}

    gpu = [c for c in dask_contexts(Shared()) if c.kind == "gpu"]
    assert [(c.name, c.slots) for c in gpu] == [("tcp://10.0.0.5:4000#gpu", 1)]
    ex = DaskExecutor(cluster.scheduler_address)
    ex.close()
    assert repr(ex) == f"DaskExecutor({cluster.scheduler_address!r}, retries=0)"


def test_a_closed_executor_says_so_and_closing_again_is_harmless(
    healthy: Any, cluster: Any
) -> None:
    g, targets = mixed_graph()
    with DaskExecutor(cluster.scheduler_address) as owned:
        assert cg.run(g, targets, executor=owned) == cg.run(g, targets, executor="sync")
    owned.close()  # again: nothing happens
    with pytest.raises(cg.UsageError, match=r"was closed.*create a new DaskExecutor"):
        cg.run(g, targets, executor=owned)
    borrowed = DaskExecutor(healthy)
    borrowed.close()
    borrowed.close()
    with pytest.raises(cg.UsageError, match=r"was closed.*create a new DaskExecutor"):
        borrowed.run(g, targets)
    assert healthy.status == "running"  # a Client passed in stays open
    assert cg.run(g, targets, executor=DaskExecutor(healthy)) == cg.run(g, targets, executor="sync")
    other = distributed.Client(cluster.scheduler_address, set_as_default=False)
    given = DaskExecutor(other)
    other.close()
    with pytest.raises(cg.UsageError, match=r"Client of DaskExecutor.* was closed"):
        given.run(g, targets)
    for closed in (lambda: DaskExecutor(other), lambda: cg.run(g, targets, executor=other)):
        with pytest.raises(cg.UsageError, match=r"Client given .* was closed"):
            closed()


@pytest.mark.parametrize("make", [make_lock, make_generator], ids=["lock", "generator"])
def test_a_result_that_cannot_leave_its_worker_is_a_task_error_naming_the_task(
    healthy: Any, make: Any
) -> None:
    """``start -> maker (returns a lock or a generator)``, ``fine`` beside it; maker is a
    target, so its result must travel back to the client."""
    g = Graph()
    maker = g.add(make, g.add(mix, 1, name="start"), name="maker")
    fine = g.add(mix, 2, name="fine")
    events: list[cg.Event] = []
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, [maker, fine], executor=DaskExecutor(healthy), subscribers=[events.append])
    (error,) = caught.value.exceptions
    assert isinstance(error, cg.TaskError)
    assert (error.task, error.attempts) == ("maker", 1)
    assert isinstance(error.__cause__, TypeError)
    assert re.search(r"result.*cannot be serialized.*numpy arrays", str(error.__cause__))
    assert [e.name for e in events if e.kind is EventKind.FAILED] == ["maker"]


@pytest.mark.timeout(60)
def test_a_result_that_cannot_reach_its_reader_on_another_worker_fails_its_task(
    healthy: Any,
) -> None:
    """``slow -> reader <- locker``: the plan puts locker apart from slow and reader, so
    the lock would have to cross workers (Dask alone would leave reader waiting)."""
    g = Graph()
    slow = g.add(slow_mix, 0.3, 1, name="slow")
    locker = g.add(make_lock, name="locker")
    reader = g.add(where, slow, locker, name="reader")
    contexts = dask_contexts(healthy)
    plan = cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")
    assert plan.context_of(locker) != plan.context_of(reader)
    with pytest.raises(ExceptionGroup) as caught:
        cg.run(g, reader, executor=DaskExecutor(healthy), plan=plan)
    (error,) = caught.value.exceptions
    assert isinstance(error, cg.TaskError) and error.task == "locker"
    assert "cannot be serialized" in str(error.__cause__)


def _pinned_plan(client: Any, g: Graph) -> cg.Plan:
    contexts = dask_contexts(client)
    return cg.plan(g, contexts, links=dask_links(contexts), strategy="heft")


def test_a_unit_whose_worker_died_twice_runs_on_a_restarted_one(
    own_cluster: Any, tmp_path: Any
) -> None:
    """Its pinned worker, then the one it moved to, die while no other runs: Dask leaves
    such a unit waiting for a worker of those addresses, which never come back (restarted
    workers get new ones). The run places it on a running worker instead of hanging."""
    _, client = own_cluster()
    g = Graph()
    g.add(kill_worker_first, str(tmp_path / "deaths"), 2, 7, name="k")
    got = cg.run(g, "k", executor=DaskExecutor(client), plan=_pinned_plan(client, g))
    assert got == 7
    assert (tmp_path / "deaths").read_text() == "2"


def test_every_worker_killed_at_once_loses_nothing(own_cluster: Any, tmp_path: Any) -> None:
    """Four 1-second tasks pinned two per worker; once both workers run one, both are
    SIGKILLed together, so the units they held wait for workers that never come back."""
    _, client = own_cluster()
    g = Graph()
    parts = [g.add(announce_then_sleep, str(tmp_path), 1.0, i, name=f"s{i}") for i in range(4)]
    total = g.add(mix, 99, *parts, name="total")
    pids = set(client.run(os.getpid).values())
    killed: list[int] = []
    stop = threading.Event()

    def kill_when_both_run() -> None:
        while not stop.wait(0.02):
            running = {int(p.name.split("-")[1]) for p in tmp_path.iterdir()}
            if running >= pids:
                for pid in sorted(pids):
                    os.kill(pid, signal.SIGKILL)
                killed.extend(sorted(pids))
                return

    killer = threading.Thread(target=kill_when_both_run, daemon=True)
    killer.start()
    try:
        got = cg.run(g, total, executor=DaskExecutor(client), plan=_pinned_plan(client, g))
    finally:
        stop.set()
        killer.join()
    assert killed == sorted(pids)
    assert got == mix(99, *(mix(i) for i in range(4)))


def test_a_client_passed_as_executor_runs_there_and_stays_open(healthy: Any) -> None:
    g, targets = mixed_graph()
    assert cg.run(g, targets, executor=healthy) == cg.run(g, targets, executor="sync")
    assert healthy.status == "running"


def test_a_gpu_task_on_a_cluster_without_gpus_says_how_to_start_gpu_workers(healthy: Any) -> None:
    g = Graph()
    g.add(mix, 1, resources={"gpu": 1}, name="on_gpu")
    with pytest.raises(cg.ConfigError, match=r"'on_gpu'.*--resources GPU=1"):
        cg.run(g, "on_gpu", executor=DaskExecutor(healthy))
