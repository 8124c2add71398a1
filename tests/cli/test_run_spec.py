"""``chunkgraph run SPEC.yaml`` and ``chunkgraph spec-schema``.

Each test works in its own directory holding ``raw.zarr`` (32³ float32, storage
chunks 16³, values in [0, 1)), a copy of ``spec_functions.py`` (found beside
the spec, as a user's module would be) and the spec. Most run ``cli.main`` in
this process; the process executor and Ctrl-C go through the installed
``chunkgraph`` command.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from chunkgraph import cli, flow, volume
from chunkgraph.cli._spec import BoxSpec, OutputSpec, RunDefaults, RunSpec, parse_spec
from chunkgraph.flow.plan._options import DEFAULT_RETRIES
from chunkgraph.flow.state import flows_for

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "docs" / "spec-example.yaml"
CHUNKGRAPH = Path(sys.executable).parent / "chunkgraph"

OUTPUT = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"


def write(directory: Path, text: str, name: str = "spec.yaml") -> str:
    (directory / name).write_text(text)
    return str(directory / name)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["run", "--quiet", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read(path: Path) -> np.ndarray:
    v = volume.open(path)
    return v.read(v.bounds)


def test_elementwise_function_matches_numpy(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\n"
        "kwargs: {factor: 3.0, offset: 1.0}\nchunk_sizes: [16]\n",
    )
    code, out, err = run(capsys, spec)
    assert code == 0, err
    assert "tasks per level: [8]" in out
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 3 + 1)


def test_gaussian_with_crop_pads_equals_the_whole_array_filter(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sigma 1 reaches 4 voxels (truncate=4): crop 4 gives each chunk all it needs."""
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\nkwargs: {sigma: 1.0}\n"
        "chunk_sizes: [[16, 16, 16], 8]\ncrop_pads: [0, 4]\nrun: {executor: sync}\n",
    )
    code, out, err = run(capsys, spec)
    assert code == 0, err
    assert "tasks per level: [8, 64]" in out
    # Outside the volume the input reads as its fill value, 0: the constant mode.
    want = gaussian_filter(read(work / "raw.zarr"), sigma=1.0, mode="constant")
    np.testing.assert_allclose(read(work / "out.zarr"), want, rtol=0, atol=1e-6)


