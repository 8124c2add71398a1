"""parallel_for / parallel_map / parallel_reduce: results, grain, errors, nesting, stealing."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph._errors import ConfigError
from chunkgraph.parallel import (
    WorkStealingPool,
    _grain,
    _loops,
    get_pool,
    parallel_for,
    parallel_map,
    parallel_reduce,
)
from chunkgraph.parallel._grain import GRAINS, CostModel, OpKind, body_key, fit

grains = st.one_of(st.none(), st.integers(1, 64))


@pytest.fixture
def cheap_is_under_a_quarter_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes grow until a piece takes PROBE_MIN_S (0.5 ms): a loaded machine can stall a
    piece of a cheap body that long, and the probe then stops early. At 0.25 s, what
    these tests call cheap stays cheap under any load."""
    monkeypatch.setattr(_grain, "PROBE_MIN_S", 0.25)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3_000), grain=grains)
def test_parallel_for_visits_every_index_exactly_once(n: int, grain: int | None) -> None:
    counts = np.zeros(n, dtype=np.int64)

    def body(start: int, stop: int) -> None:
        counts[start:stop] += 1

    parallel_for(n, body, grain=grain)
    assert np.array_equal(counts, np.ones(n, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers(-1000, 1000), max_size=400), grain=grains)
def test_parallel_map_equals_a_list_comprehension(items: list[int], grain: int | None) -> None:
    assert parallel_map(lambda v: 3 * v - 1, items, grain=grain) == [3 * v - 1 for v in items]


def test_parallel_map_accepts_any_iterable() -> None:
    assert parallel_map(str, (i for i in range(5)), grain=1) == ["0", "1", "2", "3", "4"]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-(2**40), 2**40), max_size=2_000), grain=grains)
def test_parallel_reduce_equals_the_sequential_sum(values: list[int], grain: int | None) -> None:
    x = np.array(values, dtype=np.int64)
    total = parallel_reduce(
        len(x), lambda a, b: int(x[a:b].sum()), lambda p, q: p + q, 0, grain=grain
    )
    assert total == sum(values)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 500), grain=grains)
def test_parallel_reduce_combines_in_index_order(n: int, grain: int | None) -> None:
    """List concatenation is associative but not commutative."""
    result = parallel_reduce(n, lambda a, b: list(range(a, b)), lambda p, q: p + q, [], grain=grain)
    assert result == list(range(n))


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_results_do_not_depend_on_the_pool_size(
    use_pool: Callable[[int], WorkStealingPool], workers: int
) -> None:
    use_pool(workers)
    x = np.random.default_rng(workers).random(50_000)
    out = np.empty_like(x)

    def body(start: int, stop: int) -> None:
        np.sqrt(np.exp(x[start:stop]), out=out[start:stop])

    parallel_for(len(x), body, grain=1_000)
    assert np.array_equal(out, np.sqrt(np.exp(x)))


def test_a_range_shorter_than_twice_the_grain_runs_in_one_call() -> None:
    calls: list[tuple[int, int]] = []
    parallel_for(150, lambda a, b: calls.append((a, b)), grain=100)
    assert calls == [(0, 150)]


def test_first_use_probes_growing_prefix_pieces_in_the_caller(
    cheap_is_under_a_quarter_second: None,
) -> None:
    calls: list[tuple[int, int, str]] = []
    caller = threading.current_thread().name

    def body_seen_once(start: int, stop: int) -> None:
        calls.append((start, stop, threading.current_thread().name))

    GRAINS.clear()
    parallel_for(30, body_seen_once)
    assert [(a, b) for a, b, _ in calls[:3]] == [(0, 1), (1, 5), (5, 21)]
    assert all(name == caller for _, _, name in calls[:3])
    assert GRAINS.get(body_key(body_seen_once, OpKind.COMPUTE)) is not None
    covered = sorted((a, b) for a, b, _ in calls)
    assert covered[0][0] == 0 and covered[-1][1] == 30
    assert all(p[1] == q[0] for p, q in itertools.pairwise(covered))


def test_a_known_short_loop_is_one_call_and_a_longer_one_probes_again(
    cheap_is_under_a_quarter_second: None,
) -> None:
    """A probe that ran out of elements is not trusted beyond that length."""
    calls: list[tuple[int, int]] = []

    def cheap(start: int, stop: int) -> None:
        calls.append((start, stop))

    GRAINS.clear()
    parallel_for(10, cheap)
    model = GRAINS.get(body_key(cheap, OpKind.COMPUTE))
    assert model is not None and not model.trusted
    calls.clear()
    parallel_for(10, cheap)
    assert calls == [(0, 10)]
    calls.clear()
    parallel_for(1_000, cheap)
    assert calls[:2] == [(0, 1), (1, 5)]


