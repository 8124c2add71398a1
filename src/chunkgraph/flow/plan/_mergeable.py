"""Whether a flow's bbox may cut its destination's storage chunks.

Policy. A bbox that is not aligned to dst's storage chunks leaves partial chunks at
its edge, which two adjacent flows both read, modify and write back. That is safe
where those writes are locked across processes (a disk: ``run/_edge_locks``) or
conditional (an object store with ETag matches). A store that offers neither is
refused when the flow's arguments are checked, before anything is written:
adjacent flows would lose voxels. Pure: it reads the volume's metadata only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunkgraph._errors import ConfigError

if TYPE_CHECKING:
    from chunkgraph.geometry import Box
    from chunkgraph.volume import Volume


def check_edges_mergeable(dst: Volume, bbox: Box) -> None:
    """Refuse a ``bbox`` that cuts ``dst``'s storage chunks on a store that can neither
    lock them across processes nor merge them by conditional writes."""
    where = dst.location
    if where.conditional_writes or where.kind != "remote":
        return
    inside = bbox.intersection(dst.bounds)  # an expanded bbox may pass dst's edge
    aligned = dst.chunk_aligned(inside)
    if aligned != inside:
        raise unmergeable(dst, "the storage chunks the bbox's edges cut", aligned)


def unmergeable(dst: Volume, what: str, aligned: Box | None) -> ConfigError:
    """The refusal of ``what`` (edge chunks) on ``dst``, naming the aligned bbox if known."""
    snapped = f" ({aligned})" if aligned is not None else " (dst.chunk_aligned(bbox))"
    return ConfigError(
        f"destination {dst.path!r} is on a store without conditional writes, so {what} "
        "cannot be merged safely with another flow's writes; use a bbox aligned to dst's "
        f"storage chunks{snapped} or a destination through the zarr backend",
        field="bbox",
    )
