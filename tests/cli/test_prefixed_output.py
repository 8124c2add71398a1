"""A spec's output, or apply's dst, named with a format prefix (``precomputed://``,
``zarr2://``, ``n5://``, ``zarr3://``, ``file://``), on disk and in a bucket: the flow's
state goes beside the place the prefix names, never under a path spelled with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkgraph import cli, flow, volume

PREFIXES = ("precomputed://", "zarr2://", "n5://", "zarr3://", "file://")


def _spec(work: Path, output: str) -> Path:
    spec = work / "spec.yaml"
    spec.write_text(
        f"input: {work / 'raw.zarr'}\n"
        f"output: {{path: '{output}', dtype: float32, chunks: [16, 16, 16]}}\n"
        "function: spec_functions:scale\n"
        "chunk_sizes: [16]\n"
        "run: {executor: sync}\n"
    )
    return spec


def _run_both_ways(work: Path, output: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(work, output)
    assert cli.main(["run", "--quiet", "--dry-run", str(spec)]) == 0, capsys.readouterr().err
    assert cli.main(["run", "--quiet", str(spec)]) == 0, capsys.readouterr().err
    raw = volume.open(str(work / "raw.zarr"))
    out = volume.open(output)
    np.testing.assert_allclose(out.read(out.bounds), 2 * raw.read(raw.bounds))


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_spec_output_on_disk_with_a_format_prefix_runs(
    work: Path, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_both_ways(work, f"{prefix}{work / 'out'}", capsys)


@pytest.mark.parametrize("prefix", [p for p in PREFIXES if p != "file://"])
def test_a_spec_output_in_a_bucket_with_a_format_prefix_runs(
    work: Path, bucket: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_both_ways(work, f"{prefix}s3://{bucket}/out", capsys)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_apply_into_a_volume_opened_with_a_format_prefix(tmp_path: Path, prefix: str) -> None:
    src = volume.create(tmp_path / "raw.zarr", (32, 32, 32), (16, 16, 16), "float32")
    src.write(src.bounds, np.arange(32**3, dtype="float32").reshape(32, 32, 32))
    volume.create(f"{prefix}{tmp_path / 'out'}", (32, 32, 32), (16, 16, 16), "float32")
    dst = volume.open(f"{prefix}{tmp_path / 'out'}", mode="r+")
    flow.apply(lambda x: x + 1, src, dst, chunk_sizes=[16], executor="sync")
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)
