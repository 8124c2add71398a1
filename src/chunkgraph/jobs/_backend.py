"""The backend of the volumes a job makes, unless told otherwise.

Policy. A job's new volumes (downsample's Zarr v3 levels beside a plain source,
transfer's dst) keep the source's backend where it writes Zarr v3 (``zarr``,
``tensorstore``, ``memory``), and are ``zarr`` when the source is in another format:
a format prefix on the new path (``precomputed://``, ``n5://``, ``zarr2://``)
chooses its own.
"""

from __future__ import annotations

from typing import cast

from chunkgraph.volume import BackendName, Volume


def plain_backend(source: Volume) -> BackendName:
    """The backend of a job's new Zarr v3 volume made from ``source``."""
    backend = source.backend if source.backend in ("zarr", "tensorstore", "memory") else "zarr"
    return cast("BackendName", backend)
