"""``blend_modes="defer"`` and ``reduce_deferred``: the layers hold the blend margin, and
reducing them later writes what the flow without ``defer`` writes, once, resumably."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import ConfigError, CorruptChunkError, TaskError
from chunkgraph import volume as volumes
from chunkgraph.flow import apply, reduce_deferred
from chunkgraph.flow.run import _deferred_run as reduce_module
from chunkgraph.flow.state import StateRoot
from chunkgraph.flow.state._flow_dir import FlowDir
from chunkgraph.flow.state._markers import REDUCE, TOP, MarkerStore
from chunkgraph.flow.state._status import FlowStatus, read_flow, read_flows
from chunkgraph.geometry import Box

pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")

SHAPE, CHUNKS = (40, 56), (8, 8)
# The bbox ends at dst's edge on axis 1, so one margin lies past dst (fill values).
BBOX = Box((4, 8), (36, 56))
# Two levels: the top blends (2) and is what defer leaves; the bottom crops (1). fn's
# float means are rounded into uint8 dsts: cast="unsafe" says so.
FLOW: dict[str, Any] = dict(
    chunk_sizes=[(16, 24), (10, 14)], crop_pads=[0, 1], blend_pads=[2, 0], bbox=BBOX,
    cast="unsafe",
)  # fmt: skip


def mean9(src: np.ndarray) -> np.ndarray:
    """3x3 mean, cropping one voxel: every output voxel depends on its neighbours."""
    h, w = src.shape[0] - 2, src.shape[1] - 2
    total = sum(src[i : i + h, j : j + w].astype(np.float64) for i in range(3) for j in range(3))
    return total / 9.0


def _chunk_files(path: str) -> dict[str, bytes]:
    """Every chunk file of a Zarr v3 array on disk, by its path inside the array."""
    found = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = Path(folder, name)
            found[str(full.relative_to(path))] = full.read_bytes()
    return found


def _deferred(files: Any, mode_dst: str = "uint8") -> tuple[Any, Any, Any]:
    data = files.random(SHAPE, "uint8")
    src = files.source(data, CHUNKS)
    dst = files.empty(SHAPE, CHUNKS, mode_dst)
    report = apply(
        mean9, src, dst, blend_modes=["defer", "linear"], intermediates=files.root / "t", **FLOW
    )
    return src, dst, report


@pytest.mark.parametrize("mode", ["quadratic", "max"])
def test_reducing_later_writes_what_apply_writes(files: Any, mode: str) -> None:
    src, dst, report = _deferred(files)
    assert dst.stats.bytes_written == 0
    reference = files.empty(SHAPE, CHUNKS, "uint8")
    apply(
        mean9, src, reference, blend_modes=[mode, "linear"], intermediates=files.root / "r", **FLOW
    )

    reduced = reduce_deferred(report, dst, blend_mode=mode)
    assert reduced.reductions > 0 and reduced.reductions_skipped == 0
    assert reduced.bytes_written == dst.stats.bytes_written
    # it reads every layer: the report says what (not "read 0 B", "tasks per level: []")
    assert reduced.bytes_read == sum(b for _, b, _ in reduced.task_bytes) > 0
    assert reduced.read_amplification >= 1.0
    assert "reductions of the deferred layers" in reduced.summary()
    assert "tasks per level" not in reduced.summary() and " of layers" in reduced.summary()
    # where its time went: reading layers and writing dst, no fn
    b = reduced.breakdown
    assert b is not None and b.fn_calls == 0 and b.compute_seconds == 0
    assert (
        b.decode_seconds + b.read_wait_seconds > 0 and b.encode_seconds + b.write_wait_seconds > 0
    )
    np.testing.assert_array_equal(dst.read(dst.bounds), reference.read(reference.bounds))
    assert _chunk_files(dst.path) == _chunk_files(reference.path)


def test_the_layers_hold_the_margin_past_the_bbox(files: Any) -> None:
    data = files.random(SHAPE, "int16")
    src = files.source(data, CHUNKS)
    dst = files.empty(SHAPE, CHUNKS, "int16")
    report = apply(
        lambda src: src,
        src,
        dst,
        chunk_sizes=[(16, 24)],
        blend_pads=3,
        blend_modes="defer",
        bbox=BBOX,
        intermediates=files.root / "t",
    )
    # top chunk (0, 0) wrote layer 0 over its padded box, which starts 3 before the bbox;
    # chunk (1, 1) wrote layer 3 up to 3 past dst's edge on axis 1 (fill: zeros there)
    corner = Box((1, 5), (23, 35))
    np.testing.assert_array_equal(
        volumes.open(report.deferred_layers[0]).read(corner), data[1:23, 5:35]
    )
    edge = Box((17, 29), (39, 59))
    beyond = volumes.open(report.deferred_layers[3]).read(edge)
    np.testing.assert_array_equal(beyond[:, :27], data[17:39, 29:56])
    assert not beyond[:, 27:].any()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda f: f.empty(SHAPE, CHUNKS, "int16"), r"dtype int16 \(the flow's: uint8\)"),
        (lambda f: f.empty(SHAPE, (8, 16), "uint8"), r"chunks \(8, 16\) \(the flow's: \(8, 8\)\)"),
        (lambda f: f.empty((40, 64), CHUNKS, "uint8"), r"shape \(40, 64\)"),
        (
            lambda f: f.empty(SHAPE, CHUNKS, "uint8", resolution=(4, 4)),
            r"resolution \(4.0, 4.0\) \(the flow's: \(1.0, 1.0\)\)",
        ),
    ],
    ids=["dtype", "chunks", "shape", "resolution"],
)
def test_a_wrong_dst_is_refused_before_any_write(files: Any, make: Any, message: str) -> None:
    _, _, report = _deferred(files)
    wrong = make(files)
    with pytest.raises(ConfigError, match=message):
        reduce_deferred(report, wrong)
    assert wrong.stats.bytes_written == 0
    assert not MarkerStore(StateRoot.of(str(report.intermediates))).done_keys(REDUCE)
    flow_dir = Path(str(report.intermediates))
    assert read_flow(StateRoot.of(flow_dir.parent), flow_dir.name).status is FlowStatus.DEFERRED


def test_refusals_of_what_is_not_a_finished_deferred_flow(files: Any) -> None:
    src, dst, report = _deferred(files)
    with pytest.raises(ConfigError, match=r"blend_mode='defer' cannot reduce.*linear, quadratic"):
        reduce_deferred(report, dst, blend_mode="defer")
    with pytest.raises(ConfigError, match="holds no deferred flow"):
        reduce_deferred(files.root / "nowhere" / "f00d", dst)
    plain = apply(mean9, src, dst, intermediates=files.root / "p", **FLOW)
    with pytest.raises(ConfigError, match="has no deferred layers"):
        reduce_deferred(plain, dst)
    # a top-level task whose layer is missing: apply has not finished
    markers = MarkerStore(StateRoot.of(str(report.intermediates)))
    kept = sorted(markers.done_keys(TOP))[1:]
    markers.clear((TOP,))
    markers.mark_done_many(TOP, kept, "all-but-one")
    with pytest.raises(ConfigError, match=r"unfinished: 3 of 4 .*resume=True"):
        reduce_deferred(report, dst)


def test_a_second_reduce_does_nothing_and_the_flow_is_finished(files: Any) -> None:
    _, dst, report = _deferred(files)
    first = reduce_deferred(report, dst, blend_mode="max")
    # Reduced: its layers and markers are gone, as apply's temporaries go on success.
    flow_dir = Path(str(report.intermediates))
    assert not flow_dir.exists()
    assert not any(Path(p).exists() for p in report.deferred_layers)
    assert first.intermediates is None
    state = read_flow(StateRoot.of(flow_dir.parent), flow_dir.name)
    assert state.status is FlowStatus.FINISHED
    assert not state.has_temporaries and not state.stale()
    assert state.reductions_total == first.reductions
    [listed] = read_flows(StateRoot.of(flow_dir.parent))
    assert listed.flow_id == report.flow_id and listed.status is FlowStatus.FINISHED
    assert not listed.stale()
    written = dst.stats.bytes_written
    again = reduce_deferred(report.intermediates or "", dst, blend_mode="max")
    assert again.finished_before and again.reductions == 0
    assert again.reductions_skipped == first.reductions
    assert again.bbox == first.bbox
    assert dst.stats.bytes_written == written
    also = reduce_deferred(report, dst, blend_mode="max")  # the apply's report works too
    assert also.finished_before and also.reductions == 0
    # Another mode (or dst) now would need the layers: refused, saying why.
    with pytest.raises(ConfigError, match="layers were removed"):
        reduce_deferred(report, dst, blend_mode="linear")


def test_a_failed_reduce_resumes_where_it_stopped(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, report = _deferred(files)
    reference = files.empty(SHAPE, CHUNKS, "uint8")
    apply(mean9, src, reference, blend_modes="linear", intermediates=files.root / "r", **FLOW)
    real, calls = reduce_module.reduce_box, []

    def fails_third(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk went away")
        return real(*args, **kw)

    monkeypatch.setattr(reduce_module, "reduce_box", fails_third)
    with pytest.raises(ExceptionGroup):
        reduce_deferred(report, dst, blend_mode="linear", executor="sync", retries=0)
    monkeypatch.setattr(reduce_module, "reduce_box", real)
    resumed = reduce_deferred(report, dst, blend_mode="linear")
    assert resumed.reductions_skipped == 2 and resumed.reductions > 0
    np.testing.assert_array_equal(dst.read(dst.bounds), reference.read(reference.bounds))


def _garble_a_chunk(layer: str) -> Path:
    chunk = next(p for p in sorted(Path(layer).rglob("*")) if p.is_file() and "c" in p.parts)
    chunk.write_bytes(b"garbage" * 7)
    return chunk


def _corrupt_of(info: pytest.ExceptionInfo[BaseException]) -> CorruptChunkError:
    error: BaseException = info.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    if isinstance(error, TaskError):
        assert "or delete the file" not in str(error)
        error = error.__cause__  # type: ignore[assignment]
    assert isinstance(error, CorruptChunkError)
    return error


def test_a_damaged_deferred_layer_says_to_recompute_not_to_delete(files: Any) -> None:
    _, dst, report = _deferred(files)
    chunk = _garble_a_chunk(report.deferred_layers[0])
    with pytest.raises((CorruptChunkError, BaseExceptionGroup)) as info:
        reduce_deferred(report, dst, blend_mode="linear", executor="sync", retries=0)
    error = _corrupt_of(info)
    text = str(error)
    assert report.flow_id in text and "deferred layers" in text and "damaged" in text
    assert "Do not delete the file" in text and "or delete the file" not in text
    assert "without resume=True" in text and f"chunkgraph clean {dst.path}" not in text
    assert "chunkgraph clean" in text and report.flow_id in text
    assert str(chunk) in error.files


_CALLS: list[int] = []


def mean9_failing_ninth(src: np.ndarray) -> np.ndarray:
    _CALLS.append(1)
    if len(_CALLS) == 9:  # the third top-level task (four calls each)
        raise RuntimeError("node lost")
    return mean9(src)


def test_a_damaged_temporary_layer_of_a_flow_says_to_recompute(files: Any) -> None:
    data = files.random(SHAPE, "uint8")
    src, dst = files.source(data, CHUNKS), files.empty(SHAPE, CHUNKS, "uint8")
    run: dict[str, Any] = dict(
        blend_modes=["linear", "linear"],
        intermediates=files.root / "t",
        probe=False,
        executor="sync",
        retries=0,
        **FLOW,
    )
    _CALLS.clear()
    with pytest.raises(BaseExceptionGroup):
        apply(mean9_failing_ninth, src, dst, **run)
    layers = sorted((files.root / "t").glob("*/layers/*"))
    for layer in layers:  # every layer chunk written so far
        for chunk in (p for p in layer.rglob("*") if p.is_file() and "c" in p.parts):
            chunk.write_bytes(b"garbage" * 7)
    with pytest.raises((CorruptChunkError, BaseExceptionGroup)) as info:
        apply(mean9_failing_ninth, src, dst, resume=True, **run)
    text = str(_corrupt_of(info))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "are damaged: a resume would read them again" in notes and "resume=True to" not in notes
    assert "temporary layers" in text and "damaged" in text and "Do not delete" in text
    assert "rerun apply without resume=True" in text and "chunkgraph clean" in text


def test_a_reduce_killed_while_cleaning_up_is_finished_and_the_next_call_cleans(
    files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completion record first, then the deletion: a kill in between leaves a finished flow
    (its leftovers stale), which the next call reports as done and removes."""
    _, dst, report = _deferred(files)

    def killed(_state: FlowDir) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(FlowDir, "discard", killed)
    with pytest.raises(KeyboardInterrupt):
        reduce_deferred(report, dst, blend_mode="max")
    monkeypatch.undo()
    flow_dir = Path(str(report.intermediates))
    state = read_flow(StateRoot.of(flow_dir.parent), flow_dir.name)
    assert state.status is FlowStatus.FINISHED and state.stale()
    written = dst.stats.bytes_written
    again = reduce_deferred(report, dst, blend_mode="max")
    assert again.finished_before and again.reductions == 0
    assert dst.stats.bytes_written == written
    assert not flow_dir.exists()
