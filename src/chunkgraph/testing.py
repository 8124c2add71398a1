"""Real servers on loopback for tests and benchmarks: an S3 server (moto's server mode).

Not imported by the library. ``moto[server]`` is a test extra, not a runtime
dependency; this module imports it on use.

    with s3_server(buckets=("data",)) as server:
        # AWS_ENDPOINT_URL and test credentials are set for the body
        v = chunkgraph.volume.create("s3://data/a.zarr", (64, 64), (32, 32), "uint8")
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Credentials moto accepts; they are not secrets of anything.
TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret",
    "AWS_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    """A running S3 server: its endpoint URL (``http://127.0.0.1:PORT``)."""

    endpoint: str

    def create_bucket(self, name: str) -> None:
        self._client().create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` in ``bucket`` (all pages)."""
        pages = (
            self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def _client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=TEST_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=TEST_ENV["AWS_REGION"],
        )


@contextlib.contextmanager
def s3_server(buckets: tuple[str, ...] = (), *, set_env: bool = True) -> Iterator[S3Server]:
    """Run moto's S3 server on 127.0.0.1 (a free port) for the body.

    With ``set_env`` the body sees ``AWS_ENDPOINT_URL`` and test credentials, as
    the providers' tools (and chunkgraph) read them; the environment is restored
    afterwards.
    """
    from moto.server import ThreadedMotoServer

    # One log line per request would drown a test's output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    found = S3Server(f"http://{host}:{port}")
    saved = {k: os.environ.get(k) for k in (*TEST_ENV, "AWS_ENDPOINT_URL")}
    try:
        if set_env:
            os.environ.update(TEST_ENV, AWS_ENDPOINT_URL=found.endpoint)
        for name in buckets:
            found.create_bucket(name)
        yield found
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()
