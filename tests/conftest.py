"""Settings for the whole suite."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from chunkgraph.testing import S3Server, s3_server

# A loaded machine can stretch an example past Hypothesis's 200 ms deadline, or its
# data generation past the too_slow health check: speed is measured in benchmarks/,
# never in tests.
settings.register_profile("chunkgraph", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("chunkgraph")

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests would then test
# nothing but that. Python's own handler here restores it, for this process and, since a
# caught signal is reset to its default on exec, for the processes the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _ctrl_c_left_as_found() -> Iterator[None]:
    """A test (or a library it imports) that leaves Ctrl-C handled otherwise breaks every
    interrupt test after it, far from the cause: name the test, and put it back."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"this test left the SIGINT handler changed ({before!r} -> {after!r})")


# --- object stores -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def server() -> Iterator[S3Server]:
    """moto's S3 server on loopback, one for the session; AWS_ENDPOINT_URL and test
    credentials are set while it runs (``chunkgraph.testing.s3_server``)."""
    with s3_server() as running:
        yield running


@pytest.fixture
def bucket(server: S3Server) -> str:
    """A fresh bucket per test, so tests share the server but never see each other's
    objects (moto keeps a process's buckets across its servers: names must be new)."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    server.create_bucket(name)
    return name


# --- the documentation site --------------------------------------------------------------


@pytest.fixture(scope="session")
def flow_pictures() -> None:
    """The site's drawn pictures (the apply flow's, the design notes' layers), drawn as
    ``make docs`` draws them (into docs/images, ignored by git): the pages link to them,
    and a fresh clone has none yet."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for script in ("draw_flow.py", "draw_layers.py"):
        subprocess.run(
            [sys.executable, str(root / "docs" / "scripts" / script)],
            cwd=root,
            check=True,
            capture_output=True,
        )
