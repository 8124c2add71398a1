"""The public surface of the geometry and volume subpackages."""

from __future__ import annotations

import chunkgraph.geometry
import chunkgraph.volume


def test_geometry_exports_exactly_box() -> None:
    assert chunkgraph.geometry.__all__ == ["Box"]


def test_volume_exports_the_storage_api() -> None:
    storage_api = {"ChunkCache", "IOStats", "Volume", "create", "open", "remove"}
    assert storage_api <= set(chunkgraph.volume.__all__)
    for name in chunkgraph.volume.__all__:
        assert getattr(chunkgraph.volume, name) is not None
    assert not any(name.startswith("_") for name in chunkgraph.volume.__all__)
