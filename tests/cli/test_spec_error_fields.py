"""apply's findings on a spec are reported at the spec's line by the error's ``field``.

``chunkgraph run`` maps a ``ConfigError`` of apply to the spec field it is about by
its ``field`` (apply's parameter: ``dst`` is ``output.path``, ``fn_kwargs.NAME`` is
``kwargs.NAME``), ``level`` (the entry of a per-level list) and ``axis``; the message
text is never read, so rewording a message keeps the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkgraph import cli
from chunkgraph._errors import ConfigError
from chunkgraph.cli._spec import OutputPlan, ResolvedSpec, parse_spec
from chunkgraph.flow.plan._options import RunOptions

HERE = Path(__file__).resolve().parent
OUTPUT = "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
SMOOTH = "input: raw.zarr\n" + OUTPUT + "function: spec_functions:smooth\n"


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        pytest.param(
            SMOOTH + "chunk_sizes:\n  - [16, 16, 16]\n  - [16, 12, 16]\n",
            ":6: chunk_sizes.1.1: ",
            "does not divide",
            id="divisibility-level-1-axis-1",
        ),
        pytest.param(
            SMOOTH + "chunk_sizes: [16, 8]\ncrop_pads:\n  - 0\n  - -2\n",
            ":7: crop_pads.1: ",
            "has a negative pad",
            id="negative-crop-pad",
        ),
        pytest.param(
            SMOOTH + "chunk_sizes: [16, 8]\nblend_pads:\n  - 0\n  - [0, 5, 0]\n",
            ":7: blend_pads.1.1: ",
            "more than half",
            id="blend-pad-over-half-the-chunk",
        ),
        pytest.param(
            SMOOTH + "chunk_sizes: [16, 8]\nblend_pads: 2\nblend_modes:\n  - linear\n  - defer\n",
            ":8: blend_modes.1: ",
            "below the top level",
            id="defer-below-the-top",
        ),
        pytest.param(
            "inputs: {a: raw.zarr, b: raw.zarr}\n" + OUTPUT + "function: spec_functions:add\n"
            "chunk_sizes: [32]\nkwargs:\n  b: 3\n",
            ":6: kwargs.b: ",
            "clashes with input 'b'",
            id="kwarg-clash",
        ),
        pytest.param(
            "input: raw.zarr\noutput:\n  path: raw.zarr\n  dtype: float32\n"
            "function: spec_functions:smooth\nchunk_sizes: [16]\ncrop_pads: 2\n",
            ":3: output.path: ",
            "in-place processing is refused",
            id="dst-is-the-input",
        ),
        pytest.param(
            SMOOTH + "chunk_sizes: [16]\nbbox:\n  start: [0, 0, 0]\n  stop: [48, 16, 16]\n",
            ":5: bbox: ",
            "is not inside dst bounds",
            id="bbox-outside-dst",
        ),
        pytest.param(
            "input: raw.zarr\noutput: {path: out.zarr, dtype: uint8, chunks: [16, 16, 16]}\n"
            "function: spec_functions:scale\nkwargs: {factor: 300.0}\nchunk_sizes: [16]\n"
            "cast: safe\n",
            ":6: cast: ",
            "refuses fn's output dtype float32",
            id="cast-refused",
        ),
    ],
)
def test_a_finding_of_apply_names_its_spec_field_and_line(
    work: Path, capsys: pytest.CaptureFixture[str], text: str, where: str, says: str
) -> None:
    (work / "spec.yaml").write_text(text)
    spec = str(work / "spec.yaml")
    code = cli.main(["run", "--quiet", spec])
    err = capsys.readouterr().err
    assert code == 2, err
    line = next((x for x in err.splitlines() if x.startswith(f"{spec}{where}")), None)
    assert line is not None, err
    assert says in line, err
    assert not (work / "out.zarr").exists()


SPEC = """\
input: raw.zarr
output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}
function: spec_functions:smooth
kwargs:
  sigma: 2.0
chunk_sizes:
  - 64
  - [32, 16, 32]
crop_pads: [0, [1, 2, 3]]
max_reduction_chunk_size: [64, 64, 64]
"""


def resolved(text: str = SPEC) -> ResolvedSpec:
    """A spec parsed, not resolved: flow_error needs its fields and their lines only."""
    spec, lines = parse_spec(text, "spec.yaml")
    run = RunOptions.of()
    return ResolvedSpec(spec, print, None, OutputPlan("out.zarr"), {}, run, "spec.yaml", lines)


@pytest.mark.parametrize(
    ("field", "level", "axis", "expected"),
    [
        ("chunk_sizes", 1, None, "spec.yaml:8: chunk_sizes.1: "),
        ("chunk_sizes", 1, 1, "spec.yaml:8: chunk_sizes.1.1: "),
        ("chunk_sizes", 0, 2, "spec.yaml:7: chunk_sizes.0: "),  # one int for all axes
        ("chunk_sizes", None, None, "spec.yaml:6: chunk_sizes: "),
        ("crop_pads", 1, 2, "spec.yaml:9: crop_pads.1.2: "),
        ("blend_pads", 1, 0, "spec.yaml: blend_pads: "),  # left to its default: no line
        ("max_reduction_chunk_size", None, 2, "spec.yaml:10: max_reduction_chunk_size.2: "),
        ("dst", None, None, "spec.yaml:2: output.path: "),
        ("fn", None, None, "spec.yaml:3: function: "),
        ("fn_kwargs.sigma", None, None, "spec.yaml:5: kwargs.sigma: "),
        ("fn_kwargs", None, None, "spec.yaml:4: kwargs: "),
        ("inputs.src", None, None, "spec.yaml:1: input: "),
        ("cast", None, None, "spec.yaml: cast: "),
        ("fn_resources", None, None, "spec.yaml: "),  # no such field in a spec
        (None, 1, None, "spec.yaml: "),
    ],
)
def test_flow_error_reads_the_field_and_level_never_the_message(
    field: str | None, level: int | None, axis: int | None, expected: str
) -> None:
    """The message says nothing a pattern could find; the line comes from the attributes."""
    err = ConfigError("something is off", field=field, level=level, axis=axis)
    assert resolved().flow_error(err).lines() == [f"{expected}something is off"]


def test_named_inputs_keep_their_names() -> None:
    text = SPEC.replace("input: raw.zarr", "inputs:\n  image: raw.zarr\n  mask: raw.zarr")
    err = ConfigError("no", field="inputs.mask")
    assert resolved(text).flow_error(err).lines() == ["spec.yaml:3: inputs.mask: no"]
