"""The validated description of one subchunkable apply flow.

``validate_flow`` turns the user's arguments of ``volume.apply`` into a
``FlowSpec``: every level's chunk size, crop pad, blend pad and blend mode as
per-axis tuples (spatial axes only), the processed ``bbox`` after
``auto_divisibility`` / ``expand_bbox``, and the dtypes involved. Everything
downstream (dry-run estimates, task generation, reductions) reads only a
``FlowSpec``; nothing downstream re-validates user input. Every invalid
argument raises ``ConfigError`` here, before anything is read or written.

Geometry of one level ``l`` (top is ``l = 0``)::

    chunk_l                       the level's processing chunk
    chunk_l.padded(crop_l + blend_l)  region read (and split by level l + 1)
    chunk_l.padded(blend_l)       region this chunk contributes to (weighted)

Level ``l + 1`` tiles ``chunk_l.padded(crop_l + blend_l)`` exactly with its
chunks (the divisibility rule). The bottom level calls ``fn``. A top-level
task therefore reads its chunk padded by ``context_pad``, the sum of every
level's crop and blend pads.

Checks, in order (each a ``ConfigError`` naming its culprit)::

    fn callable; flags are bools; inputs a Volume or a dict of identifier -> Volume
    dst a writable Volume, or None (values per bottom chunk: no blend, crop at the bottom
    only; the first input gives the bounds); one spatial dimensionality
    fn's signature accepts the inputs (positionally for one Volume, else by keyword)
    and, when it has a ``box`` parameter, the chunk's box
    per-level arguments (``_flow_args``: a tuple is per axis, a list per level)
    auto_divisibility; 2 * blend <= chunk; ``defer`` only at the top, with a pad
    dst is an input only without pads (same stored array, however opened)
    bbox inside dst; divisibility of every level; bbox expanded (past dst's edge too)
    when asked; top | bbox
    every input read over whole voxels at its own resolution (_resolution)
    the bbox meets at least one input's bounds (else fn would see fill values only)
    dtypes (an input dst cannot hold, under cast="safe"); cast one of _cast.CAST_RULES;
    reduction chunk positive (rounded down to dst chunks); skip_intermediates allowed
    a bbox cutting dst's storage chunks only where they can be merged (_mergeable)

Dtypes. Kinds may differ between inputs and dst (a float map thresholded
into labels, an image into a bool mask); float results are rounded when cast
into integers. An integer dst must hold every value of an integer input
(int32 -> int16 and int8 -> uint8 are refused) unless ``cast`` allows narrowing;
which dtypes ``fn`` itself may return is checked on its output (``_cast``).
Accumulation is float64 for dst dtypes of <= 32 bits and float64; 64-bit
integers accumulate in their own type, and are refused with weighted blending
(float64 holds integers only up to 2**53).

>>> from chunkgraph import volume
>>> src = volume.create("spec-doc-src", (64, 64), (16, 16), "uint8", backend="memory")
>>> dst = volume.create("spec-doc-dst", (64, 64), (16, 16), "uint8", backend="memory")
>>> spec = validate_flow(
...     lambda x: x, src, dst, chunk_sizes=[(32, 32), (8, 8)], crop_pads=[0, 2], blend_pads=[4, 0]
... )
>>> spec.top_grid, spec.context_pad, spec.levels[0].region_shape, spec.levels[1].region_shape
((2, 2), (6, 6), (40, 40), (12, 12))
>>> validate_flow(lambda x: x, src, dst, chunk_sizes=[(32, 32), (12, 12)])
Traceback (most recent call last):
  ...
chunkgraph.ConfigError: level 1's chunk (12, 12) does not divide ... 32 % 12 = 8. ...
>>> volume.remove("spec-doc-src"); volume.remove("spec-doc-dst")
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, cast

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.flow.plan._args import located_per_axis, parse_chunk_sizes, per_level
from chunkgraph.flow.plan._blend import ALL_MODES, WEIGHTED_MODES
from chunkgraph.flow.plan._cast import DEFAULT_CAST, CastRule, check_cast_rule
from chunkgraph.flow.plan._divisibility import (
    auto_divisible_chunks,
    check_divisibility,
    check_top_divides,
    expanded_bbox,
)
from chunkgraph.flow.plan._mergeable import check_edges_mergeable
from chunkgraph.flow.plan._resolution import Scale, check_integral, scale_of, scaled, step_of
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

BlendMode = Literal["linear", "quadratic", "bump", "max", "defer"]
BLEND_MODES: tuple[str, ...] = ALL_MODES

# The keyword under which a single (non-dict) input is known; fn receives it
# positionally, but names in reports and markers need one.
SINGLE_INPUT_NAME = "src"

# A parameter of fn with this name receives the box its arrays cover (global coordinates).
BOX_KEYWORD = "box"

# dtype kinds a dst may have: bool, signed, unsigned, float. Blending and
# rounding are defined for these only.
_NUMERIC_KINDS = "biuf"


@dataclass(frozen=True)
class LevelSpec:
    """One level of the flow; all tuples have one entry per spatial axis."""

    chunk: tuple[int, ...]
    crop: tuple[int, ...]
    blend: tuple[int, ...]
    blend_mode: BlendMode

    @property
    def region_shape(self) -> tuple[int, ...]:
        """``chunk + 2 * crop + 2 * blend``: what this level reads and its children tile."""
        return tuple(
            c + 2 * p + 2 * b for c, p, b in zip(self.chunk, self.crop, self.blend, strict=True)
        )

    @property
    def weighted(self) -> bool:
        """True when this level's outputs overlap and are combined by weights."""
        return self.blend_mode in WEIGHTED_MODES and any(self.blend)