def test_named_inputs_are_keyword_arguments(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(
        work,
        "inputs: {a: raw.zarr, b: raw.zarr}\n" + OUTPUT + "function: spec_functions:add\n"
        "chunk_sizes: [32]\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)


def test_a_kwarg_named_as_an_input_is_a_spec_error(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fn gets the input's array by that keyword at every call: the kwarg would be lost."""
    spec = write(
        work,
        "inputs: {a: raw.zarr, b: raw.zarr}\n" + OUTPUT + "function: spec_functions:add\n"
        "kwargs:\n  b: 3\nchunk_sizes: [32]\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 2
    assert f"{spec}:5: kwargs.b: fn_kwargs['b'] clashes with input 'b'" in err, err
    assert not (work / "out.zarr").exists()


def test_command_line_overrides_the_run_defaults(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "pids").mkdir()
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:record_pid\n"
        f"kwargs: {{directory: {work / 'pids'}}}\n"
        "chunk_sizes: [16]\nrun: {executor: processes, workers: 2}\n",
    )
    code, _, err = run(capsys, spec, "--executor", "sync")
    assert code == 0, err
    assert [p.name for p in (work / "pids").iterdir()] == [str(os.getpid())]


def test_the_adaptive_executor_runs_a_spec_with_a_report(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\n"
        "kwargs: {factor: 2.0, offset: 0.0}\nchunk_sizes: [16]\nrun: {executor: adaptive}\n",
    )
    code, _, err = run(capsys, spec, "--report", str(work / "report"))
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)
    assert "activation" in json.loads((work / "report" / "report.json").read_text())


def test_an_executor_must_be_a_kind_or_a_scheduler_address(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(work, "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\n"
                 "chunk_sizes: [16]\n")  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        run(capsys, spec, "--executor", "bogus")
    assert exited.value.code == 2
    assert "tcp://host:8786" in capsys.readouterr().err
    bad = write(work, "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\n"
                "chunk_sizes: [16]\nrun: {executor: fastest}\n")  # fmt: skip
    code, _, err = run(capsys, bad)
    assert code == 2 and "executor" in err
    assert not (work / "out.zarr").exists()


GOOD = {
    "input": "input: raw.zarr",
    "output": OUTPUT.strip(),
    "function": "function: spec_functions:smooth",
    "chunk_sizes": "chunk_sizes: [16]",
}


def spec_with(**changes: str) -> str:
    """The GOOD spec, one line per key, with some lines replaced (or removed by "")."""
    lines = {**GOOD, **changes}
    return "".join(f"{line}\n" for line in lines.values() if line)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(spec_with(extra="colour: red"), ":5: colour: unknown key", id="unknown-key"),
        pytest.param(
            spec_with(output="output:\n  path: out.zarr\n  dtype: float32\n  chunks: [16, x, 16]"),
            ":5: output.chunks.1: Input should be a valid integer, got 'x'",
            id="wrong-type",
        ),
        pytest.param(
            spec_with(output="output: {path: out.zarr, chunks: [16, 16, 16]}"),
            ":2: output.dtype: needed to create the output",
            id="missing-dtype",
        ),
        pytest.param(
            spec_with(function="function: no_such_module:f"),
            ":3: function: cannot import module 'no_such_module'",
            id="unimportable",
        ),
        pytest.param(
            spec_with(function="function: spec_functions:smoothe"),
            ":3: function: 'spec_functions' has no attribute 'smoothe'",
            id="missing-attribute",
        ),
        pytest.param(
            spec_with(function="function: spec_functions:NOT_CALLABLE"),
            ":3: function: spec_functions:NOT_CALLABLE is not callable",
            id="not-callable",
        ),
        pytest.param(
            spec_with(function="function: smooth"),
            ':3: function: should be "package.module:function"',
            id="no-colon",
        ),
        pytest.param(
            spec_with(extra="kwargs:\n  sigmaa: 2"),
            ":6: kwargs.sigmaa: spec_functions:smooth has no parameter 'sigmaa'",
            id="unknown-kwarg",
        ),
        pytest.param(
            spec_with(input="input: nowhere.zarr"),
            ":1: input: cannot open input volume: no volume at",
            id="missing-input",
        ),
        pytest.param(
            spec_with(extra="inputs: {a: raw.zarr}"),
            ":1: give exactly one of `input: PATH`",
            id="input-and-inputs",
        ),
        pytest.param(
            spec_with(extra="chunk_sizes: [8]"), ":5: chunk_sizes: given twice", id="duplicate"
        ),
        pytest.param(
            spec_with(extra="crop_pads: [0, [2, 2]]"),
            ":5: crop_pads: crop_pads = [0, (2, 2)] has 2 entries but there are 1 levels",
            id="flow-check",
        ),
        pytest.param("input: [unclosed\n", ":2: not valid YAML", id="yaml-syntax"),
        pytest.param(
            spec_with(extra="cast: equiv"),
            ":5: cast: Input should be 'safe', 'same_kind' or 'unsafe', got 'equiv'",
            id="cast",
        ),
        pytest.param(
            spec_with(chunk_sizes="chunk_sizes:\n  - 16\n  - 12"),
            ":6: chunk_sizes.1: level 1's chunk (12, 12, 12) does not divide",
            id="divisibility",
        ),
        pytest.param(
            spec_with(chunk_sizes="chunk_sizes: [16, 12]"),
            ":4: chunk_sizes.1: level 1's chunk (12, 12, 12) does not divide",
            id="divisibility-flow-style",
        ),
    ],
)
def test_spec_errors_name_field_and_line_and_write_nothing(
    work: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    spec = write(work, text)
    code, _, err = run(capsys, spec)
    assert code == 2
    assert f"{spec}{expected}" in err, err
    assert "nothing was run" in err
    assert not (work / "out.zarr").exists()


def test_existing_output_of_another_dtype_is_refused_unless_overwritten(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    volume.create(work / "out.zarr", (32, 32, 32), (16, 16, 16), "uint8")
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 2
    assert ":2: output.dtype: the existing output has dtype uint8, not float32" in err
    overwrite = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16], exists: overwrite}"
    spec = write(work, spec_with(output=overwrite, function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)


def test_an_existing_output_of_another_shape_is_refused_unless_used_as_it_is(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec gives no shape: it would create the output with the input's (32^3). An
    existing 16x32x32 output is not that one; running into it would compute half."""
    volume.create(work / "out.zarr", (16, 32, 32), (16, 16, 16), "float32")
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 2
    assert "output.shape: the existing output has shape [16, 32, 32], not the input's" in err
    use = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16], exists: use}"
    spec = write(work, spec_with(output=use, function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr")[:16] * 2)


@pytest.mark.parametrize("exists", ["", ", exists: use", ", exists: overwrite"])
def test_an_output_path_that_is_a_file_or_another_directory_is_refused(
    work: Path, capsys: pytest.CaptureFixture[str], exists: str
) -> None:
    np.save(work / "raw.npy", np.zeros(3))
    (work / "notes").mkdir()
    (work / "notes" / "keep.txt").write_text("keep me")
    said = {
        "raw.npy": "is a file, not a volume directory",
        "notes": "is a directory that holds files but no volume (no zarr.json, Zarr v2",
    }
    for name, message in said.items():
        output = f"output: {{path: {name}, dtype: float32, chunks: [16, 16, 16]{exists}}}"
        spec = write(work, spec_with(output=output))
        code, _, err = run(capsys, spec)
        assert code == 2, err
        assert f"{spec}:2: output.path: '{(work / name).resolve()}' {message}" in err, err
        assert "Traceback" not in err
    assert (work / "notes" / "keep.txt").read_text() == "keep me"
    assert np.load(work / "raw.npy").shape == (3,)
    # an empty directory is free for the output
    (work / "empty").mkdir()
    spec = write(work, spec_with(output=OUTPUT.strip().replace("out.zarr", "empty")))
    code, _, err = run(capsys, spec)
    assert code == 0, err


@pytest.mark.parametrize("prefix", ["precomputed://", "n5://"])
def test_an_existing_volume_of_another_format_at_a_bare_output_path_is_written_into(
    work: Path, capsys: pytest.CaptureFixture[str], prefix: str
) -> None:
    """A bare path opens as whatever format is there, as an input's does."""
    volume.create(f"{prefix}{work / 'made'}", (32, 32, 32), (16, 16, 16), "float32")
    output = "output: {path: made, dtype: float32, chunks: [16, 16, 16], exists: use}"
    spec = write(work, spec_with(output=output, function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 0, err
    made = volume.open(f"{prefix}{work / 'made'}")
    np.testing.assert_array_equal(made.read(made.bounds), read(work / "raw.zarr") * 2)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_an_output_created_meanwhile_by_another_run_is_used_when_it_matches(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    """Another run creates the output between this run's check and its creation."""
    from chunkgraph.cli import _cmd_run

    checked = _cmd_run._check_flow

    def check_then_other_run(resolved: Any, options: dict[str, Any]) -> Any:
        report = checked(resolved, options)
        volume.create(resolved.output.path, **{**resolved.output.create_args, "dtype": dtype})
        return report

    monkeypatch.setattr(_cmd_run, "_check_flow", check_then_other_run)
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    if dtype == "float32":
        assert code == 0, err
        np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)
    else:
        assert code == 2, err
        assert f"{spec}:2: output.path: created meanwhile by another process" in err
        assert "uint8" in err and "Traceback" not in err
        assert not read(work / "out.zarr").any()


def test_create_with_exist_ok_opens_a_volume_created_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The existence check saw nothing; another process created it before this creation."""
    from chunkgraph.volume import _registry

    path = tmp_path / "v.zarr"
    volume.create(path, (8, 8), (4, 4), "uint8")
    calls = []

    def not_yet_then_there(name: str) -> bool:
        calls.append(name)
        return len(calls) > 1  # absent at the check, there when the creation fails

    monkeypatch.setattr(_registry, "_is_on_disk", not_yet_then_there)
    opened = volume.create(path, (8, 8), (4, 4), "uint8", exist_ok=True)
    assert opened.shape == (8, 8)


def test_the_output_is_created_at_the_inputs_resolution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(HERE / "spec_functions.py", tmp_path)
    raw = volume.create(
        tmp_path / "raw.zarr", (32, 32, 32), (16, 16, 16), "float32", resolution=(40, 4, 4)
    )
    raw.write(raw.bounds, np.random.default_rng(7).random((32, 32, 32), dtype="float32"))
    text = "input: raw.zarr\n" + OUTPUT + "function: spec_functions:scale\nchunk_sizes: [16]\n"
    code, _, err = run(capsys, write(tmp_path, text))
    assert code == 0, err  # not "level 0's chunk 16 is 0.4 voxels of input ..."
    assert volume.open(tmp_path / "out.zarr").resolution == (40, 4, 4)
    np.testing.assert_array_equal(read(tmp_path / "out.zarr"), read(tmp_path / "raw.zarr") * 2)
    # given, it must match an existing output, and have one value per spatial axis
    given = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16], resolution: [%s]}\n"
    spec = write(tmp_path, text.replace(OUTPUT, given % "40, 8, 8"))
    code, _, err = run(capsys, spec)
    assert code == 2 and "output.resolution: the existing output has resolution" in err
    spec = write(tmp_path, text.replace(OUTPUT, given % "40, 4").replace("out.zarr", "new.zarr"))
    code, _, err = run(capsys, spec)
    assert code == 2 and "output.resolution: [40, 4] has 2 values" in err


def test_an_output_with_a_shape_is_created_at_the_inputs_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At offset 0 the output's bounds would miss an input at (1000, 2000, 3000)."""
    shutil.copy(HERE / "spec_functions.py", tmp_path)
    raw = volume.create(
        tmp_path / "raw.zarr", (32, 32, 32), (16, 16, 16), "float32", offset=(1000, 2000, 3000)
    )
    raw.write(raw.bounds, np.random.default_rng(7).random((32, 32, 32), dtype="float32") + 1)
    shaped = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16], shape: [32, 32, 32]"
    text = "input: raw.zarr\n%s}\nfunction: spec_functions:scale\nchunk_sizes: [16]\n"
    code, _, err = run(capsys, write(tmp_path, text % shaped))
    assert code == 0, err
    out = volume.open(tmp_path / "out.zarr")
    assert out.offset == (1000, 2000, 3000)
    np.testing.assert_array_equal(read(tmp_path / "out.zarr"), read(tmp_path / "raw.zarr") * 2)
    # given, it places the output; it must match an existing one and have one value per axis
    code, _, err = run(capsys, write(tmp_path, text % (shaped + ", offset: [1000, 2000, 0]")))
    assert code == 2
    assert ":2: output.offset: the existing output has offset [1000, 2000, 3000]" in err
    other = shaped.replace("out.zarr", "new.zarr")
    code, _, err = run(capsys, write(tmp_path, text % (other + ", offset: [1000, 2000]")))
    assert code == 2 and ":2: output.offset: [1000, 2000] has 2 values" in err
    code, _, err = run(capsys, write(tmp_path, text % (other + ", offset: [1000, 2000, x]")))
    assert code == 2 and ":2: output.offset.2: Input should be a valid integer" in err
    # an offset that places the output away from every input is refused, not run on fill
    code, _, err = run(capsys, write(tmp_path, text % (other + ", offset: [0, 0, 0]")))
    assert code == 2 and "meets no input" in err and "Box(start=(1000, 2000, 3000)" in err
    assert not (tmp_path / "new.zarr").exists()


def test_failure_exits_1_naming_the_chunk_and_resume_finishes(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chunk at (16, 16, 16), last in C order, fails until a marker exists.

    Run 1 (sync, no retries) finishes 7 of 8 top-level tasks and fails the last;
    run 2 with --resume does that one only.
    """
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:fail_once\n"
        f"kwargs: {{marker: {work / 'marker.txt'}, start: [16, 16, 16]}}\n"
        "chunk_sizes: [16]\nretries: 0\nrun: {executor: sync}\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 1
    assert "ValueError: chunk at [16, 16, 16] refused\n" in err  # the first line only
    assert "on chunk Box(start=(16, 16, 16), stop=(32, 32, 32))" in err
    (work / "marker.txt").touch()
    code, out, err = run(capsys, spec, "--resume")
    assert code == 0, err
    assert "skipped 7 top-level tasks" in out
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr"))


def test_resume_with_changed_kwargs_says_the_flow_starts_over(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run 1 fails on its last chunk; the kwargs then change, so --resume cannot continue
    it: stderr says so, naming the kwargs, and the earlier flow's state stays."""
    text = (
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:fail_once\n"
        f"kwargs: {{marker: {work / 'marker.txt'}, start: %s}}\n"
        "chunk_sizes: [16]\nretries: 0\nrun: {executor: sync}\n"
    )
    code, _, err = run(capsys, write(work, text % "[16, 16, 16]"))
    assert code == 1, err
    [earlier] = [p.name for p in (work / ".out.zarr.chunkgraph").iterdir() if p.is_dir()]
    code, _, err = run(capsys, write(work, text % "[0, 0, 0]"), "--resume")
    assert code == 1  # the new flow fails on its own chunk: nothing was skipped
    assert "chunkgraph: warning: resume asked for" in err
    assert "keyword arguments (fn_kwargs) changed" in err and "starts over" in err
    assert f"flow {earlier}, failed, top 7/8" in err
    assert earlier in [p.name for p in (work / ".out.zarr.chunkgraph").iterdir()]


def test_dry_run_writes_nothing(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(work, spec_with())
    code, out, err = run(capsys, spec, "--dry-run")
    assert code == 0, err
    assert "(dry run)" in out and "does not exist yet" in out
    assert sorted(p.name for p in work.iterdir()) == ["raw.zarr", "spec.yaml", "spec_functions.py"]


def test_dry_run_writes_the_report_and_log_of_its_plan(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report and --log-json beside --dry-run get the plan, not silence; the output and
    the flow's state are still not made."""
    spec = write(work, spec_with())
    report, log = work / "plan-report", work / "plan.jsonl"
    code, out, err = run(capsys, spec, "--dry-run", "--report", str(report), "--log-json", str(log))
    assert code == 0, err
    summary = json.loads((report / "report.json").read_text())["summary"]
    assert summary["outcome"] == "dry-run" and summary["tasks_per_level"] == [8]
    (last,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert last["event"] == "outcome" and last["outcome"] == "dry-run"
    assert last["tasks_per_level"] == [8] and "would read" in last["dry_run"]
    assert f"report in {report}" in out
    assert not (work / "out.zarr").exists() and not (work / ".out.zarr.chunkgraph").exists()
    # --log-json -: stdout holds JSON lines only, the plan goes to stderr
    code, out, err = run(capsys, spec, "--dry-run", "--log-json", "-")
    assert code == 0, err
    assert [json.loads(line)["outcome"] for line in out.splitlines()] == ["dry-run"]
    assert "(dry run)" in err


def test_dry_run_reads_match_what_the_run_reads(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Top chunks 16³ with crop 4 over 16³ storage chunks: each task's read touches all 8
    storage chunks (1 MiB in all without a cache); the chunk cache reads each once (128 KiB)."""
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\nkwargs: {sigma: 1.0}\n"
        "chunk_sizes: [16]\ncrop_pads: [4]\nrun: {executor: threads}\n",
    )
    code, out, err = run(capsys, spec, "--dry-run")
    assert code == 0, err
    assert "would read 128 KiB through the chunk cache (1.0 MiB without one)" in out
    expected = 128 * 1024
    code, out, err = run(capsys, spec, "--report", str(work / "report"))
    assert code == 0, err
    report = json.loads((work / "report" / "report.json").read_text())
    read_bytes = report["summary"]["bytes_read"]
    assert read_bytes == pytest.approx(expected, rel=0.1)


def test_spec_schema_is_json_naming_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["spec-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"input", "inputs", "output", "function", "chunk_sizes", "run"} <= set(
        schema["properties"]
    )
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"output", "function"}


def test_example_spec_shows_every_field_and_checks_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.read_text()
    parse_spec(text, str(EXAMPLE))
    for model in (RunSpec, OutputSpec, BoxSpec, RunDefaults):
        for name in model.model_fields:
            assert f"{name}:" in text, f"{model.__name__}.{name} is not in {EXAMPLE.name}"
    shutil.copy(EXAMPLE, tmp_path)
    volume.create(tmp_path / "raw.zarr", (128, 256, 256), (64, 64, 64), "float32")
    code, out, err = run(capsys, str(tmp_path / EXAMPLE.name), "--dry-run")
    assert code == 0, err
    assert "tasks per level: [4, 32]; reductions: 4" in out


def test_processes_import_the_module_beside_the_spec(work: Path) -> None:
    """Through the installed command: process workers find spec_functions by the spec's dir."""
    spec = write(
        work,
        spec_with(function="function: spec_functions:scale", extra="run: {executor: processes}"),
    )
    done = subprocess.run(
        [str(CHUNKGRAPH), "run", "--quiet", "--workers", "2", spec],
        cwd=HERE.anchor,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)


def test_ctrl_c_exits_130_and_says_how_to_resume(work: Path) -> None:
    spec = write(
        work,
        spec_with(
            function="function: spec_functions:slow",
            extra=f"kwargs: {{started: {work / 'started.txt'}, seconds: 0.5}}",
        ),
    )
    code, err = _interrupted_once_fn_started(spec, work / "started.txt")
    assert code == 130, err
    assert "--resume" in err


def test_ctrl_c_after_blended_top_tasks_keeps_the_new_output_for_resume(work: Path) -> None:
    """With blending, finished top tasks write their layers, not dst: an output that
    holds only its metadata still has the flow's work behind it. Ctrl-C keeps it, and
    ``--resume`` continues that flow instead of starting it over."""
    spec = write(
        work,
        spec_with(
            function="function: spec_functions:slow",
            extra=f"kwargs: {{started: {work / 'started.txt'}, seconds: 0.3}}\nblend_pads: [2]",
        ),
    )
    process = subprocess.Popen(
        [str(CHUNKGRAPH), "run", "--quiet", "--workers", "1", spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60  # the command starting on a loaded machine
    while time.monotonic() < deadline and process.poll() is None:
        flows = flows_for(work / "out.zarr", None, sizes=False)
        if flows and flows[0].top_done >= 2:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "was removed" not in err and "`--resume` continues" in err
    assert (work / "out.zarr" / "zarr.json").exists(), err
    (flow_state,) = flows_for(work / "out.zarr", None, sizes=False)
    assert flow_state.top_done >= 2 and flow_state.reductions_done == 0

    resumed = subprocess.run(
        [str(CHUNKGRAPH), "run", "--quiet", "--workers", "1", "--resume", spec],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "created anew" not in resumed.stderr and "starts it over" not in resumed.stderr
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr"))


def _interrupted_once_fn_started(spec: str, started: Path) -> tuple[int, str]:
    """Run ``spec`` (fn: ``spec_functions:slow``), Ctrl-C it once fn has touched
    ``started``: the exit code and stderr."""
    process = subprocess.Popen(
        [str(CHUNKGRAPH), "run", "--quiet", "--workers", "1", spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60  # the command starting on a loaded machine
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists(), "the run never started"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    return process.returncode, err


def test_a_report_path_that_is_a_file_is_refused_before_anything_runs(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "taken").write_text("not a directory")
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec, "--report", str(work / "taken"))
    assert code == 2
    assert "--report" in err and "is a file, not a directory" in err
    assert "Traceback" not in err
    assert not (work / "out.zarr").exists()
    code, _, err = run(capsys, spec, "--report", str(work / "taken" / "below"))
    assert code == 2 and "is a file, so no directory can be made there" in err
    assert not (work / "out.zarr").exists()


def test_a_report_that_cannot_be_written_after_the_run_is_a_message(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow finished and the volume is written: exit 0, the report's failure said."""
    from chunkgraph.cli import _cmd_run

    def broken(*_: object, **__: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_cmd_run, "write_report", broken)
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, out, err = run(capsys, spec, "--report", str(work / "report"))
    assert code == 0, err
    assert "could not write the report to" in err and "No space left on device" in err
    assert "the run itself finished" in err and "Traceback" not in err
    assert "tasks per level" in out
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)


def test_a_log_json_path_in_a_missing_folder_is_refused_before_the_output_is_made(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code = cli.main(["run", spec, "--log-json", str(work / "nodir" / "x.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--log-json" in err and "does not exist" in err and "nothing was run" in err
    assert not (work / "out.zarr").exists()
    code = cli.main(["run", spec, "--log-json", str(work)])
    assert code == 2 and "is a directory" in capsys.readouterr().err
    assert not (work / "out.zarr").exists()


def test_a_flow_already_running_is_said_in_command_line_terms(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock held (by this process): exit 1, its pid and host, status and --resume."""
    from chunkgraph.flow.state._lock import flow_lock

    spec = write(work, spec_with(function="function: spec_functions:scale"))
    code, out, err = run(capsys, spec)
    assert code == 0, err
    flow_id = out.split()[1]  # "flow <id> over ..."
    lock = work / ".out.zarr.chunkgraph" / f"{flow_id}.lock"
    with flow_lock(lock):
        code, _, err = run(capsys, spec)
    assert code == 1
    assert f"process {os.getpid()} on host" in err and str(lock) in err
    assert f"chunkgraph status {work / 'out.zarr'}" in err
    assert f"`chunkgraph run {spec} --resume`" in err
    assert "resume=True" not in err and "lock_wait" not in err


GPU_SPEC = (
    "input: raw.zarr\n"
    + OUTPUT
    + "function: spec_functions:scale\n"
    + ("kwargs: {factor: 3.0, offset: 1.0}\nchunk_sizes: [16, 8]\n")
)


def test_device_gpu_runs_fn_on_device_arrays(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fake device stands for CuPy here (no GPU runs here): fn gets its arrays."""
    from chunkgraph.gpu import FakeBackend, use_backend

    spec = write(work, GPU_SPEC + "device: gpu\n")
    with use_backend(FakeBackend()) as backend:
        code, _out, err = run(capsys, spec)
    assert code == 0, err
    # One each per top task, and the probe's upload (its answer is only measured).
    assert backend.uploads == 8 + 1 and backend.downloads == 8
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 3 + 1)


def test_device_gpu_without_a_gpu_fails_saying_how_or_falls_back(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkgraph.gpu import FakeBackend, use_backend

    with use_backend(FakeBackend(0)):  # a backend that sees no device: no GPU
        code, _, err = run(capsys, write(work, GPU_SPEC + "device: gpu\n"))
        assert code == 2 and "gpu_fallback" in err and "no GPU" in err
        assert not (work / "out.zarr").exists()  # refused before the output is made
        spec = write(work, GPU_SPEC + "device: gpu\ngpu_fallback: true\n")
        code, _out, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 3 + 1)


def test_an_unknown_device_names_the_valid_ones(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, write(work, GPU_SPEC + "device: tpu\n"))
    assert code == 2
    assert "device" in err and "'cpu'" in err and "'gpu'" in err


@pytest.mark.parametrize("dry_run", [False, True])
def test_read_amplification_is_warned_of_once(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    """apply's cache reads this flow's storage chunks once (1.00x), which draws no warning;
    with the threshold under that, the check and the run would both warn: once is said."""
    from chunkgraph.flow.plan import _auto_sizes

    monkeypatch.setattr(_auto_sizes, "WARN_AMPLIFICATION", 0.5)
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\n"
        "chunk_sizes: [4]\ncrop_pads: 4\nprobe: false\n",
    )
    code, _, err = run(capsys, spec, *(["--dry-run"] if dry_run else []))
    assert code == 0, err
    assert err.count("will amplify reads") == 1


def test_given_sizes_whose_halo_apply_s_cache_reads_once_draw_no_warning(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Top chunks of 16 with a crop of 4 read the neighbours' storage chunks (3.38x without
    a cache); apply's own cache reads each once, so there is nothing to warn of."""
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\n"
        "chunk_sizes: [16, 8]\ncrop_pads: [0, 4]\n",
    )
    code, out, err = run(capsys, spec)
    assert code == 0, err
    assert "amplif" not in err, err
    assert "(amplification 1.00)" in out


def test_quiet_prints_the_result_without_the_plan_and_the_plan_is_said_once(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Automatic sizes: a run says its plan in one line (a dry run gives the reasons too);
    --quiet leaves it out."""
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\ncrop_pads: 4\n",
    )
    code, out, err = run(capsys, spec)
    assert code == 0, err
    assert "tasks per level" in out and "plan" not in out, out
    code = cli.main(["run", spec])
    out = capsys.readouterr().out
    assert code == 0
    assert [line for line in out.splitlines() if "plan" in line or "cache" in line] == [
        next(line for line in out.splitlines() if line.startswith("  plan (automatic): "))
    ], out
    code, out, _ = run(capsys, spec, "--dry-run")
    assert code == 0 and "plan (automatic)" in out and "  - bottom chunk" in out


def test_a_probe_failure_says_nothing_was_written_and_the_log_ends_with_the_outcome(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:fail_once\n"
        f"kwargs: {{marker: {work / 'marker.txt'}, start: [0, 0, 0]}}\n"
        "chunk_sizes: [16]\nretries: 0\n",
    )
    log = work / "events.jsonl"
    code, _, err = run(capsys, spec, "--log-json", str(log))
    assert code == 1
    assert "failed its probe call" in err and "before anything was written" in err
    assert f"the output {work / 'out.zarr'} this run had created was removed" in err
    assert not (work / "out.zarr").exists() and not (work / ".out.zarr.chunkgraph").exists()
    assert "--resume" not in err
    assert json.loads(log.read_text().splitlines()[-1]) == {"event": "outcome", "outcome": "failed"}
    (work / "marker.txt").touch()
    code, _, err = run(capsys, spec, "--log-json", str(log))
    assert code == 0, err
    last = json.loads(log.read_text().splitlines()[-1])
    assert last == {"event": "outcome", "outcome": "finished"}


def test_a_failed_probe_takes_back_only_what_the_run_created(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output that was there before (with data), an empty directory given as the output,
    and an output another run created meanwhile are not this run's: they stay."""
    from chunkgraph.cli import _cmd_run

    failing = (
        "input: raw.zarr\noutput: {path: %s, dtype: float32, chunks: [16, 16, 16]}\n"
        "function: spec_functions:fail_once\n"
        f"kwargs: {{marker: {work / 'marker.txt'}, start: [0, 0, 0]}}\n"
        "chunk_sizes: [16]\nretries: 0\n"
    )
    kept = volume.create(work / "kept.zarr", (32, 32, 32), (16, 16, 16), "float32")
    kept.write(kept.bounds, np.ones((32, 32, 32), "float32"))
    code, _, err = run(capsys, write(work, failing % "kept.zarr"))
    assert code == 1 and "was removed" not in err
    assert read(work / "kept.zarr").all()
    (work / "empty").mkdir()
    code, _, err = run(capsys, write(work, failing % "empty"))
    assert code == 1 and "this run had created was removed" in err
    assert (work / "empty").is_dir() and not any((work / "empty").iterdir())
    checked = _cmd_run._check_flow

    def check_then_other_run(resolved: Any, options: dict[str, Any]) -> Any:
        report = checked(resolved, options)
        volume.create(resolved.output.path, **resolved.output.create_args)
        return report

    monkeypatch.setattr(_cmd_run, "_check_flow", check_then_other_run)
    code, _, err = run(capsys, write(work, failing % "theirs.zarr"))
    assert code == 1 and "was removed" not in err
    assert (work / "theirs.zarr" / "zarr.json").exists()


def test_without_chunk_sizes_the_flow_plans_its_own(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only fn and its crop pad: automatic sizes, the same result as the whole-array filter."""
    spec = write(
        work,
        "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\nkwargs: {sigma: 1.0}\n"
        "crop_pads: 4\n",
    )
    code, out, err = run(capsys, spec, "--dry-run")
    assert code == 0, err
    assert "plan (automatic)" in out
    code, out, err = run(capsys, spec)
    assert code == 0, err
    want = gaussian_filter(read(work / "raw.zarr"), sigma=1.0, mode="constant")
    np.testing.assert_allclose(read(work / "out.zarr"), want, rtol=0, atol=1e-6)
    code, _, err = run(capsys, write(work, Path(spec).read_text() + "chunk_sizes: x\n", "b.yaml"))
    assert code == 2 and "chunk_sizes" in err


def test_an_error_about_a_field_the_spec_leaves_out_names_no_line(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The output at offset 1000, given explicitly: the default bbox meets no input. The
    spec has no bbox line to point at, so none is named (not line 1)."""
    spec = write(
        work,
        "input: raw.zarr\noutput: {path: out.zarr, dtype: float32, chunks: [16, 16, 16], "
        "offset: [1000, 0, 0]}\nfunction: spec_functions:scale\nchunk_sizes: [16]\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 2
    assert f"{spec}: bbox: " in err and "meets no input" in err


def test_a_cast_that_saturates_is_refused_unless_the_spec_allows_it(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """float32 * 300 into a uint8 output: refused (exit 2) naming both dtypes and the
    field that allows it; with `cast: unsafe` it runs and warns with the count."""
    lines = (
        "input: raw.zarr\noutput: {path: out.zarr, dtype: uint8, chunks: [16, 16, 16]}\n"
        "function: spec_functions:scale\nkwargs: {factor: 300.0}\nchunk_sizes: [16]\n"
    )
    code, _, err = run(capsys, write(work, lines))
    assert code == 2
    assert "refuses fn's output dtype float32" in err and "dst's dtype uint8" in err
    assert "`cast: unsafe`" in err
    code, out, err = run(capsys, write(work, lines + "cast: unsafe\n", "allowed.yaml"))
    assert code == 0, err
    raw = read(work / "raw.zarr")
    over = int((np.rint(raw * np.float32(300.0)) > 255).sum())
    assert over > 0 and f"chunkgraph: warning: {over} voxel(s) of dst" in err
    assert f"saturated: {over} voxels" in out
    expected = np.clip(np.rint(raw * np.float32(300.0)), 0, 255).astype("uint8")
    np.testing.assert_array_equal(read(work / "out.zarr"), expected)


def test_a_spec_s_defaults_are_apply_s() -> None:
    """A field left out of a spec means what the parameter left out of apply means."""
    params = inspect.signature(flow.apply).parameters
    # The spec's `run:` holds its executor and workers; apply's `run=`, a RunOptions.
    shared = [n for n in RunSpec.model_fields if n in params and n not in ("inputs", "run")]
    assert {"retries", "blend_modes", "cast", "crop_pads", "chunk_sizes"} <= set(shared)
    # apply's None for retries is "not given", which RunOptions reads as DEFAULT_RETRIES
    # (a given value beside an Executor object is refused; a default one is not).
    unset = {"retries": DEFAULT_RETRIES}
    for name in shared:
        meant = params[name].default
        meant = unset.get(name, meant) if meant is None else meant
        assert RunSpec.model_fields[name].default == meant, name


OVERWRITE = "output: {path: out.zarr, dtype: uint8, chunks: [16, 16, 16], exists: overwrite}"


def _kept_volume(work: Path) -> np.ndarray:
    """An existing out.zarr of 42s that an overwrite must not lose for nothing."""
    old = volume.create(work / "out.zarr", (32, 32, 32), (16, 16, 16), "uint8")
    data = np.full((32, 32, 32), 42, "uint8")
    old.write(old.bounds, data)
    return data


def test_an_overwrite_that_fails_before_writing_leaves_the_old_output_as_it_was(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fn's floats into the uint8 output are refused by the probe (cast='safe'): exit 2,
    and the volume the run was to replace is still there, whole, with no copy beside it."""
    data = _kept_volume(work)
    spec = write(work, spec_with(output=OVERWRITE, function="function: spec_functions:scale"))
    code, _, err = run(capsys, spec)
    assert code == 2, err
    assert "is as it was" in err, err
    np.testing.assert_array_equal(read(work / "out.zarr"), data)
    assert sorted(p.name for p in work.iterdir() if ".replaced-" in p.name) == []
    # The same output replaced for real: the old volume is gone, aside copy included.
    spec = write(work, spec_with(output=OVERWRITE, function="function: spec_functions:scale",
                                 extra="cast: unsafe"))  # fmt: skip
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), np.rint(read(work / "raw.zarr") * 2))
    assert [p.name for p in work.iterdir() if ".replaced-" in p.name] == []


def test_ctrl_c_during_the_probe_of_an_overwrite_keeps_the_old_output(work: Path) -> None:
    data = _kept_volume(work)
    spec = write(
        work,
        spec_with(
            output=OVERWRITE,
            function="function: spec_functions:slow",
            extra=f"kwargs: {{started: {work / 'started.txt'}, seconds: 30}}\ncast: unsafe",
        ),
    )
    # fn's first call is the probe's: nothing is written when the Ctrl-C comes.
    code, err = _interrupted_once_fn_started(spec, work / "started.txt")
    assert code == 130, err
    assert "interrupted before anything was written" in err, err
    np.testing.assert_array_equal(read(work / "out.zarr"), data)
    assert [p.name for p in work.iterdir() if ".replaced-" in p.name] == []


def test_a_spec_may_snap_its_bbox_as_apply_does(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``expand_bbox: snap`` (apply's "snap") grows a bbox off the top-chunk grid to it."""
    spec = write(
        work,
        spec_with(
            function="function: spec_functions:scale",
            extra="bbox: {start: [4, 0, 0], stop: [28, 32, 32]}\nexpand_bbox: snap",
        ),
    )
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_array_equal(read(work / "out.zarr"), read(work / "raw.zarr") * 2)


def test_an_output_at_another_resolution_covers_the_input_s_physical_extent(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No output.shape: 2x coarser covers the input (32 x 32 at 8 nm over 64 x 64 at 4 nm),
    not the input's voxel count (64 x 64 at 8 nm, three quarters from fill values)."""
    fine = volume.create(work / "fine.zarr", (64, 64, 8), (16, 16, 8), "float32",
                         resolution=(4, 4, 40), offset=(8, 8, 0))  # fmt: skip
    data = np.random.default_rng(3).random((64, 64, 8), dtype="float32")
    fine.write(fine.bounds, data)
    spec = write(
        work,
        "input: fine.zarr\n"
        "output: {path: out.zarr, dtype: float32, chunks: [8, 8, 8], resolution: [8, 8, 40]}\n"
        "function: spec_functions:pool2\nchunk_sizes: [[8, 8, 8]]\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 0, err
    out = volume.open(work / "out.zarr")
    assert out.shape == (32, 32, 8) and out.bounds.start == (4, 4, 0)
    pooled = data.reshape(32, 2, 32, 2, 8).mean(axis=(1, 3))
    np.testing.assert_allclose(out.read(out.bounds), pooled, rtol=1e-6)


def test_an_input_in_another_format_is_named_by_its_prefix_beside_the_spec(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorstore")
    data = read(work / "raw.zarr")
    n5 = volume.create(f"n5://{work}/raw.n5", data.shape, (16, 16, 16), "float32")
    n5.write(n5.bounds, data)
    spec = write(
        work,
        "input: n5://raw.n5\n" + OUTPUT + "function: spec_functions:scale\n"
        "kwargs: {factor: 3.0, offset: 1.0}\nchunk_sizes: [16]\n",
    )
    code, _, err = run(capsys, spec)
    assert code == 0, err
    np.testing.assert_allclose(read(work / "out.zarr"), data * 3.0 + 1.0, rtol=1e-6)


def test_the_json_log_holds_each_event_as_it_happens(tmp_path: Path) -> None:
    """A watcher (or a post-mortem after kill -9) reads every event written so far."""
    from chunkgraph.cli._output import JsonLines
    from chunkgraph.execute import Event, EventKind

    log = JsonLines(str(tmp_path / "log.jsonl"))
    log(Event(EventKind.RUN_STARTED, time=1.0, total=3))
    lines = (tmp_path / "log.jsonl").read_text().splitlines()  # before close
    assert [json.loads(line)["event"] for line in lines] == [EventKind.RUN_STARTED.value]
    log.close("finished")


@pytest.mark.parametrize(
    "argv",
    [
        ["downsample", "nope.zarr"],
        ["downsample", "nope.zarr", "--scale", "1"],
        ["transfer", "nope.zarr", "copy.zarr"],
    ],
)
def test_a_missing_source_is_a_usage_error_naming_it(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "nope.zarr" in err and "Traceback" not in err
    assert not (tmp_path / "copy.zarr").exists()
