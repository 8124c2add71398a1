"""One Neuroglancer layer per chunkgraph volume, read lazily through the volume.

Policy:

* **Nothing is read until the viewer asks.** A layer's source (``_pyramid.py``) reads
  through ``VolumeArray``, an array-like that has a shape and a dtype and answers
  ``array[slices]`` with ``Volume.read`` of that box: opening a terabyte volume reads
  its metadata only, and each chunk the viewer draws is one read, served from the
  volume's chunk cache when it was read before.
* **Image or segmentation from the dtype.** Integers of four bytes or more are labels
  (segmentation: each id its colour); smaller integers and floats are intensities
  (image). Neuroglancer's own guess calls ``uint16`` labels; microscopy keeps images in
  ``uint16``, so chunkgraph does not follow it.
* **Aligned in physical space.** Each layer's voxel offset is the volume's offset and its
  voxel size the volume's resolution (in nm), so volumes of different resolutions and
  regions overlay where their voxels are. Spatial axes are named ``x, y, z`` in the
  volume's order (as ``--bbox X0,Y0,Z0:X1,Y1,Z1`` names them); channel axes ``c0^, ...``.
* **Contrast from the data.** An image layer's display range is the 0.5 to 99.5
  percentiles of the one chunk (as reads decode it) at the view's centre: one read when
  the view opens, where Neuroglancer's default ([0, 1] for floats, the dtype's range for
  integers) shows most volumes all black or all white.
* **Raw chunks.** The browser is on this machine: chunks go uncompressed.
* **Only what the browser reads.** dtypes Neuroglancer does not draw are converted per
  chunk: ``int64`` to ``uint64`` (labels' bits kept), ``bool`` to ``uint8``, ``float16``
  and ``float64`` to ``float32``. The browser gets voxels, never the store's credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

# dtypes Neuroglancer's precomputed chunks cannot carry, and what the browser gets instead.
_SHOWN_AS: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype("bool"): np.dtype("uint8"),
    np.dtype("int64"): np.dtype("uint64"),
    np.dtype("float16"): np.dtype("float32"),
    np.dtype("float64"): np.dtype("float32"),
}
SPATIAL_NAMES = ("x", "y", "z")


def neuroglancer() -> Any:
    """The ``neuroglancer`` package, imported on first use: it is an optional extra, and
    runs that only print a view command never need it."""
    try:
        import neuroglancer as ng  # noqa: PLC0415 (optional dependency)
        from neuroglancer import local_volume  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            "viewing volumes needs the neuroglancer package: pip install 'chunkgraph[view]'"
        ) from None
    if not hasattr(np.ndarray, "tostring"):
        # Its raw chunk encoder calls ndarray.tostring, which NumPy 2 removed.
        local_volume.encode_raw = encode_raw
    return ng


def encode_raw(subvol: np.ndarray[Any, Any]) -> bytes:
    """A chunk's voxels as the viewer decodes them: the first axis fastest (as its npz
    encoder's Fortran order; the old encoder's C order draws them transposed)."""
    return subvol.tobytes("F")


def layer_kind(dtype: np.dtype[Any]) -> str:
    """``"segmentation"`` for labels, ``"image"`` for intensities.

    >>> import numpy as np
    >>> layer_kind(np.dtype("uint64")), layer_kind(np.dtype("uint16"))
    ('segmentation', 'image')
    """
    labels = np.issubdtype(dtype, np.integer) and dtype.itemsize >= 4
    return "segmentation" if labels else "image"


def axis_names(volume: Volume) -> list[str]:
    """The volume's axes as the viewer names them: channels first, then space."""
    channels = [f"c{i}^" for i in range(len(volume.channel_shape))]
    n = volume.spatial_ndim
    space = list(SPATIAL_NAMES[:n]) if n <= 3 else [f"d{i}" for i in range(n)]
    return channels + space


class VolumeArray:
    """A volume as the array ``neuroglancer.LocalVolume`` reads: ``shape``, ``dtype`` and
    ``array[slices]`` relative to the volume's first voxel, each one ``Volume.read``."""

    def __init__(self, volume: Volume) -> None:
        self.volume = volume
        self.shape = volume.shape
        self.dtype: np.dtype[Any] = _SHOWN_AS.get(volume.dtype, volume.dtype)
        self._n_channel = len(volume.channel_shape)

    def __getitem__(self, index: tuple[slice, ...]) -> np.ndarray[Any, Any]:
        spatial = index[self._n_channel :]
        offset = self.volume.offset
        box = Box(
            tuple(o + s.start for o, s in zip(offset, spatial, strict=True)),
            tuple(o + s.stop for o, s in zip(offset, spatial, strict=True)),
        )
        data = self.volume.read(box)[index[: self._n_channel]]
        if data.dtype == self.dtype:
            return data
        if data.dtype == np.dtype("int64"):
            return data.view(np.uint64)
        return data.astype(self.dtype)


def display_range(volume: Volume, centre: Sequence[float]) -> tuple[float, float]:
    """The range an image layer's contrast spans: the 0.5 and 99.5 percentiles of the
    read chunk holding ``centre`` (spatial, global voxels; clamped into the bounds)."""
    bounds, step = volume.bounds, volume.read_chunks
    inside = [
        min(max(int(c), a), b - 1)
        for c, a, b in zip(centre, bounds.start, bounds.stop, strict=True)
    ]
    start = tuple(a + (c - a) // s * s for c, a, s in zip(inside, bounds.start, step, strict=True))
    sample = volume.read(Box(start, tuple(a + s for a, s in zip(start, step, strict=True))))
    values = sample.astype(np.float64).ravel()  # bool has no percentiles; int64 overflows none
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    low, high = (float(p) for p in np.percentile(finite, (0.5, 99.5)))
    return (low, high) if high > low else (low, low + 1.0)


def dimensions(volume: Volume) -> Any:
    """The volume's coordinate space as the viewer names it: channels unitless, space in
    nm at the volume's resolution."""
    n_channel = len(volume.channel_shape)
    return neuroglancer().CoordinateSpace(
        names=axis_names(volume),
        units=[""] * n_channel + ["nm"] * volume.spatial_ndim,
        scales=[1.0] * n_channel + list(volume.resolution),
    )