def test_a_slow_body_is_trusted_after_one_element() -> None:
    calls: list[tuple[int, int]] = []

    def slow(start: int, stop: int) -> None:
        calls.append((start, stop))
        time.sleep(0.002 * (stop - start))

    GRAINS.clear()
    parallel_for(4, slow)
    model = GRAINS.get(body_key(slow, OpKind.COMPUTE))
    assert model is not None and model.trusted
    assert calls[0] == (0, 1)
    assert sorted(calls)[-1][1] == 4


def test_the_measured_grain_is_reused_by_a_recreated_body() -> None:
    def make() -> Callable[[int, int], None]:
        return lambda a, b: None

    GRAINS.clear()
    parallel_for(10, make())
    assert GRAINS.get(body_key(make(), OpKind.COMPUTE)) is not None


def test_refine_moves_the_estimate_towards_measured_pieces() -> None:
    key = ("refine-test", OpKind.COMPUTE)
    GRAINS.put(key, CostModel(per_element_s=1e-6, per_call_s=0.0))
    GRAINS.refine(key, [(1000, 1e-2)])  # measured 1e-5 s per element
    model = GRAINS.get(key)
    assert model is not None
    assert model.per_element_s == pytest.approx(0.75 * 1e-6 + 0.25 * 1e-5)


def test_fit_ignores_a_negative_intercept() -> None:
    assert fit([(100, 2e-3), (200, 3e-3)]).per_element_s == pytest.approx(1e-5)
    noisy = fit([(100, 3e-3), (200, 1e-3)])
    assert noisy == CostModel(per_element_s=5e-6, per_call_s=0.0)


@pytest.mark.timeout(60)
def test_every_failing_piece_is_reported(use_pool: Callable[[int], WorkStealingPool]) -> None:
    """Two pieces run at once (a barrier makes sure) and both fail."""
    use_pool(2)
    barrier = threading.Barrier(2, timeout=20)

    def body(start: int, stop: int) -> None:
        barrier.wait()
        raise ValueError(f"bad range {start}")

    with pytest.raises(ExceptionGroup) as info:
        parallel_for(2, body, grain=1)
    errors = info.value.exceptions
    assert sorted(str(e) for e in errors) == ["bad range 0", "bad range 1"]
    assert all(isinstance(e, ValueError) for e in errors)
    assert "2 piece(s) failed" in str(info.value)
    assert any("[1, 2)" in note for e in errors for note in getattr(e, "__notes__", []))


def test_no_piece_starts_after_a_failure(use_pool: Callable[[int], WorkStealingPool]) -> None:
    use_pool(1)
    started: list[int] = []

    def body(start: int, stop: int) -> None:
        started.append(start)
        raise RuntimeError("first piece fails")

    with pytest.raises(ExceptionGroup) as info:
        parallel_for(100, body, grain=10)
    assert started == [0]
    assert len(info.value.exceptions) == 1


def test_a_failing_probe_is_reported_as_a_group() -> None:
    def fails_on_first_use(start: int, stop: int) -> None:
        raise OSError("disk gone")

    GRAINS.clear()
    with pytest.raises(ExceptionGroup) as info:
        parallel_for(1000, fails_on_first_use)
    assert [type(e) for e in info.value.exceptions] == [OSError]


def test_a_failing_combine_is_reported() -> None:
    def combine(p: int, q: int) -> int:
        raise ArithmeticError("cannot combine")

    with pytest.raises(ExceptionGroup) as info:
        parallel_reduce(100, lambda a, b: b - a, combine, 0, grain=10)
    assert all(isinstance(e, ArithmeticError) for e in info.value.exceptions)


@pytest.mark.timeout(60)
def test_nested_loops_inside_a_body_finish_and_are_correct() -> None:
    grid = np.zeros((40, 300), dtype=np.int64)

    def row_block(r0: int, r1: int) -> None:
        for r in range(r0, r1):

            def cols(c0: int, c1: int, r: int = r) -> None:
                grid[r, c0:c1] += r * 1000 + np.arange(c0, c1)

            parallel_for(grid.shape[1], cols, grain=16)

    parallel_for(grid.shape[0], row_block, grain=2)
    expected = np.arange(40)[:, None] * 1000 + np.arange(300)[None, :]
    assert np.array_equal(grid, expected)


