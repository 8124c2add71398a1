"""Activation: the ramp, the two growth signals, the caps, and the timeline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, UsageError
from chunkgraph.parallel import ActivationEvent
from chunkgraph.parallel._activation import Activation, plot_timeline
from chunkgraph.parallel._signals import ProcessSignals, Reading


class Script:
    """A sampler that hands out scripted (cpu, io) readings, one per second."""

    def __init__(self, readings: Sequence[tuple[float, float | None] | None]) -> None:
        self.readings = list(readings)
        self.time = 0.0

    def start(self) -> float:
        return self.time

    def sample(self) -> Reading | None:
        reading = self.readings.pop(0)
        if reading is None:
            return None
        self.time += 1.0
        return Reading(self.time, *reading)


class Model:
    """A sampler whose readings follow the active workers: ``per_worker(active) -> (cpu, io)``."""

    def __init__(self, per_worker: Callable[[int], tuple[float, float | None]]) -> None:
        self.per_worker = per_worker
        self.policy: Activation | None = None
        self.time = 0.0

    def start(self) -> float:
        return self.time

    def sample(self) -> Reading:
        assert self.policy is not None
        self.time += 1.0
        return Reading(self.time, *self.per_worker(sum(self.policy.active)))


def always_growing() -> Script:
    return Script([(1000.0 * k, None) for k in range(1, 100)])


def ramp(policy: Activation, remaining: int = 10_000, checks: int = 20) -> list[tuple[int, ...]]:
    policy.initial()
    seen = [policy.active]
    for _ in range(checks):
        policy.check(remaining)
        if policy.active != seen[-1]:
            seen.append(policy.active)
    return seen


def test_the_ramp_of_a_node_of_16_is_4_then_2_per_step() -> None:
    steps = ramp(Activation([16], always_growing()))
    assert [a for (a,) in steps] == [4, 6, 8, 10, 12, 14, 16]


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (1, [1]),
        (2, [1, 2]),
        (3, [1, 2, 3]),
        (7, [1, 2, 3, 4, 5, 6, 7]),
        (10, [2, 3, 4, 5, 6, 7, 8, 9, 10]),
        (40, [10, 15, 20, 25, 30, 35, 40]),
        (192, [48, 72, 96, 120, 144, 168, 192]),
    ],
)
def test_the_ramp_starts_at_a_quarter_and_grows_by_an_eighth(cap: int, expected: list[int]) -> None:
    steps = ramp(Activation([cap], always_growing()))
    assert [a for (a,) in steps] == expected


def test_eight_nodes_ramp_in_as_many_steps_as_one_and_stay_balanced() -> None:
    one = ramp(Activation([16], always_growing()))
    eight = ramp(Activation([16] * 8, always_growing()))
    assert len(eight) == len(one)
    assert all(len(set(active)) == 1 for active in eight)
    assert [active[0] for active in eight] == [a for (a,) in one]


def test_cpu_grows_when_the_gain_since_the_last_step_is_a_fifth_of_the_workers_it_added() -> None:
    """Node of 40: start 10 (a step taken at 0 cores), then +5 per step."""
    policy = Activation([40], Script([(1.75, None), (2.0, None), (2.5, None), (3.0, None)]))
    assert policy.initial() == [10]
    assert policy.check(100) == [0]  # gain 1.75 < 0.2 * 10
    assert policy.check(100) == [5]  # gain 2.0 >= 2.0: step at 2.0 cores
    assert policy.check(100) == [0]  # gain 0.5 < 0.2 * 5
    assert policy.check(100) == [5]  # gain 1.0 since the step at 2.0 (not since 2.5)
    assert policy.active == (20,)


def test_io_grows_when_the_added_workers_bring_a_fifth_of_a_workers_rate() -> None:
    """CPU stays at 0 throughout, so only the I/O signal can grow the node of 40.

    Start 10; steps of 5. After a step from ``a`` workers at rate ``r``, the
    next must come from a rate of at least ``r + 0.2 * 5 * r / a``.
    """
    readings = [0.0, 0.0, 10.0, 10.0, 10.4, 11.0, 11.2, 11.5]
    policy = Activation([40], Script([(0.0, io) for io in readings]))
    policy.initial()
    added = [policy.check(100)[0] for _ in readings]
    # 0, 0: nothing; 10: the first non-zero rate (step at 10 with 10 active:
    # 1.0 per worker, so 5 more must bring 0.2 * 5 * 1.0 = 1.0); 10: flat;
    # 10.4: +0.4 < 1.0; 11.0: +1.0 over the step's 10 (not over the previous
    # window's 10.4): step at 11.0 with 15 active, so the next must bring
    # max(0.2 * 5 * 11 / 15, 0.1 * 11) = 1.1 (the noise floor binds); 11.2, 11.5: short.
    assert added == [0, 0, 5, 0, 0, 5, 0, 0]
    assert [e.io_grows for e in policy.timeline[1:]] == [bool(a) for a in added]


def test_both_signals_are_sampled_at_every_check() -> None:
    """A step taken for the CPU moves the I/O baseline too."""
    policy = Activation([40], Script([(2.0, 10.0), (2.0, 10.5), (2.0, 11.0)]))
    policy.initial()
    first = policy.check(100)  # CPU grows (2.0 >= 0.2 * 10); I/O bootstraps too
    second = policy.check(100)  # +0.5 over the step's 10: short of 0.2 * 5 * 10 / 10
    third = policy.check(100)  # +1.0: the five added brought a fifth of a worker's rate each
    assert (first, second, third) == ([5], [0], [5])
    event = policy.timeline[1]
    assert (event.cpu_grows, event.io_grows) == (True, True)


def test_an_io_bound_stage_stalls_on_cpu_alone_and_grows_with_the_io_signal() -> None:
    """The lesson: each worker busies 0.05 cores and moves 1 MB/s; 500 partitions queued.

    With only the CPU signal the node never leaves its initial 8 of 32; with
    the I/O signal a stage whose throughput grows with its workers reaches
    the cap: 8 (the first non-zero rate) -> 12 -> ... -> 32. (A fixed "20%
    over the previous window" stopped it at 28: the step of 4 is less than
    20% of 24.)
    """
    for io, expected in ((False, [8]), (True, [8, 12, 16, 20, 24, 28, 32])):
        model = Model(lambda n, io=io: (0.05 * n, 1e6 * n if io else None))
        policy = model.policy = Activation([32], model)
        assert [a for (a,) in ramp(policy, remaining=500)] == expected


def test_noise_on_a_saturated_device_does_not_ratchet_the_ramp_up() -> None:
    """Rates within +-4% of a flat 16 MB/s, for 200 checks: after the bootstrap
    step every window is compared with the rate at that step, and no two
    windows differ by the 10% floor. (Noise wider than the floor can still
    add a step now and then: the floor is the knob.)"""
    rng = np.random.default_rng(3)
    noisy = [(0.05 * 8, 16e6 * (1 + rng.uniform(-0.04, 0.04))) for _ in range(200)]
    policy = Activation([32], Script(noisy))
    assert [a for (a,) in ramp(policy, remaining=500, checks=200)] == [8, 12]


def test_a_cpu_bound_stage_at_its_ceiling_stays_at_one_worker_per_core() -> None:
    """8 CPUs, a node of 32: the start (8) already keeps 8 cores busy; more cannot help."""
    model = Model(lambda n: (min(8.0, 1.0 * n), None))
    with_ceiling = model.policy = Activation([32], model, cpus=8)
    assert [a for (a,) in ramp(with_ceiling, remaining=500)] == [8]
    model = Model(lambda n: (min(8.0, 1.0 * n), None))
    without = model.policy = Activation([32], model)
    assert [a for (a,) in ramp(without, remaining=500)] == [8, 12]  # one wasted step


def test_io_after_a_step_taken_without_io_does_not_grow_alone() -> None:
    """Bootstrap on the first non-zero rate only; a step taken at a zero rate leaves no
    baseline, so a later burst of writes is not growth."""
    policy = Activation([40], Script([(0.0, 5.0), (0.0, 0.0), (0.0, 0.0), (0.0, 9.0)]))
    policy.initial()
    assert [policy.check(100)[0] for _ in range(4)] == [5, 0, 0, 5]
    # The bootstrap at 5; a CPU step (3 cores >= 0.2 * 5) at a zero rate; then 9 MB/s.
    policy = Activation([40], Script([(0.0, 5.0), (3.0, 0.0), (3.0, 9.0)]))
    policy.initial()
    assert [policy.check(100)[0] for _ in range(3)] == [5, 5, 0]


def test_a_saturated_device_stops_the_io_growth() -> None:
    """Throughput that stops rising with workers (a device at its limit) stops the ramp:
    16 MB/s at most, 2 MB/s per worker below that; the node of 32 stops at 12."""
    model = Model(lambda n: (0.05 * n, min(16e6, 2e6 * n)))
    policy = model.policy = Activation([32], model)
    assert [a for (a,) in ramp(policy, remaining=500)] == [8, 12]


def test_a_rejected_window_changes_and_records_nothing() -> None:
    """The guard, end to end: a 0.01 s window of 0.94 CPU seconds would read 94 cores."""
    times = iter([0.0, 0.01, 1.0]).__next__
    cpu = iter([0.0, 0.5]).__next__  # read at start and at 1.0 only
    policy = Activation([16], ProcessSignals(cpu=cpu, io=None, clock=times))
    policy.initial()
    before = list(policy.timeline)
    assert policy.check(100) == [0]
    assert policy.timeline == before and policy.active == (4,)
    assert policy.check(100) == [0]  # 0.5 cores over [0, 1]: gain 0.5 < 0.8
    assert policy.timeline[-1].cpu == 0.5


def test_growth_is_capped_by_the_partitions_not_yet_started() -> None:
    policy = Activation([16, 16, 16], always_growing())
    assert policy.initial() == [4, 4, 4]
    assert policy.check(remaining=4) == [2, 1, 1]  # fewest active first, then node order
    assert policy.check(remaining=2) == [0, 1, 1]
    assert policy.check(remaining=0) == [0, 0, 0]
    assert policy.active == (6, 6, 6)
    assert len(policy.timeline) == 4  # the capped-to-nothing check is still recorded


def test_nodes_of_different_sizes_grow_by_their_own_eighth() -> None:
    policy = Activation([16, 8], always_growing())
    assert policy.initial() == [4, 2]
    assert policy.check(100) == [2, 1]


def test_the_timeline_records_each_accepted_check_and_feeds_on_event() -> None:
    events: list[ActivationEvent] = []
    policy = Activation([16], Script([(4.0, 8.0), None, (4.3, None)]), on_event=events.append)
    policy.initial()
    policy.check(100)
    policy.check(100)
    policy.check(100)
    assert events == policy.timeline
    assert policy.timeline == [
        ActivationEvent(0.0, (4,), (4,), None, None),
        ActivationEvent(1.0, (6,), (2,), 4.0, 8.0, True, True),
        ActivationEvent(2.0, (6,), (0,), 4.3, None, False, False),
    ]


def test_full_nodes_add_nothing_more() -> None:
    policy = Activation([2], always_growing())
    policy.initial()
    policy.check(100)
    assert policy.full
    assert policy.check(100) == [0]


def test_misuse_is_refused() -> None:
    with pytest.raises(ConfigError, match="caps"):
        Activation([4, 0], always_growing())
    with pytest.raises(ConfigError, match="caps"):
        Activation([], always_growing())
    policy = Activation([4], always_growing())
    with pytest.raises(UsageError, match="initial"):
        policy.check(1)
    policy.initial()
    with pytest.raises(UsageError, match="already"):
        policy.initial()


def test_the_timeline_draws_as_a_png(tmp_path: Path) -> None:
    policy = Activation([16, 16], Script([(4.0, 1e6), (6.0, 2e6), (6.1, 2.1e6)]))
    ramp(policy, checks=3)
    path = plot_timeline(policy.timeline, tmp_path / "ramp.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UsageError, match="timeline"):
        plot_timeline([], tmp_path / "none.png")
