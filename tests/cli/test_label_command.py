"""``chunkgraph label``: exit 0 with a summary, exit 2 for bad options with nothing written,
and a label killed (SIGKILL) in its relabel pass resumed with ``--resume``: the same ids
as scipy's, the chunks written before the kill not written again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage
from tests.flow._done import done_under

from chunkgraph import cli, volume

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


def _source(tmp_path: Path, dtype: str = "float32") -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(7)
    data = ndimage.gaussian_filter(rng.standard_normal((32, 32, 32)).astype("float32"), 1.5)
    path = tmp_path / "src.zarr"
    src = volume.create(path, data.shape, (8, 8, 8), dtype)
    src.write(src.bounds, data.astype(dtype))
    return path, data


def _expected(data: np.ndarray, threshold: float, connectivity: int) -> np.ndarray:
    structure = ndimage.generate_binary_structure(3, connectivity)
    ids: np.ndarray = ndimage.label(data > threshold, structure=structure)[0]
    return ids


def test_label_writes_scipys_ids_and_says_how_many(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, data = _source(tmp_path)
    dst = tmp_path / "dst.zarr"
    argv = ["label", str(src), str(dst), "--threshold", "0.1", "--connectivity", "3"]
    assert cli.main([*argv, "--chunk", "16,16,16", "--quiet"]) == 0
    expected = _expected(data, 0.1, 3)
    out = capsys.readouterr().out
    assert f"{expected.max()} component(s), wrote uint32 ids" in out
    assert "find: 8 task(s)" in out and "relabel: 8 task(s)" in out
    result = volume.open(dst)
    np.testing.assert_array_equal(result.read(result.bounds), expected)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ([], "no threshold was given"),
        (["--threshold", "0", "--connectivity", "4"], "connectivity must be one of"),
        (["--threshold", "0", "--dtype", "ids"], "not a numpy dtype"),
        (["--threshold", "0", "--chunk", "12,8,8"], "multiples of the source's chunks"),
    ],
)
def test_bad_options_exit_2_with_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], words: str
) -> None:
    src, _ = _source(tmp_path)
    assert cli.main(["label", str(src), str(tmp_path / "dst.zarr"), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chunkgraph label: ") and words in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_an_existing_dst_exits_2_and_a_missing_source_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = _source(tmp_path, "uint8")
    dst = tmp_path / "dst.zarr"
    assert cli.main(["label", str(src), str(dst), "--quiet"]) == 0
    assert cli.main(["label", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "pass --resume" in err
    assert "resume=True" not in err and "volume.remove" not in err
    assert cli.main(["label", str(tmp_path / "none.zarr"), str(tmp_path / "x.zarr")]) == 2


def test_refusals_name_the_command_lines_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not the Python keywords: --threshold, --memory-limit, --dtype."""
    src, _ = _source(tmp_path)
    dst = str(tmp_path / "dst.zarr")
    assert cli.main(["label", str(src), dst]) == 2
    err = capsys.readouterr().err
    assert "give --threshold T" in err and "threshold=" not in err
    assert cli.main(["label", str(src), dst, "--threshold", "0", "--memory-limit", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chunkgraph label: --memory-limit 100000 bytes is below what one label")
    src_u8, _ = _source(tmp_path / "u8", "uint8")
    assert cli.main(["label", str(src_u8), dst, "--connectivity", "3", "--dtype", "uint8"]) == 0
    capsys.readouterr()
    noise = tmp_path / "noise.zarr"
    many = volume.create(noise, (16, 16, 16), (8, 8, 8), "uint8")
    many.write(many.bounds, np.indices((16, 16, 16)).sum(axis=0).astype("uint8") % 2)
    assert cli.main(["label", str(noise), str(tmp_path / "n.zarr"), "--dtype", "uint8"]) == 2
    err = capsys.readouterr().err
    assert "2048 components" in err and "leave --dtype out" in err
    assert not (tmp_path / "n.zarr").exists()


def test_a_resume_into_a_volume_label_did_not_make_exits_2_and_leaves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = _source(tmp_path)
    foreign = volume.create(tmp_path / "foreign.zarr", (32, 32, 32), (8, 8, 8), "uint32")
    foreign.write(foreign.bounds, np.full((32, 32, 32), 99, np.uint32))
    argv = ["label", str(src), str(tmp_path / "foreign.zarr"), "--threshold", "0.1"]
    assert cli.main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chunkgraph label: dst {str(tmp_path / 'foreign.zarr')!r}")
    assert "was not made by label, and --resume continues only" in err
    assert "resume=True" not in err and "volume.remove" not in err
    assert (foreign.read(foreign.bounds) == 99).all()


def test_a_resume_with_another_threshold_exits_2_in_labels_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, data = _source(tmp_path)
    dst = tmp_path / "dst.zarr"
    assert cli.main(["label", str(src), str(dst), "--threshold", "0.1", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["label", str(src), str(dst), "--threshold", "0.2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "started by a label with --threshold 0.1, and this one has --threshold 0.2" in err
    assert "--resume continues only the label that started dst" in err
    assert "fn_kwargs" not in err and "warning" not in err
    np.testing.assert_array_equal(volume.open(dst).read(volume.open(dst).bounds),
                                  _expected(data, 0.1, 1))  # fmt: skip


def test_the_json_log_names_each_pass_and_ends_with_the_components_and_dst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, data = _source(tmp_path)
    dst, log = tmp_path / "dst.zarr", tmp_path / "log.jsonl"
    argv = ["label", str(src), str(dst), "--threshold", "0.1", "--chunk", "16,16,16"]
    assert cli.main([*argv, "--log-json", str(log)]) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    runs = [(r["event"], r.get("pass")) for r in records if r["event"].startswith("run-")]
    assert runs == [("run-started", "find"), ("run-finished", "find"),
                    ("run-started", "relabel"), ("run-finished", "relabel")]  # fmt: skip
    tasks = [r for r in records if "task" in r]
    assert tasks and {r["pass"] for r in tasks} == {"find", "relabel"}
    assert records[-1] == {"event": "outcome", "outcome": "finished", "saturated_voxels": 0,
                           "components": int(_expected(data, 0.1, 1).max()),
                           "dst": str(dst)}  # fmt: skip


# The label run killed below: the CLI's own entry point, with a subscriber that sleeps
# after each relabel task, so that the kill lands while that pass is under way (the
# subscriber is a run option: the flow id, and so the resume, do not depend on it).
SCRIPT = """
import sys, time
sys.path.insert(0, {src!r})
from chunkgraph import label
from chunkgraph.execute import EventKind

src, dst, log = sys.argv[1:4]

def slow(event):
    if event.kind == EventKind.FINISHED and not event.name.startswith("apply-values"):
        with open(log, "a") as f:
            f.write("relabelled\\n")
        time.sleep(0.15)

label(src, dst, threshold=0.1, chunk=(8, 8, 8), executor="sync", subscribers=[slow])
"""


def test_a_label_killed_while_relabelling_resumes_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, data = _source(tmp_path)
    dst, log, script = tmp_path / "dst.zarr", tmp_path / "log", tmp_path / "run.py"
    script.write_text(SCRIPT.format(src=str(SRC_DIR)))
    killed = subprocess.Popen([sys.executable, str(script), str(src), str(dst), str(log)])
    state = tmp_path / ".dst.zarr.chunkgraph"
    deadline = time.monotonic() + 60
    # Markers are recorded in bulk (about once a second): wait until some are.
    while done_under(state) < 3 and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.02)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    done_before = done_under(state)
    assert 3 <= done_before < 64
    argv = ["label", str(src), str(dst), "--threshold", "0.1", "--chunk", "8,8,8", "--resume"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"relabel: {64 - done_before} task(s), {done_before} done before" in out
    result = volume.open(dst)
    np.testing.assert_array_equal(result.read(result.bounds), _expected(data, 0.1, 1))
