"""Non-trivial functions through the flow: pointwise, stencil, failures, defer, dry run."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph._errors import ConfigError, TaskError
from chunkgraph.flow.run._subchunk import FlowOutputError
from chunkgraph.geometry import Box
from chunkgraph.volume import apply


def affine(src: np.ndarray) -> np.ndarray:
    return src.astype(np.float64) * 2.5 - 7.0


@pytest.mark.parametrize("mode", ["linear", "quadratic", "bump"])
def test_pointwise_with_blending_matches_whole_array(files: Any, mode: str) -> None:
    data = files.random((24, 20, 28), "float32")
    src = files.source(data, (8, 8, 8))
    dst = files.empty((24, 20, 28), (8, 8, 8), "float32")
    apply(
        affine,
        src,
        dst,
        chunk_sizes=[(12, 10, 14), (9, 8, 10)],
        crop_pads=[(1, 1, 1), (0, 0, 0)],
        blend_pads=[(2, 2, 2), (1, 1, 1)],
        blend_modes=mode,
        intermediates=files.root / "tmp",
    )
    expected = affine(data).astype(np.float32)
    np.testing.assert_allclose(dst.read(Box((0, 0, 0), (24, 20, 28))), expected, rtol=1e-6)


def mean27(src: np.ndarray) -> np.ndarray:
    """3x3x3 mean over the valid region (shape shrinks by 1 per side), fixed summation order."""
    x = src.astype(np.float64)
    n0, n1, n2 = (s - 2 for s in x.shape)
    total = np.zeros((n0, n1, n2))
    for a in range(3):
        for b in range(3):
            for c in range(3):
                total += x[a : a + n0, b : b + n1, c : c + n2]
    return total / 27.0


def mean27_padded(src: np.ndarray) -> np.ndarray:
    """The same mean, returned at the input's shape (edge voxels keep their input)."""
    out = src.astype(np.float64).copy()
    out[1:-1, 1:-1, 1:-1] = mean27(src)
    return out


@pytest.mark.parametrize("crop, fn", [(1, mean27), (2, mean27_padded)])
def test_stencil_with_crop_equals_whole_array_in_interior(files: Any, crop: int, fn: Any) -> None:
    shape = (24, 20, 28)
    data = files.random(shape, "float32")
    src = files.source(data, (8, 8, 8))
    dst = files.empty(shape, (8, 8, 8), "float64")
    apply(
        fn,
        src,
        dst,
        chunk_sizes=[(12, 10, 14), (6, 5, 7)],
        crop_pads=[(0, 0, 0), (crop,) * 3],
        intermediates=files.root / "tmp",
    )
    whole = mean27(data)  # covers [1, s - 1) on every axis
    out = dst.read(Box((1, 1, 1), tuple(s - 1 for s in shape)))
    assert np.array_equal(out, whole)  # exactly, not approximately


