"""Casting ``fn``'s output into dst's dtype: which casts are refused, which voxels saturate.

A cast that cannot represent a value does not fail in numpy, and the flow's own
cast (``_subchunk.cast_to``) saturates rather than wraps: uint64 labels written
into a uint32 dst all become 4294967295, ``float * 1000`` into uint8 becomes 255.
Both finish with exit 0 and wrong data. So ``apply(cast=...)`` decides, from the
dtype ``fn`` returns (checked on every chunk; the probe checks it before anything
is written, as a ``ConfigError``), which casts run at all, with numpy's names:

    cast          allows (fn's dtype -> dst's dtype)                   examples
    "safe"        numpy's "safe", and a float into a narrower float   u1->u2, i4->f8, f8->f4
    (default)
    "same_kind"   numpy's "same_kind": also narrower integers,        u8->u4, i8->i2, i4->f4
                  unsigned into signed                                u4->i4
    "unsafe"      any number: floats into integers, anything -> bool  f8->u1, u1->bool

float64 into a float32 dst is allowed by default: it rounds to the precision the
dst was made with, which is what a float32 dst asks for, and numpy's arithmetic
returns float64 from many float32 inputs. Blending adds nothing to this: weights
are in [0, 1] and sum to 1, so a blended voxel lies between the values ``fn``
returned for it, and a float accumulation rounded into an integer dst stays in
the range of ``fn``'s dtype. ``dst=None`` casts nothing.

Saturation. Where ``fn``'s dtype has values outside dst's (``can_saturate``:
uint64 -> uint32, float64 -> uint8, float64 -> float32 past 3.4e38), the flow
counts, where each voxel is first cast into dst's dtype, the voxels that did not
fit (``count_saturated``), and ``apply`` warns with the total at the end
(``SaturationWarning``; ``ApplyReport.saturated_voxels``). Worked: uint32 holds
[0, 4294967295]; a uint64 id of 3 << 32 is counted, 7 is not; float 255.4 into
uint8 rounds to 255 and is not counted, 255.5 is.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from chunkgraph._errors import ConfigError

if TYPE_CHECKING:
    from chunkgraph.volume import Volume

CastRule = Literal["safe", "same_kind", "unsafe"]
CAST_RULES: tuple[CastRule, ...] = ("safe", "same_kind", "unsafe")
DEFAULT_CAST: CastRule = "safe"


class SaturationWarning(UserWarning):
    """Values ``fn`` returned did not fit dst's dtype and were written at its limits."""


SaturationWarning.__module__ = "chunkgraph.flow"


def check_cast_rule(value: object) -> CastRule:
    """``value`` if it is a cast rule, else ``ConfigError`` listing them."""
    if isinstance(value, str) and value in CAST_RULES:
        return value
    raise ConfigError(
        f"cast must be one of {', '.join(repr(r) for r in CAST_RULES)} (numpy's casting "
        f"names: which dtypes fn may return for dst's dtype), got {value!r}; 'safe' (the "
        "default) refuses casts that saturate, 'same_kind' allows narrower integers, "
        "'unsafe' also floats into integers",
        field="cast",
    )


def cast_allowed(src: np.dtype[Any], dst: np.dtype[Any], rule: CastRule) -> bool:
    """Whether ``rule`` lets ``fn`` return ``src`` for a dst of dtype ``dst``.

    >>> f8, f4, u8, u4 = (np.dtype(t) for t in ("f8", "f4", "u8", "u4"))
    >>> cast_allowed(f8, f4, "safe"), cast_allowed(u8, u4, "safe")
    (True, False)
    >>> cast_allowed(u8, u4, "same_kind"), cast_allowed(f8, u4, "same_kind")
    (True, False)
    """
    src, dst = np.dtype(src), np.dtype(dst)
    if rule == "unsafe" or np.can_cast(src, dst, "safe"):
        return True
    if src.kind == "f" and dst.kind == "f":
        return True  # rounding to a float dst's precision is what that dst means
    return rule == "same_kind" and bool(np.can_cast(src, dst, "same_kind"))


def cast_refusal(src: np.dtype[Any], dst: np.dtype[Any], rule: CastRule, where: str = "") -> str:
    """Why ``rule`` refuses ``src`` into ``dst`` and what to do; empty when it is allowed.
    ``where``: the chunk ``fn`` returned it for."""
    src, dst = np.dtype(src), np.dtype(dst)
    if cast_allowed(src, dst, rule):
        return ""
    needed, happens, fix = _what_casting_does(src, dst)
    default = " (the default)" if rule == DEFAULT_CAST else ""
    return (
        f"cast={rule!r}{default} refuses fn's output dtype {src}{where} for dst's dtype {dst}: "
        f"{happens}. Return {dst} from fn ({fix}), give dst dtype "
        f"{np.promote_types(src, dst)}, or pass cast={needed!r} (a spec file: `cast: {needed}`) "
        "to write it anyway: apply then counts the voxels that saturate and warns with the count"
    )


