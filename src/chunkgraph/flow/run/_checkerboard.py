"""Checkerboarded temporary layers: where top-level tasks write without racing.

Top-level chunk ``i`` (a grid index) contributes to ``chunk_i.padded(blend)``,
which overlaps its neighbours by ``2 * blend``. Writing those overlaps to one
volume would race on shared storage chunks, so each chunk writes to the layer
of its parity, ``(i_0 % 2, i_1 % 2, ...)``, over the axes that blend (``2**k``
layers for ``k`` blended axes, at most ``2**d``: chunks never overlap along an
axis without a blend pad, so parity along it buys nothing)::

    axis 0 ->   chunk 0     chunk 1     chunk 2     chunk 3
    layer 0   [=========]             [=========]
    layer 1             [=========]             [=========]
                      ^^ overlap 2p: in two layers, never twice in one

Storage grid. Every layer covers ``bbox.padded(blend)`` and its storage grid
starts at that corner, with a storage chunk ``s`` dividing the top chunk ``C``
on each axis (the divisor nearest the destination's chunk among those of at
least half its size, so reduction reads stay chunk-sized and a prime ``C``
does not make one-voxel files). Chunk ``i`` then starts on a storage boundary (``i * C``
from the corner) and ends before ``(i + 2) * C``, where the next chunk of its
layer starts, because ``2 * blend <= C``: no storage chunk of a layer is
touched by two tasks. A task's last storage chunk may be partly covered
(``C + 2p`` need not be a multiple of ``s``), so layers are created with
``aligned_writes=False``; that partial write is a read-modify-write by the
only writer of that storage chunk. Odd and per-axis different sizes follow
the same rule.

Without a top-level blend pad there is one layer and the "reduction" is an
aligned copy to the destination.

Dtype. Layers hold unweighted outputs; reductions weigh them from geometry.
The dtype must not lose what the weighted sum needs: the accumulation dtype
(float64 for <= 32-bit data) for integer destinations (rounding before the
weighted sum would round twice) and for ``defer`` (left for a later pass);
the destination's own dtype for float32 / float64 destinations (a weighted
sum of values already at the final precision stays within an ulp of the
float64 result, and an identity ``fn`` stays exact) and for ``max`` and
unblended copies, whose stored values are final already.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkgraph import volume
from chunkgraph._util import divisors
from chunkgraph.flow.plan import FlowSpec, layer_dtype
from chunkgraph.flow.state import StateRoot, state_store
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume


def nearest_divisor(n: int, target: int) -> int:
    """The divisor of ``n`` closest to ``target`` among those >= ``target / 2``.

    Smaller storage chunks would multiply the number of files (a prime chunk
    size would give chunks of 1 voxel); ``n`` itself always qualifies. Ties go
    to the larger divisor.

    >>> nearest_divisor(128, 64), nearest_divisor(45, 16), nearest_divisor(7, 3)
    (64, 15, 7)
    """
    fit = [d for d in divisors(n) if 2 * d >= target] or [n]
    return min(fit, key=lambda d: (abs(d - target), -d))


@dataclass(frozen=True)
class LayerPlan:
    """The temporary layers of one flow: where they live and how they are chunked."""

    root: StateRoot  # a folder, or an object-store prefix (state's ``_layout.layers_place``)
    parity_axes: tuple[int, ...]
    bounds: Box
    storage_chunk: tuple[int, ...]
    dtype: np.dtype
    channel_shape: tuple[int, ...]

    @property
    def storage_options(self) -> Any:
        """The object store's settings where root is one (dst's storage_options); None: env."""
        return self.root.options

    @property
    def n_layers(self) -> int:
        return int(2 ** len(self.parity_axes))

    def layer_of(self, index: tuple[int, ...]) -> int:
        """The layer a top-level grid index writes to.

        >>> plan = LayerPlan(StateRoot.of("."), (0, 2), Box((0,) * 3, (8,) * 3), (4,) * 3,
        ...                  np.dtype("f4"), ())
        >>> plan.n_layers, plan.layer_of((1, 0, 1)), plan.layer_of((2, 5, 3))
        (4, 3, 2)
        """
        layer = 0
        for bit, axis in enumerate(self.parity_axes):
            layer |= (index[axis] % 2) << bit
        return layer

    def path(self, layer: int) -> str:
        return str(self.root.join(f"layer_{layer}.zarr"))

    def paths(self) -> tuple[str, ...]:
        return tuple(self.path(k) for k in range(self.n_layers))

    def create(self) -> list[Volume]:
        """Create (or reopen, when resuming) every layer."""
        local = self.root.local
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        return [
            volume.create(
                self.path(k),
                self.channel_shape + self.bounds.shape,
                self.channel_shape + self.storage_chunk,
                self.dtype,
                fill_value=0,
                offset=self.bounds.start,
                exist_ok=True,
                aligned_writes=False,
                spatial_ndim=self.bounds.ndim,
                storage_options=self.storage_options,
            )
            for k in range(self.n_layers)
        ]

    def remove(self) -> None:
        local = self.root.local
        if local is None:
            state_store(self.root).delete_tree("")
        elif local.exists():
            shutil.rmtree(local)

    def present(self) -> bool:
        """Whether anything of the layers is stored (a folder, or objects under the URL)."""
        local = self.root.local
        return state_store(self.root).exists("") if local is None else local.is_dir()


def plan_layers(spec: FlowSpec, dst: Volume, root: StateRoot) -> LayerPlan:
    """Choose parity axes, extent, storage grid and dtype of a flow's temporary layers."""
    top = spec.levels[0]
    dst_chunk = dst.spatial_chunks
    storage = tuple(nearest_divisor(c, t) for c, t in zip(top.chunk, dst_chunk, strict=True))
    return LayerPlan(
        root=root,
        parity_axes=tuple(a for a, p in enumerate(top.blend) if p > 0),
        bounds=spec.bbox.padded(top.blend),
        storage_chunk=storage,
        dtype=layer_dtype(spec),
        channel_shape=tuple(dst.channel_shape),
    )