@pytest.mark.parametrize("probe", [True, False])
def test_failing_fn_raises_task_error_naming_the_box(files: Any, probe: bool) -> None:
    data = files.random((16, 16), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((16, 16), (8, 8), "float32")

    def explode(src: np.ndarray) -> np.ndarray:
        raise ZeroDivisionError("boom")

    with pytest.raises(ExceptionGroup) as info:
        apply(explode, src, dst, chunk_sizes=[(8, 8)], intermediates=files.root / "t", probe=probe)
    errors = info.value.exceptions
    assert all(isinstance(e, TaskError) for e in errors)
    names = {e.task for e in errors}
    assert ("apply-probe" if probe else "apply-top") + str(Box((0, 0), (8, 8))) in names
    # The probe fails before anything exists; a failed run keeps its state for resume.
    assert (files.root / "t").exists() is not probe
    cause = errors[0].__cause__
    assert isinstance(cause, ZeroDivisionError)
    assert any("chunk Box(" in note for note in getattr(cause, "__notes__", []))


def test_wrong_output_shape_names_the_chunk(files: Any) -> None:
    data = files.random((16, 16), "float32")
    src = files.source(data, (8, 8))
    dst = files.empty((16, 16), (8, 8), "float32")

    with pytest.raises(ExceptionGroup) as info:
        apply(
            lambda src: src[:-1],
            src,
            dst,
            chunk_sizes=[(8, 8)],
            crop_pads=1,
            intermediates=files.root / "tmp",
        )
    cause = info.value.exceptions[0].__cause__
    assert isinstance(cause, FlowOutputError)
    assert "Box(start=(" in str(cause) and "(9, 10)" in str(cause)


def test_non_numeric_output_is_rejected(files: Any) -> None:
    src = files.source(files.random((8, 8), "uint8"), (8, 8))
    dst = files.empty((8, 8), (8, 8), "uint8")
    with pytest.raises(ExceptionGroup) as info:
        apply(
            lambda src: src.astype(complex),
            src,
            dst,
            chunk_sizes=[(8, 8)],
            intermediates=files.root / "tmp",
        )
    assert isinstance(info.value.exceptions[0].__cause__, FlowOutputError)


def test_config_error_before_any_write(files: Any) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError):
        apply(
            lambda src: src,
            src,
            dst,
            chunk_sizes=[(8, 8)],
            blend_pads=5,
            intermediates=files.root / "tmp",
        )
    assert not (files.root / "tmp").exists()
    assert dst.stats.bytes_written == 0


def test_defer_leaves_the_layers_unreduced(files: Any) -> None:
    data = files.random((16, 24), "int16")
    src = files.source(data, (8, 8))
    dst = files.empty((16, 24), (8, 8), "int16")
    report = apply(
        lambda src: src,
        src,
        dst,
        chunk_sizes=[(8, 12)],
        blend_pads=2,
        blend_modes="defer",
        intermediates=files.root / "tmp",
    )
    assert report.reductions == 0
    assert len(report.deferred_layers) == 4
    assert all(Path(p).exists() for p in report.deferred_layers)
    assert dst.stats.bytes_written == 0
    from chunkgraph import volume

    # chunk (0, 1) wrote its padded output, unweighted, into layer (0 % 2, 1 % 2) = 2
    layer = volume.open(report.deferred_layers[2])
    part = Box((0, 10), (10, 26)).intersection(Box((0, 0), (16, 24)))
    np.testing.assert_array_equal(layer.read(part), data[part.slices()])


def test_dry_run_writes_nothing_and_counts(files: Any, tmp_path: Path) -> None:
    src = files.source(files.random((16, 24), "uint8"), (8, 8))
    dst = files.empty((16, 24), (8, 8), "uint8")
    report = apply(
        lambda src: src,
        src,
        dst,
        chunk_sizes=[(8, 12), (4, 4)],
        blend_pads=[(2, 2), (0, 0)],
        dry_run=True,
        intermediates=files.root / "tmp",
    )
    assert report.dry_run and report.estimate is not None
    assert report.tasks_per_level[0] == 4
    assert report.bytes_read == 0 and dst.stats.bytes_written == 0
    assert not (files.root / "tmp").exists()


def test_flow_id_is_stable_and_sensitive(files: Any) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8))
    dst = files.empty((16, 16), (8, 8), "uint8")
    kw: dict[str, Any] = dict(chunk_sizes=[(8, 8)], dry_run=True)
    a = apply(affine, src, dst, **kw).flow_id
    assert a == apply(affine, src, dst, **kw).flow_id
    assert a != apply(mean27, src, dst, **kw).flow_id
    assert a != apply(affine, src, dst, chunk_sizes=[(8, 8)], crop_pads=1, dry_run=True).flow_id


