"""Resume after SIGKILL of the whole process: identical output, only unfinished work reruns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tests.flow._done import done_under

from chunkgraph import volume
from chunkgraph.geometry import Box

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
SHAPE = (32, 48)
TOP_TASKS = (32 // 8) * (48 // 8)

# Run in a fresh interpreter each time, so that fn's identity (module, name, code) and
# with it the flow id are the same in the killed run and in the resumed one.
SCRIPT = """
import json, sys, time
sys.path.insert(0, {src!r})
from chunkgraph import volume

mode, root, dst_name, log = sys.argv[1:5]

def slow_affine(src):
    with open(log, "a") as f:
        f.write("call\\n")
    time.sleep(0.3)
    return src.astype("float64") * 3.0 + 1.0

src = volume.open(root + "/src.zarr")
if mode == "create":  # the script makes its own dst, as a first run usually does
    dst = volume.create(root + "/" + dst_name, src.shape, src.chunks, "float32")
else:
    dst = volume.open(root + "/" + dst_name, mode="r+")
report = volume.apply(
    slow_affine, src, dst, chunk_sizes=[(8, 8)], blend_pads=2, blend_modes="linear",
    intermediates=root + "/tmp-" + dst_name, resume=(mode == "resume"), probe=False,
)
print(json.dumps(dict(tasks=report.tasks_per_level, skipped=report.top_tasks_skipped,
                      reductions=report.reductions, reductions_skipped=report.reductions_skipped)))
