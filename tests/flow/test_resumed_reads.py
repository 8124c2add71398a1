"""A resumed run predicts what it reads: its pending top tasks read the halo they share
with done neighbours alone (and the probe its region, its task done or not), so the
prediction it reports is theirs, not the whole flow's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph.geometry import Box
from chunkgraph.volume import apply

# A sweep of 4 top tasks along the last axis over 32^3 storage chunks, crop 2: each reads
# one storage chunk of each neighbour's. With tasks 0 and 1 done, tasks 2 and 3 read
# [96, 256) for [128, 256): 1.25 where the whole flow reads 1.00.
FLOW: dict[str, Any] = dict(chunk_sizes=[(32, 32, 64), (32, 32, 32)], crop_pads=[0, 2])


@pytest.mark.parametrize("probe", [False, True])
@pytest.mark.parametrize("executor", ["sync", "processes"])
def test_a_resumed_run_predicts_the_reads_of_its_pending_tasks(
    files: Any, tmp_path: Path, probe: bool, executor: str
) -> None:
    """On a worker process the probe reads through the driver's volumes, which the report
    does not count there: nor does the prediction (one process: one stream, in order)."""
    data = files.random((32, 32, 256), "float32")
    src = files.source(data, (32, 32, 32))
    dst = files.empty((32, 32, 256), (32, 32, 32), "float32")
    flag = tmp_path / "fail"
    flag.touch()

    def second_half_fails_once(src: np.ndarray, box: Box) -> np.ndarray:
        if flag.exists() and box.start[2] >= 128:
            raise RuntimeError("the second half fails the first time")
        return src[2:-2, 2:-2, 2:-2]

    workers = {"workers": 1} if executor == "processes" else {}
    args = dict(executor=executor, probe=probe, intermediates=tmp_path / "t", **workers, **FLOW)
    with pytest.raises(ExceptionGroup):
        apply(second_half_fails_once, src, dst, retries=0, **args)
    flag.unlink()
    report = apply(second_half_fails_once, src, dst, resume=True, **args)
    assert report.top_tasks_skipped == 2
    assert report.plan is not None
    assert report.read_amplification == pytest.approx(report.plan.read_amplification, abs=0.02)
    assert report.read_amplification > 1.2  # the done neighbours' halos: not a whole-flow 1.00
    assert any(r.startswith("resumed: 2 of 4 top tasks pending") for r in report.plan.reasons)
    np.testing.assert_array_equal(dst.read(dst.bounds)[..., 2:-2], data[..., 2:-2])
