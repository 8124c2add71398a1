"""``view``: serve volumes to a Neuroglancer viewer running in this process.

Lifecycle, top to bottom in ``view``: open every volume (a path that does not open is
refused before anything listens), check that the port is free, start Neuroglancer's
server (its client ships with the ``neuroglancer`` package: nothing outside the machine
is reached), add one layer per volume, centre the view, and hand back a ``View`` with
the URL and ``stop()``. Labels are drawn over images; two images or more are shown side
by side, one panel each (an input beside its output), with the labels over every one.
The server runs in a background thread; the CLI waits for
Ctrl-C, Python code keeps working and calls ``stop()`` (or leaves a ``with`` block).

Neuroglancer's server is one per process: a new ``view`` replaces the one before it.
"""

from __future__ import annotations

import errno
import os
import socket
import webbrowser
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box
from chunkgraph.viewer._layers import dimensions, display_range, neuroglancer
from chunkgraph.viewer._pyramid import layer_source
from chunkgraph.volume import Volume
from chunkgraph.volume import open as open_volume

# Each volume's chunk cache while it is shown: panning back over a region, or two panels
# showing the same chunk, reads it once. Big enough for a screen of 64^3 float32 chunks.
CACHE_BYTES = 256 << 20
HOST = "127.0.0.1"
# The first view shows the region (bbox, else the first volume) across about this many
# screen pixels, but never zoomed out beyond this many voxels a pixel: farther out the
# viewer asks for coarser chunks, each computed from that many times more voxels per axis.
FIT_PIXELS = 400
MAX_VOXELS_PER_PIXEL = 8.0


@dataclass(frozen=True)
class View:
    """A running viewer: open ``url`` in a browser; ``stop()`` ends the server.

    Attributes:
        url: The viewer's address on 127.0.0.1.
        layers: The layers' names, one per volume, in the order given.
        viewer: The ``neuroglancer.Viewer``, for scripting its state (``viewer.txn()``).
    """

    url: str
    layers: tuple[str, ...]
    viewer: Any  # the neuroglancer.Viewer, for scripting its state

    def stop(self) -> None:
        neuroglancer().server.stop()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def view(
    *volumes: Volume | str | os.PathLike[str],
    port: int = 0,
    bbox: Box | None = None,
    position: Sequence[float] | None = None,
    open_browser: bool = False,
) -> View:
    """Serve ``volumes`` to a Neuroglancer viewer on this machine; one layer each.

    Args:
        volumes: Volumes, or the paths and URLs ``volume.open`` takes.
        port: The viewer's port on 127.0.0.1 (0: any free one).
        bbox: A region to outline and centre on (global voxel coordinates).
        position: A voxel to centre on (default: bbox's centre, else the first volume's).
        open_browser: Open the URL in the default browser.

    Raises:
        VolumeNotFoundError: A path where no volume is.
        ConfigError: No volumes, a port in use, or a position of the wrong length.
    """
    opened = [_opened(v) for v in volumes]
    if not opened:
        raise ConfigError("view needs at least one volume (a path, URL or Volume)")
    centre = _centre(opened[0], bbox, position)
    spatial_centre = centre[len(opened[0].channel_shape) :]  # each layer's channels apart
    ng = neuroglancer()
    _check_port_free(port)
    if ng.server.is_server_running():
        ng.server.stop()
    ng.set_server_bind_address(HOST, port)
    viewer = ng.Viewer()
    names = _layer_names([_given_name(v) for v in volumes])
    images: list[str] = []
    with viewer.txn() as state:
        for name, volume in zip(names, opened, strict=True):
            kind, source = layer_source(volume)
            if kind == "segmentation":
                state.layers[name] = ng.SegmentationLayer(source=source)
                continue
            low, high = display_range(volume, spatial_centre)
            state.layers[name] = ng.ImageLayer(
                source=source, shader_controls={"normalized": {"range": [low, high]}}
            )
            images.append(name)
        labels = [n for n in names if n not in images]
        if len(images) > 1:  # side by side, one panel each, the labels over every one
            state.layout = ng.row_layout(
                [ng.LayerGroupViewer(layers=[n, *labels], layout="xy") for n in images]
            )
        if bbox is not None:
            state.layers["bbox"] = _box_layer(opened[0], bbox)
        state.position = centre
        state.cross_section_scale = _zoom(opened[0], bbox)
    url = str(viewer)
    if open_browser:
        webbrowser.open(url)
    return View(url=url, layers=tuple(names), viewer=viewer)


def _opened(given: Volume | str | os.PathLike[str]) -> Volume:
    if isinstance(given, Volume):
        return given if given.cache_bytes else given.with_cache(CACHE_BYTES)
    return open_volume(given, cache_bytes=CACHE_BYTES)


def _centre(first: Volume, bbox: Box | None, position: Sequence[float] | None) -> list[float]:
    """Where the view starts, in the viewer's coordinates (channels, then space)."""
    n = first.spatial_ndim
    if position is not None:
        if len(position) != n:
            raise ConfigError(
                f"position {tuple(position)} has {len(position)} coordinates; "
                f"{first.path!r} has {n} spatial axes"
            )
        spatial = [float(p) for p in position]
    else:
        region = first.bounds if bbox is None else bbox
        spatial = [(a + b) / 2 for a, b in zip(region.start, region.stop, strict=True)]
    return [0.0] * len(first.channel_shape) + spatial


def _zoom(first: Volume, bbox: Box | None) -> float:
    """Metres per screen pixel (Neuroglancer's unit) for the first view: the region fits
    in ``FIT_PIXELS``."""
    region = first.bounds if bbox is None else bbox
    voxels = min(max(region.shape[:2]) / FIT_PIXELS, MAX_VOXELS_PER_PIXEL)
    return voxels * min(first.resolution[:2]) * 1e-9


def _check_port_free(port: int) -> None:
    """Refuse a port something else listens on, before Neuroglancer's server tries it."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError as error:
            why = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be used ({error})"
            raise ConfigError(
                f"port {port} on {HOST} {why}; pick another with --port, or --port 0 for "
                "any free one"
            ) from None


def _given_name(given: Volume | str | os.PathLike[str]) -> str:
    """What names a layer: the path as given (a Volume's own path for a Volume)."""
    return given.path if isinstance(given, Volume) else os.fspath(given)


def _layer_names(paths: Sequence[str]) -> list[str]:
    """Each volume's last path component, made unique by its position when two agree."""
    names = [p.rstrip("/").rsplit("/", 1)[-1] or p for p in paths]
    return [n if names.count(n) == 1 else f"{n} ({i})" for i, n in enumerate(names)]


def _box_layer(first: Volume, bbox: Box) -> Any:
    """An annotation layer outlining ``bbox`` in ``first``'s coordinates."""
    n_channel = len(first.channel_shape)
    ng = neuroglancer()
    layer = ng.LocalAnnotationLayer(dimensions=dimensions(first))
    layer.annotations.append(
        ng.AxisAlignedBoundingBoxAnnotation(
            id="bbox",
            point_a=[0] * n_channel + list(bbox.start),
            point_b=[0] * n_channel + list(bbox.stop),
        )
    )
    return layer