def conversion_refusal(src: np.dtype[Any], dst: np.dtype[Any], rule: CastRule) -> str:
    """``cast_refusal`` for stored data converted as it is copied (``transfer``): no fn,
    and the ways out in the copy's own options; empty when it is allowed."""
    src, dst = np.dtype(src), np.dtype(dst)
    if cast_allowed(src, dst, rule):
        return ""
    needed, happens, _ = _what_casting_does(src, dst)
    default = " (the default)" if rule == DEFAULT_CAST else ""
    return (
        f"cast={rule!r}{default} refuses converting the source's {src} into dtype {dst}: "
        f"{happens}. Give dtype {np.promote_types(src, dst)} (--dtype), or cast={needed!r} "
        f"(--cast {needed} on the command line) to convert it anyway: the voxels that "
        "saturate are then counted and warned of"
    )


def _what_casting_does(src: np.dtype[Any], dst: np.dtype[Any]) -> tuple[str, str, str]:
    """(the rule that allows ``src`` into ``dst``, what the cast does to values, the numpy
    expression that does it on purpose)."""
    needed = "same_kind" if np.can_cast(src, dst, "same_kind") else "unsafe"
    low, high = value_range(dst)
    if dst.kind == "b":
        happens = "a bool dst keeps only whether each value is nonzero"
        fix = "out != 0"
    elif src.kind == "f" and dst.kind in "iu":
        happens = (
            f"floats are rounded, and values outside {dst}'s range [{low}, {high}] would be "
            f"written as {low} or {high} (saturated)"
        )
        fix = f"np.clip(np.rint(out), {low}, {high}).astype({dst.name!r})"
    elif dst.kind == "f":
        happens = f"{dst} would round integers of {src} beyond 2**{np.finfo(dst).nmant + 1}"
        fix = f"out.astype({dst.name!r})"
    else:
        happens = (
            f"{dst} holds [{low}, {high}], so values outside it would be written as {low} or "
            f"{high} (saturated: distinct labels past the limit would merge)"
        )
        fix = f"out.astype({dst.name!r}) once its values fit"
    return needed, happens, fix


def value_range(dtype: np.dtype[Any]) -> tuple[int | float, int | float]:
    """The lowest and highest value ``dtype`` holds (bool: 0 and 1; floats: finite ones).

    >>> value_range(np.dtype("u1")), value_range(np.dtype("?"))
    ((0, 255), (0, 1))
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return 0, 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    largest = float(np.finfo(dtype).max)
    return -largest, largest


def can_saturate(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """Whether some value of ``src`` lies outside ``dst``'s range (rounding aside).

    >>> can_saturate(np.dtype("u8"), np.dtype("u4")), can_saturate(np.dtype("i8"), np.dtype("f4"))
    (True, False)
    """
    low, high = value_range(src)
    dst_low, dst_high = value_range(dst)
    return low < dst_low or high > dst_high


def count_saturated(array: Any, dtype: np.dtype[Any], xp: ModuleType = np) -> int:
    """How many values of ``array`` do not fit ``dtype`` once cast as the flow casts them
    (floats rounded to nearest into integers; into floats, past the largest finite value
    a value rounds to ±inf). ``xp``: ``array``'s array module.

    >>> count_saturated(np.array([255.4, 255.5, -0.6, 7.0]), np.dtype("u1"))
    2
    >>> count_saturated(np.array([3 << 32, 7], dtype="u8"), np.dtype("u4"))
    1
    >>> count_saturated(np.array([1e38, 4e38, -1e39, np.inf]), np.dtype("f4"))
    2
    """
    dtype = np.dtype(dtype)
    if not can_saturate(array.dtype, dtype):
        return 0
    low, high = value_range(dtype)
    if dtype.kind == "f":
        # Half an ulp past the largest finite value rounds to inf (ties go to the even
        # significand, which is inf's). An infinite input stays infinite: not counted.
        info = np.finfo(dtype)
        limit = float(high) + 2.0 ** (info.maxexp - 1 - info.nmant) / 2
        over = (array >= limit) & (array != np.inf)
        over |= (array <= -limit) & (array != -np.inf)
    else:
        values = xp.rint(array) if array.dtype.kind == "f" and dtype.kind in "iu" else array
        over = (values < low) | (values > high)
    return int(xp.count_nonzero(over))


def warn_if_saturated(
    saturated: int, dst: Volume, rule: str | None = None, *, values: str = "fn's values"
) -> None:
    """The end of a run that wrote ``saturated`` voxels at the limits of dst's dtype
    (``rule``: the cast rule that allowed it, when known; ``values``: whose did not fit)."""
    if not saturated:
        return
    dtype = np.dtype(dst.dtype)
    low, high = value_range(dtype)
    allowed = f" (cast={rule!r} allowed the cast)" if rule else ""
    # An integer saturates at its limits; a float overflows to +-inf past them.
    written = "as +-inf, past" if dtype.kind == "f" else "at"
    warnings.warn(
        f"{saturated} voxel(s) of dst {dst.path!r} were written {written} the limits of its "
        f"dtype {dtype} ([{low}, {high}]): {values} there did not fit{allowed}. Give dst a "
        f"wider dtype, or bring {values} into {dtype}'s range",
        SaturationWarning,
        stacklevel=3,
    )
