"""Fixtures shared by the volume tests: a factory that makes a fresh volume on any backend."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chunkgraph import volume
from chunkgraph.volume import Volume

BACKENDS = ("zarr", "tensorstore", "memory")
_names = itertools.count()

MakeVolume = Callable[..., Volume]


@pytest.fixture
def make_volume(tmp_path: Path) -> Iterator[Callable[..., Volume]]:
    """``make_volume(backend, shape, chunks, dtype, **kw)``; memory volumes removed after."""
    made: list[str] = []

    def make(backend: str, shape: Any, chunks: Any, dtype: Any = "float32", **kw: Any) -> Volume:
        n = next(_names)
        path = f"test-mem-{n}" if backend == "memory" else str(tmp_path / f"vol{n}")
        if backend == "memory":
            made.append(path)
        return volume.create(path, shape, chunks, dtype, backend=backend, **kw)

    yield make
    for name in made:
        volume.remove(name, missing_ok=True)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
