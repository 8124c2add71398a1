"""Zoomed out, chunks come from the pyramid a volume has stored: the coarsest level whose
factor divides the factor the viewer asks for, downsampled in memory the rest of the way.
Each level below holds values the full resolution does not (a constant), so a chunk
says which level it was read from."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import numpy as np

from chunkgraph import volume
from chunkgraph.viewer import View, view

RES = (4, 4, 40)


def _raw_chunk(
    shown: View, factor: str, start: str, stop: str, dtype: str, shape: tuple
) -> np.ndarray:
    base = shown.url.split("/v/", 1)[0]
    key = str(shown.viewer.state.layers[0].source[0].url).removeprefix("python://volume/")
    with urllib.request.urlopen(f"{base}/neuroglancer/raw/{key}/{factor}/{start}/{stop}") as reply:
        body = reply.read()
    return np.frombuffer(body, dtype).reshape(shape, order="F")


def test_zarr_siblings_serve_the_scales_they_divide(tmp_path: Path) -> None:
    raw = volume.create(tmp_path / "raw.zarr", (64, 64, 8), (16, 16, 8), "uint8",
                        resolution=RES, offset=(32, 32, 0))  # fmt: skip
    raw.write(raw.bounds, np.full(raw.shape, 10, "uint8"))
    s1 = volume.create(tmp_path / "raw_s1.zarr", (32, 32, 8), (16, 16, 8), "uint8",
                       resolution=(8, 8, 40), offset=(16, 16, 0))  # fmt: skip
    s1.write(s1.bounds, np.full(s1.shape, 77, "uint8"))
    with view(str(tmp_path / "raw.zarr")) as shown:
        from_s1 = _raw_chunk(shown, "2,2,1", "0,0,0", "16,16,8", "uint8", (16, 16, 8))
        assert (from_s1 == 77).all()
        beyond = _raw_chunk(shown, "4,4,2", "0,0,0", "8,8,4", "uint8", (8, 8, 4))
        assert (beyond == 77).all()  # s1, then 2,2,2 in memory
        # 1,1,2 is not a multiple of s1's 2,2,1: computed from full resolution.
        full = _raw_chunk(shown, "1,1,2", "0,0,0", "16,16,4", "uint8", (16, 16, 4))
        assert (full == 10).all()


def test_a_level_that_does_not_line_up_is_not_used(tmp_path: Path) -> None:
    raw = volume.create(tmp_path / "raw.zarr", (32, 32, 8), (16, 16, 8), "uint8", resolution=RES)
    raw.write(raw.bounds, np.full(raw.shape, 10, "uint8"))
    odd = volume.create(tmp_path / "raw_s1.zarr", (11, 11, 8), (16, 16, 8), "uint8",
                        resolution=(12, 12, 40), offset=(1, 0, 0))  # fmt: skip
    odd.write(odd.bounds, np.full(odd.shape, 77, "uint8"))
    with view(str(tmp_path / "raw.zarr")) as shown:
        got = _raw_chunk(shown, "2,2,1", "0,0,0", "16,16,8", "uint8", (16, 16, 8))
        assert (got == 10).all()


def test_a_precomputed_pyramid_serves_its_scales(tmp_path: Path) -> None:
    path = f"precomputed://{tmp_path}/seg"
    base = volume.create(path, (64, 64, 8), (16, 16, 8), "uint32", resolution=RES)
    base.write(base.bounds, np.full(base.shape, 3, "uint32"))
    level = volume.add_level(base, (2, 2, 1))
    level.write(level.bounds, np.full(level.shape, 5, "uint32"))
    with view(path) as shown:
        got = _raw_chunk(shown, "4,4,1", "0,0,0", "16,16,8", "uint32", (16, 16, 8))
        assert (got == 5).all()  # the level, then a stride of 2,2,1 (labels)


def test_a_level_off_the_grid_or_short_of_the_edge_is_not_used(tmp_path: Path) -> None:
    """A level whose offset is not the volume's over the factor exactly (half a voxel off
    would serve chunks shifted by one voxel), or whose shape is floor(shape / f) (one
    short at the far edge), is computed from full resolution instead."""
    raw = volume.create(tmp_path / "raw.zarr", (9, 4, 4), (4, 4, 4), "uint8", offset=(3, 0, 0))
    raw.write(raw.bounds, np.full(raw.shape, 10, "uint8"))
    # Offset 3 // 2 = 1 but 1 * 2 != 3: off the grid. Shape 4 = floor(9 / 2): short.
    odd = volume.create(tmp_path / "raw_s1.zarr", (4, 2, 2), (4, 2, 2), "uint8",
                        resolution=(2, 2, 2), offset=(1, 0, 0))  # fmt: skip
    odd.write(odd.bounds, np.full(odd.shape, 77, "uint8"))
    with view(str(tmp_path / "raw.zarr")) as shown:
        got = _raw_chunk(shown, "2,2,2", "0,0,0", "5,2,2", "uint8", (5, 2, 2))
        assert (got == 10).all()
