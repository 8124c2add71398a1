"""What a deferred flow records about itself, so that its layers can be reduced later.

A flow run with ``blend_modes="defer"`` ends with its top-level outputs in the
checkerboard layers (``_checkerboard``), margin past the bbox included, and no
reduction. ``reduce_deferred`` (``_deferred_run``) runs that reduction later,
possibly in another process, knowing nothing but the flow's directory. So
``apply`` writes, beside the totals in ``flow.json`` (state's ``_info.write_flow_info``),
the geometry the reduction needs under the key ``"deferred_geometry"``::

    bbox, top chunk, top blend pad      which top task wrote which voxels, its weights
    dst: shape, chunks, dtype, offset, resolution   the destination the reduction must write
    accumulate dtype, reduction chunk   the sums and the reduction boxes, as apply's
    layers: parity axes, bounds,        how to find and read each layer
            storage chunk, dtype

Everything else of the ``FlowSpec`` (lower levels, inputs, ``fn``) is spent:
the layers hold the top level's finished, unweighted outputs. The reduction's
blend mode is the caller's choice (``defer`` itself has no weights), so it is not
recorded. Layer paths are stored relative to the flow directory, so a moved
intermediates directory still reduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.flow.plan import ALL_MODES, WEIGHTED_MODES, FlowSpec, LevelSpec
from chunkgraph.flow.run._checkerboard import LayerPlan
from chunkgraph.flow.state import StateRoot
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.volume import Volume

GEOMETRY_KEY = "deferred_geometry"


@dataclass(frozen=True)
class DeferredGeometry:
    """A deferred flow's top level, destination and layers (see the module docstring)."""

    bbox: Box
    top_chunk: tuple[int, ...]
    top_blend: tuple[int, ...]
    dst_shape: tuple[int, ...]
    dst_chunks: tuple[int, ...]
    dst_dtype: np.dtype[Any]
    dst_offset: tuple[int, ...]
    accumulate_dtype: np.dtype[Any]
    max_reduction_chunk_size: tuple[int, ...]
    layer_parity_axes: tuple[int, ...]
    layer_bounds: Box
    layer_storage_chunk: tuple[int, ...]
    layer_dtype: np.dtype[Any]
    layer_channel_shape: tuple[int, ...]
    # Part of the flow id; None in a flow.json written before it was recorded.
    dst_resolution: tuple[float, ...] | None = None

    @classmethod
    def of(cls, spec: FlowSpec, dst: Volume, layers: LayerPlan) -> DeferredGeometry:
        top = spec.levels[0]
        return cls(
            bbox=spec.bbox,
            top_chunk=top.chunk,
            top_blend=top.blend,
            dst_shape=tuple(dst.shape),
            dst_chunks=tuple(dst.chunks),
            dst_dtype=np.dtype(dst.dtype),
            dst_offset=tuple(dst.offset),
            accumulate_dtype=np.dtype(spec.accumulate_dtype),
            max_reduction_chunk_size=spec.max_reduction_chunk_size,
            layer_parity_axes=layers.parity_axes,
            layer_bounds=layers.bounds,
            layer_storage_chunk=layers.storage_chunk,
            layer_dtype=np.dtype(layers.dtype),
            layer_channel_shape=layers.channel_shape,
            dst_resolution=tuple(float(r) for r in dst.resolution),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "bbox": [list(self.bbox.start), list(self.bbox.stop)],
            "top_chunk": list(self.top_chunk),
            "top_blend": list(self.top_blend),
            "dst_shape": list(self.dst_shape),
            "dst_chunks": list(self.dst_chunks),
            "dst_dtype": self.dst_dtype.str,
            "dst_offset": list(self.dst_offset),
            "accumulate_dtype": self.accumulate_dtype.str,
            "max_reduction_chunk_size": list(self.max_reduction_chunk_size),
            "layer_parity_axes": list(self.layer_parity_axes),
            "layer_bounds": [list(self.layer_bounds.start), list(self.layer_bounds.stop)],
            "layer_storage_chunk": list(self.layer_storage_chunk),
            "layer_dtype": self.layer_dtype.str,
            "layer_channel_shape": list(self.layer_channel_shape),
            "dst_resolution": None if self.dst_resolution is None else list(self.dst_resolution),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DeferredGeometry:
        def ints(key: str) -> tuple[int, ...]:
            return tuple(int(v) for v in raw[key])

        def box(key: str) -> Box:
            start, stop = raw[key]
            return Box(tuple(int(v) for v in start), tuple(int(v) for v in stop))

        return cls(
            bbox=box("bbox"),
            top_chunk=ints("top_chunk"),
            top_blend=ints("top_blend"),
            dst_shape=ints("dst_shape"),
            dst_chunks=ints("dst_chunks"),
            dst_dtype=np.dtype(raw["dst_dtype"]),
            dst_offset=ints("dst_offset"),
            accumulate_dtype=np.dtype(raw["accumulate_dtype"]),
            max_reduction_chunk_size=ints("max_reduction_chunk_size"),
            layer_parity_axes=ints("layer_parity_axes"),
            layer_bounds=box("layer_bounds"),
            layer_storage_chunk=ints("layer_storage_chunk"),
            layer_dtype=np.dtype(raw["layer_dtype"]),
            layer_channel_shape=ints("layer_channel_shape"),
            dst_resolution=(
                None
                if raw.get("dst_resolution") is None
                else tuple(float(r) for r in raw["dst_resolution"])
            ),
        )

    def spec(self, blend_mode: str) -> FlowSpec:
        """The one-level ``FlowSpec`` that ``_reduce.reduce_box`` reads, blending by
        ``blend_mode`` (checked by ``check_blend_mode``)."""
        ndim = self.bbox.ndim
        top = LevelSpec(
            chunk=self.top_chunk,
            crop=(0,) * ndim,
            blend=self.top_blend,
            blend_mode=blend_mode,  # type: ignore[arg-type]
        )
        return FlowSpec(
            levels=(top,),
            bbox=self.bbox,
            input_names=(),
            dst_dtype=self.dst_dtype,
            accumulate_dtype=self.accumulate_dtype,
            max_reduction_chunk_size=self.max_reduction_chunk_size,
            skip_intermediates=False,
            spatial_ndim=ndim,
        )

    def layers(self, root: StateRoot) -> LayerPlan:
        """The layers, stored under ``root`` (a folder or an object-store prefix:
        ``FlowDir.layers_dir``)."""
        return LayerPlan(
            root=root,
            parity_axes=self.layer_parity_axes,
            bounds=self.layer_bounds,
            storage_chunk=self.layer_storage_chunk,
            dtype=self.layer_dtype,
            channel_shape=self.layer_channel_shape,
        )

    def check_blend_mode(self, blend_mode: object) -> None:
        """``ConfigError`` unless ``blend_mode`` can reduce these layers exactly."""
        modes = [m for m in ALL_MODES if m != "defer"]
        if not isinstance(blend_mode, str) or blend_mode not in modes:
            raise ConfigError(
                f"blend_mode={blend_mode!r} cannot reduce deferred layers; "
                f"give one of {', '.join(modes)}",
                field="blend_mode",
            )
        wide_int = self.dst_dtype.kind in "iu" and self.dst_dtype.itemsize == 8
        if blend_mode in WEIGHTED_MODES and wide_int:
            raise ConfigError(
                f"blend_mode={blend_mode!r} into a {self.dst_dtype.name} dst: a weighted "
                "sum is computed in float64, which holds integers only up to 2**53; "
                "use blend_mode='max' or a dst of at most 32 bits",
                field="blend_mode",
            )

    def check_dst(self, dst: Volume) -> None:
        """``ConfigError`` naming every field where ``dst`` differs from the flow's dst."""
        found = {
            "shape": tuple(dst.shape),
            "chunks": tuple(dst.chunks),
            "dtype": np.dtype(dst.dtype),
            "offset": tuple(dst.offset),
            "resolution": tuple(float(r) for r in dst.resolution),
        }
        wanted: dict[str, object] = {
            "shape": self.dst_shape,
            "chunks": self.dst_chunks,
            "dtype": self.dst_dtype,
            "offset": self.dst_offset,
            "resolution": self.dst_resolution or found["resolution"],  # unrecorded: any
        }
        wrong = [
            f"{k} {found[k]} (the flow's: {wanted[k]})" for k in found if found[k] != wanted[k]
        ]
        if wrong:
            raise ConfigError(
                f"dst {dst.path!r} does not match the deferred flow's destination: "
                f"{'; '.join(wrong)}. Give a dst created with shape={self.dst_shape}, "
                f"chunks={self.dst_chunks}, dtype={self.dst_dtype.name!r}, "
                f"offset={self.dst_offset}, resolution={self.dst_resolution} (the one apply "
                "was given, or one like it; the resolution is part of the flow id)",
                field="dst",
            )
