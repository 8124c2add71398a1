"""The divisibility rule: every level's chunks tile the padded chunk above exactly.

Rule. For each level ``l > 0`` and axis, ``chunk[l]`` divides
``chunk[l-1] + 2 * crop[l-1] + 2 * blend[l-1]``; the top chunk divides the
bbox. Worked: top 256 with crop 8 gives 272 = 4 * 68, so a bottom chunk of 68
fits and 60 does not (272 % 60 = 32); the error then suggests the divisors of
272 nearest 60 (34 or 68) and the top chunks that make 60 fit (224 or 284).

``auto_divisible_chunks`` keeps the bottom chunk and shrinks each upper one to
the largest size below the given one that satisfies the rule, bottom-up;
``expanded_bbox`` then grows the bbox end to whole top chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

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
                    f"{axis} or chunk_sizes[{i}] smaller"
                )
        out[i - 1] = new
    return out


def check_divisibility(
    chunks: Sequence[tuple[int, ...]],
    crops: Sequence[tuple[int, ...]],
    blends: Sequence[tuple[int, ...]],
) -> None:
    """Each level's chunk divides the padded chunk of the level above, on every axis."""
    for i in range(1, len(chunks)):
        parent, child = chunks[i - 1], chunks[i]
        padded = tuple(
            c + 2 * p + 2 * b for c, p, b in zip(parent, crops[i - 1], blends[i - 1], strict=True)
        )
        for axis, (size, region) in enumerate(zip(child, padded, strict=True)):
            if region % size:
                pad = region - parent[axis]
                below, above = nearest_divisors(region, size)
                lower = region // size * size - pad
                parents = [p for p in (lower, lower + size) if p > 0]
                raise ConfigError(
                    f"level {i}'s chunk {child} does not divide level {i - 1}'s padded "
                    f"chunk {padded} (chunk {parent} + 2*crop {crops[i - 1]} "
                    f"+ 2*blend {blends[i - 1]}): on axis {axis}, {region} % {size} = "
                    f"{region % size}. Nearest valid level-{i} sizes on axis {axis}: "
                    f"{either(below, above)}; or keep {size} and make level {i - 1}'s chunk "
                    f"{either(*parents)} on axis {axis}; or pass auto_divisibility=True"
                )


def nearest_divisors(n: int, near: int) -> tuple[int | None, int | None]:
    """The divisors of ``n`` closest to ``near`` from below and from above."""
    found = divisors(n)
    below = max((d for d in found if d < near), default=None)
    above = min((d for d in found if d > near), default=None)
    return below, above


def either(*options: int | None) -> str:
    """``"a or b"`` for the options that exist, for error messages."""
    shown = [str(o) for o in options if o is not None]
    return " or ".join(shown) if shown else "none"


def expanded_bbox(bbox: Box, top: tuple[int, ...], bounds: Box, auto: bool) -> Box:
    """``bbox`` with its stop grown to whole top chunks; an error if it leaves ``bounds``."""
    stop = tuple(s + -(-n // c) * c for s, n, c in zip(bbox.start, bbox.shape, top, strict=True))
    grown = Box(bbox.start, stop)
    if not bounds.contains(grown):
        axis = next(a for a in range(bbox.ndim) if stop[a] > bounds.stop[a])
        room = (bounds.stop[axis] - bbox.start[axis]) // top[axis] * top[axis]
        shrink = f", a bbox stopping at {bbox.start[axis] + room}" if room else ""
        origin = " (sizes from auto_divisibility)" if auto else ""
        raise ConfigError(
            f"expanding bbox {bbox} to whole top chunks {top}{origin} gives {grown}, which "
            f"leaves dst bounds {bounds} on axis {axis} ({stop[axis]} > {bounds.stop[axis]}); "
            f"use a top chunk dividing {bbox.shape[axis]} on that axis{shrink}, or a bbox "
            "starting lower"
        )
    return grown


def check_top_divides(bbox: Box, top: tuple[int, ...]) -> None:
    """The top chunk divides the bbox on every axis."""
    for axis, (size, chunk) in enumerate(zip(bbox.shape, top, strict=True)):
        if size % chunk:
            below, above = nearest_divisors(size, chunk)
            raise ConfigError(
                f"the top chunk {top} does not divide bbox {bbox} (shape {bbox.shape}): on axis "
                f"{axis}, {size} % {chunk} = {size % chunk}. Use a top chunk of "
                f"{either(below, above)} on axis {axis}, a bbox of size "
                f"{either(size // chunk * chunk or None, -(-size // chunk) * chunk)}, or pass "
                "expand_bbox=True (or auto_divisibility=True)"
            )
