"""One object URL, however spelled (a trailing or doubled slash), is one volume: a transfer
onto its own source is refused; and status, clean and reduce refuse a URL with a slash
lost (``s3:/bucket/x``) as run does, rather than look for a local folder named ``s3:``."""

from __future__ import annotations

import numpy as np
import pytest

from chunkgraph import cli, volume
from chunkgraph.testing import S3Server


@pytest.mark.parametrize(
    "spelling", ["s3://{b}/raw.zarr/", "s3://{b}//raw.zarr", "s3://{b}/raw.zarr//"]
)
def test_a_transfer_onto_its_source_spelled_otherwise_is_refused(
    bucket: str, server: S3Server, spelling: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = volume.create(f"s3://{bucket}/raw.zarr", (32, 32), (16, 16), "uint8")
    src.write(src.bounds, np.ones((32, 32), "uint8"))
    before = server.keys(bucket)
    assert cli.main(["transfer", f"s3://{bucket}/raw.zarr", spelling.format(b=bucket)]) == 2
    assert "is the source" in capsys.readouterr().err
    assert server.keys(bucket) == before  # no flow ran: no state beside it, no new object
    assert volume.open(f"s3://{bucket}//raw.zarr/").path == f"s3://{bucket}/raw.zarr"


@pytest.mark.parametrize("command", [["status"], ["clean", "--all"], ["reduce"]])
def test_a_url_with_a_slash_lost_is_refused_by_status_clean_and_reduce(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command[0], "s3:/bkt/x", *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "'s3:/bkt/x'" in err and "s3://BUCKET/path" in err and "does not exist" not in err
    assert cli.main(["status", "x.zarr", "--intermediates", "s3:/bkt/state"]) == 2
    assert "--intermediates: 's3:/bkt/state'" in capsys.readouterr().err
