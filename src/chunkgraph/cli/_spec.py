"""Spec files of ``chunkgraph run``: the pydantic model, and loading it with errors that point.

    spec.yaml ──SafeLoader──> node tree (the line of every key and item)
              │                  └──construct──> plain data (str, int, float, bool, list, dict)
              └─────────────────────────────────────┐
    RunSpec.model_validate(data, strict) ──> resolve_spec() ──> ResolvedSpec
      types, unknown keys, ranges            import the function, check kwargs,
                                              open inputs, plan the output
    any failure ──> SpecError: every problem as ``spec.yaml:LINE: field.path: message``

Nothing in a spec is evaluated: values are YAML scalars, lists and mappings,
and the one piece of code it names, ``function: "package.module:attribute"``,
is imported (the spec's directory first on ``sys.path``, so a module beside the
spec is found; ``module_file`` names that file, or the directory of a package
beside the spec, which ``chunkgraph run`` sends to the workers of a Dask
cluster: they cannot import it from the spec's directory). Relative paths (inputs, output,
intermediates) are relative to the spec file's directory, so a spec means the
same from any working directory; ``kwargs`` are passed as they are (a path among
them is the function's business).

YAML has lists only, no tuples, so the flow's "a tuple is per axis, a list is
per level" rule reads here: a pad is one int (all levels, all axes) or a list
with one entry per level, each an int or a list with one int per axis.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from chunkgraph import volume
from chunkgraph._errors import ConfigError, StoreError
from chunkgraph.execute import CLUSTER_KINDS, ExecutorKind
from chunkgraph.execute._cluster_spec import cluster_json_schema
from chunkgraph.flow.plan import DEFAULT_CAST, DEFAULT_RETRIES, BlendMode, CastRule, RunOptions
from chunkgraph.geometry import Box
from chunkgraph.volume import is_url, relative_place
from chunkgraph.volume._object_store import SCHEMES, broken_url

Sizes = int | list[int]
Pads = Annotated[
    int | list[Sizes],
    Field(description="one int for all levels and axes, or a list: per level, int or per axis"),
]


class _Model(BaseModel):
    # strict: YAML already types its values; "64" is not silently the number 64.
    model_config = ConfigDict(extra="forbid", strict=True)


class BoxSpec(_Model):
    """A box in global voxel coordinates, ``[start, stop)`` on each spatial axis."""

    start: list[int]
    stop: list[int]

    @model_validator(mode="after")
    def _same_length(self) -> BoxSpec:
        if len(self.start) != len(self.stop):
            raise ValueError(
                f"start {self.start} and stop {self.stop} have different lengths; "
                "give one value per spatial axis in both"
            )
        return self


class OutputSpec(_Model):
    """The volume written; created from these fields when it does not exist."""

    path: str = Field(min_length=1, description="Zarr v3 volume path (relative: to the spec)")
    dtype: str | None = Field(
        default=None, description="numpy dtype name; needed to create the volume"
    )
    chunks: list[Annotated[int, Field(gt=0)]] | None = Field(
        default=None, description="storage chunk per axis; needed to create the volume"
    )
    shape: list[Annotated[int, Field(gt=0)]] | None = Field(
        default=None,
        description="default: the first input's shape (and its spatial axes); at another "
        "resolution, the input's physical extent in the output's voxels",
    )
    offset: list[int] | None = Field(
        default=None,
        description="global voxel coordinate of the output's first voxel, per spatial axis; "
        "default: the first input's offset (also when shape is given)",
    )
    resolution: list[Annotated[int | float, Field(gt=0)]] | None = Field(
        default=None,
        description="physical size of a voxel per spatial axis (e.g. [40, 4, 4] nm); "
        "default: the first input's resolution",
    )
    fill_value: int | float | bool = Field(default=0, description="value of never-written voxels")
    exists: Literal["error", "overwrite", "use"] | None = Field(
        default=None,
        description="when the volume exists: error, overwrite (delete and create) or use; "
        "default: use it when its shape, chunks and dtype match the spec, else error",
    )


class RunDefaults(_Model):
    """How to run, unless the command line says otherwise."""

    executor: (
        ExecutorKind
        | Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9+.-]*://.+$")]
        # checked by ClusterSpec (the key and the valid ones named); the schema from its table
        | Annotated[dict[str, dict[str, Any] | None], WithJsonSchema(cluster_json_schema())]
        | None
    ) = Field(
        default=None,
        description="default: threads; or a Dask scheduler address; or a cluster to start, "
        f"one key of {', '.join(CLUSTER_KINDS)} holding its options, e.g. {{slurm: {{cores: 8, "
        'memory: 32GiB, walltime: "02:00:00", jobs: 10}} (docs/executors.md, A SLURM site)',
    )
    workers: Annotated[int, Field(gt=0)] | None = Field(
        default=None, description="default: all cores"
    )


class RunSpec(_Model):
    """A ``chunkgraph run`` spec: one ``chunkgraph.flow.apply`` call written down."""

    input: str | None = Field(
        default=None, description="one input volume, passed to fn positionally"
    )
    inputs: dict[str, str] | None = Field(
        default=None, description="name -> path; each passed to fn as the keyword argument `name`"
    )
    cache_bytes: Annotated[int, Field(ge=0)] = Field(
        0, description="chunk cache of each input, in bytes (serves halos to neighbours)"
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of the object store the spec's s3:// or gs:// paths reach "
        "(obstore's keys, e.g. endpoint, region), on top of the environment's; credentials "
        "are best left to the environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS)",
    )
    output: OutputSpec
    function: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description='"package.module:function", imported (the spec\'s directory first)',
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments bound to the function"
    )
    chunk_sizes: Annotated[list[Sizes], Field(min_length=1)] | Literal["auto"] = Field(
        default="auto",
        description="processing chunk per level, top first (int or per-axis list); auto "
        "(the default): planned from the pads, the storage chunks, the cores and the memory",
    )
    crop_pads: Pads = 0
    blend_pads: Pads = 0
    blend_modes: BlendMode | list[BlendMode] = "quadratic"
    bbox: BoxSpec | None = Field(default=None, description="default: the output's bounds")
    auto_divisibility: bool = False
    expand_bbox: bool | Literal["snap"] = Field(
        default=False,
        description="grow the bbox to whole top chunks past the volume's edge (true), or "
        "snap it to the top-chunk grid of the output's bounds (snap)",
    )
    max_reduction_chunk_size: Sizes | None = None
    intermediates: str | None = Field(
        default=None,
        description="directory of temporaries; default .<output name>.chunkgraph beside it",
    )
    skip_intermediates: bool | None = Field(
        default=None,
        description="write bottom outputs straight to the output (nothing may overlap); "
        "default: decided with automatic sizes, else false",
    )
    retries: Annotated[int, Field(ge=0)] = DEFAULT_RETRIES
    timeout: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="seconds per try of a top-level task or reduction"
    )
    probe: bool = True
    lock_wait: Annotated[float, Field(ge=0)] = 0.0
    device: Literal["cpu", "gpu"] = Field(
        default="cpu",
        description="where fn computes: cpu (numpy arrays) or gpu (CuPy arrays; needs "
        "chunkgraph[gpu] and an NVIDIA GPU)",
    )
    gpu_fallback: bool = Field(
        default=False, description="device gpu without a GPU here: run on the CPU, not fail"
    )
    cast: CastRule = Field(
        default=DEFAULT_CAST,
        description="which dtypes the function may return for the output's dtype (numpy's "
        "names): safe refuses casts that saturate (a float into a narrower float is fine), "
        "same_kind allows narrower integers, unsafe also floats into integers; voxels that "
        "saturate are counted and warned of",
    )
    run: RunDefaults = RunDefaults()

    @model_validator(mode="after")
    def _one_input_form(self) -> RunSpec:
        if (self.input is None) == (self.inputs is None):
            raise ValueError(
                "give exactly one of `input: PATH` (fn(array)) or `inputs: {name: PATH}` "
                "(fn(name=array))"
            )
        if self.inputs is not None and not self.inputs:
            raise ValueError("inputs is empty; name at least one input volume")
        return self


@dataclass(frozen=True)
class SpecProblem:
    path: str  # dotted field path, e.g. "output.chunks" or "chunk_sizes.1"
    line: int | None  # 1-based line in the spec file
    message: str


class SpecError(ConfigError):
    """A spec that cannot run; ``problems`` lists every finding with its field and line."""

    def __init__(self, file: str, problems: list[SpecProblem]) -> None:
        self.file = file
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for p in self.problems:
            where = f"{self.file}:{p.line}" if p.line is not None else self.file
            out.append(f"{where}: {p.path + ': ' if p.path else ''}{p.message}")
        return out


@dataclass
class OutputPlan:
    """What to do with the output: use ``existing``, or (re)create it from ``create_args``."""

    path: str
    existing: Any = None  # an open Volume, or None
    overwrite: bool = False
    create_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ResolvedSpec:
    spec: RunSpec
    fn: Callable[..., Any]
    inputs: Any  # a Volume, or {name: Volume}
    output: OutputPlan
    flow_options: dict[str, Any]  # apply's arguments that shape the flow
    run: RunOptions  # how it runs, as the spec says (_cmd_run adds the command line's)
    file: str
    lines: _Lines
    # The file of the function's module when it is a .py file beside the spec: sent to
    # the workers of a Dask cluster, which cannot import it from there.
    module_file: str | None = None

    def flow_error(self, err: ConfigError) -> SpecError:
        """apply's own finding (divisibility, pads...) as a SpecError at its spec field.

        The error's ``field`` (apply's parameter) names the spec's field (``dst`` is
        ``output.path``, ``fn_kwargs.NAME`` is ``kwargs.NAME``) and its ``level`` the
        entry of a per-level list (``chunk_sizes.1``); the line is given where the file
        spells that field out (a field left to its default has none). The message text is
        never read: rewording it keeps the line.
        """
        where = spec_field(err.field, self.spec)
        if where is None:  # about no field of the spec: the spec as a whole
            return SpecError(self.file, [SpecProblem("", None, str(err))])
        loc: tuple[str | int, ...] = _Lines.loc(where)
        if where in _PER_LEVEL and err.level is not None:
            loc += (err.level,) if err.axis is None else (err.level, err.axis)
        elif where in _PER_AXIS and err.axis is not None:
            loc += (err.axis,)
        if not self.lines.has(where):
            return SpecError(self.file, [SpecProblem(where, None, str(err))])
        kept, line = self.lines.find(loc)
        path = ".".join(str(k) for k in kept)
        return SpecError(self.file, [SpecProblem(path, line, str(err))])


# apply's parameters that the spec names otherwise (``fn_kwargs.NAME`` -> ``kwargs.NAME``).
_SPEC_NAMES = {"dst": "output.path", "fn": "function", "fn_kwargs": "kwargs"}
# Spec fields whose list has one entry per level; one entry per spatial axis.
_PER_LEVEL = frozenset({"chunk_sizes", "crop_pads", "blend_pads", "blend_modes"})
_PER_AXIS = frozenset({"max_reduction_chunk_size"})


def spec_field(field: str | None, spec: RunSpec) -> str | None:
    """The spec's dotted field path for apply's parameter ``field`` (a ``ConfigError``'s
    ``field``); None when the spec has no such field (``fn_resources``, say).

    >>> spec = RunSpec(input="raw.zarr", output=OutputSpec(path="out.zarr"), function="m:f")
    >>> [spec_field(f, spec) for f in ("dst", "fn_kwargs.sigma", "inputs.src", "crop_pads")]
    ['output.path', 'kwargs.sigma', 'input', 'crop_pads']
    >>> spec_field("fn_resources", spec) is None
    True
    """
    if field is None:
        return None
    head, dot, rest = field.partition(".")
    if head == "inputs":  # one input (`input: PATH`) is passed positionally, unnamed
        return "input" if spec.input is not None else field
    where = _SPEC_NAMES.get(head, head) + dot + rest
    return where if where.partition(".")[0] in RunSpec.model_fields else None


class _Lines:
    """Field path -> line, from the YAML node tree."""

    def __init__(self, root: yaml.Node | None) -> None:
        self.root = root

    def find(self, loc: tuple[str | int, ...]) -> tuple[list[str | int], int | None]:
        """The loc elements present in the file (pydantic's union tags dropped) and the line."""
        node, kept = self.root, []
        line = node.start_mark.line + 1 if node is not None else None
        for key in loc:
            child = _child(node, key)
            if child is None:
                continue
            node, line = child[1], child[0]
            kept.append(key)
        return kept, line

    def line(self, path: str) -> int | None:
        """The line of ``path``, or of the nearest part of it that the file has."""
        return self.find(self.loc(path))[1]

    def has(self, path: str) -> bool:
        """Whether the file spells out ``path`` (a field left to its default does not)."""
        loc = self.loc(path)
        return len(self.find(loc)[0]) == len(loc)

    @staticmethod
    def loc(path: str) -> tuple[str | int, ...]:
        return tuple(int(k) if k.isdigit() else k for k in path.split(".") if k)


def _child(node: yaml.Node | None, key: str | int) -> tuple[int, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        for k, v in node.value:
            if k.value == key:
                return k.start_mark.line + 1, v
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        item = node.value[key]
        return item.start_mark.line + 1, item
    return None


def _duplicates(node: yaml.Node | None, path: str = "") -> list[SpecProblem]:
    """PyYAML keeps the last of two equal keys silently; a spec with one is ambiguous."""
    found: list[SpecProblem] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            here = f"{path}.{k.value}" if path else str(k.value)
            if k.value in seen:
                found.append(SpecProblem(here, k.start_mark.line + 1, "given twice"))
            seen.add(k.value)
            found += _duplicates(v, here)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicates(item, f"{path}.{i}")
    return found


def parse_spec(text: str, file: str) -> tuple[RunSpec, _Lines]:
    """YAML text -> a validated RunSpec; SpecError naming each bad field and its line."""
    loader = yaml.SafeLoader(text)
    loader.name = file  # YAML errors say "in spec.yaml, line 3", not "in <unicode string>"
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise SpecError(file, [SpecProblem("", line, f"not valid YAML: {err}")]) from None
    finally:
        loader.dispose()
    lines = _Lines(node)
    if problems := _duplicates(node):
        raise SpecError(file, problems)
    if not isinstance(data, dict):
        raise SpecError(file, [SpecProblem("", 1, "a spec is a YAML mapping (key: value lines)")])
    try:
        return RunSpec.model_validate(data), lines
    except ValidationError as err:
        raise SpecError(file, _pydantic_problems(err, lines)) from None


def _pydantic_problems(err: ValidationError, lines: _Lines) -> list[SpecProblem]:
    """One problem per field: the branches of a union that failed are joined by 'or'."""
    grouped: dict[str, tuple[int | None, list[str]]] = {}
    for e in err.errors():
        loc = tuple(e["loc"])
        kept, line = lines.find(loc)
        if e["type"] == "missing" and loc:
            kept.append(loc[-1])
        path = ".".join(str(k) for k in kept)
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "string_pattern_mismatch" and loc == ("function",):
            message = 'should be "package.module:function" (a module, a colon, an attribute)'
        if e["type"] == "extra_forbidden":
            message = "unknown key (see `chunkgraph spec-schema` for the fields)"
        elif e["type"] != "missing" and "input" in e:
            message += f", got {_short(e['input'])}"
        messages = grouped.setdefault(path, (line, []))[1]
        if message not in messages:
            messages.append(message)
    # A union reports every branch: for crop_pads [4, "x"] both "not an int" at crop_pads and
    # "not an int" at crop_pads.1; the deeper finding is the useful one.
    return [
        SpecProblem(path, line, "; or ".join(msgs))
        for path, (line, msgs) in grouped.items()
        if not any(other.startswith(f"{path}.") for other in grouped if path)
    ]


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_spec(path: str | os.PathLike[str]) -> ResolvedSpec:
    """Read, validate and resolve a spec file; SpecError lists everything wrong in it."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(file, [SpecProblem("", None, f"cannot read the spec: {err}")]) from None
    except UnicodeDecodeError as err:
        problem = f"the spec is not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        raise SpecError(file, [SpecProblem("", None, problem)]) from None
    spec, lines = parse_spec(text, file)
    return resolve_spec(spec, Path(file).resolve().parent, file, lines)


def resolve_spec(spec: RunSpec, base: Path, file: str, lines: _Lines) -> ResolvedSpec:
    """Import the function, open the inputs, plan the output: every problem, then SpecError."""
    problems: list[SpecProblem] = []

    def problem(where: str, message: str) -> None:
        problems.append(SpecProblem(where, lines.line(where), message))

    fn = _import_function(spec, str(base), problem)
    inputs = _open_inputs(spec, base, problem)
    first = next(iter(inputs.values()), None)
    output = _plan_output(spec, base, first, inputs, problem)
    bbox = None
    if spec.bbox is not None:
        try:
            bbox = Box(tuple(spec.bbox.start), tuple(spec.bbox.stop))
        except ConfigError as err:
            problem("bbox", str(err))
    run = _run_options(spec, base, problem)
    if problems or fn is None or run is None:
        raise SpecError(file, problems)
    flow_options = {
        # apply binds them (and refuses one named as an input or `box`: see flow_error)
        "fn_kwargs": spec.kwargs or None,
        "chunk_sizes": (
            spec.chunk_sizes
            if spec.chunk_sizes == "auto"
            else [_tupled(c) for c in spec.chunk_sizes]
        ),
        "crop_pads": _pads(spec.crop_pads),
        "blend_pads": _pads(spec.blend_pads),
        "blend_modes": spec.blend_modes,
        "bbox": bbox,
        "auto_divisibility": spec.auto_divisibility,
        "expand_bbox": spec.expand_bbox,
        "max_reduction_chunk_size": _tupled(spec.max_reduction_chunk_size),
        "skip_intermediates": spec.skip_intermediates,
        "cast": spec.cast,
    }
    passed = inputs["input"] if spec.input is not None else inputs
    module_file = _module_beside(spec.function, base)
    return ResolvedSpec(spec, fn, passed, output, flow_options, run, file, lines, module_file)


def _run_options(spec: RunSpec, base: Path, problem: Problem) -> RunOptions | None:
    """The spec's run options as apply checks them (the command line may override the
    executor and the workers, and adds resume, progress and subscribers)."""
    try:
        return RunOptions.of(
            executor=spec.run.executor,
            workers=spec.run.workers,
            retries=spec.retries,
            timeout=spec.timeout,
            probe=spec.probe,
            lock_wait=spec.lock_wait,
            intermediates=None if spec.intermediates is None else place(base, spec.intermediates),
            device=spec.device,
            gpu_fallback=spec.gpu_fallback,
        )
    except ConfigError as err:
        field = err.field or ""  # executor.slurm.cores: run.executor.slurm.cores
        in_run = field.partition(".")[0] in RunDefaults.model_fields
        problem(f"run.{field}" if in_run else field, str(err))
        return None


def _module_beside(function: str, base: Path) -> str | None:
    """Where ``function``'s code lies when it is beside the spec, in ``base``: its module's
    .py file, or its top-level package's directory (imported already); None otherwise."""
    top = sys.modules.get(function.partition(":")[0].split(".")[0])
    file = getattr(top, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    if path.name == "__init__.py":  # a package: its directory must be the one in base
        return str(path.parent) if path.parent.parent == base.resolve() else None
    return str(path) if path.parent == base.resolve() and path.suffix == ".py" else None


def _tupled(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _pads(value: int | list[Sizes]) -> Any:
    """YAML's per-level list of (int | per-axis list) -> the flow's list of (int | tuple)."""
    return [_tupled(v) for v in value] if isinstance(value, list) else value


Problem = Callable[[str, str], None]


def _import_function(spec: RunSpec, base: str, problem: Problem) -> Callable[..., Any] | None:
    module_name, _, attribute = spec.function.partition(":")
    added = base not in sys.path
    if added:  # a module beside the spec; `chunkgraph run` keeps it there for the run
        sys.path.insert(0, base)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:  # reported: any failure of the user's module to import
        problem("function", f"cannot import module {module_name!r}: {type(err).__name__}: {err}")
        return None
    finally:
        if added:
            sys.path.remove(base)
    for part in attribute.split("."):
        if not hasattr(target, part):
            problem("function", f"{target.__name__!r} has no attribute {part!r} ({spec.function})")
            return None
        target = getattr(target, part)
    if not callable(target):
        problem(
            "function",
            f"{spec.function} is not callable (it is {_short(target)}, of type "
            f"{type(target).__name__}); name a function",
        )
        return None
    _check_kwargs(target, spec, problem)
    return target  # type: ignore[no-any-return]


def _check_kwargs(fn: Callable[..., Any], spec: RunSpec, problem: Problem) -> None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature (some builtins): the call will tell
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for name in spec.kwargs:
        if name not in params:
            problem(
                f"kwargs.{name}",
                f"{spec.function} has no parameter {name!r}; it takes ({', '.join(params)})",
            )


def _open_inputs(spec: RunSpec, base: Path, problem: Problem) -> dict[str, Any]:
    named = {"input": spec.input} if spec.input is not None else dict(spec.inputs or {})
    opened: dict[str, Any] = {}
    for name, path in named.items():
        where = "input" if spec.input is not None else f"inputs.{name}"
        if spec.inputs is not None and (not name.isidentifier() or name == "box"):
            problem(
                where,
                f"{name!r} cannot be a keyword argument of fn; use an identifier other than 'box'",
            )
        try:
            opened[name] = volume.open(
                relative_place(base, path),
                cache_bytes=spec.cache_bytes,
                storage_options=_options_for(relative_place(base, path), spec),
            )
        except (ConfigError, FileNotFoundError, StoreError) as err:
            problem(where, f"cannot open input volume: {err}")
    return opened


def _plan_output(
    spec: RunSpec, base: Path, first: Any, inputs: Mapping[str, Any], problem: Problem
) -> OutputPlan:
    """What to do with the output: use the volume there (checked against the spec), or
    create it from ``create_args`` (replacing the one there with ``exists: overwrite``).
    ``first``: the first input, whose shape, offset and resolution are the defaults."""
    out = spec.output
    path = place(base, out.path)
    plan = OutputPlan(path)
    options = _options_for(path, spec)
    usable, existing = _found_output(path, out, options, problem)
    if not usable:
        return plan
    if existing is not None:
        if _uses_existing(existing, out, first, inputs, path, problem):
            plan.existing = existing
            return plan
        plan.overwrite = True
    plan.create_args = _create_args(out, first, path, options, problem)
    return plan


def _found_output(
    path: str, out: OutputSpec, options: dict[str, Any] | None, problem: Problem
) -> tuple[bool, Any]:
    """(whether the output can go at ``path``, the volume there or None); a problem when
    it cannot: nothing is done there."""
    if is_url(path) and out.exists == "overwrite":
        # replacing sets the old volume aside by a rename, which a bucket has not
        problem(
            "output.exists",
            f"overwrite is for outputs on a disk; remove {path!r} first (chunkgraph's "
            "volume.remove) or set exists: use",
        )
        return False, None
    if not_a_volume := _not_a_volume(path):
        problem("output.path", not_a_volume)
        return False, None
    try:
        return True, volume.open(path, "r+", storage_options=options)
    except FileNotFoundError:
        return True, None
    except (ConfigError, StoreError) as err:
        # A place that cannot be reached (no such bucket, access refused, no answer, a
        # broken URL) says so itself; "does not open" is for what is there.
        about_place = isinstance(err, StoreError) or err.field in ("path", "storage_options")
        problem(
            "output.path",
            str(err) if about_place else f"something is at {path!r} but it does not open: {err}",
        )
        return False, None


def _uses_existing(
    existing: Any, out: OutputSpec, first: Any, inputs: Mapping[str, Any], path: str,
    problem: Problem,
) -> bool:  # fmt: skip
    """Whether the run writes into the output there as it is (a problem where it does not
    match the spec); False: it is replaced (``exists: overwrite``) or refused (``error``)."""
    if out.exists == "error":
        problem(
            "output.exists",
            f"{path!r} already exists; set exists: use" + ("" if is_url(path) else " or overwrite"),
        )
        return False
    if out.exists != "overwrite":
        _check_matches(existing, out, first, path, problem)
        return True
    if any(os.path.realpath(v.path) == os.path.realpath(path) for v in inputs.values()):
        problem("output.exists", f"overwrite would delete {path!r}, which is an input")
    return False


def _create_args(
    out: OutputSpec, first: Any, path: str, options: dict[str, Any] | None, problem: Problem
) -> dict[str, Any]:
    """``volume.create``'s arguments for the output: the spec's, else the first input's
    shape, offset and resolution; a problem for each one missing or not fitting."""
    for name in ("dtype", "chunks"):
        if getattr(out, name) is None:
            problem(f"output.{name}", f"needed to create the output {path!r}")
    if out.dtype is not None:
        try:
            np.dtype(out.dtype)
        except TypeError as err:
            problem("output.dtype", f"{out.dtype!r} is not a numpy dtype: {err}")
    args: dict[str, Any] = {"dtype": out.dtype, "chunks": out.chunks, "fill_value": out.fill_value}
    if options is not None:
        args["storage_options"] = options
    _shape_args(args, out, first)
    _offset_args(args, out, first, problem)
    _resolution_args(args, out, first, problem)
    if out.shape is None and out.resolution is not None and first is not None:
        _cover_the_input(args, first, out)
    if out.chunks is not None and "shape" in args and len(out.chunks) != len(args["shape"]):
        problem(
            "output.chunks",
            f"{out.chunks} has {len(out.chunks)} axes but the output shape "
            f"{list(args['shape'])} has {len(args['shape'])}",
        )
    return args


def _shape_args(args: dict[str, Any], out: OutputSpec, first: Any) -> None:
    """The output's shape and spatial axes: the spec's, else the first input's."""
    if out.shape is not None:
        args["shape"] = tuple(out.shape)
        if first is not None and len(out.shape) > first.spatial_ndim:
            args["spatial_ndim"] = first.spatial_ndim  # leading channel axes, as the input's
    elif first is not None:
        args.update(shape=first.shape, spatial_ndim=first.spatial_ndim)


def _offset_args(args: dict[str, Any], out: OutputSpec, first: Any, problem: Problem) -> None:
    """The output's offset: the spec's (one per spatial axis), else the first input's."""
    spatial_axes = args.get("spatial_ndim") or len(args.get("shape", ()))
    if out.offset is not None:
        args["offset"] = tuple(out.offset)
        if "shape" in args and len(out.offset) != spatial_axes:
            problem(
                "output.offset",
                f"{out.offset} has {len(out.offset)} values but the output has "
                f"{spatial_axes} spatial axes: give one per spatial axis",
            )
    elif first is not None and len(first.offset) == spatial_axes:
        # At 0 beside an input elsewhere, the output's bounds would miss the input.
        args["offset"] = tuple(first.offset)


def _resolution_args(args: dict[str, Any], out: OutputSpec, first: Any, problem: Problem) -> None:
    """The output's resolution: the spec's (one per spatial axis), else the first input's."""
    if out.resolution is not None:
        args["resolution"] = tuple(out.resolution)
        spatial = args.get("spatial_ndim") or len(args.get("shape", out.resolution))
        if len(out.resolution) != spatial:
            problem(
                "output.resolution",
                f"{out.resolution} has {len(out.resolution)} values but the output has "
                f"{spatial} spatial axes: give one per spatial axis",
            )
    elif first is not None and len(first.resolution) == (
        args.get("spatial_ndim") or len(args.get("shape", ()))
    ):
        # The flow's grid is the output's: at resolution 1 beside an input at (40, 4, 4)
        # the input would be 40x finer along z, never what a spec without one means.
        args["resolution"] = tuple(first.resolution)


def _options_for(path: str, spec: RunSpec) -> dict[str, Any] | None:
    """The spec's ``storage_options`` for a path on an object store; None for a local one."""
    return dict(spec.storage_options) if is_url(path) and spec.storage_options else None


def place(base: Path, path: str) -> str:
    """A spec's path as the run uses it: relative to the spec's folder, resolved; an
    object-store URL as given.

    >>> place(Path("/data"), "s3://bucket/out.zarr"), place(Path("/data"), "out.zarr")
    ('s3://bucket/out.zarr', '/data/out.zarr')
    """
    if is_url(path) or _looks_like_url(path):  # a broken URL: volume.open says why
        return path
    return str((base / path).resolve())


def _looks_like_url(path: str) -> bool:
    return broken_url(path, (*SCHEMES, "file")) is not None


def _not_a_volume(path: str) -> str | None:
    """Why ``path`` is something the output must not be made in (None: a volume or free)."""
    if is_url(path):
        return None  # a key prefix: volume.open says whether a volume is there
    where = Path(path)
    if where.exists() and not where.is_dir():
        return f"{path!r} is a file, not a volume directory; give a path for the output volume"
    if where.is_dir() and any(where.iterdir()) and not _holds_a_volume(path):
        return (
            f"{path!r} is a directory that holds files but no volume (no zarr.json, Zarr v2 "
            "or OME-Zarr metadata, precomputed info or N5 attributes.json); it is neither "
            "written into nor deleted (whatever `exists` says): give another path"
        )
    return None


def _holds_a_volume(path: str) -> bool:
    """Whether a bare path holds a volume of any format ``volume.open`` finds there (one
    that is there but does not open is reported by the output's own open)."""
    if (Path(path) / "zarr.json").exists():
        return True
    try:
        volume.open(path)
    except FileNotFoundError:
        return False
    except (ConfigError, StoreError):
        return True
    return True


def _cover_the_input(args: dict[str, Any], first: Any, out: OutputSpec) -> None:
    """An output at another resolution than the input, with no shape given, covers the
    input's physical extent (not the input's voxel count: 2x coarser at the same shape
    would be twice the input, half of it computed from fill values). Its offset, when
    not given, is the input's physical start, rounded down to output voxels."""
    if out.resolution is None or len(first.resolution) != len(out.resolution):
        return
    ratio = [
        Fraction(str(i)) / Fraction(str(o))
        for i, o in zip(first.resolution, out.resolution, strict=True)
    ]
    n = len(ratio)
    shape = list(args["shape"])
    start, stop = first.bounds.start, first.bounds.stop
    low = [math.floor(a * r) for a, r in zip(start, ratio, strict=True)]
    high = [math.ceil(b * r) for b, r in zip(stop, ratio, strict=True)]
    if out.offset is None:
        args["offset"] = tuple(low)
    offset = args.get("offset", tuple(low))
    shape[-n:] = [max(1, h - o) for h, o in zip(high, offset, strict=True)]
    args["shape"] = tuple(shape)


def _check_matches(existing: Any, out: OutputSpec, first: Any, path: str, problem: Problem) -> None:
    """Problems where the existing output is not the one the spec describes. Without
    ``exists:`` that includes the shape the spec would create it with (the first input's,
    when neither shape nor resolution is given); ``exists: use`` takes it as it is."""
    # A bucket has no rename to set the old volume aside: overwrite is for a disk there.
    instead = (
        f"remove it first (chunkgraph's volume.remove({path!r}))"
        if is_url(path)
        else "set exists: overwrite to replace it"
    )
    asked = {
        "shape": out.shape,
        "offset": out.offset,
        "chunks": out.chunks,
        "resolution": out.resolution,
    }
    for name, want in asked.items():
        if want is not None and tuple(want) != tuple(getattr(existing, name)):
            problem(
                f"output.{name}",
                f"the existing output has {name} {list(getattr(existing, name))}, not {want}; "
                f"{instead}",
            )
    default_shape = out.shape is None and out.resolution is None and first is not None
    if out.exists is None and default_shape and tuple(existing.shape) != tuple(first.shape):
        problem(
            "output.shape",
            f"the existing output has shape {list(existing.shape)}, not the input's "
            f"{list(first.shape)} that this spec would create it with; give output.shape "
            f"(and a bbox) to write into part of it, set exists: use to take it as it is, "
            f"or {instead}",
        )
    try:
        dtype = None if out.dtype is None else np.dtype(out.dtype)
    except TypeError as err:
        problem("output.dtype", f"{out.dtype!r} is not a numpy dtype: {err}")
        return
    if dtype is not None and dtype != existing.dtype:
        problem(
            "output.dtype",
            f"the existing output has dtype {existing.dtype}, not {out.dtype}; {instead}",
        )
