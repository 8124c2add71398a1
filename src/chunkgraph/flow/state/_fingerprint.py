"""The flow id: which earlier run's state a rerun may reuse.

The id names the flow's directory: a hash of ``fn`` (module, qualified
name, bytecode and constants, the values it closes over and its defaults, a
callable object's or bound method's state, and the source file of the module
its code lives in), of every input's and the destination's resolved path,
shape, chunks, dtype code, offset and resolution, and of every field of the
validated ``FlowSpec`` in a canonical text (the inputs' scales included).
Changing any of them starts a new flow instead of resuming an incompatible
one; nothing in it depends on how an object prints.

Module source. ``fn`` reads module-level names (``SCALE = 2``) that neither its
code nor its closure holds, and people edit ``ops.py`` between a crash and a
resume. So the text of the file that defines ``fn``'s globals is hashed: the
module of a function's ``__globals__`` (a partial's function, a callable
object's ``__call__``, a bound method's function), or of a class called as
``fn``; a script run as ``__main__`` is its file. Only ``.py`` files count:
code with no source file (a notebook cell, ``exec``, built-ins and numpy
ufuncs, extension modules) falls back to what the rest of the fingerprint
sees. Editing any line of that file (a comment included) starts the flow over,
which wastes work but never mixes results; modules ``fn`` imports from are
not covered and remain the caller's to keep fixed.

``flow_id_parts`` digests the same texts part by part (the function, its
bound keyword arguments, the inputs, the destination, the spec): a flow
records them in its state, so that a resume that finds another flow's state
for its destination can say which part changed (``_status.resume_mismatch``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sys
import types
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from chunkgraph.geometry import Box
from chunkgraph.volume import Volume

_FINGERPRINT_DEPTH = 4


def flow_id_of(
    fn: Callable[..., Any], inputs: Mapping[str, Volume], dst: Volume | None, spec: object
) -> str:
    """A stable 16-hex-digit id of one flow (same arguments, same id, across processes).

    >>> from chunkgraph import volume
    >>> dst = volume.create("out", (4,), (2,), "u1", backend="memory")
    >>> a = flow_id_of(len, {}, dst, "spec")
    >>> len(a), a == flow_id_of(len, {}, dst, "spec"), a == flow_id_of(abs, {}, dst, "spec")
    (16, True, False)
    >>> volume.remove("out")
    """
    parts = [_fn_fingerprint(fn, 0)]
    for name in sorted(inputs):
        parts.append(f"input {name}: {_volume_fingerprint(inputs[name])}")
    parts.append(f"dst: {_volume_fingerprint(dst) if dst is not None else None}")
    parts.append(f"spec: {_canonical(spec)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# What flow_id_parts names, in the words a message about a changed part uses.
PART_NAMES = {
    "function": "the function (its code, defaults, the values it closes over or the source "
    "of its module)",
    "fn_kwargs": "the function's keyword arguments (fn_kwargs)",
    "inputs": "the inputs",
    "dst": "the destination's layout",
    "spec": "the flow's sizes, pads, blend modes or bbox",
}


def flow_id_parts(
    fn: Callable[..., Any], inputs: Mapping[str, Volume], dst: Volume | None, spec: object
) -> dict[str, str]:
    """A 12-hex-digit digest of each part ``flow_id_of`` hashes, keyed as ``PART_NAMES``.

    ``fn_kwargs`` are a partial's bound arguments (``apply`` binds them so), the
    function is what they are bound to.

    >>> from chunkgraph import volume
    >>> dst = volume.create("out", (4,), (2,), "u1", backend="memory")
    >>> a = flow_id_parts(functools.partial(round, ndigits=1), {}, dst, "spec")
    >>> b = flow_id_parts(functools.partial(round, ndigits=2), {}, dst, "spec")
    >>> sorted(k for k in a if a[k] != b[k])
    ['fn_kwargs']
    >>> volume.remove("out")
    """
    if isinstance(fn, functools.partial):
        function = _fn_fingerprint(fn.func, 0)
        bound = f"{_value_repr(fn.args, 0)}, {_value_repr(sorted(fn.keywords.items()), 0)}"
    else:
        function, bound = _fn_fingerprint(fn, 0), ""
    texts = {
        "function": function,
        "fn_kwargs": bound,
        "inputs": "\n".join(
            f"input {name}: {_volume_fingerprint(inputs[name])}" for name in sorted(inputs)
        ),
        "dst": _volume_fingerprint(dst) if dst is not None else "None",
        "spec": _canonical(spec),
    }
    return {k: hashlib.sha256(v.encode()).hexdigest()[:12] for k, v in texts.items()}


def _volume_fingerprint(vol: Volume) -> str:
    """What a volume's data means: where it is stored and how it is laid out.

    Never how the volume object prints: a reopened volume may spell the same
    dtype differently (``float32`` / ``<f4``) and must keep the flow's id.
    """
    # Both on-disk backends read the same files: the place, not the backend, is the data.
    where = vol.location.identity()
    return (
        f"{where} shape={tuple(map(int, vol.shape))} chunks={tuple(map(int, vol.chunks))} "
        f"dtype={np.dtype(vol.dtype).str} offset={tuple(map(int, vol.offset))} "
        f"resolution={tuple(map(repr, vol.resolution))}"
    )


def _canonical(value: object) -> str:
    """A text for a spec value that depends only on its meaning (dtypes by their code).

    >>> _canonical(np.dtype("float32")) == _canonical(np.dtype("<f4"))
    True
    """
    if isinstance(value, np.dtype):
        return np.dtype(value).str
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # A field marked {"id": "when set"} is named only when not at its default: the
        # flows that never set it keep the ids they had before it was added.
        fields = ",".join(
            f"{f.name}={_canonical(getattr(value, f.name))}"
            for f in dataclasses.fields(value)
            if f.metadata.get("id") != "when set" or getattr(value, f.name) != f.default
        )
        return f"{type(value).__name__}({fields})"
    if isinstance(value, tuple | list):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, np.integer | np.bool_):
        return repr(value.item())
    if isinstance(value, Fraction):  # an input's scale (_resolution)
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, bool | int | str | float) or value is None:
        return repr(value)
    if isinstance(value, Box):
        return f"Box({_canonical(value.start)},{_canonical(value.stop)})"
    raise AssertionError(f"no canonical form for {type(value).__name__} in a flow spec")


def _fn_fingerprint(fn: object, depth: int) -> str:
    if depth > _FINGERPRINT_DEPTH:
        return type(fn).__qualname__
    if isinstance(fn, functools.partial):
        return (
            f"partial({_fn_fingerprint(fn.func, depth + 1)}, {_value_repr(fn.args, depth)}, "
            f"{_value_repr(sorted(fn.keywords.items()), depth)})"
        )
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    # A plain function carries its own code; a callable object's behaviour is its __call__.
    target = fn if hasattr(fn, "__code__") else type(fn).__dict__.get("__call__")
    parts = [f"{module}.{name or type(fn).__qualname__}"]
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType):
        parts.append(_code_digest(code))
    source = _module_source_digest(fn, target)
    if source:
        parts.append(source)
    for cell in getattr(target, "__closure__", None) or ():
        try:
            parts.append(_value_repr(cell.cell_contents, depth))
        except ValueError:  # an empty cell (a name bound later)
            parts.append("<empty>")
    parts.append(_value_repr(getattr(target, "__defaults__", None), depth))
    # The same code with other state is another computation (a model's weights, a
    # scale): a bound method's object and a callable object carry their state.
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        parts.append("self=" + _state_repr(owner, depth + 1))
    if not hasattr(fn, "__code__") and not isinstance(fn, types.BuiltinFunctionType):
        parts.append("state=" + _state_repr(fn, depth + 1))
    return "|".join(parts)


def _module_source_digest(fn: object, target: object) -> str:
    """``module-source=<digest>`` of the ``.py`` file defining ``fn``'s globals; empty
    when there is none (see the module docstring)."""
    namespace = getattr(target, "__globals__", None)
    if namespace is None and isinstance(fn, type):  # a class called as fn: its module
        namespace = getattr(sys.modules.get(fn.__module__), "__dict__", None)
    elif namespace is None:  # a callable object whose __call__ a base class defines
        inherited = next((k.__dict__["__call__"] for k in type(fn).__mro__ if "__call__" in
                          k.__dict__), None)  # fmt: skip
        namespace = getattr(inherited, "__globals__", None)  # None for ufuncs, builtins
    path = namespace.get("__file__") if isinstance(namespace, dict) else None
    if not isinstance(path, str) or not path.endswith(".py"):
        return ""
    try:
        # Read each time, never cached by mtime: an edit within the clock's granularity
        # would keep the old digest.
        with open(path, "rb") as file:
            return f"module-source={hashlib.sha256(file.read()).hexdigest()[:16]}"
    except OSError:  # deleted or unreadable since it was imported: nothing to compare
        return ""


def _state_repr(obj: object, depth: int) -> str:
    """An object's type and attributes (``__dict__``), recursively to a bounded depth."""
    state = getattr(obj, "__dict__", None)
    if depth > _FINGERPRINT_DEPTH or not isinstance(state, dict):
        return type(obj).__qualname__
    items = ",".join(f"{k}={_value_repr(v, depth)}" for k, v in sorted(state.items()))
    return f"{type(obj).__qualname__}{{{items}}}"


def _code_digest(code: types.CodeType) -> str:
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_digest(const).encode())
        else:
            h.update(_value_repr(const, 0).encode())
    return h.hexdigest()[:16]


def _value_repr(value: object, depth: int) -> str:
    """A process-independent text for ``value`` (no memory addresses)."""
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        return repr(value)
    if isinstance(value, tuple | list | frozenset | set):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return "(" + ",".join(_value_repr(v, depth) for v in items) + ")"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}{value.dtype.str}:{hashlib.sha256(value.tobytes()).hexdigest()}"
    if isinstance(value, np.generic):
        return repr(value.item())
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{k!r}:{_value_repr(v, depth)}"
                for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))
            )
            + "}"
        )
    if isinstance(value, types.ModuleType):
        # A module fn closes over (``import scipy.ndimage as ndi`` in an outer function)
        # is code, named by its name; its state is not fn's (and walking it never ends well).
        return f"module {value.__name__}"
    if callable(value):
        return _fn_fingerprint(value, depth + 1)
    return _state_repr(value, depth + 1)