"""


def _start(script: Path, mode: str, root: Path, dst: str, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), mode, str(root), dst, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _markers(root: Path, dst: str) -> int:
    return done_under(root / f"tmp-{dst}")


def _kill_mid_run(killed: subprocess.Popen[str], root: Path) -> int:
    """SIGKILL a flow once it has marked 4 top-level tasks done; how many it marked."""
    deadline = time.monotonic() + 60
    while _markers(root, "dst.zarr") < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    done_before = _markers(root, "dst.zarr")
    assert 4 <= done_before < TOP_TASKS, "the kill must land mid-run"
    return done_before


def test_resume_after_sigkill_is_identical_and_reruns_only_unfinished(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal(SHAPE).astype(np.float32)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(Box.from_shape(SHAPE), data)
    for name in ("dst.zarr", "ref.zarr"):
        volume.create(str(tmp_path / name), SHAPE, (8, 8), "float32")
    script = tmp_path / "flow_script.py"
    script.write_text(SCRIPT.format(src=str(SRC_DIR)))

    done_before = _kill_mid_run(
        _start(script, "fresh", tmp_path, "dst.zarr", tmp_path / "log1"), tmp_path
    )

    resumed = _finish(_start(script, "resume", tmp_path, "dst.zarr", tmp_path / "log2"))
    assert resumed["skipped"] == done_before
    assert resumed["tasks"] == [TOP_TASKS - done_before]
    calls = (tmp_path / "log2").read_text().count("call")
    assert calls == TOP_TASKS - done_before
    assert not any((tmp_path / "tmp-dst.zarr").glob("*/markers"))  # cleaned after success

    reference = _finish(_start(script, "fresh", tmp_path, "ref.zarr", tmp_path / "log3"))
    assert reference["tasks"] == [TOP_TASKS]
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    ref = volume.open(str(tmp_path / "ref.zarr")).read(Box.from_shape(SHAPE))
    assert np.array_equal(out, ref)
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)


def test_resume_finds_the_work_of_a_run_that_created_dst(tmp_path: Path) -> None:
    """A just-created volume and the same volume reopened must give one flow id."""
    data = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(Box.from_shape(SHAPE), data)
    script = tmp_path / "flow_script.py"
    script.write_text(SCRIPT.format(src=str(SRC_DIR)))

    done_before = _kill_mid_run(
        _start(script, "create", tmp_path, "dst.zarr", tmp_path / "log1"), tmp_path
    )

    resumed = _finish(_start(script, "resume", tmp_path, "dst.zarr", tmp_path / "log2"))
    assert resumed["skipped"] == done_before
    assert not any((tmp_path / "tmp-dst.zarr").glob("*/markers")), "the old flow is left behind"
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)


def test_flow_id_depends_on_meaning_not_on_how_objects_print(tmp_path: Path) -> None:
    from chunkgraph.flow.state._fingerprint import flow_id_of

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    made = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    reopened = volume.open(str(tmp_path / "d.zarr"), mode="r+")
    (tmp_path / "link.zarr").symlink_to(tmp_path / "d.zarr")
    linked = volume.open(str(tmp_path / "link.zarr"), mode="r+")
    ids = set()
    for dst in (made, reopened, linked):
        report = volume.apply(lambda x: x, src, dst, chunk_sizes=[8], blend_pads=2, dry_run=True)
        ids.add(report.flow_id)
    assert len(ids) == 1
    assert flow_id_of(abs, {}, made, "spec") == flow_id_of(abs, {}, reopened, "spec")


class _Scale:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x * self.factor

    def apply(self, x: np.ndarray) -> np.ndarray:
        return x * self.factor


def test_flow_id_sees_the_state_of_callable_objects_and_bound_methods() -> None:
    """Same code, other state: another flow, so resume never mixes their outputs."""
    from types import SimpleNamespace

    from chunkgraph.flow.state._fingerprint import flow_id_of
    from chunkgraph.volume import Location

    dst = SimpleNamespace(backend="zarr", path="out", shape=(4,), chunks=(2,), dtype="u1",
                          offset=(0,), resolution=(1,),
                          location=Location.of("out", "zarr"))  # fmt: skip
    ids = {
        name: flow_id_of(fn, {}, dst, "spec")  # type: ignore[arg-type]
        for name, fn in {
            "call-2": _Scale(2),
            "call-3": _Scale(3),
            "method-2": _Scale(2).apply,
            "method-3": _Scale(3).apply,
            "closure-2": (lambda m: lambda x: m(x))(_Scale(2)),
            "closure-3": (lambda m: lambda x: m(x))(_Scale(3)),
        }.items()
    }
    assert len(set(ids.values())) == len(ids)
    assert flow_id_of(_Scale(2), {}, dst, "spec") == ids["call-2"]  # type: ignore[arg-type]


def test_memory_volumes_make_flow_ids_private_to_their_process() -> None:
    import subprocess
    import sys

    script = (
        "from types import SimpleNamespace as N\n"
        "from chunkgraph.flow.state._fingerprint import flow_id_of\n"
        "from chunkgraph.volume import Location\n"
        "d = N(backend='memory', path='out', shape=(4,), chunks=(2,), dtype='u1', offset=(0,),\n"
        "      resolution=(1,), location=Location.of('out', 'memory'))\n"
        "print(flow_id_of(len, {}, d, 'spec'))\n"
    )
    ids = {
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(ids) == 2


_CALLS: list[int] = []


def test_resume_after_success_is_a_no_op(tmp_path: Path) -> None:
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    src.write(src.bounds, np.ones((16, 16), "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    calls = _CALLS  # a global: values an fn closes over are part of the flow's identity
    calls.clear()

    def double(x: np.ndarray) -> np.ndarray:
        _CALLS.append(1)
        return x * 2

    first = volume.apply(double, src, dst, chunk_sizes=[8], blend_pads=2, probe=False)
    assert first.tasks_per_level == (4,) and len(calls) == 4
    again = volume.apply(double, src, dst, chunk_sizes=[8], blend_pads=2, resume=True)
    assert again.tasks_per_level == (0,) and again.top_tasks_skipped == 4
    assert again.reductions_skipped == first.reductions and again.finished_before
    assert "already finished at" in again.summary() and len(calls) == 4
    fresh = volume.apply(double, src, dst, chunk_sizes=[8], blend_pads=2, probe=False)
    assert fresh.tasks_per_level == (4,) and len(calls) == 8  # without resume: run again


KILLED_WHILE_CLEANING = """
import os, shutil, signal, sys
sys.path.insert(0, {src!r})
import numpy as np
from chunkgraph import volume

root, mode = sys.argv[1], sys.argv[2]
if mode == "die-while-cleaning":
    # Die in the middle of deleting the temporaries, in the order some file systems list
    # them: the layers and the reductions' markers gone, the top-level markers not yet.
    plain = shutil.rmtree
    def dying_rmtree(path, *args, **kwargs):
        layers = os.path.join(path, "layers")
        if os.path.isdir(layers):
            plain(layers)
            plain(os.path.join(path, "markers", "reduce"))
            os.kill(os.getpid(), signal.SIGKILL)
        plain(path, *args, **kwargs)
    shutil.rmtree = dying_rmtree

def affine(x):
    return x * 3.0 + 1.0

src = volume.open(root + "/src.zarr")
dst = volume.open(root + "/dst.zarr", mode="r+")
volume.apply(affine, src, dst, chunk_sizes=[(8, 8)], blend_pads=2, resume=True,
             intermediates=root + "/tmp")
