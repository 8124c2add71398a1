"""A flow's state root is one value (``flow.state.StateRoot``): a folder on this machine
or an object-store prefix with its options, made once from what was given and passed
whole. The state code takes that value and never asks a root's spelling what it is;
status, clean and resume behave alike over a folder and over a bucket (moto's S3 server).
"""

from __future__ import annotations

import ast
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import ConfigError, FlowLockedError, volume
from chunkgraph.flow.state import (
    TOP,
    FlowDir,
    FlowStatus,
    StateRoot,
    clean_flow,
    default_state_root,
    flows_for,
    removals,
    remove_roots_if_empty,
    state_store,
)
from chunkgraph.geometry import Box
from chunkgraph.testing import S3Server

FLOW = Path(__file__).resolve().parents[2] / "src" / "chunkgraph" / "flow"
SHAPE = (32, 32)
# Names under which flow/ keeps a place of flow state: a test of their type is a test of
# a spelling that StateRoot answers (``remote``, ``local``).
ROOT_NAMES = ("root", "flow_dir", "layers_at", "layers_dir", "marked", "here")
# isinstance(..., str) tests left in flow/ (alone or in a union): inputs checked where
# they enter (a blend mode, fn_kwargs' keys, an executor's kind) and JSON read back. 52
# while roots were `Path | str`, 27 since; a few new inputs fit under the ceiling.
MAX_STR_TESTS = 30


def test_a_root_is_made_once_from_what_was_given() -> None:
    remote = StateRoot.of(
        "s3://bucket/flows/", {"endpoint": "http://127.0.0.1:1", "secret_access_key": "k"}
    )
    assert remote == StateRoot.of("s3://bucket/flows") and hash(remote) == hash(
        StateRoot.of("s3://bucket/flows")
    )  # the options reach a place; they are not part of it
    assert (remote.remote, remote.local, remote.url, str(remote)) == (
        True, None, "s3://bucket/flows", "s3://bucket/flows",
    )  # fmt: skip
    flow = remote.join("f00d")
    assert (str(flow), flow.name, flow.parent, flow.options) == (
        "s3://bucket/flows/f00d", "f00d", remote, remote.options,
    )  # fmt: skip
    shipped = pickle.dumps(remote)
    assert b'"k"' not in shipped and b"'k'" not in shipped  # secrets stay here
    assert pickle.loads(shipped).options.public() == {"endpoint": "http://127.0.0.1:1"}

    local = StateRoot.of(Path("data") / ".out.zarr.chunkgraph")
    assert (local.remote, local.local, local.url) == (
        False, Path("data/.out.zarr.chunkgraph"), None,
    )  # fmt: skip
    assert str(local.join("f00d", "layers")) == "data/.out.zarr.chunkgraph/f00d/layers"
    assert local.same_place(StateRoot.of(Path.cwd() / "data/.out.zarr.chunkgraph"))
    assert not local.same_place(StateRoot.of("s3://data/.out.zarr.chunkgraph"))
    assert StateRoot.of(local) is local
    # beside dst in its bucket; a format prefix names how, not where
    assert default_state_root("precomputed://s3://b/img") == StateRoot.of("s3://b/.img.chunkgraph")


def test_a_command_line_root_with_a_slash_lost_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'s3:/b/x' starts with 's3:/'") as refused:
        StateRoot.given("s3:/b/x")
    assert refused.value.field == "intermediates"
    assert StateRoot.given("scratch/flows").local == Path("scratch/flows")


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def root_annotations(source: str, name: str) -> list[str]:
    """Each parameter or dataclass field named as a root (``ROOT_NAMES``) whose annotation
    is not ``StateRoot`` (optionally ``| None``)."""
    tree = ast.parse(source)
    found = []
    typed: list[tuple[str, ast.expr | None, int]] = []
    for fn in _functions(tree):
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        typed += [(a.arg, a.annotation, fn.lineno) for a in args]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            fields = [s for s in node.body if isinstance(s, ast.AnnAssign)]
            typed += [(f.target.id, f.annotation, f.lineno) for f in fields
                      if isinstance(f.target, ast.Name)]  # fmt: skip
    for arg, annotation, line in typed:
        if arg in ROOT_NAMES:
            text = ast.unparse(annotation) if annotation is not None else ""
            if text not in ("StateRoot", "StateRoot | None"):
                found.append(f"{name}:{line} {arg}: {text or '(none)'}")
    return found


