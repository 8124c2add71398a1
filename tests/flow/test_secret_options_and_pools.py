"""A pool's processes never receive secret ``storage_options``: apply with
``executor="processes"`` refuses such a volume before the run when this process's
environment (which the pool inherits) lacks the credentials, instead of failing every task."""

from __future__ import annotations

import numpy as np
import pytest

from chunkgraph import ConfigError, flow, volume
from chunkgraph.testing import S3Server

OPTIONS = {"access_key_id": "testing", "secret_access_key": "testing-secret"}


def test_processes_with_secret_options_and_no_credentials_are_refused_up_front(
    bucket: str, server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    src = volume.create(f"s3://{bucket}/raw.zarr", (32, 32), (16, 16), "uint8",
                        storage_options=OPTIONS)  # fmt: skip
    src.write(src.bounds, np.ones((32, 32), "uint8"))
    dst = volume.create(f"s3://{bucket}/out.zarr", (32, 32), (16, 16), "uint8",
                        storage_options=OPTIONS)  # fmt: skip
    before = server.keys(bucket)
    with pytest.raises(ConfigError) as refused:
        flow.apply(lambda x: x + 1, src, dst, chunk_sizes=[16], executor="processes")
    message = str(refused.value)
    assert "executor='processes'" in message and "secret_access_key" in message
    assert "AWS_ACCESS_KEY_ID" in message and refused.value.field == "executor"
    assert server.keys(bucket) == before  # no task ran, no state was written