"""


def test_a_kill_while_deleting_temporaries_never_corrupts_a_resume(tmp_path: Path) -> None:
    data = np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32)
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(Box.from_shape(SHAPE), data)
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    script = tmp_path / "flow_script.py"
    script.write_text(KILLED_WHILE_CLEANING.format(src=str(SRC_DIR)))
    run = [sys.executable, str(script), str(tmp_path)]
    died = subprocess.run([*run, "die-while-cleaning"], capture_output=True, check=False)
    assert died.returncode == -signal.SIGKILL
    subprocess.run([*run, "resume"], capture_output=True, check=True)
    out = volume.open(str(tmp_path / "dst.zarr")).read(Box.from_shape(SHAPE))
    np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.is_dir()] == []


def scaled_failing_at(x: np.ndarray, box: Box, *, factor: float, fail_at: int) -> np.ndarray:
    """``x * factor``, except on the chunk whose read box starts at row ``fail_at``."""
    if box.start[0] == fail_at:
        raise ValueError(f"refused the chunk at row {fail_at}")
    return x * factor


def test_a_resume_with_other_fn_kwargs_says_it_starts_over_and_keeps_the_old_state(
    tmp_path: Path,
) -> None:
    """Run 1 (factor 2) fails on its last row of chunks and keeps its state; a resume with
    factor 3 is another flow: it warns, naming fn_kwargs, and leaves run 1's state alone."""
    import pytest

    from chunkgraph import flow
    from chunkgraph.flow.state import StateRoot
    from chunkgraph.flow.state._layout import default_root
    from chunkgraph.flow.state._status import read_flows

    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    src.write(src.bounds, np.ones((16, 16), "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    kw = dict(chunk_sizes=[8], executor="sync", retries=0, probe=False)
    with pytest.raises(ExceptionGroup):
        flow.apply(scaled_failing_at, src, dst, fn_kwargs={"factor": 2.0, "fail_at": 8}, **kw)
    root = default_root(str(tmp_path / "d.zarr"))
    (first,) = read_flows(StateRoot.of(root), sizes=False)
    assert first.status.value == "failed"
    kwargs = {"factor": 3.0, "fail_at": -1}
    with pytest.warns(UserWarning, match="fn_kwargs") as caught:
        report = flow.apply(scaled_failing_at, src, dst, fn_kwargs=kwargs, resume=True, **kw)
    [message] = [str(w.message) for w in caught if "resume asked for" in str(w.message)]
    assert f"flow {first.flow_id}, failed, top 2/4" in message
    assert "function (its code" not in message  # only what changed is named
    assert "starts over from nothing" in message and report.flow_id in message
    assert f"chunkgraph clean {tmp_path / 'd.zarr'} {first.flow_id}" in message
    assert report.top_tasks_skipped == 0
    np.testing.assert_array_equal(dst.read(dst.bounds), np.full((16, 16), 3.0, "float32"))
    assert first.flow_id in {s.flow_id for s in read_flows(StateRoot.of(root), sizes=False)}  # kept
    # The same parameters again: its own (finished) state is found, nothing to say.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = flow.apply(scaled_failing_at, src, dst, fn_kwargs=kwargs, resume=True, **kw)
    assert again.finished_before
    # A finished flow is named as finished; the spec's part is told apart from fn_kwargs.
    with pytest.warns(UserWarning, match="resume asked for") as caught:
        flow.apply(scaled_failing_at, src, dst, fn_kwargs=kwargs, resume=True,
                   **{**kw, "chunk_sizes": [16]})  # fmt: skip
    [message] = [str(w.message) for w in caught if "resume asked for" in str(w.message)]
    assert f"flow {report.flow_id}, finished" in message and "sizes, pads" in message
    assert "fn_kwargs" not in message


OPS_MODULE = """
import functools
import os

SCALE = {scale}


def scale(x, box):
    # Interrupts the run below row 8 while a file named "stop" lies beside this module.
    if box.start[0] >= 8 and os.path.exists(os.path.join(os.path.dirname(__file__), "stop")):
        raise RuntimeError("interrupted")
    return x * SCALE


class Scaler:
    def __call__(self, x):
        return x * SCALE


class Doubler(Scaler):  # its __call__ is inherited
    pass


halved = functools.partial(scale, box=None)
"""


def _import_ops(tmp_path: Path, scale: int, name: str) -> Any:
    """Write ``OPS_MODULE`` with ``SCALE = scale`` as ``<name>.py`` and import it afresh."""
    import importlib

    (tmp_path / f"{name}.py").write_text(OPS_MODULE.format(scale=scale))
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return importlib.import_module(name)


def test_a_resume_after_fn_s_module_changed_starts_over(tmp_path: Path, monkeypatch: Any) -> None:
    """Interrupted with SCALE = 1, resumed with SCALE = 2: the flow id covers the module's
    source, so the resume warns that the function changed and recomputes every chunk."""
    import pytest

    from chunkgraph import flow

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no stale .pyc within a second
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    src.write(src.bounds, np.ones((16, 16), "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    kw: dict[str, Any] = dict(chunk_sizes=[8], executor="sync", retries=0, probe=False)

    ops = _import_ops(tmp_path, 1, "ops_resume")
    (tmp_path / "stop").touch()
    with pytest.raises(ExceptionGroup):
        flow.apply(ops.scale, src, dst, **kw)
    (tmp_path / "stop").unlink()
    ops = _import_ops(tmp_path, 2, "ops_resume")
    with pytest.warns(UserWarning, match="resume asked for") as caught:
        report = flow.apply(ops.scale, src, dst, resume=True, **kw)
    [message] = [str(w.message) for w in caught if "resume asked for" in str(w.message)]
    assert "the source of its module" in message and "fn_kwargs" not in message
    assert report.top_tasks_skipped == 0 and report.tasks_per_level == (4,)
    np.testing.assert_array_equal(dst.read(dst.bounds), np.full((16, 16), 2.0, "float32"))


def test_the_flow_id_covers_the_module_of_partials_callables_and_classes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")

    def ids(scale: int) -> dict[str, str]:
        ops = _import_ops(tmp_path, scale, "ops_ids")
        fns = {"function": ops.scale, "partial": ops.halved, "object": ops.Scaler(),
               "inherited __call__": ops.Doubler(), "method": ops.Scaler().__call__}  # fmt: skip
        found = {
            kind: volume.apply(fn, src, dst, chunk_sizes=[8], dry_run=True).flow_id
            for kind, fn in fns.items()
        }
        from chunkgraph.flow.state._fingerprint import flow_id_of

        found["class"] = flow_id_of(ops.Scaler, {}, dst, "spec")  # a class called as fn
        return found

    first, again, edited = ids(1), ids(1), ids(2)
    assert first == again  # reimported unchanged: the same flows
    assert all(first[kind] != edited[kind] for kind in first), (first, edited)


def test_code_without_a_source_file_keeps_its_flow_id(tmp_path: Path) -> None:
    """A notebook cell or exec'd code has no module file, numpy ufuncs no source: the
    fingerprint is what the code, closure and state give, stable across calls."""
    src = volume.create(str(tmp_path / "s.zarr"), (16, 16), (8, 8), "float32")
    dst = volume.create(str(tmp_path / "d.zarr"), (16, 16), (8, 8), "float32")
    cell: dict[str, Any] = {"__name__": "__main__"}
    exec("SCALE = 2\ndef f(x):\n    return x * SCALE\n", cell)
    for fn in (cell["f"], np.negative):
        a = volume.apply(fn, src, dst, chunk_sizes=[8], dry_run=True).flow_id
        b = volume.apply(fn, src, dst, chunk_sizes=[8], dry_run=True).flow_id
        assert a == b


def _closing_over_a_module(sigma: float) -> Any:
    import scipy.ndimage as ndi

    def smooth(x: np.ndarray) -> np.ndarray:
        return ndi.gaussian_filter(x, sigma)

    return smooth


def test_an_fn_closing_over_a_module_has_a_stable_id_and_runs() -> None:
    """A module in fn's closure is named, not walked (walking scipy's crashed the id)."""
    from chunkgraph.flow.state._fingerprint import flow_id_of

    dst = volume.create("closure-dst", (8,), (4,), "float32", backend="memory")
    try:
        ids = {flow_id_of(_closing_over_a_module(s), {}, dst, "spec") for s in (1.0, 1.0)}
        other = flow_id_of(_closing_over_a_module(2.0), {}, dst, "spec")
        assert len(ids) == 1 and other not in ids
    finally:
        volume.remove("closure-dst")


def test_a_resume_whose_automatic_sizes_moved_with_memory_limit_says_how_to_pin_them(
    tmp_path: Path,
) -> None:
    """Automatic sizes come from memory_limit (8 MiB: 32^3 bottom chunks; 4 MiB: 32 x 32 x
    16), so a resume under another budget is another flow, which starts over: the warning
    says why, and how to pin the sizes."""
    import pytest

    from chunkgraph import flow

    src = volume.create(str(tmp_path / "s.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    src.write(src.bounds, np.ones(src.shape, "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    kw: dict[str, Any] = dict(crop_pads=2, executor="sync", probe=False,
                              fn_kwargs={"factor": 2.0, "fail_at": -1})  # fmt: skip
    first = flow.apply(scaled_failing_at, src, dst, memory_limit=8 << 20, **kw)
    assert first.plan is not None and first.plan.chunk_sizes[-1] == (32, 32, 32)
    with pytest.warns(UserWarning, match="resume asked for") as caught:
        report = flow.apply(scaled_failing_at, src, dst, resume=True, memory_limit=4 << 20, **kw)
    [message] = [str(w.message) for w in caught if "resume asked for" in str(w.message)]
    assert "sizes, pads" in message and "fn_kwargs" not in message
    assert "Automatic sizes depend on memory_limit" in message
    assert "give memory_limit=... or the sizes of its plan" in message
    assert report.plan is not None and report.plan.chunk_sizes[-1] == (32, 32, 16)
    np.testing.assert_array_equal(dst.read(dst.bounds), np.full(dst.shape, 2.0, "float32"))


def doubled_unless_stopped(x: np.ndarray, box: Box, *, stop: str) -> np.ndarray:
    """``x * 2``, except past z = 62 while the file ``stop`` exists."""
    if box.start[2] >= 62 and os.path.exists(stop):
        raise RuntimeError("stopped")
    return x * 2


def test_a_resume_under_the_default_memory_limit_reuses_the_unfinished_flows_sizes(
    tmp_path: Path,
) -> None:
    """Run 1 planned automatic sizes under a budget of 4 MiB (32 x 32 x 16 bottom chunks)
    and failed part way; the resume plans under the default (half the memory available,
    another power of two: 32^3 chunks), which would be another flow. It finds run 1's
    unfinished flow of the same work and resumes it with its sizes: same flow id, the
    finished top tasks skipped, no warning, the same result."""
    import warnings

    import pytest

    from chunkgraph import flow

    src = volume.create(str(tmp_path / "s.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    src.write(src.bounds, np.ones(src.shape, "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    stop = tmp_path / "stop"
    stop.touch()
    kw: dict[str, Any] = dict(crop_pads=2, executor="sync", probe=False, retries=0,
                              fn_kwargs={"stop": str(stop)})  # fmt: skip
    with pytest.raises(ExceptionGroup):
        flow.apply(doubled_unless_stopped, src, dst, memory_limit=4 << 20, **kw)
    dry = flow.apply(doubled_unless_stopped, src, dst, dry_run=True, **kw)
    assert dry.plan is not None and dry.plan.chunk_sizes[-1] == (32, 32, 32)  # the default's
    stop.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = flow.apply(doubled_unless_stopped, src, dst, resume=True, **kw)
    assert report.flow_id != dry.flow_id
    assert report.plan is not None and report.plan.chunk_sizes[-1] == (32, 32, 16)
    assert report.top_tasks_skipped == 4 and report.tasks_per_level[0] == 4
    np.testing.assert_array_equal(dst.read(dst.bounds), np.full(dst.shape, 2.0, "float32"))


def test_a_resume_with_other_pads_does_not_take_an_unfinished_flows_sizes(
    tmp_path: Path,
) -> None:
    """Run 1 (crop 2) failed part way; run 2 asks for crop 3 with resume=True. The
    unfinished flow is the same fn, inputs and dst, but not the same work: its recorded
    pads are not the ones asked for, so run 2 is a flow of its own (crop 3), not run 1's
    continued with crop 2."""
    import pytest

    from chunkgraph import flow

    src = volume.create(str(tmp_path / "s.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    src.write(src.bounds, np.ones(src.shape, "float32"))
    dst = volume.create(str(tmp_path / "d.zarr"), (64, 64, 128), (16, 16, 16), "float32")
    stop = tmp_path / "stop"
    stop.touch()
    kw: dict[str, Any] = dict(executor="sync", probe=False, retries=0,
                              fn_kwargs={"stop": str(stop)})  # fmt: skip
    with pytest.raises(ExceptionGroup):
        flow.apply(doubled_unless_stopped, src, dst, crop_pads=2, memory_limit=4 << 20, **kw)
    stop.unlink()
    dry = flow.apply(doubled_unless_stopped, src, dst, crop_pads=3, dry_run=True, **kw)
    report = flow.apply(doubled_unless_stopped, src, dst, crop_pads=3, resume=True, **kw)
    assert report.flow_id == dry.flow_id and report.top_tasks_skipped == 0
    assert report.plan is not None and report.plan.crop_pads[-1] == (3, 3, 3)
