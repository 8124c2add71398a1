"""Inputs at their own resolution: the box an input is read over for a box of dst.

The flow's grid is dst's: chunks, pads and the bbox are in dst voxels. An
input whose voxels have another physical size (``Volume.resolution``) is read
over the same physical box, at its own resolution::

    scale s = dst resolution / input resolution        (per axis, an exact fraction p/q)
    input box = dst box * s                            e.g. dst 8 nm, input 4 nm: s = 2

So a 2x2x1 downsampling ``fn`` (inputs at (4, 4, 40), dst at (8, 8, 40))
gets twice the voxels of its output on the first two axes, and returns the
output at dst's resolution. Every box an input is read over must be integral:
with ``s = p/q`` in lowest terms, each of its coordinates must be a multiple of
``q`` in dst voxels. The flow reads at the corners of its chunks padded by
the pads, so ``check_integral`` asks that the bbox start and every level's
chunk, crop pad and blend pad be multiples of ``q`` on that axis (``q = 1``,
so nothing to check, when the input is finer by a whole factor). Worked: an
input at 8 nm for a dst at 4 nm has ``s = 1/2``; a crop pad of 3 would be 1.5
input voxels and is refused, 2 or 4 are valid.

A bbox may be given in physical units (``bbox_units="physical"``): it is
divided by dst's resolution and must land on dst's voxel grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from chunkgraph._errors import ConfigError
from chunkgraph.geometry import Box

if TYPE_CHECKING:
    from chunkgraph.flow.plan._spec import FlowSpec, LevelSpec
    from chunkgraph.volume import Volume

Scale = tuple[Fraction, ...]

BBOX_UNITS = ("voxels", "physical")


def _exact(value: float) -> Fraction:
    # Through the decimal text: a resolution of 0.1 means 1/10, not the float's binary value.
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def scale_of(vol: Volume, dst: Volume) -> Scale:
    """Input voxels per dst voxel on each axis: dst resolution / the input's.

    >>> from types import SimpleNamespace as N
    >>> scale_of(N(resolution=(4, 4, 40)), N(resolution=(8, 8, 40)))
    (Fraction(2, 1), Fraction(2, 1), Fraction(1, 1))
    """
    return tuple(_exact(d) / _exact(r) for d, r in zip(dst.resolution, vol.resolution, strict=True))


def scaled(box: Box, scale: Scale) -> Box:
    """``box`` (dst voxels) in the voxels of an input of this scale; integral by validation.

    >>> scaled(Box((2, -4), (6, 8)), (Fraction(2), Fraction(1, 2)))
    Box(start=(4, -2), stop=(12, 4))
    """
    if all(s == 1 for s in scale):
        return box
    return Box(
        tuple(int(x * s) for x, s in zip(box.start, scale, strict=True)),
        tuple(int(x * s) for x, s in zip(box.stop, scale, strict=True)),
    )


def step_of(scales: Sequence[Scale], ndim: int) -> tuple[int, ...]:
    """Per axis, what every dst coordinate an input is read at must be a multiple of.

    >>> step_of([(Fraction(2), Fraction(1, 2)), (Fraction(2, 3), Fraction(1))], 2)
    (3, 2)
    """
    return tuple(math.lcm(1, *(s[a].denominator for s in scales)) for a in range(ndim))


def check_integral(
    levels: Sequence[LevelSpec], bbox: Box, scales: Mapping[str, Scale], dst: Volume
) -> None:
    """Refuse a flow that would read some input over a box that is not whole input voxels.

    One ``ConfigError`` names every offending level (or the bbox start) and axis, the
    input and its resolution, and the multiple that would be valid.
    """
    problems: list[str] = []
    # The parameter, level and axis of the first problem: the error's location.
    located: list[tuple[str, int | None, int]] = []
    for name, scale in scales.items():
        for axis, s in enumerate(scale):
            q = s.denominator
            if q == 1:
                continue
            where = f"input {name!r} on axis {axis} ({_ratio(s)} input voxels per dst voxel)"
            if bbox.start[axis] % q:
                problems.append(
                    f"the bbox start {bbox.start[axis]} for {where}: use a multiple of {q}"
                )
                located.append(("bbox", None, axis))
            for i, lv in enumerate(levels):
                for what, field, value in (
                    ("chunk", "chunk_sizes", lv.chunk),
                    ("crop pad", "crop_pads", lv.crop),
                    ("blend pad", "blend_pads", lv.blend),
                ):
                    if value[axis] % q:
                        problems.append(_problem(i, what, value[axis], s, q, where))
                        located.append((field, i, axis))
    if problems:
        field, level, axis = located[0]
        inputs = ", ".join(f"{n!r} {_resolution_text(s, dst)}" for n, s in scales.items())
        raise ConfigError(
            "the flow would read inputs over boxes that are not whole voxels at their own "
            f"resolution (dst {tuple(dst.resolution)}; inputs {inputs}); chunks, pads and the "
            "bbox are in dst voxels: " + "; ".join(problems) + _default_dst_hint(scales, dst),
            field=field,
            level=level,
            axis=axis,
        )


def _default_dst_hint(scales: Mapping[str, Scale], dst: Volume) -> str:
    """When dst kept the default resolution (all 1) beside an input that has another:
    most likely dst was created without one, not meant to be at 1."""
    if any(_exact(r) != 1 for r in dst.resolution) or not scales:
        return ""
    name, scale = next(iter(scales.items()))
    return (
        f". Note: dst is at resolution {tuple(dst.resolution)}, the default, while input "
        f"{name!r} is at {_resolution_text(scale, dst)}: dst was probably created without "
        "one and should be at the input's, volume.create(..., resolution=src.resolution) "
        "(chunkgraph run: the output's resolution field, by default the first input's)"
    )


def _problem(level: int, what: str, value: int, s: Fraction, q: int, where: str) -> str:
    return (
        f"level {level}'s {what} {value} is {_ratio(value * s)} voxels of {where}: "
        f"use a multiple of {q}"
    )


def _ratio(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def _resolution_text(scale: Scale, dst: Volume) -> str:
    """An input's resolution, recovered from its scale (dst resolution / s)."""
    res = (_ratio(_exact(d) / s) for d, s in zip(dst.resolution, scale, strict=True))
    return "(" + ", ".join(res) + ")"


