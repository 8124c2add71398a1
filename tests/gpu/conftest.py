"""Pretend devices for the GPU tests: no GPU runs here (``FakeBackend``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chunkgraph.gpu import FakeBackend, use_backend


def _installed(count: int) -> Iterator[FakeBackend]:
    with use_backend(FakeBackend(count)) as backend:
        assert isinstance(backend, FakeBackend)
        yield backend


@pytest.fixture
def fake() -> Iterator[FakeBackend]:
    """One pretend device, this process's backend for the test."""
    yield from _installed(1)


@pytest.fixture
def fake2() -> Iterator[FakeBackend]:
    """Two pretend devices, this process's backend for the test."""
    yield from _installed(2)
