"""A memory volume holds no array until it is written: the stand-ins that ``downsample``
and ``transfer`` plan over before every run cost nothing, however large the volume."""

from __future__ import annotations

import numpy as np

from chunkgraph import volume
from chunkgraph.geometry import Box


def test_a_memory_volume_is_made_on_its_first_write() -> None:
    # 1 TiB: an array made at once would not fit this machine.
    volume.create("lazy-tib", (2**20, 2**20), (1024, 1024), "uint8", fill_value=7,
                  backend="memory")  # fmt: skip
    try:
        assert volume.open("lazy-tib", backend="memory").read(Box((5, 5), (7, 9))).tolist() == [
            [7] * 4,
            [7] * 4,
        ]
    finally:
        volume.remove("lazy-tib")
    small = volume.create("lazy-small", (4, 4), (2, 2), "int16", fill_value=-1, backend="memory")
    try:
        got = small.read(small.bounds)
        got[...] = 5  # a copy: the volume keeps its fill
        small.write(Box((0, 0), (2, 2)), np.full((2, 2), 3, "int16"))
        assert small.read(small.bounds).tolist() == [[3, 3, -1, -1]] * 2 + [[-1] * 4] * 2
    finally:
        volume.remove("lazy-small")
