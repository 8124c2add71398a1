"""Done markers of one apply flow: what a rerun with ``resume=True`` may skip.

Policy. Every top-level task and every reduction writes its data first and
only then an empty marker file named after its grid key. A marker therefore
proves that the data it stands for is complete on disk; a process killed at
any point (SIGKILL included) leaves at worst a task whose data is partly
written and whose marker is missing, and that task simply runs again and
overwrites the same voxels with the same values.

State (all under ``<intermediates>/<flow_id>/``)::

    markers/top/<key>       top-level task ``key`` wrote its temporary output
    markers/reduce/<key>    reduction ``key`` wrote its dst chunks

and, beside that directory, ``<flow_id>.lock`` while a run holds the flow
(``_flow_lock``) and ``<flow_id>.done`` once a run has finished it
(``CompletionRecord``; the markers and temporaries are gone by then).

A marker is created by writing a uniquely named temporary file and renaming
it into place (``os.replace`` is atomic on POSIX), so a reader sees either no
marker or a complete one. Keys are grid indices joined by ``_``
(``"3_0_12"``), which keeps a directory listing the only query needed: the
driver lists each directory once instead of probing one path per task.

Identity. The flow id names the directory: a hash of ``fn`` (module,
qualified name, bytecode and constants, closure and default values of simple
types), of every input's and the destination's path and metadata, and of
every field of the validated ``FlowSpec``. Changing any of them starts a new
flow instead of resuming an incompatible one. (What the hash cannot see, such
as a global variable ``fn`` reads, is the caller's to keep fixed.)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time
import types
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from chunkgraph.volume import Volume
    from chunkgraph.volume._flow_spec import FlowSpec

TOP = "top"
REDUCE = "reduce"
_KINDS = (TOP, REDUCE)


def grid_key(index: tuple[int, ...]) -> str:
    """The marker name of a grid index.

    >>> grid_key((3, 0, 12))
    '3_0_12'
    """
    return "_".join(str(int(i)) for i in index)


class MarkerStore:
    """Done markers under ``root`` (the flow's directory); safe from many threads.

    >>> import tempfile
    >>> store = MarkerStore(Path(tempfile.mkdtemp()))
    >>> store.mark_done(TOP, "0_1")
    >>> store.done_keys(TOP), store.done_keys(REDUCE)
    ({'0_1'}, set())
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        for kind in _KINDS:
            (self.root / "markers" / kind).mkdir(parents=True, exist_ok=True)

    def _dir(self, kind: str) -> Path:
        if kind not in _KINDS:
            raise ValueError(f"unknown marker kind {kind!r}; valid kinds are {_KINDS}")
        return self.root / "markers" / kind

    def mark_done(self, kind: str, key: str) -> None:
        """Record that ``key`` finished; call only after its data is written."""
        folder = self._dir(kind)
        tmp = folder / f".{key}.{uuid.uuid4().hex}.tmp"
        tmp.write_bytes(b"")
        os.replace(tmp, folder / key)

    def done_keys(self, kind: str) -> set[str]:
        """Keys of ``kind`` marked done (temporary files of interrupted marks ignored)."""
        folder = self._dir(kind)
        return {name for name in os.listdir(folder) if not name.startswith(".")}

    def clear(self) -> None:
        """Forget every marker (a fresh, non-resumed run)."""
        for kind in _KINDS:
            folder = self._dir(kind)
            shutil.rmtree(folder)
            folder.mkdir(parents=True)


class CompletionRecord:
    """``<intermediates>/<flow id>.done``: the flow finished; a resumed run has nothing to do.

    A successful run deletes its temporaries and markers, so without this
    small record ``resume=True`` after success would redo everything. It is
    removed when a run of the flow starts (until that run completes, the flow
    is not finished) and written, atomically, once it has.
    """

    def __init__(self, root: Path, flow_id: str) -> None:
        self.path = Path(root) / f"{flow_id}.done"

    def read(self) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return record

    def write(self, report: Any) -> None:
        record = {
            "flow_id": report.flow_id,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "bbox": [list(report.bbox.start), list(report.bbox.stop)],
            "tasks_per_level": list(report.tasks_per_level),
            "reductions": report.reductions + report.reductions_skipped,
            "bytes_written": report.bytes_written,
        }
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def discard_flow_dir(flow_dir: Path) -> None:
    """Delete a flow's directory so that no interruption leaves part of it looking valid.

    Deleting file by file in directory order may remove the layers before the
    markers that vouch for them; a kill in between would leave markers of work
    whose data is gone. So the directory is first renamed away (atomic), and
    the renamed copy, which nothing reads, is deleted; copies that an earlier
    interrupted deletion left behind are deleted too.
    """
    flow_dir = Path(flow_dir)
    if flow_dir.exists():
        tomb = flow_dir.with_name(f".{flow_dir.name}.deleted-{uuid.uuid4().hex[:8]}")
        os.replace(flow_dir, tomb)
    for tomb in flow_dir.parent.glob(f".{flow_dir.name}.deleted-*"):
        shutil.rmtree(tomb, ignore_errors=True)


# How deep flow_id_of follows callables nested in closures, defaults and partials:
# deep enough for decorators and partials of partials, bounded against cycles.
_FINGERPRINT_DEPTH = 4


def flow_id_of(
    fn: Callable[..., Any], inputs: Mapping[str, Volume], dst: Volume, spec: FlowSpec
) -> str:
    """A stable 16-hex-digit id of one flow (same arguments, same id, across processes).

    >>> from types import SimpleNamespace
    >>> dst = SimpleNamespace(backend="memory", path="out", shape=(4,), chunks=(2,), dtype="u1",
    ...                       offset=(0,))
    >>> a = flow_id_of(len, {}, dst, "spec")
    >>> len(a), a == flow_id_of(len, {}, dst, "spec"), a == flow_id_of(abs, {}, dst, "spec")
    (16, True, False)
    """
    parts = [_fn_fingerprint(fn, 0)]
    for name in sorted(inputs):
        parts.append(f"input {name}: {_volume_fingerprint(inputs[name])}")
    parts.append(f"dst: {_volume_fingerprint(dst)}")
    parts.append(f"spec: {_canonical(spec)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _volume_fingerprint(vol: Volume) -> str:
    """What a volume's data means: where it is stored and how it is laid out.

    Never how the volume object prints: a reopened volume may spell the same
    dtype differently (``float32`` / ``<f4``) and must keep the flow's id.
    """
    if vol.backend == "memory":
        # A memory volume lives only in its process: same-named ones elsewhere are other data.
        where = f"memory:{vol.path} pid={os.getpid()}"
    else:
        # Both on-disk backends read the same files: the place is the resolved path.
        path = vol.path
        where = f"disk:{path if '://' in path else os.path.realpath(path)}"
    return (
        f"{where} shape={tuple(map(int, vol.shape))} chunks={tuple(map(int, vol.chunks))} "
        f"dtype={np.dtype(vol.dtype).str} offset={tuple(map(int, vol.offset))}"
    )


def _canonical(value: object) -> str:
    """A text for a spec value that depends only on its meaning (dtypes by their code).

    >>> _canonical(np.dtype("float32")) == _canonical(np.dtype("<f4"))
    True
    """
    if isinstance(value, np.dtype):
        return np.dtype(value).str
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(
            f"{f.name}={_canonical(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"{type(value).__name__}({fields})"
    if isinstance(value, tuple | list):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, np.integer | np.bool_):
        return repr(value.item())
    if isinstance(value, bool | int | str | float) or value is None:
        return repr(value)
    from chunkgraph.geometry import Box

    if isinstance(value, Box):
        return f"Box({_canonical(value.start)},{_canonical(value.stop)})"
    raise TypeError(f"no canonical form for {type(value).__name__} in a flow spec")


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
    if callable(value):
        return _fn_fingerprint(value, depth + 1)
    return _state_repr(value, depth + 1)
