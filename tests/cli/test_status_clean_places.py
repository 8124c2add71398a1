"""``chunkgraph status`` / ``clean`` where an intermediates directory or a bucket holds
more than flows: volumes and folders of the user's beside them are never a flow, and a
destination is named by its path or its URL (real files, moto's S3 server on loopback)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.flow.state import _store
from chunkgraph.testing import S3Server

SHAPE = (32, 32)
TWO_DAYS = 48 * 3600


def fails_late(x: np.ndarray, box: object) -> np.ndarray:
    if box.start[0] >= 14:  # type: ignore[attr-defined]
        raise RuntimeError("injected failure")
    return x + 1


def _volume(path: str) -> volume.Volume:
    vol = volume.create(path, SHAPE, (8, 8), "float32")
    vol.write(vol.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    return vol


def _backdate(top: Path) -> None:
    then = top.stat().st_mtime - TWO_DAYS
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.utime(Path(folder) / name, (then, then))
    os.utime(top, (then, then))


def _apply(src: str, dst: str, intermediates: str, fn: object) -> None:
    volume.apply(fn, volume.open(src), volume.open(dst, mode="r+"),  # type: ignore[arg-type]
                 chunk_sizes=[(8, 8)], blend_pads=2, intermediates=intermediates,
                 executor="sync", retries=0)  # fmt: skip


def test_volumes_and_folders_beside_flows_are_never_listed_or_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    _volume(str(work / "raw2.zarr"))
    (work / "my_notes").mkdir()
    (work / "my_notes" / "todo.txt").write_text("keep me")
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    _backdate(work / "raw2.zarr")
    _backdate(work / "my_notes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _apply(str(work / "raw2.zarr"), str(tmp_path / "dst.zarr"), str(work), lambda x: x * 2)
    assert not [w for w in caught if "stale flow" in str(w.message)]
    assert cli.main(["status", "--intermediates", str(work)]) == 0
    out = capsys.readouterr().out
    assert "1 flow(s)" in out and "raw2.zarr" not in out and "my_notes" not in out
    assert cli.main(["clean", "--intermediates", str(work), "--all"]) == 0
    capsys.readouterr()
    assert cli.main(["clean", "--intermediates", str(work), "raw2.zarr"]) == 2
    assert "no flow raw2.zarr" in capsys.readouterr().err
    assert (work / "my_notes" / "todo.txt").read_text() == "keep me"
    np.testing.assert_array_equal(
        volume.open(str(work / "raw2.zarr")).read(volume.open(str(work / "raw2.zarr")).bounds),
        np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE),
    )


def test_volumes_in_a_bucket_are_no_flows_of_its_intermediates(
    bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = f"s3://{bucket}"
    _volume(f"{lab}/raw.zarr")
    volume.create(f"{lab}/out.zarr", SHAPE, (8, 8), "float32")
    with pytest.raises(ExceptionGroup):
        _apply(f"{lab}/raw.zarr", f"{lab}/out.zarr", f"{lab}/state", fails_late)
    assert cli.main(["status", "--intermediates", lab]) == 0
    assert "no flows under" in capsys.readouterr().out
    assert cli.main(["status", "--intermediates", f"{lab}/state"]) == 0
    out = capsys.readouterr().out
    assert "1 flow(s)" in out and "failed" in out
    before = [k for k in server.keys(bucket) if k.startswith(("raw.zarr/", "out.zarr/"))]
    assert cli.main(["clean", "--intermediates", lab, "--all"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert [k for k in server.keys(bucket) if k.startswith(("raw.zarr/", "out.zarr/"))] == before


def test_clean_takes_a_destination_url_beside_an_intermediates_url(
    bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = f"s3://{bucket}"
    _volume(f"{lab}/raw.zarr")
    volume.create(f"{lab}/out2.zarr", SHAPE, (8, 8), "float32")
    with pytest.raises(ExceptionGroup):
        _apply(f"{lab}/raw.zarr", f"{lab}/out2.zarr", f"{lab}/state", fails_late)
    code = cli.main(["clean", f"{lab}/out2.zarr", "--intermediates", f"{lab}/state", "--all"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "removed" in out
    assert not [k for k in server.keys(bucket) if k.startswith("state/")]
    assert not [k for k in server.keys(bucket) if k.endswith(".where")]  # the note went too


def test_status_reduce_and_clean_of_a_spec_reach_the_store_with_its_options(
    work: Path,
    bucket: str,
    server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    raw = volume.open(str(work / "raw.zarr"))
    src = volume.create(f"s3://{bucket}/raw.zarr", raw.shape, raw.chunks, raw.dtype)
    src.write(src.bounds, raw.read(raw.bounds))
    lines = [
        f"input: s3://{bucket}/raw.zarr",
        f"output: {{path: s3://{bucket}/out.zarr, dtype: float32, chunks: [16, 16, 16]}}",
        "function: spec_functions:scale",
        "chunk_sizes: [16]",
        "blend_pads: [2]",
        "blend_modes: defer",
        f"storage_options: {{endpoint: '{server.endpoint}'}}",
        "run: {executor: sync}",
    ]
    spec = work / "s6.yaml"
    spec.write_text("\n".join(lines) + "\n")
    # The environment names a closed port on loopback: only the spec's endpoint answers.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert cli.main(["run", "--quiet", str(spec)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(_store, "_REACH", {})  # as a new process: nothing reached yet
    assert cli.main(["status", str(spec)]) == 0
    assert "deferred" in capsys.readouterr().out
    assert cli.main(["reduce", str(spec), "--blend-mode", "linear"]) == 0
    capsys.readouterr()
    assert cli.main(["status", str(spec), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "finished"
    assert cli.main(["clean", str(spec), row["flow_id"]]) == 0
    assert "removed" in capsys.readouterr().out
    assert not [k for k in server.keys(bucket) if ".chunkgraph" in k]


def test_a_destination_url_with_no_volume_and_no_state_is_a_usage_error(
    bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    volume.create(f"s3://{bucket}/out.zarr", SHAPE, (8, 8), "float32")
    for command in (["status"], ["clean", "--all"]):
        assert cli.main([*command, f"s3://{bucket}/typo.zarr"]) == 2
        err = capsys.readouterr().err
        assert f"the destination s3://{bucket}/typo.zarr does not exist" in err
        assert cli.main([*command, f"s3://{bucket}/out.zarr/"]) == 0  # exists: no flows
        capsys.readouterr()


def test_clean_keeps_the_intermediates_directory_the_user_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    _volume(str(tmp_path / "src.zarr"))
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    with pytest.raises(ExceptionGroup):
        _apply(str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"), str(flows), fails_late)
    (flow_id,) = [p.name for p in flows.iterdir()]
    assert cli.main(["clean", str(tmp_path / "dst.zarr"), flow_id]) == 0
    assert f"removed {flow_id}" in capsys.readouterr().out
    assert flows.is_dir() and not list(flows.iterdir())
    # the dst's own default directory (its note of where the state was) goes once empty
    assert not (tmp_path / ".dst.zarr.chunkgraph").exists()


def test_intermediates_given_as_a_file_url_is_that_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flows = tmp_path / "flows"
    _volume(str(tmp_path / "src.zarr"))
    volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    with pytest.raises(ExceptionGroup):
        _apply(str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"), str(flows), fails_late)
    assert cli.main(["status", "--intermediates", f"file://{flows}"]) == 0
    assert "1 flow(s)" in capsys.readouterr().out
