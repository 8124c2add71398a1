"""The divisibility rule: every level's chunks tile the padded chunk above exactly.

Rule. For each level ``l > 0`` and axis, ``chunk[l]`` divides
``chunk[l-1] + 2 * crop[l-1] + 2 * blend[l-1]``; the top chunk divides the
bbox. Worked: top 256 with crop 8 gives 272 = 4 * 68, so a bottom chunk of 68
fits and 60 does not (272 % 60 = 32); the error then suggests the divisors of
272 nearest 60 (34 or 68) and the top chunks that make 60 fit (224 or 284,
with ``expand_bbox=True`` when neither divides the bbox).

Suggestions only name sizes that make the whole chain valid on their axis
(the level's own ``2 * blend <= chunk``, its parent and its child), and every
offending axis is named in one error.

``auto_divisible_chunks`` keeps the bottom chunk and shrinks each upper one to
the largest size below the given one that satisfies the rule, bottom-up;
``expanded_bbox`` then grows the bbox to whole top chunks, past dst's edge if
need be (reads there give fill values, writes are clipped at dst's bounds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chunkgraph._errors import ConfigError
from chunkgraph._util import divisors
from chunkgraph.geometry import Box


def auto_divisible_chunks(
    chunks: Sequence[tuple[int, ...]],
    crops: Sequence[tuple[int, ...]],
    blends: Sequence[tuple[int, ...]],
) -> list[tuple[int, ...]]:
    """Shrink upper chunks so each level's padded chunk is a multiple of the level below.

    The bottom size is kept; going up, ``C[i-1] = floor((C[i-1] + 2c + 2b) / C[i]) * C[i]
    - 2c - 2b`` with ``c, b`` the pads of level ``i - 1``: the given sizes are upper bounds.

    >>> auto_divisible_chunks([(1000,), (64,)], [(8,), (4,)], [(0,), (0,)])
    [(944,), (64,)]
    >>> auto_divisible_chunks([(300,), (100,)], [(10,), (0,)], [(0,), (0,)])
    [(280,), (100,)]
    """
    out = [tuple(c) for c in chunks]
    for i in range(len(out) - 1, 0, -1):
        pad = tuple(2 * c + 2 * b for c, b in zip(crops[i - 1], blends[i - 1], strict=True))
        new = tuple(
            (p + up) // lo * lo - p for up, lo, p in zip(out[i - 1], out[i], pad, strict=True)
        )
        for axis, size in enumerate(new):
            if size <= 0:
                least = (pad[axis] // out[i][axis] + 1) * out[i][axis] - pad[axis]
                region, lo = out[i - 1][axis] + pad[axis], out[i][axis]
                why = (
                    f"is smaller than one level-{i} chunk ({lo})"
                    if region < lo
                    else f"holds {region // lo} level-{i} chunk(s), no more than the pads "
                    f"2*crop + 2*blend = {pad[axis]}"
                )
                raise ConfigError(
                    f"auto_divisibility cannot fit level {i}'s chunk {out[i]} into level "
                    f"{i - 1}: on axis {axis}, chunk {out[i - 1][axis]} + 2*crop + 2*blend = "
                    f"{region} {why}; make chunk_sizes[{i - 1}] at least {least} on axis "
                    f"{axis} or chunk_sizes[{i}] smaller",
                    field="chunk_sizes",
                    level=i - 1,
                    axis=axis,
                )
        out[i - 1] = new
    return out


def check_divisibility(
    chunks: Sequence[tuple[int, ...]],
    crops: Sequence[tuple[int, ...]],
    blends: Sequence[tuple[int, ...]],
    bbox_shape: tuple[int, ...] | None = None,
    step: tuple[int, ...] | None = None,
) -> None:
    """Each level's chunk divides the padded chunk of the level above, on every axis.

    Every offending level and axis is named, each with the sizes that would make
    the whole chain valid on that axis (``would_fit``); ``bbox_shape`` (None:
    the bbox will be expanded to whole top chunks) constrains suggested top chunks;
    ``step``: per axis, what every chunk must be a multiple of (inputs at another
    resolution read over whole voxels, ``_resolution.step_of``), so that no suggestion
    is then refused by that check.
    """
    problems = []
    first: tuple[int, int] | None = None  # the first offending level and axis
    for i in range(1, len(chunks)):
        parent, child = chunks[i - 1], chunks[i]
        padded = tuple(
            c + 2 * p + 2 * b for c, p, b in zip(parent, crops[i - 1], blends[i - 1], strict=True)
        )
        for axis, (size, region) in enumerate(zip(child, padded, strict=True)):
            if region % size == 0:
                continue
            first = first or (i, axis)
            pad = region - parent[axis]
            chain = _AxisChain(axis, chunks, crops, blends, bbox_shape, step)
            below, above = nearest_divisors(region, size, keep=functools.partial(chain.fits, i))
            parents, condition = _nearest_parents(chain, i - 1, size, pad)
            if parents:
                keep = (
                    f"or keep {size} and make level {i - 1}'s chunk {parents} on axis {axis}"
                    f"{condition}"
                )
            else:
                keep = f"no level-{i - 1} chunk near {parent[axis]} fits {size} on axis {axis}"
            problems.append(
                f"level {i}'s chunk {child} does not divide level {i - 1}'s padded "
                f"chunk {padded} (chunk {parent} + 2*crop {crops[i - 1]} "
                f"+ 2*blend {blends[i - 1]}): on axis {axis}, {region} % {size} = "
                f"{region % size}. Nearest valid level-{i} sizes on axis {axis}: "
                f"{either(below, above)}; {keep}"
            )
    if first is not None:
        raise ConfigError(
            "; and ".join(problems) + "; or pass auto_divisibility=True",
            field="chunk_sizes",
            level=first[0],
            axis=first[1],
        )


@dataclass(frozen=True)
class _AxisChain:
    """One axis of every level, to ask whether changing one level's size makes it all valid.

    Axes are independent under the divisibility rule, so a suggestion for one
    axis is checked on that axis alone: its level keeps ``2 * blend <= chunk``,
    divides its parent's padded chunk (the top: the bbox, unless it will be
    expanded) and its own padded chunk is divided by the level below.
    """

    axis: int
    chunks: Sequence[tuple[int, ...]]
    crops: Sequence[tuple[int, ...]]
    blends: Sequence[tuple[int, ...]]
    bbox_shape: tuple[int, ...] | None
    step: tuple[int, ...] | None = None

    def pad(self, level: int) -> int:
        return 2 * self.crops[level][self.axis] + 2 * self.blends[level][self.axis]

    def fits(self, level: int, size: int) -> bool:
        a = self.axis
        if size <= 0 or 2 * self.blends[level][a] > size:
            return False
        if self.step is not None and size % self.step[a]:
            return False  # not whole voxels of an input at another resolution
        if level == 0:
            above_ok = self.bbox_shape is None or self.bbox_shape[a] % size == 0
        else:
            above_ok = (self.chunks[level - 1][a] + self.pad(level - 1)) % size == 0
        below_ok = (
            level == len(self.chunks) - 1
            or (size + self.pad(level)) % self.chunks[level + 1][a] == 0
        )
        return above_ok and below_ok


def _nearest_parents(chain: _AxisChain, level: int, child: int, pad: int) -> tuple[str, str]:
    """The sizes of ``level`` nearest its current one that hold whole ``child`` chunks
    and keep the rest of the chain valid (``""`` when none does within reach), and the
    condition they need (expanding the bbox) or ``""``."""
    current = chain.chunks[level][chain.axis]
    reach = 4 * (current + pad) if chain.bbox_shape is None else chain.bbox_shape[chain.axis]
    if level > 0:
        reach = chain.chunks[level - 1][chain.axis] + chain.pad(level - 1)
    sizes = [k * child - pad for k in range(1, reach // child + 2)]
    fitting = [p for p in sizes if chain.fits(level, p)]
    below = max((p for p in fitting if p < current), default=None)
    above = min((p for p in fitting if p > current), default=None)
    if below is not None or above is not None:
        return either(below, above), ""
    if level == 0 and chain.bbox_shape is not None:
        # Any top chunk works once the bbox grows to whole top chunks (past dst's edge).
        loose = _AxisChain(chain.axis, chain.chunks, chain.crops, chain.blends, None, chain.step)
        return _nearest_parents(loose, 0, child, pad)[0], " with expand_bbox=True"
    return "", ""


def nearest_divisors(
    n: int, near: int, keep: Callable[[int], bool] | None = None
) -> tuple[int | None, int | None]:
    """The divisors of ``n`` closest to ``near`` from below and from above (those ``keep``
    accepts)."""
    found = [d for d in divisors(n) if keep is None or keep(d)]
    below = max((d for d in found if d < near), default=None)
    above = min((d for d in found if d > near), default=None)
    return below, above


def either(*options: int | None) -> str:
    """``"a or b"`` for the options that exist, for error messages."""
    shown = [str(o) for o in options if o is not None]
    return " or ".join(shown) if shown else "none"


def expanded_bbox(bbox: Box, top: tuple[int, ...], origin: tuple[int, ...], snap: bool) -> Box:
    """``bbox`` grown to whole top chunks: its stop, and with ``snap`` its start too, onto
    the top grid from ``origin`` (dst's corner). It may leave dst: reads there give
    the inputs' fill value and writes are clipped at dst's bounds.

    >>> expanded_bbox(Box((10,), (500,)), (112,), (0,), False)
    Box(start=(10,), stop=(570,))
    >>> expanded_bbox(Box((10,), (500,)), (112,), (0,), True)
    Box(start=(0,), stop=(560,))
    """
    start = bbox.start
    if snap:
        start = tuple(o + (s - o) // c * c for s, o, c in zip(bbox.start, origin, top, strict=True))
    stop = tuple(a + -(-(b - a) // c) * c for a, b, c in zip(start, bbox.stop, top, strict=True))
    return Box(start, stop)


def check_top_divides(
    bbox: Box,
    top: tuple[int, ...],
    bounds: Box | None = None,
    next_level: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None,
    step: tuple[int, ...] | None = None,
) -> None:
    """The top chunk divides the bbox on every axis; every axis that does not is named.

    ``step``: per axis, what a suggested top chunk must be a multiple of (as in
    ``check_divisibility``).

    Suggested top chunks keep ``2 * blend <= chunk`` and, with ``next_level`` (the top's
    crop, the top's blend, level 1's chunk), the divisibility of level 1; suggested
    bboxes stay inside ``bounds`` (``expand_bbox`` is the way past dst's edge).
    """
    problems = []
    for axis, (size, chunk) in enumerate(zip(bbox.shape, top, strict=True)):
        if size % chunk == 0:
            continue

        def fits(t: int, axis: int = axis) -> bool:
            if step is not None and t % step[axis]:
                return False
            if next_level is None:
                return True
            crop, blend, child = next_level
            return (
                2 * blend[axis] <= t and (t + 2 * crop[axis] + 2 * blend[axis]) % child[axis] == 0
            )

        below, above = nearest_divisors(size, chunk, keep=fits)
        room = (bounds or bbox).stop[axis] - bbox.start[axis]
        smaller = size // chunk * chunk or None
        larger = -(-size // chunk) * chunk
        sizes = either(smaller, larger if larger <= room else None)
        chunks = either(below, above)
        fixes = [f"a top chunk of {chunks} on axis {axis}"] if chunks != "none" else []
        fixes += [f"a bbox of size {sizes}"] if sizes != "none" else []
        problems.append(
            f"on axis {axis}, {size} % {chunk} = {size % chunk}: use "
            + (" or ".join(fixes) if fixes else "another bbox (no top chunk near fits)")
        )
    if problems:
        raise ConfigError(
            f"the top chunk {top} does not divide bbox {bbox} (shape {bbox.shape}): "
            + "; ".join(problems)
            + "; or pass expand_bbox=True (or auto_divisibility=True), which grows the bbox to "
            "whole top chunks, past dst's edge if need be",
            field="chunk_sizes",
            level=0,
            axis=next(a for a, (s, c) in enumerate(zip(bbox.shape, top, strict=True)) if s % c),
        )