def test_process_executor_gives_the_same_result(files: Any) -> None:
    """Jobs (fn, volumes by path, layer plan) travel to worker processes and back.

    fn must be importable by the workers: a partial of a numpy ufunc is.
    """
    scale = functools.partial(np.multiply, 2.5)
    data = files.random((24, 20, 28), "float32")
    src = files.source(data, (8, 8, 8))
    outs = []
    for executor in ("threads", "processes"):
        dst = files.empty((24, 20, 28), (8, 8, 8), "float32")
        report = apply(
            scale,
            src,
            dst,
            chunk_sizes=[(12, 10, 14), (9, 8, 10)],
            crop_pads=[(1, 1, 1), (0, 0, 0)],
            blend_pads=[(2, 2, 2), (1, 1, 1)],
            executor=executor,
            intermediates=files.root / executor,
        )
        assert report.tasks_per_level == (8, 64)
        assert report.bytes_read > 0
        outs.append(dst.read(Box((0, 0, 0), (24, 20, 28))))
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[1], data * np.float32(2.5), rtol=1e-6)


def test_dry_run_predicts_the_run(files: Any) -> None:
    data = files.random((40, 36), "uint8")
    src = files.source(data, (8, 8))
    dst = files.empty((40, 36), (8, 8), "uint8")
    kw: dict[str, Any] = dict(
        chunk_sizes=[(20, 18), (10, 14)],
        crop_pads=[(2, 2), (1, 1)],
        blend_pads=[(3, 3), (2, 3)],
        bbox=Box((0, 0), (40, 36)),
        intermediates=files.root / "tmp",
    )
    dry = apply(lambda src: src, src, dst, dry_run=True, **kw)
    real = apply(lambda src: src, src, dst, **kw)
    assert dry.tasks_per_level == real.tasks_per_level
    assert dry.reductions == real.reductions
    assert dry.flow_id == real.flow_id


def test_process_executor_refuses_memory_volumes(files: Any) -> None:
    src = files.source(files.random((16, 16), "uint8"), (8, 8), backend="memory")
    dst = files.empty((16, 16), (8, 8), "uint8")
    with pytest.raises(ConfigError, match="memory volumes"):
        apply(lambda src: src, src, dst, chunk_sizes=[(8, 8)], executor="processes")


def _label_or_empty(kind: str) -> Any:
    """A labelling fn as people write it: uint8 zeros where nothing is found.

    Empty chunks answer at once and the others after a pause, so an empty
    chunk is the first of its level to finish.
    """

    def fn(src: np.ndarray) -> np.ndarray:
        if not src.any():
            return np.zeros_like(src, dtype=np.uint8)
        import time

        time.sleep(0.01)
        if kind == "labels":
            return (src.astype(np.uint32) + 1000) * (src > 0)
        return np.where(src > 0, 300.5, 0.0)

    return fn


@pytest.mark.parametrize(
    ("kind", "dtype", "blend"),
    [("labels", "uint32", 0), ("labels", "uint32", 2), ("values", "float32", 2)],
    ids=["labels", "labels-top-blend-max", "fractions-top-blend"],
)
def test_outputs_are_assembled_in_the_flows_dtype_not_the_first_chunks(
    files: Any, kind: str, dtype: str, blend: int
) -> None:
    top = 16 if blend == 0 else 12  # the padded top chunk is tiled by 8s either way
    n = 2 * top
    # Empty where a top-level task's first bottom chunk reads, set elsewhere.
    pos = (np.arange(n) + blend) % top < 8
    data = np.where(pos[:, None] & pos[None, :], 0, 7).astype(np.uint8)
    src = files.source(data, (8, 8))
    dst = files.empty((n, n), (8, 8), dtype)
    apply(
        _label_or_empty(kind),
        src,
        dst,
        chunk_sizes=[(top, top), (8, 8)],
        blend_pads=[blend, 0],
        blend_modes="max" if kind == "labels" else "linear",
        intermediates=files.root / "tmp",
    )
    out = dst.read(Box((0, 0), (n, n)))
    if kind == "labels":
        expected = np.where(data > 0, 1007, 0).astype(np.uint32)
        np.testing.assert_array_equal(out, expected)
    else:
        np.testing.assert_allclose(out, np.where(data > 0, 300.5, 0.0), rtol=1e-6)