def type_tests_of_roots(source: str, name: str) -> list[str]:
    """Each ``isinstance(X, ...)`` in ``source`` whose X is named as a root."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "isinstance" or not node.args:
            continue
        subject = node.args[0]
        named = subject.attr if isinstance(subject, ast.Attribute) else getattr(subject, "id", "")
        if named in ROOT_NAMES:
            found.append(f"{name}:{node.lineno} isinstance({ast.unparse(subject)}, ...)")
    return found


def str_tests(source: str) -> int:
    """How many ``isinstance(..., str)`` (alone or in a union or tuple) ``source`` has."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"):
            continue
        types = node.args[1] if len(node.args) == 2 else None
        if types is not None and "str" in {
            n.id for n in ast.walk(types) if isinstance(n, ast.Name)
        }:
            count += 1
    return count


def _sources() -> list[tuple[str, str]]:
    return [(p.read_text(), str(p.relative_to(FLOW))) for p in sorted(FLOW.rglob("*.py"))]


def test_the_flow_takes_roots_as_values() -> None:
    """Every root the flow passes is a ``StateRoot`` (parameters and fields), and no
    function tells a local root from a bucket by its type."""
    sources = _sources()
    untyped = [hit for text, name in sources for hit in root_annotations(text, name)]
    assert not untyped, "annotate these StateRoot:\n" + "\n".join(untyped)
    tested = [hit for text, name in sources for hit in type_tests_of_roots(text, name)]
    assert not tested, "ask the StateRoot (remote, local):\n" + "\n".join(tested)
    total = sum(str_tests(text) for text, _ in sources)
    assert total <= MAX_STR_TESTS, f"{total} isinstance(..., str) tests in flow/"


def test_the_rules_see_a_root_told_by_its_spelling() -> None:
    """The checks can fail: what flow/ held before roots were values is found."""
    before = (
        "def layers_place(root: Path | str, flow_id: str) -> Path | str:\n"
        "    if not isinstance(root, str):\n"
        "        return root / flow_id\n"
        "    return f'{root}/{flow_id}'\n"
        "class FlowDir:\n"
        "    root: Path | str\n"
        "    def remote(self) -> bool:\n"
        "        return isinstance(self.root, str)\n"
    )
    assert len(root_annotations(before, "x.py")) == 2
    assert len(type_tests_of_roots(before, "x.py")) == 2
    assert str_tests(before) == 2
    after = (
        "def f(root: StateRoot, layers_at: StateRoot | None = None) -> bool:\n"
        "    return root.remote\n"
    )
    assert root_annotations(after, "x.py") == type_tests_of_roots(after, "x.py") == []


# -- status, clean and resume over a folder and over a bucket ------------------------

# Whether failing_row_two fails: flipped between runs of one flow (its id hashes fn's
# code, not this value), as a transient failure would be.
FAILING = {"now": False}


def failing_row_two(x: np.ndarray, box: Box) -> np.ndarray:
    if FAILING["now"] and box.start[0] >= 16:
        raise RuntimeError("injected failure")
    return x + 1


def _run(src: volume.Volume, dst: volume.Volume, root: str, **kw: object) -> object:
    kw.update(executor="sync", retries=0, intermediates=root, probe=False)
    return volume.apply(failing_row_two, src, dst, chunk_sizes=[(8, 8)], **kw)  # type: ignore[arg-type]