@pytest.mark.timeout(60)
def test_loops_from_plain_threads_and_executor_workers_finish() -> None:
    def one_loop(seed: int) -> int:
        x = np.arange(seed, seed + 20_000, dtype=np.int64)
        return parallel_reduce(
            len(x), lambda a, b: int(x[a:b].sum()), lambda p, q: p + q, 0, grain=500
        )

    results: dict[int, int] = {}

    def in_thread(seed: int) -> None:
        results[seed] = one_loop(seed)

    threads = [threading.Thread(target=in_thread, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    with ThreadPoolExecutor(3) as executor:
        from_executor = list(executor.map(one_loop, range(3, 6)))
    for t in threads:
        t.join(50)
    expected = {s: int(np.arange(s, s + 20_000).sum()) for s in range(6)}
    assert results == {s: expected[s] for s in range(3)}
    assert from_executor == [expected[s] for s in range(3, 6)]


@pytest.mark.timeout(60)
def test_stolen_work_is_split_again(use_pool: Callable[[int], WorkStealingPool]) -> None:
    """The first piece blocks until the far half of the range has run.

    With 2 workers the splitter's budget of 8 splits makes exactly 9 pieces
    when nothing is stolen. The right half (pushed first, so stolen first)
    re-arms to 8 splits in the thief, so the loop ends with more than 9.
    """
    pool = use_pool(2)
    far_half_ran = threading.Event()
    n = 64
    pieces: list[tuple[int, int]] = []

    def body(start: int, stop: int) -> None:
        pieces.append((start, stop))
        if start == 0:
            assert far_half_ran.wait(20), "the right half was never stolen"
        if start >= n // 2:
            far_half_ran.set()

    before = pool.stats()
    parallel_for(n, body, grain=1)
    delta = pool.stats() - before
    assert delta.steals >= 1
    assert delta.rearms >= 1
    assert delta.resplits >= 1
    assert len(pieces) > 9
    assert sorted(pieces)[-1][1] == n and sum(b - a for a, b in pieces) == n


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: parallel_for(-1, lambda a, b: None), "n must be"),
        (lambda: parallel_for(2.5, lambda a, b: None), "n must be"),  # type: ignore[arg-type]
        (lambda: parallel_for(10, lambda a, b: None, grain=0), "grain"),
        (lambda: parallel_for(10, lambda a, b: None, kind="gpu"), "valid: 'compute'"),
    ],
)
def test_bad_arguments_are_config_errors(call: Callable[[], None], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call()


def test_empty_loops_return_the_identity_without_calling_the_body() -> None:
    def never(a: int, b: int) -> int:
        raise AssertionError("called")

    assert parallel_reduce(0, never, lambda p, q: p + q, 7) == 7
    parallel_for(0, never)
    assert parallel_map(str, []) == []
    assert get_pool().workers >= 1


def test_an_untrusted_fit_never_makes_a_short_loop_probe_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A noisy fit of a fully probed loop may claim it is worth splitting.

    The probe still runs the real body; only its fitted model is replaced by
    one that says "1 ms per element", which alone would make 100 elements
    worth splitting. The length just probed must stay one call regardless.
    """
    real_probe = _loops.probe

    def noisy_probe(run: Callable[[int, int], object], start: int, stop: int) -> Any:
        values, at, _model = real_probe(run, start, stop)
        return values, at, CostModel(per_element_s=1e-3, per_call_s=0.0, trusted=False)

    monkeypatch.setattr(_loops, "probe", noisy_probe)
    calls: list[tuple[int, int]] = []

    def cheap_again(start: int, stop: int) -> None:
        calls.append((start, stop))

    GRAINS.clear()
    parallel_for(100, cheap_again)
    assert calls[0] == (0, 1)  # it was probed
    calls.clear()
    parallel_for(100, cheap_again)
    assert calls == [(0, 100)]


def test_an_interrupt_in_a_piece_propagates_and_stops_the_loop() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def body(start: int, stop: int) -> None:
        if start == 0:
            raise KeyboardInterrupt
        time.sleep(0.002)
        with lock:
            done.append(stop - start)

    with pytest.raises(KeyboardInterrupt):
        parallel_for(400, body, grain=1)
    assert sum(done) < 200  # far from the 399 other elements


_SIGINT_DRIVER = """
import os, signal, threading, time
from chunkgraph.parallel import parallel_for
done = []
def body(start, stop):
    for _ in range(start, stop):
        time.sleep(0.02)
        done.append(1)
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    parallel_for(200, body, grain=1)
except KeyboardInterrupt:
    print("interrupted", len(done))
"""


def test_ctrl_c_stops_a_running_loop_promptly() -> None:
    """200 elements of 20 ms on 2 threads take ~2 s; Ctrl-C at 0.3 s must end it early."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _SIGINT_DRIVER], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert out[0] == "interrupted", out
    assert int(out[1]) < 100, f"{out[1]} of 200 elements ran after Ctrl-C at 0.3 s"
