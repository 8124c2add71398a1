"""validate_flow: argument broadcasting, the divisibility rule, auto_divisibility, and
every invalid configuration raising a ConfigError that names its culprit."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkgraph import volume
from chunkgraph._errors import ConfigError
from chunkgraph.flow.plan._divisibility import auto_divisible_chunks, check_divisibility
from chunkgraph.flow.plan._fn_kwargs import with_fn_kwargs
from chunkgraph.flow.plan._spec import FlowSpec, LevelSpec, normalize_inputs, validate_flow
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

Make = Callable[..., Volume]


@pytest.fixture
def mem() -> Iterator[Make]:
    """Makes small in-memory volumes with unique names, removed afterwards."""
    names: list[str] = []

    def make(
        shape: tuple[int, ...] = (64, 64, 64),
        chunks: tuple[int, ...] | None = None,
        dtype: Any = "uint8",
        **kw: Any,
    ) -> Volume:
        name = f"flow-spec-{uuid.uuid4().hex}"
        names.append(name)
        return volume.create(
            name, shape, chunks or (16,) * len(shape), dtype, backend="memory", **kw
        )

    yield make
    for name in names:
        volume.remove(name)


def ident(x: np.ndarray) -> np.ndarray:
    return x


def flow(make: Make, **kw: Any) -> FlowSpec:
    """validate_flow on a fresh uint8 64^3 source and dst, with ``kw`` overriding."""
    args: dict[str, Any] = {"chunk_sizes": [(32, 32, 32)]}
    args.update(kw)
    fn = args.pop("fn", ident)
    inputs = args.pop("inputs") if "inputs" in args else make()
    dst = args.pop("dst") if "dst" in args else make()
    return validate_flow(fn, inputs, dst, **args)


# --- valid configurations ------------------------------------------------------------


def test_defaults_resolve_to_per_axis_tuples(mem: Make) -> None:
    spec = flow(mem, chunk_sizes=[(32, 32, 32), (8, 8, 8)], crop_pads=[0, 4], blend_pads=[4, 0])
    assert spec.levels == (
        LevelSpec((32, 32, 32), (0, 0, 0), (4, 4, 4), "quadratic"),
        LevelSpec((8, 8, 8), (4, 4, 4), (0, 0, 0), "quadratic"),
    )
    assert spec.bbox == Box((0, 0, 0), (64, 64, 64))
    assert spec.input_names == ("src",) and spec.positional_input
    assert spec.spatial_ndim == 3 and spec.context_pad == (8, 8, 8)
    assert spec.top_grid == (2, 2, 2)
    assert spec.dst_dtype == np.uint8 and spec.accumulate_dtype == np.float64
    assert spec.max_reduction_chunk_size == (32, 32, 32)
    assert not spec.skip_intermediates


@pytest.mark.parametrize(
    ("crop_pads", "expected"),
    [
        (3, [(3, 3, 3), (3, 3, 3)]),
        ((1, 2, 3), [(1, 2, 3), (1, 2, 3)]),
        ([5, 1], [(5, 5, 5), (1, 1, 1)]),
        ([(1, 2, 3), 0], [(1, 2, 3), (0, 0, 0)]),
        (np.array([1, 2, 3]), [(1, 2, 3), (1, 2, 3)]),
        (np.array([[1, 2, 3], [4, 5, 6]]), [(1, 2, 3), (4, 5, 6)]),
        ([np.int64(2), np.int32(4)], [(2, 2, 2), (4, 4, 4)]),
    ],
)
def test_pads_broadcast_per_axis_and_per_level(
    mem: Make, crop_pads: Any, expected: list[tuple[int, ...]]
) -> None:
    # Bottom chunk 2 divides every padded top chunk 32 + 2c.
    spec = flow(mem, chunk_sizes=[(32,) * 3, (2,) * 3], crop_pads=crop_pads)
    assert [lv.crop for lv in spec.levels] == expected


def test_a_list_is_per_level_and_a_tuple_per_axis(mem: Make) -> None:
    """With as many levels as axes, the container decides."""
    sizes = [(32,) * 3, (16,) * 3, (8,) * 3]
    per_level = flow(mem, chunk_sizes=sizes, crop_pads=[0, 0, 8])
    assert [lv.crop for lv in per_level.levels] == [(0, 0, 0), (0, 0, 0), (8, 8, 8)]
    per_axis = flow(mem, chunk_sizes=sizes, crop_pads=(0, 0, 8))
    assert [lv.crop for lv in per_axis.levels] == [(0, 0, 8)] * 3


def test_chunk_sizes_spellings(mem: Make) -> None:
    assert flow(mem, chunk_sizes=(32, 16, 64)).levels[0].chunk == (32, 16, 64)
    assert [lv.chunk for lv in flow(mem, chunk_sizes=[32, 16]).levels] == [(32,) * 3, (16,) * 3]
    grid = np.array([[32, 32, 64], [16, 16, 16]])
    assert [lv.chunk for lv in flow(mem, chunk_sizes=grid).levels] == [(32, 32, 64), (16,) * 3]


def test_modes_one_for_all_or_one_per_level(mem: Make) -> None:
    spec = flow(mem, chunk_sizes=[(32,) * 3, (8,) * 3], blend_pads=[4, 2], blend_modes="max")
    assert [lv.blend_mode for lv in spec.levels] == ["max", "max"]
    spec = flow(
        mem, chunk_sizes=[(32,) * 3, (8,) * 3], blend_pads=[4, 2], blend_modes=["defer", "bump"]
    )
    assert [lv.blend_mode for lv in spec.levels] == ["defer", "bump"]


def test_dict_inputs_are_keywords(mem: Make) -> None:
    image, mask = mem(), mem(dtype="bool")

    def fn(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return image * mask

    spec = flow(mem, fn=fn, inputs={"image": image, "mask": mask})
    assert spec.input_names == ("image", "mask") and not spec.positional_input
    assert normalize_inputs({"image": image}) == {"image": image}
    assert normalize_inputs(image) == {"src": image}


def test_channels_and_offsets(mem: Make) -> None:
    src = mem((2, 48, 40), (2, 16, 8), spatial_ndim=2, offset=(100, -8))
    dst = mem((3, 48, 40), (3, 16, 8), dtype="float32", spatial_ndim=2, offset=(100, -8))
    spec = validate_flow(ident, src, dst, chunk_sizes=[(16, 40)])
    assert spec.spatial_ndim == 2
    assert spec.bbox == Box((100, -8), (148, 32))
    assert spec.max_reduction_chunk_size == (16, 40)


def test_expand_bbox_inside_dst(mem: Make) -> None:
    dst = mem((96, 96, 96))
    spec = flow(mem, dst=dst, bbox=Box((0, 8, 16), (40, 70, 48)), expand_bbox=True)
    assert spec.bbox == Box((0, 8, 16), (64, 72, 48))


def test_auto_divisibility_rewrites_upper_levels_and_bbox(mem: Make) -> None:
    dst = mem((128, 128, 128))
    spec = flow(
        mem,
        dst=dst,
        chunk_sizes=[(50, 50, 50), (12, 12, 12)],
        crop_pads=[4, 0],
        bbox=Box((0, 0, 0), (100, 100, 100)),
        auto_divisibility=True,
    )
    # floor((50 + 8) / 12) * 12 - 8 = 40; the bbox end grows to a multiple of 40.
    assert spec.levels[0].chunk == (40, 40, 40) and spec.levels[1].chunk == (12, 12, 12)
    assert spec.bbox == Box((0, 0, 0), (120, 120, 120))


def test_dtype_rules(mem: Make) -> None:
    assert flow(mem, dst=mem(dtype="float32")).accumulate_dtype == np.float64
    assert flow(mem, dst=mem(dtype="float64")).accumulate_dtype == np.float64
    big = mem(dtype="uint64")
    assert flow(mem, inputs=mem(dtype="uint32"), dst=big).accumulate_dtype == np.uint64
    labels = flow(mem, dst=mem(dtype="int64"), blend_pads=4, blend_modes="max")
    assert labels.accumulate_dtype == np.int64
    # Kinds may differ on purpose (a float map thresholded into labels, an image
    # into a bool mask).
    assert flow(mem, inputs=mem(dtype="float32"), dst=mem(dtype="uint8")).dst_dtype == np.uint8
    assert flow(mem, inputs=mem(dtype="uint16"), dst=mem(dtype="bool")).dst_dtype == np.bool_
    assert flow(mem, inputs=mem(dtype="bool"), dst=mem(dtype="int8")).dst_dtype == np.int8
    # A cast rule that allows narrowing lets fn narrow an input itself (uint16 >> 8).
    narrowed = flow(mem, inputs=mem(dtype="uint16"), dst=mem(dtype="uint8"), cast="same_kind")
    assert (narrowed.dst_dtype, narrowed.cast) == (np.uint8, "same_kind")
    assert flow(mem).cast == "safe"


def test_reduction_chunk_is_an_upper_bound_rounded_down_to_dst_chunks(mem: Make) -> None:
    spec = flow(mem, max_reduction_chunk_size=(64, 16, 32))
    assert spec.max_reduction_chunk_size == (64, 16, 32)
    assert flow(mem, max_reduction_chunk_size=48).max_reduction_chunk_size == (48, 48, 48)
    dst = mem(chunks=(16, 16, 16))
    rounded = flow(mem, dst=dst, max_reduction_chunk_size=(40, 15, 100))
    assert rounded.max_reduction_chunk_size == (32, 16, 96)  # at least one dst chunk


def test_skip_intermediates_when_aligned(mem: Make) -> None:
    spec = flow(
        mem,
        chunk_sizes=[(32,) * 3, (16,) * 3],
        crop_pads=[0, 3],
        bbox=Box((16, 0, 0), (48, 64, 64)),
        skip_intermediates=True,
    )
    assert spec.skip_intermediates


def test_skip_intermediates_with_clipped_edge_chunk(mem: Make) -> None:
    """A bbox ending at the dst edge is aligned even where the edge dst chunk is clipped."""
    dst = mem((48, 64, 64), (32, 16, 16))
    spec = flow(
        mem,
        dst=dst,
        chunk_sizes=[(16, 16, 16)],
        bbox=Box((32, 0, 0), (48, 64, 64)),
        skip_intermediates=True,
    )
    assert spec.bbox.stop[0] == 48


# --- auto_divisibility as a property ----------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=4),
    pads=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=4, max_size=4),
)
def test_auto_divisibility_gives_the_largest_divisible_sizes(
    sizes: list[int], pads: list[tuple[int, int]]
) -> None:
    levels = len(sizes)
    crops = [(c,) for c, _ in pads[:levels]]
    blends = [(b,) for _, b in pads[:levels]]
    try:
        out = auto_divisible_chunks([(s,) for s in sizes], crops, blends)
    except ConfigError as err:
        assert "auto_divisibility cannot fit level" in str(err)
        return
    assert out[-1] == (sizes[-1],)
    for i in range(1, levels):
        region = out[i - 1][0] + 2 * crops[i - 1][0] + 2 * blends[i - 1][0]
        assert region % out[i][0] == 0
        assert 0 < out[i - 1][0] <= sizes[i - 1]
        # The next multiple would exceed the given upper bound.
        assert out[i - 1][0] + out[i][0] > sizes[i - 1]


@settings(max_examples=40, deadline=None)
@given(
    bottom=st.tuples(st.integers(2, 9), st.integers(2, 9)),
    factors=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=0, max_size=2),
    crop=st.integers(0, 3),
    blend=st.integers(0, 1),
    counts=st.tuples(st.integers(1, 3), st.integers(1, 3)),
)
def test_random_valid_configurations_are_accepted(
    bottom: tuple[int, int],
    factors: list[tuple[int, int]],
    crop: int,
    blend: int,
    counts: tuple[int, int],
) -> None:
    """Build levels bottom-up so each padded chunk is a multiple of the level below."""
    chunks = [bottom]
    for f in factors:
        pad = 2 * crop + 2 * blend
        # The smallest multiple of the child that leaves a positive chunk, times f.
        chunks.insert(0, tuple((k + pad // b) * b - pad for k, b in zip(f, chunks[0], strict=True)))
    if any(c < max(1, 2 * blend) for level in chunks for c in level):
        return
    top = chunks[0]
    shape = tuple(t * n + 5 for t, n in zip(top, counts, strict=True))
    names = [f"flow-spec-{uuid.uuid4().hex}" for _ in range(2)]
    src = volume.create(names[0], shape, (7, 5), "uint8", backend="memory")
    dst = volume.create(names[1], shape, (4, 6), "int16", backend="memory")
    try:
        bbox = Box((5, 5), shape)
        spec = validate_flow(
            ident, src, dst, chunk_sizes=chunks, crop_pads=crop, blend_pads=blend, bbox=bbox
        )
    finally:
        for name in names:
            volume.remove(name)
    assert [lv.chunk for lv in spec.levels] == chunks
    assert spec.top_grid == counts and spec.bbox == bbox


# --- the divisibility message suggests sizes that work ----------------------------------


def test_divisibility_error_suggests_valid_sizes(mem: Make) -> None:
    with pytest.raises(ConfigError) as info:
        flow(
            mem,
            chunk_sizes=[(32, 32, 256), (8, 8, 60)],
            crop_pads=[(0, 0, 8), 0],
            dst=mem((64, 64, 256)),
        )
    message = str(info.value)
    assert "level 1's chunk (8, 8, 60)" in message and "272 % 60 = 32" in message
    assert "level-1 sizes on axis 2: 34 or 68" in message
    assert "level 0's chunk 224 or 284 on axis 2" in message
    for child in (34, 68):
        flow(
            mem,
            chunk_sizes=[(32, 32, 256), (8, 8, child)],
            crop_pads=[(0, 0, 8), 0],
            dst=mem((64, 64, 256)),
        )
    flow(
        mem,
        chunk_sizes=[(32, 32, 224), (8, 8, 60)],
        crop_pads=[(0, 0, 8), 0],
        dst=mem((64, 64, 224)),
    )


def test_top_chunk_error_suggests_valid_sizes(mem: Make) -> None:
    with pytest.raises(ConfigError) as info:
        flow(mem, chunk_sizes=[(32, 32, 24)])
    message = str(info.value)
    assert "on axis 2, 64 % 24 = 16" in message
    assert "top chunk of 16 or 32 on axis 2" in message
    # 72 would leave dst (64): a bbox given by the user stays inside, expand_bbox goes past
    assert "a bbox of size 48;" in message and "expand_bbox=True" in message


# --- every invalid configuration names its culprit ------------------------------------


def _case(**kw: Any) -> Callable[[Make], dict[str, Any]]:
    return lambda make: kw


def _dst_is_input(make: Make) -> dict[str, Any]:
    vol = make()
    return {"inputs": vol, "dst": vol, "crop_pads": 2}


INVALID: list[tuple[str, Callable[[Make], dict[str, Any]], str]] = [
    ("fn not callable", _case(fn=42), r"fn must be callable, got int: 42"),
    ("inputs an array", _case(inputs=np.zeros((4, 4, 4))), r"inputs must be a Volume.*ndarray"),
    (
        "input not a Volume",
        _case(inputs={"img": np.zeros(3)}),
        r"inputs\['img'\] must be a Volume, got ndarray",
    ),
    (
        "input name not an identifier",
        (lambda m: {"inputs": {"my image": m()}}),
        r"input name 'my image' is not usable as a keyword",
    ),
    (
        "input name a keyword",
        (lambda m: {"inputs": {"class": m()}}),
        r"input name 'class' is not usable",
    ),
    ("dst not a Volume", _case(dst="out.zarr"), r"dst must be a Volume, got str"),
    (
        "dst read-only",
        (lambda m: {"dst": volume.open(m().path, mode="r", backend="memory")}),
        r"dst 'flow-spec-\w+' is open read-only \(mode 'r'\)",
    ),
    (
        "dst is the input",
        _dst_is_input,
        r"dst 'flow-spec-\w+' is the same stored array as input 'src'.*crop pad",
    ),
    (
        "inputs of different dimensionality",
        (lambda m: {"inputs": {"a": m(), "b": m((64, 64))}, "fn": lambda a, b: a}),
        r"different spatial dimensionality: \{'a': 3, 'b': 2\}",
    ),
    (
        "input and dst dimensionality",
        (lambda m: {"inputs": m((64, 64))}),
        r"input 'src' has 2 spatial axes but dst has 3",
    ),
    (
        "fn cannot take the inputs",
        (lambda m: {"inputs": {"image": m()}, "fn": lambda src: src}),
        r"cannot be called as fn\(image=array\)",
    ),
    ("chunk_sizes empty", _case(chunk_sizes=[]), r"chunk_sizes is empty"),
    ("chunk_sizes an int", _case(chunk_sizes=32), r"chunk_sizes must be a list.*write \[32\]"),
    ("chunk_sizes a str", _case(chunk_sizes="32"), r"chunk_sizes must be a list.*got '32'"),
    (
        "chunk size of wrong length",
        _case(chunk_sizes=[(32, 32, 32), (8, 8)]),
        r"chunk_sizes\[1\] = \(8, 8\) has 2 entries; expected 3",
    ),
    (
        "chunk size zero",
        _case(chunk_sizes=[(0, 32, 32)]),
        r"chunk_sizes\[0\] = \(0, 32, 32\) has a size <= 0",
    ),
    (
        "chunk size negative",
        _case(chunk_sizes=[(32, -32, 32)]),
        r"chunk_sizes\[0\] = \(32, -32, 32\) has a size <= 0",
    ),
    (
        "chunk size not an int",
        _case(chunk_sizes=[(32, 32.5, 32)]),
        r"chunk_sizes\[0\]\[1\] must be an integer, got 32.5 \(float\)",
    ),
    (
        "chunk size a bool",
        _case(chunk_sizes=[(32, True, 32)]),
        r"chunk_sizes\[0\]\[1\] must be an integer, got True \(a bool",
    ),
    (
        "crop_pads one per level, wrong count",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], crop_pads=[(0, 0, 0), 4, 4]),
        r"crop_pads = \[\(0, 0, 0\), 4, 4\] has 3 entries but there are 2 levels",
    ),
    (
        "blend_pads per axis, wrong count",
        _case(blend_pads=[(2, 2)]),
        r"blend_pads\[0\] = \(2, 2\) has 2 entries; expected 3",
    ),
    (
        "per-level pads of wrong length",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], crop_pads=[1, 2, 3, 4]),
        r"crop_pads = \[1, 2, 3, 4\] has 4 entries but there are 2 levels.*a tuple of 3",
    ),
    (
        "negative crop pad",
        _case(crop_pads=-1),
        r"crop_pads\[0\] = \(-1, -1, -1\) has a negative pad",
    ),
    (
        "negative blend pad",
        _case(blend_pads=(0, -2, 0)),
        r"blend_pads\[0\] = \(0, -2, 0\) has a negative pad",
    ),
    (
        "per-axis pad of wrong length",
        _case(crop_pads=(1, 2)),
        r"crop_pads = \(1, 2\) has 2 entries; expected 3, one per axis \(or a single int",
    ),
    (
        "unknown blend mode",
        _case(blend_pads=2, blend_modes="cubic"),
        r"blend_modes\[0\] = 'cubic' is not a blend mode; valid modes are linear",
    ),
    (
        "blend modes, wrong count",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], blend_modes=["linear"]),
        r"blend_modes has 1 entries but there are 2 levels",
    ),
    ("blend mode not a str", _case(blend_modes=7), r"blend_modes must be a str or a list"),
    (
        "defer below the top",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], blend_pads=2, blend_modes=["linear", "defer"]),
        r"blend_modes\[1\] = 'defer' below the top level",
    ),
    (
        "defer without a blend pad",
        _case(blend_modes="defer"),
        r"blend_modes\[0\] = 'defer' but blend_pads\[0\] is 0",
    ),
    (
        "blend pad over half the chunk",
        _case(blend_pads=(17, 0, 0)),
        r"blend_pads\[0\] = 17 on axis 0 is more than half of level 0's chunk 32.*<= 16",
    ),
    (
        "sizes not divisible",
        _case(chunk_sizes=[(32,) * 3, (8, 8, 12)], crop_pads=[4, 0]),
        r"level 1's chunk \(8, 8, 12\) does not divide level 0's padded chunk \(40, 40, 40\)",
    ),
    (
        "top chunk does not divide the bbox",
        _case(chunk_sizes=[(32, 32, 24)]),
        r"top chunk \(32, 32, 24\) does not divide bbox",
    ),
    (
        "auto_divisibility cannot fit",
        _case(chunk_sizes=[(8,) * 3, (24,) * 3], auto_divisibility=True),
        r"auto_divisibility cannot fit level 1's chunk \(24, 24, 24\).*at least 24",
    ),
    (
        "expand_bbox neither a bool nor 'snap'",
        _case(chunk_sizes=[(48,) * 3], expand_bbox="grid"),
        r"expand_bbox must be True .*'snap'.* or False, got 'grid'",
    ),
    (
        "bbox outside dst",
        _case(bbox=Box((32, 0, 0), (96, 64, 64))),
        r"bbox .*stop=\(96, 64, 64\).* is not inside dst bounds",
    ),
    (
        "bbox of wrong dimensionality",
        _case(bbox=Box((0, 0), (32, 32))),
        r"bbox .* has 2 axes but dst has 3 spatial axes",
    ),
    ("bbox empty", _case(bbox=Box((0, 0, 0), (32, 0, 32))), r"bbox .* is empty"),
    ("bbox not a Box", _case(bbox=((0, 0, 0), (32, 32, 32))), r"bbox must be a .*Box.*tuple"),
    (
        "reduction chunk of zero",
        _case(max_reduction_chunk_size=0),
        r"max_reduction_chunk_size = \(0, 0, 0\) is not positive on axis 0.*e\.g\. \(16, 16, 16\)",
    ),
    (
        "blend mode not a str inside a list",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], blend_modes=["linear", 3]),
        r"blend_modes\[1\] = 3 is not a blend mode",
    ),
    (
        "chunk size a str",
        _case(chunk_sizes=[(32, 32, "32")]),
        r"chunk_sizes\[0\]\[2\] must be an integer, got '32' \(str\)",
    ),
    (
        "reduction chunk of wrong length",
        _case(max_reduction_chunk_size=(32, 32)),
        r"max_reduction_chunk_size = \(32, 32\) has 2 entries; expected 3",
    ),
    (
        "skip_intermediates with blending",
        _case(blend_pads=2, skip_intermediates=True),
        r"skip_intermediates=True needs non-overlapping outputs, but level 0 has blend pad",
    ),
    (
        "skip_intermediates with an upper crop",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], crop_pads=[4, 0], skip_intermediates=True),
        r"level 0 has crop pad \(4, 4, 4\)",
    ),
    (
        "skip_intermediates with misaligned bottom chunks",
        _case(chunk_sizes=[(32,) * 3, (8,) * 3], skip_intermediates=True),
        r"cover whole dst chunks \(16, 16, 16\): on axis 0 the bottom chunk is 8",
    ),
    (
        "skip_intermediates with a misaligned bbox",
        _case(bbox=Box((8, 0, 0), (40, 64, 64)), skip_intermediates=True),
        r"bbox spans \[8, 40\) with the dst grid starting at 0",
    ),
    (
        "int32 input into an int16 dst",
        (lambda m: {"inputs": m(dtype="int32"), "dst": m(dtype="int16")}),
        r"dst dtype int16 cannot hold every value of input 'src' \(int32\); use a dst of "
        r"dtype int32",
    ),
    (
        "signed input into an unsigned dst",
        (lambda m: {"inputs": {"img": m(dtype="int8")}, "dst": m(), "fn": lambda img: img}),
        r"dst dtype uint8 cannot hold every value of input 'img' \(int8\)",
    ),
    (
        "64-bit integer dst with weighted blending",
        (lambda m: {"dst": m(dtype="int64"), "blend_pads": 2, "blend_modes": "bump"}),
        r"dst dtype int64 cannot be blended exactly.*level 0, mode 'bump'.*'max'",
    ),
    (
        "complex dst",
        (lambda m: {"dst": m(dtype="complex64")}),
        r"dst dtype complex64 cannot be blended or rounded",
    ),
    (
        "flag not a bool",
        _case(auto_divisibility="yes"),
        r"auto_divisibility must be True or False, got 'yes'",
    ),
    (
        "cast not one of numpy's rules",
        _case(cast="equiv"),
        r"cast must be one of 'safe', 'same_kind', 'unsafe' .*got 'equiv'",
    ),
]


@pytest.mark.parametrize(
    ("build", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_configuration_names_the_culprit(
    mem: Make, build: Callable[[Make], dict[str, Any]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        flow(mem, **build(mem))


def test_there_are_at_least_thirty_distinct_invalid_cases() -> None:
    assert len({c[0] for c in INVALID}) == len(INVALID) >= 30
    assert len({c[2] for c in INVALID}) == len(INVALID)


def test_invalid_flow_writes_nothing(mem: Make) -> None:
    dst = mem()
    with pytest.raises(ConfigError):
        flow(mem, dst=dst, blend_pads=40)
    assert dst.stats.bytes_written == 0 and dst.stats.bytes_read == 0


@pytest.mark.parametrize(("top", "crop", "least"), [(1, 4, 4), (2, 4, 4), (3, 0, 6)])
def test_auto_divisibility_error_names_a_top_chunk_that_fits(
    top: int, crop: int, least: int
) -> None:
    with pytest.raises(ConfigError, match=rf"chunk_sizes\[0\] at least {least} on axis 0"):
        auto_divisible_chunks([(top,), (6,)], [(crop,), (0,)], [(0,), (0,)])
    fitted = auto_divisible_chunks([(least,), (6,)], [(crop,), (0,)], [(0,), (0,)])
    assert fitted[0] == (least,)


@settings(max_examples=80, deadline=None)
@given(
    parent=st.integers(1, 400),
    crop=st.integers(0, 20),
    blend=st.integers(0, 20),
    child=st.integers(1, 500),
)
def test_divisibility_suggestions_are_the_nearest_divisors(
    parent: int, crop: int, blend: int, child: int
) -> None:
    region = parent + 2 * crop + 2 * blend
    if region % child == 0:
        check_divisibility([(parent,), (child,)], [(crop,), (0,)], [(blend,), (0,)])
        return
    with pytest.raises(ConfigError) as info:
        check_divisibility([(parent,), (child,)], [(crop,), (0,)], [(blend,), (0,)])
    found = re.search(r"level-1 sizes on axis 0: ([\d ]+(?:or [\d]+)?);", str(info.value))
    assert found, str(info.value)
    suggested = [int(x) for x in found.group(1).split(" or ")]
    divisors = [d for d in range(1, region + 1) if region % d == 0]
    below = [d for d in divisors if d < child]
    above = [d for d in divisors if d > child]
    assert suggested == ([max(below)] if below else []) + ([min(above)] if above else [])
    parents = re.search(r"make level 0's chunk ([\d ]+(?:or [\d]+)?) on axis 0", str(info.value))
    assert parents, str(info.value)
    for p in (int(x) for x in parents.group(1).split(" or ")):
        assert p > 0 and (p + 2 * crop + 2 * blend) % child == 0


# --- where an error is: field, level, axis --------------------------------------------

TWO_LEVELS = [(32, 32, 32), (16, 16, 16)]


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"chunk_sizes": [(32, 32, 32), (32, 24, 32)]}, ("chunk_sizes", 1, 1)),
        ({"chunk_sizes": [(32, 32, 24)]}, ("chunk_sizes", 0, 2)),  # the top chunk vs the bbox
        ({"chunk_sizes": [(32, 0, 32)]}, ("chunk_sizes", 0, 1)),
        ({"chunk_sizes": "big"}, ("chunk_sizes", None, None)),
        ({"chunk_sizes": TWO_LEVELS, "crop_pads": [0, (0, -1, 0)]}, ("crop_pads", 1, 1)),
        ({"chunk_sizes": TWO_LEVELS, "crop_pads": [0, 0, 0]}, ("crop_pads", None, None)),
        ({"crop_pads": [(1, 2)]}, ("crop_pads", 0, None)),  # two values for three axes
        ({"blend_pads": (0, 0, 20)}, ("blend_pads", 0, 2)),
        ({"chunk_sizes": TWO_LEVELS, "blend_modes": ["linear", "defer"]}, ("blend_modes", 1, None)),
        ({"blend_modes": ["nonsense"]}, ("blend_modes", 0, None)),
        ({"bbox": Box((0, 0, 0), (96, 32, 32))}, ("bbox", None, None)),
        ({"bbox": Box((0, 200, 0), (32, 232, 32))}, ("bbox", None, 1)),
        ({"max_reduction_chunk_size": (32, 0, 32)}, ("max_reduction_chunk_size", None, 1)),
        ({"skip_intermediates": "maybe"}, ("skip_intermediates", None, None)),
        ({"expand_bbox": "sometimes"}, ("expand_bbox", None, None)),
        ({"cast": "equiv"}, ("cast", None, None)),
        ({"dst": "out.zarr"}, ("dst", None, None)),
        ({"fn": 42}, ("fn", None, None)),
        ({"inputs": "raw.zarr"}, ("inputs", None, None)),
    ],
)
def test_an_error_says_its_field_level_and_axis(
    mem: Make, kw: dict[str, Any], where: tuple[str, int | None, int | None]
) -> None:
    """What the command line reads to point at a spec's line (never the message)."""
    with pytest.raises(ConfigError) as caught:
        flow(mem, **kw)
    assert (caught.value.field, caught.value.level, caught.value.axis) == where


def test_an_input_name_and_a_keyword_of_fn_say_which() -> None:
    def two(src: np.ndarray, k: int = 0) -> np.ndarray:
        return src

    with pytest.raises(ConfigError) as clash:
        with_fn_kwargs(two, {"src": 1}, ["src"])
    with pytest.raises(ConfigError) as unknown:
        with_fn_kwargs(two, {"k": 1, "nope": 2}, ["src"])
    with pytest.raises(ConfigError) as named:
        normalize_inputs({"class": None})
    assert (clash.value.field, unknown.value.field) == ("fn_kwargs.src", "fn_kwargs.nope")
    assert named.value.field == "inputs.class"
