"""``chunkgraph run``, ``status`` and ``clean`` with volumes and flow state in a bucket
(moto's S3 server on loopback): a spec's URLs, and a destination named by its URL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.testing import S3Server


def _spec(work: Path, bucket: str, **extra: str) -> str:
    """raw.zarr copied into the bucket; a spec from it into s3://BUCKET/out.zarr."""
    raw = volume.open(str(work / "raw.zarr"))
    src = volume.create(f"s3://{bucket}/raw.zarr", raw.shape, raw.chunks, raw.dtype)
    src.write(src.bounds, raw.read(raw.bounds))
    lines = [
        f"input: s3://{bucket}/raw.zarr",
        f"output: {{path: s3://{bucket}/out.zarr, dtype: float32, chunks: [16, 16, 16]}}",
        "function: spec_functions:fail_once",
        f"kwargs: {{marker: {work / 'marker.txt'}, start: [16, 16, 16]}}",
        "chunk_sizes: [16]",
        "retries: 0",
        "run: {executor: sync}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    (work / "spec.yaml").write_text("\n".join(lines) + "\n")
    return str(work / "spec.yaml")


def test_a_spec_between_urls_fails_shows_in_status_resumes_and_is_cleaned(
    work: Path, bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(work, bucket)
    assert cli.main(["run", "--quiet", spec]) == 1  # the last of 8 chunks refused
    capsys.readouterr()
    dst = f"s3://{bucket}/out.zarr"
    for where in (dst, spec):
        assert cli.main(["status", where]) == 0
        out = capsys.readouterr().out
        assert f"under s3://{bucket}/.out.zarr.chunkgraph" in out
        assert "failed       top 7/8" in out
    (work / "marker.txt").touch()
    assert cli.main(["run", "--quiet", spec, "--resume"]) == 0
    assert "skipped 7 top-level tasks" in capsys.readouterr().out
    out = volume.open(dst).read(volume.open(dst).bounds)
    raw = volume.open(str(work / "raw.zarr"))
    np.testing.assert_array_equal(out, raw.read(raw.bounds))
    assert cli.main(["status", dst, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "finished" and row["flow_dir"].startswith(f"s3://{bucket}/")
    assert cli.main(["clean", dst, row["flow_id"]]) == 0
    assert "removed" in capsys.readouterr().out
    assert not [k for k in server.keys(bucket) if ".chunkgraph" in k]


def test_state_kept_elsewhere_in_a_bucket_is_found_from_the_destination(
    work: Path, bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(work, bucket, intermediates=f"s3://{bucket}/scratch/flows")
    assert cli.main(["run", "--quiet", spec]) == 1
    capsys.readouterr()
    # the note beside dst says where the state is
    assert any(k.endswith(".where") for k in server.keys(bucket, ".out.zarr.chunkgraph/"))
    assert cli.main(["status", f"s3://{bucket}/out.zarr"]) == 0
    out = capsys.readouterr().out
    assert f"(state under s3://{bucket}/scratch/flows)" in out and "top 7/8" in out
    assert cli.main(["status", "--intermediates", f"s3://{bucket}/scratch/flows"]) == 0
    assert "top 7/8" in capsys.readouterr().out
    assert cli.main(["clean", f"s3://{bucket}/out.zarr", "--all"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not [k for k in server.keys(bucket, "scratch/") if "/markers/" in k]


def test_overwriting_an_output_in_a_bucket_is_refused_naming_the_field(
    work: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(work, bucket)
    text = Path(spec).read_text().replace("chunks: [16, 16, 16]}", "chunks: [16, 16, 16], "
                                          "exists: overwrite}")  # fmt: skip
    Path(spec).write_text(text)
    assert cli.main(["run", "--quiet", spec]) == 2
    assert "output.exists" in capsys.readouterr().err


def doubled(x: np.ndarray) -> np.ndarray:
    return x * 2


def test_a_deferred_flow_in_a_bucket_is_reduced_by_its_destination_url(
    bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = np.arange(32 * 32, dtype="float32").reshape(32, 32)
    src = volume.create(f"s3://{bucket}/src.zarr", (32, 32), (8, 8), "float32")
    src.write(src.bounds, data)
    dst = volume.create(f"s3://{bucket}/out.zarr", (32, 32), (8, 8), "float32")
    report = volume.apply(doubled, src, dst, chunk_sizes=[(8, 8)], blend_pads=2,
                          blend_modes="defer", executor="sync")  # fmt: skip
    layers = Path(report.deferred_layers[0]).parent  # on this machine's scratch
    assert layers.is_dir()
    assert cli.main(["status", dst.path]) == 0
    assert "deferred     top 16/16" in capsys.readouterr().out
    assert cli.main(["reduce", dst.path, "--blend-mode", "linear"]) == 0
    np.testing.assert_array_equal(volume.open(dst.path).read(dst.bounds), data * 2)
    assert cli.main(["status", dst.path]) == 0
    assert "finished" in capsys.readouterr().out
    assert not layers.exists()


def test_a_spec_s_storage_options_reach_a_store_the_environment_does_not_name(
    work: Path,
    bucket: str,
    server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = _spec(work, bucket, storage_options=f"{{endpoint: '{server.endpoint}'}}")
    (work / "marker.txt").touch()  # fail_once: nothing fails
    # The environment names a closed port on loopback: only the spec's endpoint answers.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    text = Path(spec).read_text().replace("storage_options", "#")
    (work / "no-options.yaml").write_text(text)
    assert cli.main(["run", "--quiet", str(work / "no-options.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach 's3://{bucket}/raw.zarr' at endpoint http://127.0.0.1:9" in err
    assert "Traceback" not in err
    assert cli.main(["run", "--quiet", spec]) == 0
    out = volume.open(f"s3://{bucket}/out.zarr", storage_options={"endpoint": server.endpoint})
    raw = volume.open(str(work / "raw.zarr"))
    np.testing.assert_array_equal(out.read(out.bounds), raw.read(raw.bounds))


def test_a_run_that_fails_before_writing_takes_back_the_bucket_output_it_created(
    work: Path, bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = Path(_spec(work, bucket))
    # the probe (the first chunk) fails: nothing is written
    spec.write_text(spec.read_text().replace("start: [16, 16, 16]", "start: [0, 0, 0]"))
    assert cli.main(["run", "--quiet", str(spec)]) != 0
    assert "this run had created was removed" in capsys.readouterr().err
    assert not [k for k in server.keys(bucket) if k.startswith("out.zarr/")]
    # an output that existed before the run stays, whatever happens
    volume.create(f"s3://{bucket}/out.zarr", (32, 32, 32), (16, 16, 16), "float32")
    assert cli.main(["run", "--quiet", str(spec)]) != 0
    assert server.keys(bucket, "out.zarr/") == ["out.zarr/zarr.json"]


def test_a_bucket_s_root_as_the_output_is_refused_naming_what_would_do(
    work: Path, bucket: str, server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = Path(_spec(work, bucket))
    spec.write_text(spec.read_text().replace(f"s3://{bucket}/out.zarr", f"s3://{bucket}"))
    assert cli.main(["run", "--quiet", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"'s3://{bucket}' is a bucket's root" in err and "Traceback" not in err
    assert cli.main(["status", f"s3://{bucket}"]) == 2
    assert "bucket's root" in capsys.readouterr().err


def test_the_dry_run_of_a_new_bucket_output_says_where_the_run_will_put_its_layers(
    work: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = Path(_spec(work, bucket, blend_pads="2"))
    assert cli.main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "on local scratch" in out and f"state in s3://{bucket}/.out.zarr.chunkgraph/" in out
