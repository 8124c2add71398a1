"""A resume on an object store recognises its source however the endpoint is given (the
environment, storage options, another spelling of the same server): a job's mark names
the source by its scheme, bucket and key; a mark of another source is refused showing
both sources. The flow's id still names an endpoint given in storage options, so such a
resume may compute its chunks again (it warns): the output is the same."""

from __future__ import annotations

import numpy as np
import pytest

from chunkgraph import ConfigError, downsample, label, transfer, volume
from chunkgraph.testing import S3Server


def _source(bucket: str, name: str = "src.zarr") -> str:
    url = f"s3://{bucket}/{name}"
    made = volume.create(url, (32, 32, 16), (16, 16, 16), "uint8")
    made.write(made.bounds, np.random.default_rng(5).integers(0, 3, (32, 32, 16)).astype("uint8"))
    return url


def _spellings(endpoint: str) -> list[dict[str, str]]:
    """The same server as the environment names it, given another way each."""
    return [
        {"endpoint": endpoint},
        {"aws_endpoint": endpoint + "/"},
        {"endpoint": endpoint.replace("127.0.0.1", "localhost")},
    ]


def _same(a: str, b: str) -> bool:
    x, y = volume.open(a), volume.open(b)
    return x.bounds == y.bounds and bool((x.read(x.bounds) == y.read(y.bounds)).all())


STARTS_OVER = "ignore:resume asked for, but the state"


@pytest.mark.filterwarnings(STARTS_OVER)
def test_a_transfer_resumes_whichever_way_the_endpoint_is_given(
    server: S3Server, bucket: str
) -> None:
    src = _source(bucket)
    dst = f"s3://{bucket}/t.zarr"
    transfer(src, dst, chunks=(32, 32, 32))  # the endpoint from AWS_ENDPOINT_URL
    again = transfer(src, dst, chunks=(32, 32, 32), resume=True)
    assert again.top_tasks_skipped > 0 and again.tasks_per_level[0] == 0
    for options in _spellings(server.endpoint):
        transfer(volume.open(src, storage_options=options), dst, chunks=(32, 32, 32),
                 resume=True)  # fmt: skip
        assert _same(src, dst), options


@pytest.mark.filterwarnings(STARTS_OVER)
def test_downsample_and_label_resume_whichever_way_the_endpoint_is_given(
    server: S3Server, bucket: str
) -> None:
    src = _source(bucket)
    first = downsample(src)
    label(src, f"s3://{bucket}/l.zarr", chunk=(16, 16, 16))
    for options in _spellings(server.endpoint):
        opened = volume.open(src, storage_options=options)
        again = downsample(opened, resume=True)
        assert again.paths == first.paths, options
        label(opened, f"s3://{bucket}/l.zarr", chunk=(16, 16, 16), resume=True)
    assert _same(first.paths[0], downsample(src, dst=f"s3://{bucket}/d{{level}}.zarr").paths[0])


def test_another_source_is_refused_showing_both(bucket: str) -> None:
    src, other = _source(bucket), _source(bucket, "other.zarr")
    dst = f"s3://{bucket}/t.zarr"
    transfer(src, dst)
    with pytest.raises(ConfigError) as info:
        transfer(other, dst, resume=True)
    text = str(info.value)
    assert f"made by a transfer of another source ({src}), and this one's is {other}" in text
    assert "disk:" not in text