@pytest.fixture(params=["folder", "bucket"])
def root_text(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "folder":
        return str(tmp_path / "flows")
    request.getfixturevalue("server")
    return f"s3://{request.getfixturevalue('bucket')}/flows"


def test_status_resume_and_clean_alike_in_a_folder_and_a_bucket(
    tmp_path: Path, root_text: str
) -> None:
    src = volume.create(str(tmp_path / "src.zarr"), SHAPE, (8, 8), "float32")
    src.write(src.bounds, np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE))
    dst = volume.create(str(tmp_path / "dst.zarr"), SHAPE, (8, 8), "float32")
    FAILING["now"] = True
    try:
        with pytest.raises(ExceptionGroup):
            _run(src, dst, root_text)
    finally:
        FAILING["now"] = False
    root = StateRoot.of(root_text)
    # found from dst alone (the note beside it) and from the root
    for dst_path, given in ((str(tmp_path / "dst.zarr"), None), (None, root)):
        (flow,) = flows_for(dst_path, given)
        assert (flow.status, flow.top_done, flow.root) == (FlowStatus.FAILED, 8, root)
        assert flow.flow_dir == root.join(flow.flow_id)

    # a run holds it: clean keeps it
    state = FlowDir(root, flow.flow_id)
    (stale,) = removals([flow], [], stale=True, older_than_hours=0.0, now=time.time())
    assert not stale.named and stale.what == "temporaries"
    with state.held(0.0), pytest.raises(FlowLockedError):
        clean_flow(stale, dst=None)
    assert state.exists()

    _run(src, dst, root_text, resume=True)
    np.testing.assert_array_equal(dst.read(dst.bounds), src.read(src.bounds) + 1)
    (flow,) = flows_for(None, root)
    assert flow.status is FlowStatus.FINISHED and not flow.has_temporaries

    (named,) = removals([flow], [flow.flow_id], stale=True, older_than_hours=0.0, now=0.0)
    assert named.named and named.what == "flow and its record"
    clean_flow(named, dst=str(tmp_path / "dst.zarr"))
    remove_roots_if_empty([root])
    assert flows_for(str(tmp_path / "dst.zarr"), root) == []
    assert not state_store(root).names()
    if root.local is not None:
        assert not root.local.exists()  # the emptied folder went too
    assert not list((tmp_path / ".dst.zarr.chunkgraph").glob("*.where"))  # nor its note


def test_a_root_in_a_bucket_carries_the_options_that_reach_it(
    server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No endpoint nor credentials in the environment: the root's own options say where
    the bucket is, for writing state, listing it, its lock and removing it."""
    from chunkgraph.testing import TEST_ENV

    for name in (*TEST_ENV, "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    reach = {
        "endpoint": server.endpoint,
        "region": TEST_ENV["AWS_REGION"],
        "access_key_id": TEST_ENV["AWS_ACCESS_KEY_ID"],
        "secret_access_key": TEST_ENV["AWS_SECRET_ACCESS_KEY"],
    }
    root = StateRoot.of(f"s3://{bucket}/elsewhere/.out.zarr.chunkgraph", reach)
    state = FlowDir(root, "f00d")
    with state.held(0.0):
        state.markers().mark_done(TOP, "0_0")
        state.write_info(top_tasks=4, reductions=0, deferred=False)
    (flow,) = flows_for(None, root)
    assert (flow.status, flow.top_done, flow.top_total) == (FlowStatus.INTERRUPTED, 1, 4)
    (removal,) = removals([flow], ["f00d"], stale=False, older_than_hours=0.0, now=0.0)
    clean_flow(removal, dst=None)
    assert flows_for(None, root) == []
    assert not server.keys(bucket, "elsewhere/")


def test_a_damaged_layer_in_a_bucket_names_its_flow_by_url(server: S3Server, bucket: str) -> None:
    """The message of a layer chunk that does not decode names the flow's root as a URL
    (a path would fold ``s3://`` into ``s3:/``) and reads the flow's ``flow.json`` there."""
    from chunkgraph import CorruptChunkError
    from chunkgraph.flow.run._reduce import damaged_layer_error

    root = StateRoot.of(f"s3://{bucket}/flows")
    FlowDir(root, "f00d").write_info(top_tasks=4, reductions=0, deferred=True, deferred_geometry={})
    layer = f"s3://{bucket}/flows/f00d/layers/layer_0.zarr"
    said = damaged_layer_error(CorruptChunkError("bad", volume=layer, files=("c/0/0",)), layer)
    assert f"flow f00d under s3://{bucket}/flows:" in str(said)
    assert f"`chunkgraph clean --intermediates s3://{bucket}/flows f00d`" in str(said)
    assert "its deferred layers" in str(said)  # flow.json read from the bucket
