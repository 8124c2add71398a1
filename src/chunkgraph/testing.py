"""Real servers on loopback for tests and benchmarks: an S3 server (moto's server mode),
a proxy in front of it that behaves like a distant, sometimes failing one, a
silent endpoint (it accepts connections and never answers: a hung store), and a
TCP forwarder that freezes on demand (a store that hangs in the middle of a run).

Not imported by the library. ``moto[server]`` is a test extra, not a runtime
dependency; this module imports it on use.

``latency_proxy`` forwards every request to the server after a fixed delay and
answers a seeded random share of them with ``503 SlowDown`` instead (what S3
says when it throttles), counting both: what a client's retries and
concurrency must cope with, on loopback.

    with s3_server(buckets=("data",)) as server:
        # AWS_ENDPOINT_URL and test credentials are set for the body
        v = chunkgraph.volume.create("s3://data/a.zarr", (64, 64), (32, 32), "uint8")
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


# Headers that describe one hop, not the message: never forwarded either way.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
)
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


@dataclass
class Proxy:
    """A running proxy: its endpoint and what it has seen (read them after the requests)."""

    endpoint: str
    upstream: str
    latency: float
    fail_fraction: float
    requests: int = 0  # every request received, failed ones included
    failed: int = 0  # answered 503 without reaching the server
    by_method: dict[str, int] = field(default_factory=dict)
    gets: dict[str, int] = field(default_factory=dict)  # GETs per path (/bucket/key)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def _admit(self, method: str, path: str) -> bool:
        """Count the request; whether it goes through (False: answer 503)."""
        with self._lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            if method == "GET":
                key = urllib.parse.urlsplit(path).path
                self.gets[key] = self.gets.get(key, 0) + 1
            fail = self._random.random() < self.fail_fraction
            self.failed += fail
            return not fail


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    target = urllib.parse.urlsplit(proxy.upstream)
    upstream_host = target.hostname or "127.0.0.1"
    local = threading.local()  # one upstream connection per proxy thread, kept alive

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connections
        # Headers and body go out as two writes: without TCP_NODELAY the body of a small
        # answer waits for the client's delayed ACK (about 40 ms a request).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if proxy.latency:
                time.sleep(proxy.latency)
            if not proxy._admit(self.command, self.path):
                self._answer(503, [("Content-Type", "application/xml")], _SLOW_DOWN)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            if body is not None:
                headers["Content-Length"] = str(len(body))
            for attempt in range(2):  # a kept-alive connection the server closed: once more
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(upstream_host, target.port)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    reply = conn.getresponse()
                    data = reply.read()
                    break
                except (ConnectionError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt:
                        raise
            kept = [(k, v) for k, v in reply.getheaders() if k.lower() not in _HOP_HEADERS]
            # A HEAD answer's length is the object's size, though no bytes follow.
            size = reply.getheader("Content-Length") if self.command == "HEAD" else None
            self._answer(reply.status, kept, data, size)

        def _answer(
            self, status: int, headers: list[tuple[str, str]], data: bytes, size: str | None = None
        ) -> None:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", size or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Forward


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """An endpoint URL on loopback that accepts every connection and never answers a
    byte: what a client meets at a hung store (a timeout, not a refusal)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener closed: the body is over
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, name="silent-endpoint", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in held:
            conn.close()


class FreezingProxy:
    """A TCP forwarder on loopback (``endpoint``) to ``upstream``; after ``freeze()`` it
    passes no byte either way and keeps every connection open."""

    def __init__(self, upstream: str) -> None:
        host, _, port = urllib.parse.urlsplit(upstream).netloc.rpartition(":")
        self._upstream = (host, int(port))
        self._frozen = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, name="freezing-proxy", daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                client = self._listener.accept()[0]
                server = socket.create_connection(self._upstream)
                self._conns += [client, server]
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: Any, sink: Any) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self._frozen.is_set():
                    return  # swallowed: the other side waits for ever
                sink.sendall(data)

    def close(self) -> None:
        self._listener.close()
        for conn in self._conns:
            conn.close()


@contextlib.contextmanager
def freezing_proxy(upstream: str) -> Iterator[FreezingProxy]:
    """A ``FreezingProxy`` to ``upstream`` for the body."""
    proxy = FreezingProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def latency_proxy(
    upstream: str,
    *,
    latency: float = 0.0,
    fail_fraction: float = 0.0,
    seed: int = 0,
    set_env: bool = True,
) -> Iterator[Proxy]:
    """A threaded HTTP proxy on 127.0.0.1 in front of ``upstream`` (an ``S3Server.endpoint``).

    Each request waits ``latency`` seconds, then a ``fail_fraction`` share of them
    (drawn from ``random.Random(seed)``) is answered ``503 SlowDown``. With
    ``set_env`` the body's ``AWS_ENDPOINT_URL`` is the proxy.

        with s3_server(buckets=("data",)) as s3, latency_proxy(s3.endpoint, latency=0.02):
            ...  # every request to s3://data/... takes 20 ms more
    """
    if not 0.0 <= fail_fraction < 1.0:
        raise ValueError(f"fail_fraction must be in [0, 1), got {fail_fraction}")
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    port = server.server_address[1]
    proxy = Proxy(f"http://127.0.0.1:{port}", upstream, latency, fail_fraction)
    proxy._random.seed(seed)
    server.RequestHandlerClass = _handler(proxy)
    thread = threading.Thread(target=server.serve_forever, name="latency-proxy", daemon=True)
    thread.start()
    saved = os.environ.get("AWS_ENDPOINT_URL")
    try:
        if set_env:
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        yield proxy
    finally:
        if saved is None:
            os.environ.pop("AWS_ENDPOINT_URL", None)
        else:
            os.environ["AWS_ENDPOINT_URL"] = saved
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    """``python -m chunkgraph.testing s3|proxy ...``: one server as a process of its own (a
    benchmark's server must not share the measured process's interpreter). It prints its
    endpoint as its first line once it listens and serves until SIGTERM; the proxy then
    writes its counts (JSON: requests, failed, by_method, gets) to ``--stats``."""
    parser = argparse.ArgumentParser(prog="python -m chunkgraph.testing")
    kind = parser.add_subparsers(dest="kind", required=True)
    kind.add_parser("s3", help="moto's S3 server on 127.0.0.1")
    proxy = kind.add_parser("proxy", help="a latency proxy in front of --upstream")
    proxy.add_argument("--upstream", required=True)
    proxy.add_argument("--latency-ms", type=float, default=0.0)
    proxy.add_argument("--fail-fraction", type=float, default=0.0)
    proxy.add_argument("--stats", help="where to write the request counts at exit")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.kind == "s3":
        with s3_server(set_env=False) as server:
            print(server.endpoint, flush=True)
            stop.wait()
        return
    with latency_proxy(
        args.upstream,
        latency=args.latency_ms / 1000,
        fail_fraction=args.fail_fraction,
        set_env=False,
    ) as running:
        print(running.endpoint, flush=True)
        stop.wait()
        if args.stats:
            with running._lock:
                counts = {
                    "requests": running.requests,
                    "failed": running.failed,
                    "by_method": running.by_method,
                    "GET": running.gets,
                }
            with open(args.stats, "w") as f:
                json.dump(counts, f)


if __name__ == "__main__":
    main()
