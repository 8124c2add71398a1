"""A refused ``downsample`` or ``transfer`` writes nothing, metadata included: no level
listed in an OME-Zarr image's ``multiscales`` or a precomputed ``info`` that nothing
fills (viewers show those black), no empty destination, no ``zarr.json`` at a bucket's
root. Each format, on a disk and in a bucket of a real S3 server (moto)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkgraph import ConfigError, downsample, transfer, volume
from chunkgraph.testing import S3Server

# Far too little for any plan: the flow refuses it before running.
TINY = 1000


def _listing(server: S3Server, bucket: str) -> list[str]:
    return sorted(server.keys(bucket))


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _image(path: str) -> Any:
    (base,) = volume.create_multiscale(
        path, [volume.Level((32, 32, 8), (16, 16, 8), (4.0, 4.0, 40.0))], "uint8"
    )
    base.write(base.bounds, np.ones((32, 32, 8), "uint8"))
    return base


def _precomputed(path: str) -> Any:
    v = volume.create(f"precomputed://{path}", (32, 32, 8), (16, 16, 8), "uint8")
    v.write(v.bounds, np.ones((32, 32, 8), "uint8"))
    return volume.open(f"precomputed://{path}")


@pytest.mark.parametrize("kind", ["zarr3", "ome-zarr", "precomputed"])
def test_a_refused_downsample_leaves_no_level_on_disk(tmp_path: Path, kind: str) -> None:
    path = str(tmp_path / "img")
    if kind == "ome-zarr":
        src = _image(path)
        before = zarr.open_group(path, mode="r").attrs.asdict()
    elif kind == "precomputed":
        src = _precomputed(path)
        before = json.loads((tmp_path / "img" / "info").read_text())
    else:
        src = volume.create(path + ".zarr", (32, 32, 8), (16, 16, 8), "uint8")
    files = _files(tmp_path)
    with pytest.raises(ConfigError) as info:
        downsample(src, factor=(2, 2, 1), levels=2, memory_limit=TINY)
    assert info.value.field == "memory_limit"
    assert "chunk_sizes" not in str(info.value)  # downsample takes no chunk sizes
    assert _files(tmp_path) == files
    if kind == "ome-zarr":
        assert zarr.open_group(path, mode="r").attrs.asdict() == before
    elif kind == "precomputed":
        assert json.loads((tmp_path / "img" / "info").read_text()) == before


def test_a_refused_downsample_in_a_bucket_adds_no_object(server: S3Server, bucket: str) -> None:
    src = _image(f"s3://{bucket}/img.zarr")
    objects = _listing(server, bucket)
    with pytest.raises(ConfigError):
        downsample(src, factor=(2, 2, 1), levels=1, memory_limit=TINY)
    assert _listing(server, bucket) == objects


@pytest.mark.parametrize("prefix", ["", "precomputed://", "zarr2://"])
def test_a_refused_transfer_leaves_no_destination(tmp_path: Path, prefix: str) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), (32, 32, 8), (16, 16, 8), "uint8")
    files = _files(tmp_path)
    with pytest.raises(ConfigError) as info:
        transfer(src, f"{prefix}{tmp_path}/dst", memory_limit=TINY)
    assert info.value.field == "memory_limit"
    # transfer takes no chunk sizes: the advice is its own memory limit or dst's chunks.
    assert "chunk_sizes" not in str(info.value) and "chunks" in str(info.value)
    assert _files(tmp_path) == files


def test_a_refused_transfer_into_a_bucket_writes_nothing_there(
    server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), (32, 32, 8), (16, 16, 8), "uint8")
    for dst in (f"s3://{bucket}", f"s3://{bucket}/", f"precomputed://s3://{bucket}"):
        with pytest.raises(ConfigError, match="bucket's root") as info:
            transfer(src, dst)
        assert info.value.field == "dst"
    with pytest.raises(ConfigError):
        transfer(src, f"s3://{bucket}/copy.zarr", memory_limit=TINY)
    assert _listing(server, bucket) == []


def test_a_dst_the_copy_made_is_removed_when_the_flow_refuses_it(tmp_path: Path) -> None:
    """The net under the plan made first: the copy itself, refused by the flow after it
    made dst, removes that dst, and leaves one it did not make."""
    from chunkgraph.flow import RunOptions
    from chunkgraph.jobs._transfer import _Copy, _run

    src = volume.create(str(tmp_path / "src.zarr"), (32, 32, 8), (16, 16, 8), "uint8")
    dst = tmp_path / "dst.zarr"
    copy = _Copy(src, dst, src.bounds, None, None, None, None, "safe", mark="")
    run = RunOptions(memory_limit=TINY, probe=False)
    with pytest.raises(ConfigError):
        _run(copy, run, made=True)
    assert not dst.exists()
    with pytest.raises(ConfigError):
        _run(copy, run, made=False)
    assert volume.open(str(dst)).shape == (32, 32, 8)
