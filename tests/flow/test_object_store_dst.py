"""Flows whose destination is on an object store: adjacent unaligned bboxes, no lock."""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.testing import s3_server

SHAPE = (32, 32)
# Rows cut at 12 are the point here, not the reads they amplify.
pytestmark = pytest.mark.filterwarnings("ignore::chunkgraph.flow.ReadAmplificationWarning")


@pytest.mark.parametrize("repeat", range(3))
def test_adjacent_unaligned_flows_on_a_remote_dst_keep_every_voxel(repeat: int) -> None:
    """Rows [0, 12) and [12, 32) both cut dst's chunks of rows [0, 16) (chunks 16 x 8)."""
    bucket = f"flows-{repeat}"  # moto keeps buckets for the process, across servers
    with s3_server(buckets=(bucket,)):
        data = np.random.default_rng(repeat).standard_normal(SHAPE).astype(np.float32)
        src = volume.create(f"s3://{bucket}/src.zarr", SHAPE, (8, 8), "float32")
        src.write(src.bounds, data)
        dst = volume.create(f"s3://{bucket}/dst.zarr", SHAPE, (16, 8), "float32")
        assert dst.location.conditional_writes and not dst.location.lockable

        def run(rows: tuple[int, int]) -> None:
            start, stop = rows
            with tempfile.TemporaryDirectory() as scratch:
                volume.apply(
                    lambda s: s.astype("float64") * 3.0 + 1.0,
                    src,
                    dst,
                    chunk_sizes=[(stop - start, 8)],
                    blend_pads=[(0, 2)],
                    bbox=Box((start, 0), (stop, SHAPE[1])),
                    probe=False,
                    intermediates=scratch,
                )

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(run, [(0, 12), (12, 32)]))
        out = volume.open(f"s3://{bucket}/dst.zarr").read(Box.from_shape(SHAPE))
        np.testing.assert_allclose(out, data * 3.0 + 1.0, rtol=1e-6, atol=1e-5)


def test_the_report_says_how_many_requests_each_input_chunk_took() -> None:
    with s3_server(buckets=("report-flow",)):
        src = volume.create("s3://report-flow/src.zarr", SHAPE, (8, 8), "float32")
        src.write(src.bounds, np.ones(SHAPE, "float32"))
        dst = volume.create("s3://report-flow/dst.zarr", SHAPE, (8, 8), "float32")
        report = volume.apply(
            lambda s: s * 2.0, src, dst, chunk_sizes=[(16, 16)], probe=False, workers=2
        )
    assert report.input_chunks_read >= 16  # every chunk of src, some twice
    assert report.input_requests == report.input_chunks_read  # one GET each, nothing else
    assert "1.00 requests per input chunk" in report.summary()
