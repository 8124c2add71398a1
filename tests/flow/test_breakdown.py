"""A flow run's breakdown: where its time and memory went (``ApplyReport.breakdown``).

``time.sleep`` inside fn is the work measured here (its wall is known), not a wait of
the test's.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

import chunkgraph as cg
from chunkgraph import cli, volume
from chunkgraph.flow import Breakdown
from chunkgraph.report import Recorder, load_report, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SLEEP = 0.01  # seconds of fn's "work" per call


def _volumes(tmp_path: Path, shape: tuple[int, ...]) -> tuple[volume.Volume, volume.Volume]:
    data = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    src = volume.create(str(tmp_path / "src.zarr"), shape, (16,) * len(shape), "float32")
    src.write(src.bounds, data)
    dst = volume.create(str(tmp_path / "dst.zarr"), shape, (16,) * len(shape), "float32")
    return src, dst


def _sleepy(x: np.ndarray) -> np.ndarray:
    time.sleep(SLEEP)
    return x + 1


def _slot_terms_add_up(b: Breakdown) -> None:
    terms = b.terms()
    assert all(seconds >= 0 for seconds in terms.values())
    assert sum(terms.values()) - b.overlap_seconds == pytest.approx(
        b.slots * b.wall_seconds, rel=1e-6, abs=1e-6
    )


def test_a_sleep_in_fn_is_compute_and_the_reads_and_writes_are_timed(tmp_path: Path) -> None:
    src, dst = _volumes(tmp_path, (32, 32, 32))
    report = cg.flow.apply(
        _sleepy, src, dst, chunk_sizes=[(32, 32, 32), (16, 16, 16)],
        run=cg.RunOptions(workers=2, progress=False, probe=False),
    )  # fmt: skip
    b = report.breakdown
    assert b is not None and b.fn_calls == 8 and b.slots == 2
    # No pads: every voxel fn is given is needed, nothing is redundant.
    assert b.redundant_seconds == 0
    assert b.compute_seconds >= 8 * SLEEP
    # A sleep takes no CPU: fn's time is its wall, not a decode or a wait.
    assert b.fn_cpu_seconds < 0.5 * b.compute_seconds
    assert b.decode_seconds + b.read_wait_seconds > 0  # the top task's read
    assert b.encode_seconds + b.write_wait_seconds > 0  # its layer, the reductions' dst
    assert b.in_process and b.peak_rss_bytes >= b.baseline_rss_bytes > 0
    assert b.in_flight_bytes > 0
    _slot_terms_add_up(b)
    assert "time on 2 slots" in report.summary() and "peak RSS" in report.summary()


def test_a_slot_with_nothing_to_do_is_idle(tmp_path: Path) -> None:
    """One chunk, one call of fn on two slots: the other slot idles the whole call."""
    src, dst = _volumes(tmp_path, (16, 16))
    seconds = 0.2

    def slow(x: np.ndarray) -> np.ndarray:
        time.sleep(seconds)
        return x

    report = cg.flow.apply(
        slow, src, dst, chunk_sizes=[(16, 16)], run=cg.RunOptions(workers=2, progress=False)
    )
    b = report.breakdown
    assert b is not None and b.fn_calls == 1
    assert b.compute_seconds == pytest.approx(seconds, abs=0.1)
    assert b.idle_seconds >= seconds * 0.75  # the second slot, all through the call
    _slot_terms_add_up(b)


def test_crop_pads_are_redundant_compute_in_the_ratio_of_the_volumes(tmp_path: Path) -> None:
    """16^3 bottom chunks with an 8-voxel crop: fn is given 32^3 to keep 16^3, so 7/8
    of its time is on margins cut off again."""
    src, dst = _volumes(tmp_path, (32, 32, 32))
    report = cg.flow.apply(
        _sleepy, src, dst, chunk_sizes=[(32, 32, 32), (16, 16, 16)], crop_pads=[0, 8],
        run=cg.RunOptions(workers=2, progress=False, probe=False),
    )  # fmt: skip
    b = report.breakdown
    assert b is not None
    fn_wall = b.compute_seconds + b.redundant_seconds
    assert b.redundant_seconds / fn_wall == pytest.approx(1 - 16**3 / 32**3)
    assert fn_wall >= 8 * SLEEP
    _slot_terms_add_up(b)


def test_the_breakdown_goes_into_report_json_and_the_report_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _volumes(tmp_path, (32, 32))
    recorder = Recorder()
    report = cg.flow.apply(
        _sleepy, src, dst, chunk_sizes=[(32, 32), (16, 16)], crop_pads=[0, 4],
        run=cg.RunOptions(workers=2, progress=False, subscribers=(recorder,)),
    )  # fmt: skip
    assert report.breakdown is not None
    folder = write_report(tmp_path / "report", recorder, {"breakdown": report.breakdown.as_json()})
    again = Breakdown.from_json(load_report(folder)["summary"]["breakdown"])
    for name, seconds in report.breakdown.terms().items():
        assert again.terms()[name] == pytest.approx(seconds, abs=1e-6)
    # Four bottom chunks; the first one's output is the probe's, computed before the tasks.
    assert again.fn_calls == report.breakdown.fn_calls == 3
    assert again.peak_rss_bytes == report.breakdown.peak_rss_bytes
    assert (folder / "breakdown.png").read_bytes()[:8] == PNG_SIGNATURE
    capsys.readouterr()
    assert cli.main(["report", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert "where the time went: 2 slots" in shown
    for label in ("compute", "redundant", "decode", "read wait", "encode", "idle"):
        assert f"\n    {label} " in shown
    assert "fn: 3 calls" in shown and "peak RSS" in shown


def test_a_report_without_a_breakdown_draws_no_breakdown_chart(tmp_path: Path) -> None:
    graph = cg.Graph()
    one = graph.add(lambda: 1, name="one")
    recorder = Recorder()
    cg.run(graph, one, executor="sync", subscribers=[recorder])
    folder = write_report(tmp_path / "report", recorder, {})
    assert not (folder / "breakdown.png").exists()


def test_a_sync_run_has_one_slot(tmp_path: Path) -> None:
    """The sync executor runs one task at a time: its breakdown counts one slot, not the
    cores the flow planned for, so no idle slot is invented."""
    src, dst = _volumes(tmp_path, (32, 32, 32))
    report = cg.flow.apply(
        _sleepy, src, dst, chunk_sizes=[(16, 16, 16)],
        run=cg.RunOptions(executor="sync", workers=2, probe=False),
    )  # fmt: skip
    b = report.breakdown
    assert b is not None and b.slots == 1
    _slot_terms_add_up(b)
    assert "time on 1 slot x" in b.line() and "1 slots" not in report.summary()


# A breakdown as report.json held it before its shares were of one total: waits overlapped
# compute (threads reading while others computed), so the terms add up to 2.3 slot-s of
# the 2 slots x 1 s, and the old line said "compute 60%, ..., overlapping 15%" (130%).
OLD_OVERLAPPING = {
    "slots": 2, "wall_seconds": 1.0, "setup_seconds": 0.05, "compute_seconds": 1.2,
    "redundant_seconds": 0.0, "decode_seconds": 0.3, "read_wait_seconds": 0.6,
    "encode_seconds": 0.1, "write_wait_seconds": 0.1, "other_seconds": 0.0,
    "idle_seconds": 0.0, "overlap_seconds": 0.3, "fn_cpu_seconds": 1.1, "fn_calls": 8,
    "peak_rss_bytes": 200 << 20, "baseline_rss_bytes": 150 << 20, "cache_bytes": 0,
    "in_flight_bytes": 64 << 20, "in_process": True,
}  # fmt: skip


def _percents(text: str) -> list[float]:
    return [float(p) for p in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def test_shares_are_of_one_total_and_add_up_to_100_with_the_overlap_said_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report written before loads; its line and its table give each term's share of
    the terms' sum (100% in all), and say apart how far the work passed the slots' time."""
    b = Breakdown.from_json(OLD_OVERLAPPING)
    assert b.as_json() == OLD_OVERLAPPING  # the same fields, read and written back
    line = b.line()
    assert line.startswith("time on 2 slots x 1.00 s: compute 52%, decode 13%, read wait 26%")
    shares, said_apart = line.split(" (", 1)
    assert sum(_percents(shares)) == 100 and "overlapping" not in line
    assert "2.30 slot-s" in said_apart and "1.15x" in said_apart
    assert sum(_percents(Breakdown(slots=3, wall_seconds=1.0, compute_seconds=1.0,
                                   idle_seconds=2.0).line())) == 100  # fmt: skip

    folder = write_report(tmp_path / "report", Recorder(), {"breakdown": OLD_OVERLAPPING})
    capsys.readouterr()
    assert cli.main(["report", str(folder)]) == 0
    shown = capsys.readouterr().out
    rows = [r for r in shown.splitlines() if r.startswith("    ") and "%" in r]
    assert len(rows) == 8 and sum(_percents("\n".join(rows))) == pytest.approx(100.0)
    assert "1.15x" in shown and "2.300 slot-s" in shown