def resolution_hint(spec: FlowSpec, returned: tuple[int, ...], read_box: Box) -> str:
    """The likely cause of an output of the wrong spatial shape when an input is at
    another resolution than dst: ``fn`` returned its input's resolution, not dst's.
    Empty when every input is at dst's resolution.

    Worked: dst at (3, 3, 3) over an input at (1, 1, 1), a bottom chunk of 8 with crop
    2: ``fn`` gets 36^3 input voxels (12 dst voxels times 3) and must return 12^3 (or
    8^3); an identity ``fn`` returns 36^3.
    """
    scaled_inputs = [
        (name, scale)
        for name, scale in zip(spec.input_names, spec.input_scales, strict=True)
        if any(s != 1 for s in scale)
    ]
    if not scaled_inputs:
        return ""
    own = {name: scaled(read_box, scale).shape for name, scale in scaled_inputs}
    # The input whose shape fn returned, if one; else the first at another resolution.
    name, scale = next(((n, s) for n, s in scaled_inputs if own[n] == returned), scaled_inputs[0])
    ratio = "(" + ", ".join(_ratio(s) for s in scale) + ")"
    if spec.dst_resolution:
        res = tuple(spec.dst_resolution)
        input_res = "(" + ", ".join(_ratio(_exact(d) / s) for d, s in zip(res, scale, strict=True))
        where = f"dst is at resolution {res} and input {name!r} at {input_res + ')'}, so "
        at_input = f"resolution={input_res + ')'}"
    else:
        where, at_input = "", "the input's resolution"
    said = (
        f"fn returned the shape of its input {name!r}"
        if own[name] == returned
        else f"its input {name!r} is {own[name]}"
    )
    if all(s >= 1 for s in scale):
        how = f" (e.g. pool by {ratio})"
    elif all(s <= 1 for s in scale):
        how = " (e.g. upsample by (" + ", ".join(_ratio(1 / s) for s in scale) + "))"
    else:
        how = ""
    return (
        f"Likely cause: the resolutions. {where}dst resolution / input resolution = {ratio}: "
        f"fn gets that many input voxels per dst voxel along each axis and must return "
        f"dst's resolution, {read_box.shape} here; {said}. Make fn return dst's "
        f"resolution{how}, or, if dst should be at the input's resolution, create it with "
        f"{at_input} (volume.create(..., resolution={name}.resolution))"
    )


def bbox_in_voxels(bbox: Box | None, units: object, dst: Volume | None) -> Box | None:
    """``bbox`` in dst voxels: as given for ``"voxels"``, divided by dst's resolution for
    ``"physical"`` (it must fall on dst's voxel grid)."""
    if units not in BBOX_UNITS:
        raise ConfigError(
            f"bbox_units must be 'voxels' (the bbox counts dst voxels, the default) or "
            f"'physical' (the bbox is in dst.resolution's units, e.g. nm), got {units!r}",
            field="bbox_units",
        )
    if units == "voxels" or not isinstance(bbox, Box) or dst is None:
        return bbox  # a bbox that is not a Box is refused by validate_flow, with its message
    res = dst.resolution
    if bbox.ndim != len(res):
        return bbox  # the wrong number of axes: validate_flow says so
    start, stop, off = [], [], []
    for axis, (lo, hi, r) in enumerate(zip(bbox.start, bbox.stop, res, strict=True)):
        a, b = Fraction(lo) / _exact(r), Fraction(hi) / _exact(r)
        if a.denominator != 1 or b.denominator != 1:
            va, vb = math.floor(a), math.ceil(b)
            pa, pb = va * _exact(r), vb * _exact(r)
            if pa.denominator == 1 and pb.denominator == 1:
                nearest = f"nearest voxel-aligned [{pa}, {pb})"
            else:  # a Box holds integers: no physical bbox lands on this grid there
                nearest = (
                    f"the voxel-aligned [{float(pa):g}, {float(pb):g}) is not integral, which "
                    f"a Box cannot hold: give that region in voxels, [{va}, {vb}), with "
                    "bbox_units='voxels'"
                )
            off.append(f"axis {axis}: [{lo}, {hi}) / {r} = [{float(a):g}, {float(b):g}); {nearest}")
        start.append(int(a))
        stop.append(int(b))
    if off:
        raise ConfigError(
            f"bbox {bbox} in physical units does not fall on dst's voxel grid (resolution "
            f"{tuple(res)}): " + "; ".join(off) + "; give a bbox on that grid, or "
            "bbox_units='voxels' with a bbox in dst voxels",
            field="bbox",
        )
    return Box(tuple(start), tuple(stop))