@dataclass(frozen=True)
class FlowSpec:
    """A fully validated flow: levels top first, the processed region, dtypes."""

    levels: tuple[LevelSpec, ...]
    bbox: Box
    input_names: tuple[str, ...]  # keyword names passed to fn; ("src",) style for one Volume
    dst_dtype: np.dtype[Any]
    accumulate_dtype: np.dtype[Any]  # float64 for <= 32-bit data, per the exactness rule
    # The reduction boxes' size: the user's value, or by default the top chunk
    # rounded down to whole dst chunks (at least one dst chunk) per axis.
    max_reduction_chunk_size: tuple[int, ...]
    skip_intermediates: bool
    spatial_ndim: int
    # True when ``inputs`` was one Volume (not a dict); fn then gets its array as
    # the first positional argument, and input_names == ("src",).
    positional_input: bool = False
    # True when fn has a parameter named ``box``: it then gets, by keyword, the box
    # (global coordinates) its arrays cover, to make labels globally unique, say.
    pass_box: bool = False
    # True for ``dst=None``: fn's return values are collected per bottom chunk (_values);
    # nothing is written, and the dtypes above are unused (float64).
    collect_values: bool = False
    # Per input (in input_names' order): input voxels per dst voxel on each axis, dst
    # resolution / the input's (_resolution); empty means 1 everywhere.
    input_scales: tuple[Scale, ...] = ()
    # Which dtypes fn may return for dst's dtype (_cast): numpy's casting names.
    cast: CastRule = DEFAULT_CAST
    # dst's resolution (an input's is dst_resolution / its scale), for messages about
    # shapes fn returns at another resolution (_resolution.resolution_hint).
    dst_resolution: tuple[float, ...] = ()
    # The caller's bbox when automatic sizes compute over ``bbox`` grown out to dst's
    # storage grid (it was off the grid): every write is clipped to it. None: writes
    # cover ``bbox`` (clipped at dst's edge). Named in the flow id only when set.
    write_box: Box | None = field(default=None, metadata={"id": "when set"})

    @property
    def writes(self) -> Box:
        """The region of dst the flow writes (before the clip at dst's edge)."""
        return self.bbox if self.write_box is None else self.write_box

    def scale_of(self, name: str) -> Scale:
        """How input ``name`` is read: ``_resolution.scaled(dst box, spec.scale_of(name))``."""
        if not self.input_scales:
            return (Fraction(1),) * self.spatial_ndim
        return self.input_scales[self.input_names.index(name)]

    @property
    def context_pad(self) -> tuple[int, ...]:
        """Per axis, how far a top-level task reads around its chunk: sum of crop + blend."""
        return tuple(
            sum(lv.crop[a] + lv.blend[a] for lv in self.levels) for a in range(self.spatial_ndim)
        )

    @property
    def top_grid(self) -> tuple[int, ...]:
        """Number of top-level chunks along each axis of ``bbox``."""
        return tuple(s // c for s, c in zip(self.bbox.shape, self.levels[0].chunk, strict=True))

    @property
    def deferred(self) -> bool:
        """True when the top level's blend mode is ``"defer"``: the run stops after the
        top-level tasks, whose layers (whole padded outputs, margin past the bbox included,
        in the accumulation dtype) are its result, kept for ``reduce_deferred``; no
        reduction, nothing written to dst."""
        return self.levels[0].blend_mode == "defer"


# ``chunk_sizes`` spelled this way (or None) asks apply to plan the levels (_auto_sizes).
AUTO_SIZES = "auto"


def wants_auto_sizes(chunk_sizes: object) -> bool:
    """True for ``chunk_sizes=None`` or ``"auto"``: the flow plans its own levels."""
    return chunk_sizes is None or (isinstance(chunk_sizes, str) and chunk_sizes == AUTO_SIZES)


def resolve_region(
    inputs: object, dst: object, bbox: object
) -> tuple[dict[str, Volume], Volume, Box]:
    """The named inputs, dst and the bbox, checked as ``validate_flow`` checks them: what
    automatic sizes are planned from, before the sizes (and so the rest) can be checked."""
    named = normalize_inputs(inputs)
    out = check_dst(dst, named)
    ndim = _check_spatial_ndim(named, out)
    return named, out, _resolve_bbox(bbox, out, ndim)


def normalize_inputs(inputs: object) -> dict[str, Volume]:
    """A ``Volume`` -> ``{"src": volume}``; a dict name -> Volume -> a checked copy.

    Names must be Python identifiers, since ``fn`` receives them as keywords. An
    empty dict is a generator: ``fn`` gets no arrays (only ``box`` if it asks), and
    dst gives the shape.
    """
    volume_cls = Volume
    if isinstance(inputs, volume_cls):
        return {SINGLE_INPUT_NAME: inputs}
    if not isinstance(inputs, Mapping):
        raise ConfigError(
            f"inputs must be a Volume or a dict of name -> Volume, got {type(inputs).__name__}; "
            "open stored data with chunkgraph.volume.open(path) and pass that",
            field="inputs",
        )
    named: dict[str, Volume] = {}
    for name, vol in inputs.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ConfigError(
                f"input name {name!r} is not usable as a keyword argument of fn; "
                "use a Python identifier such as 'image' or 'mask'",
                field=f"inputs.{name}",
            )
        if not isinstance(vol, volume_cls):
            raise ConfigError(
                f"inputs[{name!r}] must be a Volume, got {type(vol).__name__}; "
                "open it with chunkgraph.volume.open(path)",
                field=f"inputs.{name}",
            )
        named[name] = vol
    return named


def validate_flow(
    fn: Callable[..., Any],
    inputs: object,
    dst: object,
    *,
    chunk_sizes: object,
    crop_pads: object = 0,
    blend_pads: object = 0,
    blend_modes: object = "quadratic",
    bbox: object = None,
    auto_divisibility: bool = False,
    expand_bbox: bool | str = False,
    max_reduction_chunk_size: object = None,
    skip_intermediates: bool = False,
    cast: object = DEFAULT_CAST,
    grown_bbox: Box | None = None,
) -> FlowSpec:
    """Check every argument of ``volume.apply`` and return the resolved ``FlowSpec``.

    ``grown_bbox``: the region automatic sizes planned for a ``bbox`` off dst's storage
    grid (``FlowPlan.grown_bbox``): the tasks tile it and every write is clipped to
    ``bbox`` (``FlowSpec.write_box``).

    Raises ``ConfigError`` naming the argument, the level and axis, the
    offending values and a valid alternative.
    """
    if not callable(fn):
        raise ConfigError(f"fn must be callable, got {type(fn).__name__}: {fn!r}", field="fn")
    check_bools(auto_divisibility=auto_divisibility, skip_intermediates=skip_intermediates)
    snap = _check_expand_bbox(expand_bbox)
    rule = check_cast_rule(cast)
    named = normalize_inputs(inputs)
    positional = isinstance(inputs, Volume)
    collect = dst is None
    out = _values_reference(named) if collect else check_dst(dst, named)
    ndim = _check_spatial_ndim(named, out)
    pass_box = _check_signature(fn, named, positional)

    if wants_auto_sizes(chunk_sizes):
        raise ConfigError(
            f"chunk_sizes={chunk_sizes!r} asks for automatic sizes, which apply plans (it "
            "knows the cores and the memory budget); validate the sizes it chose "
            "(report.plan.arguments()) or give chunk_sizes",
            field="chunk_sizes",
        )
    chunks = parse_chunk_sizes(chunk_sizes, ndim)
    n_levels = len(chunks)
    crops = per_level("crop_pads", crop_pads, n_levels, ndim)
    blends = per_level("blend_pads", blend_pads, n_levels, ndim)
    modes = _parse_modes(blend_modes, n_levels)
    if auto_divisibility:
        chunks = auto_divisible_chunks(chunks, crops, blends)
    levels = tuple(
        LevelSpec(chunk=chunks[i], crop=crops[i], blend=blends[i], blend_mode=modes[i])
        for i in range(n_levels)
    )
    _check_levels(levels)
    if collect:
        _check_disjoint_outputs(
            levels, "dst=None (one value per bottom chunk)", "give a dst volume", "dst"
        )
    else:
        _check_in_place(named, out, levels, bool(skip_intermediates))
    region = _resolve_bbox(bbox, out, ndim)
    write_box = None
    if grown_bbox is not None:
        region, write_box = _grown_region(grown_bbox, region), region
    expand = bool(auto_divisibility or expand_bbox)
    scales = {name: scale_of(vol, out) for name, vol in named.items()}
    step = step_of(list(scales.values()), ndim)  # suggestions below keep to it
    check_divisibility(chunks, crops, blends, None if expand else region.shape, step)
    if expand:
        region = expanded_bbox(region, levels[0].chunk, out.bounds.start, snap)
    below = (crops[0], blends[0], chunks[1]) if n_levels > 1 else None
    check_top_divides(region, levels[0].chunk, out.bounds, below, step)
    check_integral(levels, region, scales, out)
    _check_bbox_reads_an_input(region, named, scales)

    if collect:
        accumulate = np.dtype(np.float64)
        reduction = levels[0].chunk
    else:
        accumulate = _accumulate_dtype(named, out, levels, rule)
        reduction = reduction_chunk(max_reduction_chunk_size, out.spatial_chunks, levels[0].chunk)
    if skip_intermediates and not collect:
        _check_skip_intermediates(levels, region, out)
    if not collect:
        check_edges_mergeable(out, region if write_box is None else write_box)
    return FlowSpec(
        levels=levels,
        bbox=region,
        input_names=tuple(named),
        dst_dtype=accumulate if collect else np.dtype(out.dtype),
        accumulate_dtype=accumulate,
        max_reduction_chunk_size=reduction,
        skip_intermediates=bool(skip_intermediates),
        spatial_ndim=ndim,
        positional_input=positional,
        pass_box=pass_box,
        collect_values=collect,
        input_scales=tuple(scales.values()),
        cast=rule,
        dst_resolution=tuple(out.resolution),
        write_box=write_box,
    )


# --- inputs, dst, dimensions ---------------------------------------------------------


def check_dst(dst: object, named: Mapping[str, Volume]) -> Volume:
    """``dst`` if it is a Volume open for writing, else ``ConfigError`` saying how to fix it."""
    if not isinstance(dst, Volume):
        raise ConfigError(
            f"dst must be a Volume, got {type(dst).__name__}; create one with "
            "chunkgraph.volume.create(path, shape, chunks, dtype)",
            field="dst",
        )
    if dst.mode == "r":
        raise ConfigError(
            f"dst {dst.path!r} is open read-only (mode {dst.mode!r}); "
            "open it with chunkgraph.volume.open(path, mode='r+')",
            field="dst",
        )
    return dst


def _values_reference(named: Mapping[str, Volume]) -> Volume:
    """For ``dst=None``: the first input stands in for dst's bounds and dimensionality."""
    if not named:
        raise ConfigError(
            "dst=None with no inputs leaves nothing to process: a flow without inputs "
            "(a generator) needs a dst to give its shape, one without dst needs an input",
            field="dst",
        )
    return next(iter(named.values()))


def _check_disjoint_outputs(levels: Sequence[LevelSpec], wants: str, off: str, field: str) -> None:
    """What ``wants`` needs: bottom outputs that tile the bbox, each voxel in exactly one
    (no blend pad at any level; a crop pad at the bottom only, or children would overlap
    their neighbours' chunks). ``off``: how to do without ``wants``; ``field``: the
    parameter that wants it (the error's field)."""
    for i, lv in enumerate(levels):
        if any(lv.blend):
            raise ConfigError(
                f"{wants} needs non-overlapping outputs, but level {i} has blend pad "
                f"{lv.blend}; use crop_pads for context instead, or {off}",
                field=field,
                level=i,
            )
        if i < len(levels) - 1 and any(lv.crop):
            raise ConfigError(
                f"{wants} needs non-overlapping outputs: a crop pad is allowed only at the "
                f"bottom level, but level {i} has crop pad {lv.crop} (its children would "
                f"overlap the neighbours' chunks); move the crop to the bottom level, or {off}",
                field=field,
                level=i,
            )


def same_storage(a: Volume, b: Volume) -> bool:
    """True when two volumes are the same stored array, however they were opened.

    On disk that is the same directory (``samefile``: symlinks, relative
    paths, zarr and TensorStore handles of one array); a memory volume is its
    registered name.
    """
    return a is b or a.location.same_as(b.location)


def _check_in_place(
    named: Mapping[str, Volume], dst: Volume, levels: Sequence[LevelSpec], direct: bool
) -> None:
    """Refuse dst as an input unless every task reads exactly what it alone writes.

    With a crop or blend pad a task reads beyond its own chunk, into chunks that
    neighbouring tasks write: it would read half-written data. Without pads a
    task reads only its chunk, which is written by the reduction after every
    task reading it has finished, so in-place is safe; except with
    ``skip_intermediates``, where a task that is interrupted mid-write would read
    its own partial output when it runs again.
    """
    for name, vol in named.items():
        if not same_storage(vol, dst):
            continue
        padded = [i for i, lv in enumerate(levels) if any(lv.crop) or any(lv.blend)]
        if padded or direct:
            why = (
                f"level {padded[0]} has crop pad {levels[padded[0]].crop} and blend pad "
                f"{levels[padded[0]].blend}, so tasks read regions that neighbouring tasks write"
                if padded
                else "skip_intermediates=True writes while other chunks are read, and a rerun "
                "after an interruption would read its own partial output"
            )
            raise ConfigError(
                f"dst {dst.path!r} is the same stored array as input {name!r} ({vol.path!r}); "
                f"in-place processing is refused because {why}. Write to a new volume instead",
                field="dst",
            )


def _check_spatial_ndim(named: Mapping[str, Volume], dst: Volume) -> int:
    dims = {name: vol.spatial_ndim for name, vol in named.items()}
    if len(set(dims.values())) > 1:
        raise ConfigError(
            f"inputs have different spatial dimensionality: {dims}; every input must have "
            f"the same number of spatial axes as dst ({dst.spatial_ndim})",
            field="inputs",
        )
    for name, nd in dims.items():
        if nd != dst.spatial_ndim:
            raise ConfigError(
                f"input {name!r} has {nd} spatial axes but dst has {dst.spatial_ndim}; "
                "channel axes may differ, spatial axes must match",
                field=f"inputs.{name}",
            )
    return int(dst.spatial_ndim)


def _check_signature(fn: Callable[..., Any], named: Mapping[str, Volume], positional: bool) -> bool:
    """Check that fn accepts the inputs; True when it also takes the ``box`` keyword."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and ufuncs may have no signature to check
        return False
    box = signature.parameters.get(BOX_KEYWORD)
    pass_box = box is not None and box.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    if pass_box and BOX_KEYWORD in named and not positional:
        raise ConfigError(
            f"input name {BOX_KEYWORD!r} clashes with fn's {BOX_KEYWORD!r} parameter, which "
            "receives the box of the chunk; rename the input (e.g. 'boxes')",
            field=f"inputs.{BOX_KEYWORD}",
        )
    probe = object()
    extra = {BOX_KEYWORD: probe} if pass_box else {}
    try:
        if positional:
            signature.bind(probe, **extra)
        else:
            signature.bind(**dict.fromkeys(named, probe), **extra)
    except TypeError as err:
        call = "fn(array)" if positional else f"fn({', '.join(f'{n}=array' for n in named)})"
        raise ConfigError(
            f"fn {getattr(fn, '__name__', fn)!r}{signature} cannot be called as {call}: {err}; "
            "a single Volume is passed positionally, a dict of inputs by keyword"
            + (f", and the chunk's box as {BOX_KEYWORD}=Box" if pass_box else ""),
            field="fn",
        ) from None
    return pass_box


def check_bools(**flags: object) -> None:
    """Each flag must be a real bool: ``"no"`` or ``0.5`` would silently read as True."""
    for flag, value in flags.items():
        if not isinstance(value, bool | np.bool_):
            raise ConfigError(
                f"{flag} must be True or False, got {value!r} ({type(value).__name__})",
                field=flag,
            )


# --- modes and level checks ---------------------------------------------------------


def _parse_modes(blend_modes: object, n_levels: int) -> list[BlendMode]:
    if isinstance(blend_modes, str):
        modes: list[object] = [blend_modes] * n_levels
    elif isinstance(blend_modes, Sequence):
        if len(blend_modes) != n_levels:
            raise ConfigError(
                f"blend_modes has {len(blend_modes)} entries but there are {n_levels} levels; "
                f"give one mode for all levels or exactly {n_levels}",
                field="blend_modes",
            )
        modes = list(blend_modes)
    else:
        raise ConfigError(
            f"blend_modes must be a str or a list of str, got {blend_modes!r}",
            field="blend_modes",
        )
    for level, mode in enumerate(modes):
        if mode not in BLEND_MODES:
            raise ConfigError(
                f"blend_modes[{level}] = {mode!r} is not a blend mode; "
                f"valid modes are {', '.join(BLEND_MODES)}",
                field="blend_modes",
                level=level,
            )
    return [cast(BlendMode, m) for m in modes]


def _check_levels(levels: Sequence[LevelSpec]) -> None:
    for i, lv in enumerate(levels):
        for axis, (chunk, blend) in enumerate(zip(lv.chunk, lv.blend, strict=True)):
            if 2 * blend > chunk:
                raise ConfigError(
                    f"blend_pads[{i}] = {blend} on axis {axis} is more than half of level {i}'s "
                    f"chunk {chunk}; ramps of both faces would overlap. Use a blend pad <= "
                    f"{chunk // 2} or a chunk >= {2 * blend}",
                    field="blend_pads",
                    level=i,
                    axis=axis,
                )
        if lv.blend_mode == "defer" and i > 0:
            raise ConfigError(
                f"blend_modes[{i}] = 'defer' below the top level; only level 0 may defer its "
                "reduction (lower levels blend in memory). Use 'quadratic', 'linear', 'bump' "
                "or 'max' there",
                field="blend_modes",
                level=i,
            )
        if lv.blend_mode == "defer" and not any(lv.blend):
            raise ConfigError(
                "blend_modes[0] = 'defer' but blend_pads[0] is 0 on every axis: nothing overlaps, "
                "so nothing would be left to blend later; give a top-level blend pad or use "
                "another mode",
                field="blend_modes",
                level=0,
            )


# --- bbox -------------------------------------------------------------------------------

# ``expand_bbox`` spelled this way grows the bbox's start down as well as its stop up onto
# the top grid from dst's corner (top tasks then start where dst's chunks do, when the top
# chunk is a multiple of them).
SNAP_BBOX = "snap"


def _check_expand_bbox(value: object) -> bool:
    """True when ``expand_bbox`` asks to snap the start too."""
    if isinstance(value, str) and value == SNAP_BBOX:
        return True
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(
            f"expand_bbox must be True (grow the bbox's stop to whole top chunks), "
            f"{SNAP_BBOX!r} (also move its start down onto the top grid from dst's corner) "
            f"or False, got {value!r} ({type(value).__name__})",
            field="expand_bbox",
        )
    return False


def _resolve_bbox(bbox: object, dst: Volume, ndim: int) -> Box:
    bounds: Box = dst.bounds
    if bbox is None:
        return bounds
    if not isinstance(bbox, Box):
        raise ConfigError(
            f"bbox must be a chunkgraph.geometry.Box or None (the whole dst), got "
            f"{type(bbox).__name__}: {bbox!r}; e.g. Box(start, stop)",
            field="bbox",
        )
    if bbox.ndim != ndim:
        raise ConfigError(
            f"bbox {bbox} has {bbox.ndim} axes but dst has {ndim} spatial axes; "
            "give a box over the spatial axes only",
            field="bbox",
        )
    if bbox.is_empty:
        raise ConfigError(
            f"bbox {bbox} is empty (shape {bbox.shape}); nothing to process", field="bbox"
        )
    _check_bbox_meets(bbox, bounds)
    if not bounds.contains(bbox):
        raise ConfigError(
            f"bbox {bbox} is not inside dst bounds {bounds}; the part inside is "
            f"{bbox.intersection(bounds)}",
            field="bbox",
        )
    return bbox


def _grown_region(grown: Box, bbox: Box) -> Box:
    """``grown`` (the region a plan computes over), checked to hold the caller's ``bbox``."""
    if not grown.contains(bbox):
        raise ConfigError(
            f"the planned region {grown} does not hold bbox {bbox}: it is the bbox grown out "
            "to dst's storage grid (report.plan.grown_bbox); plan again with this bbox",
            field="bbox",
        )
    return grown


def _check_bbox_meets(bbox: Box, bounds: Box) -> None:
    """A bbox with no voxel in dst is refused on its own: no flow over it can write
    anything, and it is most often a bbox in other coordinates (dst's offset, another
    resolution)."""
    axes = [
        a
        for a, (lo, hi, blo, bhi) in enumerate(
            zip(bbox.start, bbox.stop, bounds.start, bounds.stop, strict=True)
        )
        if hi <= blo or lo >= bhi
    ]
    apart = [
        f"axis {a}: [{bbox.start[a]}, {bbox.stop[a]}) vs dst [{bounds.start[a]}, {bounds.stop[a]})"
        for a in axes
    ]
    if apart:
        raise ConfigError(
            f"bbox {bbox} lies entirely outside dst bounds {bounds} ({'; '.join(apart)}), so "
            "nothing of it could be written; give a bbox in dst's coordinates (they start at "
            f"its offset {bounds.start}), or bbox=None for the whole dst",
            field="bbox",
            axis=axes[0],
        )


def _check_bbox_reads_an_input(
    bbox: Box, named: Mapping[str, Volume], scales: Mapping[str, Scale]
) -> None:
    """A bbox that meets no input's bounds would give fn fill values only: refused.

    Most often the output was made at another offset than the inputs (an output at 0
    beside an input at (1000, 2000, 3000)). Without inputs (fn a generator) nothing is read.
    """
    if not named:
        return
    bounds = {name: vol.bounds for name, vol in named.items()}
    for name, vol_bounds in bounds.items():
        if not scaled(bbox, scales[name]).intersection(vol_bounds).is_empty:
            return
    listed = ", ".join(f"{name!r} {b}" for name, b in bounds.items())
    raise ConfigError(
        f"bbox {bbox} (in dst voxels) meets no input: the inputs' bounds are {listed} "
        "(in their own voxels), so fn would see only fill values; create dst at the inputs' "
        "offset (volume.create(..., offset=input.offset)) or give a bbox inside an input",
        field="bbox",
    )


# --- dtypes, reductions, direct writes ---------------------------------------------------


def _accumulate_dtype(
    named: Mapping[str, Volume], dst: Volume, levels: Sequence[LevelSpec], rule: CastRule
) -> np.dtype[Any]:
    out = np.dtype(dst.dtype)
    if out.kind not in _NUMERIC_KINDS:
        raise ConfigError(
            f"dst dtype {out} cannot be blended or rounded; use bool, an integer or a float dtype",
            field="dst",
        )
    for name, vol in named.items():
        src = np.dtype(vol.dtype)
        # A bool dst is a mask: any input may be thresholded into it on purpose. A cast
        # rule that allows narrowing says fn narrows (or may saturate) on purpose.
        narrowing = not np.can_cast(src, out, "safe")
        if src.kind in "biu" and out.kind in "iu" and narrowing and rule == DEFAULT_CAST:
            raise ConfigError(
                f"dst dtype {out} cannot hold every value of input {name!r} ({src}); "
                f"use a dst of dtype {np.promote_types(src, out)} or read from a volume of "
                f"dtype {out}, or pass cast='same_kind' when fn brings the values into "
                f"{out}'s range itself",
                field="dst",
            )
    weighted = [i for i, lv in enumerate(levels) if lv.weighted]
    if weighted and out.kind in "iu" and out.itemsize > 4:
        raise ConfigError(
            f"dst dtype {out} cannot be blended exactly: weighted blending (level "
            f"{weighted[0]}, mode {levels[weighted[0]].blend_mode!r}) accumulates in float64, "
            "which holds integers only up to 2**53; use blend mode 'max' or no blend pad for "
            "64-bit labels, or a dst of at most 32 bits",
            field="dst",
            level=weighted[0],
        )
    # float64 holds every <= 32-bit value exactly and float64 data as is. 64-bit
    # integers (reached only without weights) and floats wider than float64 are
    # accumulated in their own type, which holds them exactly.
    if out.itemsize <= 4 or out == np.float64:
        return np.dtype(np.float64)
    return out


def reduction_chunk(
    value: object, dst_chunks: tuple[int, ...], top: tuple[int, ...]
) -> tuple[int, ...]:
    """Reduction boxes: an upper bound (default the top chunk) rounded down to whole dst
    chunks, at least one: 100 over dst chunks of 32 gives 96, 20 gives 32.

    >>> reduction_chunk((100, 20), (32, 32), (64, 64)), reduction_chunk(None, (32,), (80,))
    ((96, 32), (64,))
    """
    ndim = len(dst_chunks)
    name = "max_reduction_chunk_size"
    sizes = top if value is None else located_per_axis(value, ndim, name, name)
    for axis, size in enumerate(sizes):
        if size <= 0:
            raise ConfigError(
                f"max_reduction_chunk_size = {sizes} is not positive on axis {axis} ({size}); "
                f"give an upper bound on the size of a reduction box, e.g. {tuple(dst_chunks)} "
                "(one dst chunk), or None (the top chunk)",
                field=name,
                axis=axis,
            )
    return tuple(max(d, t // d * d) for d, t in zip(dst_chunks, sizes, strict=True))


def _check_skip_intermediates(levels: Sequence[LevelSpec], bbox: Box, dst: Volume) -> None:
    _check_disjoint_outputs(
        levels, "skip_intermediates=True", "set skip_intermediates=False", "skip_intermediates"
    )
    ndim = bbox.ndim
    chunks = dst.spatial_chunks
    bottom = levels[-1].chunk
    bounds: Box = dst.bounds
    for axis in range(ndim):
        origin = bounds.start[axis]
        aligned_stop = (bbox.stop[axis] - origin) % chunks[axis] == 0
        # Bottom chunks tile the bbox from its start (no upper crop, no blend), so
        # every boundary is on the dst grid iff these hold; one chunk spanning the
        # whole bbox on this axis needs only its two ends aligned.
        single = bottom[axis] == bbox.shape[axis]
        if (
            (bottom[axis] % chunks[axis] and not single)
            or (bbox.start[axis] - origin) % chunks[axis]
            # a bbox past dst's edge: writes there are clipped to the edge
            or not (aligned_stop or bbox.stop[axis] >= bounds.stop[axis])
        ):
            raise ConfigError(
                f"skip_intermediates=True writes bottom chunks straight to dst, so they must "
                f"cover whole dst chunks {chunks}: on axis {axis} the bottom chunk is "
                f"{bottom[axis]} and bbox spans [{bbox.start[axis]}, {bbox.stop[axis]}) with the "
                f"dst grid starting at {origin}; use a bottom chunk that is a multiple of "
                f"{chunks[axis]} and a bbox on that grid, or skip_intermediates=False",
                field="skip_intermediates",
                axis=axis,
            )


def layer_dtype(spec: FlowSpec) -> np.dtype:
    """The dtype of the checkerboard's temporary layers (run's ``_checkerboard``): dst's,
    unless blending in it would lose precision."""
    top = spec.levels[0]
    dst = np.dtype(spec.dst_dtype)
    if not any(top.blend) or top.blend_mode == "max":
        return dst
    if not spec.deferred and dst.kind == "f" and dst.itemsize >= 4:
        return dst
    return np.dtype(spec.accumulate_dtype)
