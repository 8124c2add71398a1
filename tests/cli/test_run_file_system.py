"""``chunkgraph run`` where the file system refuses: read-only places, a full disk, a
corrupt input chunk. Each runs the installed command, on real Zarr v3 volumes, with the
file system made to refuse for real (see ``conftest.py``).

The work directory holds ``raw.zarr`` (32³ float32 in 16³ chunks), the functions
beside the spec and the spec; ``ro/`` is the directory made read-only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chunkgraph import volume

HERE = Path(__file__).resolve().parent
CHUNKGRAPH = Path(sys.executable).parent / "chunkgraph"

Runner = Callable[..., Any]


@pytest.fixture
def work(work: Path) -> Path:
    """The command-line tests' folder, with ``ro/`` to make read-only or full."""
    (work / "ro").mkdir()
    return work


def spec(
    work: Path, output: str, extra: str = "", name: str = "spec.yaml", chunks: int = 16,
    top: int = 16,
) -> str:  # fmt: skip
    text = (
        f"input: raw.zarr\noutput: {{path: {output}, dtype: float32, chunks: [{chunks}] * 3}}\n"
        f"function: spec_functions:scale\nchunk_sizes: [{top}]\n{extra}"
    )
    text = text.replace(f"[{chunks}] * 3", f"[{chunks}, {chunks}, {chunks}]")
    (work / name).write_text(text)
    return name


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_new_output_in_a_read_only_place_is_refused_before_anything_runs(
    work: Path, read_only: Runner, dry_run: bool
) -> None:
    name = spec(work, "ro/out.zarr")
    done = read_only(work / "ro", ["run", "--quiet", name, *(["--dry-run"] * dry_run)], work)
    assert done.returncode == 2, done.stderr
    assert f"{name}:2: output: output '{work / 'ro' / 'out.zarr'}' cannot be created" in done.stderr
    assert f"no file can be created in {work / 'ro'}" in done.stderr
    assert "Traceback" not in done.stderr and "nothing was run" in done.stderr
    assert entries(work / "ro") == []


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_existing_output_on_a_read_only_mount_is_refused_naming_it(
    work: Path, read_only: Runner, dry_run: bool
) -> None:
    """Its state folder would be made beside it: the output itself is named, first."""
    volume.create(work / "ro" / "out.zarr", (32, 32, 32), (16, 16, 16), "float32")
    name = spec(work, "ro/out.zarr")
    done = read_only(work / "ro", ["run", "--quiet", name, *(["--dry-run"] * dry_run)], work)
    assert done.returncode == 2, done.stderr
    out = work / "ro" / "out.zarr"
    assert f"{name}:2: output.path: dst '{out}' cannot be written" in done.stderr
    assert "Traceback" not in done.stderr
    assert entries(work / "ro") == ["out.zarr"] and entries(out) == ["zarr.json"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_read_only_intermediates_are_refused_before_the_output_is_made(
    work: Path, read_only: Runner, dry_run: bool
) -> None:
    name = spec(work, "out.zarr", "intermediates: ro/state\n")
    done = read_only(work / "ro", ["run", "--quiet", name, *(["--dry-run"] * dry_run)], work)
    assert done.returncode == 2, done.stderr
    assert f"{name}:5: intermediates: intermediates '{work / 'ro' / 'state'}' cannot be " \
           "written" in done.stderr  # fmt: skip
    assert f"no file can be created in {work / 'ro'}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (work / "out.zarr").exists() and entries(work / "ro") == []


def test_a_full_disk_names_the_path_and_the_room_left_and_exits_quietly(
    work: Path, small_disk: Runner
) -> None:
    """A 300 kB disk for 128 kB of layers and a 128 kB output: the one top task writes its
    layer's 512 chunks of 4³ in one zarr call, which fails part way with writes of it
    still queued on zarr's loop; those used to be destroyed pending at exit, noisily."""
    (work / "small").mkdir()
    name = spec(work, "small/out.zarr", "retries: 0\n", chunks=4, top=32)
    done = small_disk(work / "small", "300k", ["run", "--quiet", name], work)
    assert done.returncode == 1, done.stderr
    layer = work / "small" / ".out.zarr.chunkgraph"
    assert "OSError: [Errno 28] No space left on device (0 B free of 300 KiB on the file " \
           "system holding it" in done.stderr, done.stderr  # fmt: skip
    assert f"of the volume at: '{layer}" in done.stderr, done.stderr
    for noise in ("Task was destroyed", "never retrieved", "was never awaited", "Traceback"):
        assert noise not in done.stderr, done.stderr


def _corrupt(path: Path) -> None:
    """Flip a byte in the middle of a stored chunk: its checksum no longer matches."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_input_chunk_is_named_in_the_message_and_the_log_and_tried_once(
    work: Path,
) -> None:
    """Top chunks of 16 with a crop of 4 read through apply's cache, storage chunk by
    storage chunk in a parallel loop, whose group's message said nothing; the error
    under it fails every try the same way, yet was tried 3 times. The probe (its own
    read of the first chunk, which meets the corrupt one too) is off: the flow meets it."""
    _corrupt(work / "raw.zarr" / "c" / "1" / "1" / "1")
    name = spec(work, "out.zarr", "crop_pads: 4\nprobe: false\nretries: 2\n")
    done = subprocess.run(
        [str(CHUNKGRAPH), "run", "--quiet", "--log-json", "log.jsonl", name],
        cwd=work, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    file = work / "raw.zarr" / "c" / "1" / "1" / "1"
    said = f"(key 'c/1/1/1', file '{file}'"
    assert f"    CorruptChunkError: read of volume '{work / 'raw.zarr'}'" in done.stderr
    assert said in done.stderr and "ExceptionGroup" not in done.stderr
    assert "(after 1 attempt(s); not retried: it would fail the same way again)" in done.stderr
    events = [json.loads(line) for line in (work / "log.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "retried"]
    failed = [e for e in events if e["event"] == "failed"]  # every task reading it, at once
    assert failed and all(e["attempt"] == 1 for e in failed)
    for event in failed:
        assert event["error"].startswith("CorruptChunkError: ") and said in event["error"]
        assert event["corrupt"]["keys"] == ["c/1/1/1"]
        assert event["corrupt"]["files"] == [str(file)]


def test_a_corrupt_chunk_met_by_the_probe_is_a_message_and_nothing_is_left(work: Path) -> None:
    """The probe reads the first bottom chunk before the flow starts, outside any task."""
    _corrupt(work / "raw.zarr" / "c" / "0" / "0" / "0")
    name = spec(work, "out.zarr")
    done = subprocess.run([str(CHUNKGRAPH), "run", "--quiet", name], cwd=work,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "chunkgraph run: CorruptChunkError: read of volume" in done.stderr
    assert "(key 'c/0/0/0'" in done.stderr and "Traceback" not in done.stderr
    assert f"the output {work / 'out.zarr'} this run had created was removed" in done.stderr
    assert not (work / "out.zarr").exists()


def test_a_disk_full_before_the_first_task_names_the_file_and_takes_the_output_back(
    work: Path, small_disk: Runner
) -> None:
    """16 kB (four pages of tmpfs): the output's zarr.json, the flow's lock, its claim on the
    output and the first temporary layer's zarr.json fill it, and writing the flow's
    flow.json fails, outside any task. Nothing was written to the output, so the run takes
    back the one it created."""
    (work / "small").mkdir()
    name = spec(work, "small/out.zarr")
    done = small_disk(work / "small", "16k", ["run", "--quiet", name], work)
    assert done.returncode == 1, done.stderr
    state = work / "small" / ".out.zarr.chunkgraph"
    assert "chunkgraph run: OSError: [Errno 28] No space left on device (0 B free of 16.0 KiB " \
           "on the file system holding it" in done.stderr, done.stderr  # fmt: skip
    assert f", writing the flow's state at: '{state}/" in done.stderr and "flow.json" in done.stderr
    assert f"the output {work / 'small' / 'out.zarr'} this run had created was removed" \
           in done.stderr  # fmt: skip
    assert "Traceback" not in done.stderr
