"""Fixtures for the apply-flow tests: small source volumes filled with known data."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

_names = itertools.count()


def random_data(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    """Values spanning most of ``dtype``'s range (so rounding mistakes show)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dt)
    info = np.iinfo(dt)
    low, high = max(info.min, -(2**31)), min(info.max, 2**32 - 1)
    return rng.integers(low, high, size=shape, endpoint=True, dtype=np.int64).astype(dt)


class FlowFiles:
    """Makes zarr (or memory) volumes under one test's tmp dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.memory: list[str] = []

    random = staticmethod(random_data)

    def source(
        self,
        data: np.ndarray,
        chunks: tuple[int, ...],
        backend: str = "zarr",
        offset: tuple[int, ...] | None = None,
        **kw: Any,
    ) -> Volume:
        vol = self.empty(data.shape, chunks, data.dtype, backend=backend, offset=offset, **kw)
        spatial = data.shape[data.ndim - vol.spatial_ndim :]
        vol.write(Box.from_shape(spatial, start=offset), data)
        return vol

    def empty(
        self,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        dtype: Any,
        backend: str = "zarr",
        **kw: Any,
    ) -> Volume:
        n = next(_names)
        if backend == "memory":
            path = f"flow-test-{n}"
            self.memory.append(path)
        else:
            path = str(self.root / f"vol{n}.zarr")
        return volume.create(path, shape, chunks, dtype, backend=backend, **kw)

    def cleanup(self) -> None:
        for path in self.memory:
            volume.remove(path)


@pytest.fixture
def files(tmp_path: Path) -> Iterator[FlowFiles]:
    made = FlowFiles(tmp_path)
    yield made
    made.cleanup()


MakeFiles = Callable[[], FlowFiles]
