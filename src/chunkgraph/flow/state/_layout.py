"""The names of a flow's state: where it lives and what each of its parts is called.

Policy. The layout is spelled here and nowhere else; every other state module
names a part through these constants and functions::

    <root>/                       intermediates (default: .<dst name>.chunkgraph beside dst;
                                  a precomputed scale's: .<volume>.chunkgraph/<scale>)
      <flow id>.lock              held while a run holds the flow (_lock)
      <flow id>.done              completion record (_markers.CompletionRecord)
      <flow id>/flow.json         totals, dst stamp, fingerprint (_info)
      <flow id>/failed.json       the error the last run failed with, if it failed (_info)
      <flow id>/markers/<kind>/   done markers (_markers.MarkerStore)
      <flow id>/markers/<kind>.records/   records of many done markers each, one per
                                  batch of tasks (MarkerStore.mark_done_many)
      <flow id>/layers/           the checkerboard's temporary layers (run's _checkerboard)
    <dst>/.chunkgraph-in-place.json   an in-place flow is rewriting dst (_info)
    <default root>/<flow id>.where    where a flow of dst keeps state elsewhere (_where)

The root (a ``StateRoot``, ``_root``) may be a folder or an object-store prefix
(``s3://bucket/.out.zarr.chunkgraph`` beside a dst in a bucket, or
``intermediates="s3://..."``): the same names, as keys (``_store``). The layers of
state in an object store go to local scratch (``scratch_layers``). Nothing here
writes: these are names, and the commands that name a root for a person
(``status_command``, ``clean_command``); the one read is a volume's ``info``, which
tells a precomputed scale's folder (its state goes beside the volume, so that a
finished flow leaves nothing inside it).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from chunkgraph._errors import ConfigError
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.volume import Volume, is_object_url, split_format, split_url

LOCK_SUFFIX = ".lock"
DONE_SUFFIX = ".done"
INFO_NAME = "flow.json"
# The first line of the error a run failed with (fn raised): status says "failed", not
# "interrupted" (a run killed writes nothing). Removed as the next run starts.
FAILED_NAME = "failed.json"
LAYERS_NAME = "layers"
MARKERS_NAME = "markers"
# markers/<kind><RECORDS_SUFFIX>/<record>: beside the plain markers of a kind, never among
# them, so that listing the plain markers never lists a record.
RECORDS_SUFFIX = ".records"
# Beside dst, in its default root: <flow id>.where names the root of state kept elsewhere.
WHERE_SUFFIX = ".where"
# Inside an on-disk dst that an in-place flow is rewriting: where that flow keeps its
# state. A run with other intermediates finds the interrupted flow through it.
IN_PLACE_MARK = ".chunkgraph-in-place.json"
# The folder of the temp dir under which flows with state in an object store keep their
# layers on this machine (scratch_layers); emptied folders go again (FlowDir.tidy_scratch).
SCRATCH_NAME = "chunkgraph-layers"
# The default root beside a file-backed dst: .<dst name>.chunkgraph
ROOT_PREFIX, ROOT_SUFFIX = ".", ".chunkgraph"
# What a flow's folder holds: one of these marks a folder as a flow's, not a user's.
FLOW_PARTS = frozenset({INFO_NAME, MARKERS_NAME, LAYERS_NAME})


def is_flow_id(name: str) -> bool:
    """Whether ``name`` is spelled as a flow id (hex digits, as ``flow_id_of`` makes): a
    volume or a folder of the user's under an intermediates directory is none.

    >>> is_flow_id("3f9a0c1d2b4e5f60"), is_flow_id("raw.zarr"), is_flow_id("my_notes")
    (True, False, False)
    """
    return 0 < len(name) <= 64 and all(c in "0123456789abcdef" for c in name)


def default_root(dst_dir: str | os.PathLike[str]) -> Path:
    """Where a flow into the on-disk ``dst_dir`` keeps its state by default: beside it, or
    for a precomputed scale's folder (beside the volume's ``info``), beside the volume, in
    a subfolder named by the scale, so that no state is left inside the volume.

    >>> default_root("data/smooth.zarr/")
    PosixPath('data/.smooth.zarr.chunkgraph')
    """
    where = Path(dst_dir)
    if _is_precomputed_scale(where):
        return default_root(where.parent) / where.name
    return where.parent / f"{ROOT_PREFIX}{where.name}{ROOT_SUFFIX}"


def _is_precomputed_scale(where: Path) -> bool:
    """Whether ``where`` is a scale's folder that its volume's ``info`` lists."""
    return where.name in precomputed_scale_keys(where.parent)


def precomputed_scale_keys(volume_dir: Path) -> list[str]:
    """The scale keys the precomputed ``info`` in ``volume_dir`` lists; [] for no volume."""
    try:
        info = json.loads((volume_dir / "info").read_text())
        return [str(scale["key"]) for scale in info.get("scales", ())]
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return []


def dst_of_default_root(folder: Path) -> Path | None:
    """The dst whose default root is the local ``folder``, or None when it is not one.

    >>> dst_of_default_root(Path("data/.smooth.zarr.chunkgraph"))
    PosixPath('data/smooth.zarr')
    """
    volume = dst_of_default_root(folder.parent) if folder.parent != folder else None
    if volume is not None and _is_precomputed_scale(volume / folder.name):
        return volume / folder.name
    name = folder.name
    if (
        name.startswith(ROOT_PREFIX)
        and name.endswith(ROOT_SUFFIX)
        and len(name) > len(ROOT_PREFIX) + len(ROOT_SUFFIX)
    ):
        return folder.parent / name[len(ROOT_PREFIX) : -len(ROOT_SUFFIX)]
    return None


def default_state_root(dst_path: str | os.PathLike[str]) -> StateRoot:
    """``default_root`` of a dst on a disk or in an object store (a URL beside it).

    A format prefix names how the volume is stored, not where: the root goes beside
    the place it names (``precomputed://s3://b/img`` keeps its state in ``s3://b/``).

    >>> str(default_state_root("s3://bucket/data/smooth.zarr/"))
    's3://bucket/data/.smooth.zarr.chunkgraph'
    >>> str(default_state_root("precomputed://s3://bucket/img"))
    's3://bucket/.img.chunkgraph'
    >>> default_state_root("zarr2://file:///data/a.zarr").local
    PosixPath('/data/.a.zarr.chunkgraph')
    """
    text = split_format(os.fspath(dst_path))[1]
    if is_object_url(text):
        scheme, bucket, prefix = split_url(text)
        if not prefix:
            raise ConfigError(
                f"{text!r} is a bucket's root, and a flow keeps its state beside its dst "
                f"by default: put the volume under a prefix ({scheme}://{bucket}/NAME.zarr), "
                "or give intermediates= a URL elsewhere",
                field="intermediates",
            )
        dst = StateRoot.of(text)
        return dst.parent.join(f"{ROOT_PREFIX}{dst.name}{ROOT_SUFFIX}")
    return StateRoot.of(default_root(text))


def dst_of_state_root(root: StateRoot) -> str | None:
    """``dst_of_default_root`` for a root on a disk or in an object store: the dst as a
    person names it (a path or a URL).

    >>> dst_of_state_root(StateRoot.of("s3://bucket/data/.smooth.zarr.chunkgraph"))
    's3://bucket/data/smooth.zarr'
    """
    local = root.local
    if local is not None:
        found = dst_of_default_root(local)
        return None if found is None else str(found)
    found = dst_of_default_root(Path(root.name))
    return None if found is None else str(root.parent.join(str(found)))


def scratch_layers(root: StateRoot, flow_id: str) -> Path:
    """Where the layers of a flow whose state is in the object store ``root`` live while
    one machine runs it: local scratch, named by a digest of ``root`` so that a resume on
    this machine finds them (``flow.json`` records it; a resume elsewhere finds none).

    >>> scratch_layers(StateRoot.of("s3://b/.x.chunkgraph"), "f00d").parts[-2:]
    ('f00d', 'layers')
    """
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    # <flow id>/layers, as under a root on a disk: a damaged layer's path names its flow
    return Path(tempfile.gettempdir()) / SCRATCH_NAME / digest / flow_id / LAYERS_NAME


def layers_place(root: StateRoot, flow_id: str, *, given: bool, remote_workers: bool) -> StateRoot:
    """Where a flow's top-level layers go (the lower levels stay in memory).

    In the flow's folder when that is on a disk (as ever: workers that share no disk
    are refused there, ``ChecksPaths``). State in an object store: beside it in the
    store when ``intermediates`` named it (``given``) or the workers share no disk
    with this process (``remote_workers``: a Dask cluster); otherwise on this
    machine's scratch (``scratch_layers``), where writes cost no requests.

    >>> root = StateRoot.of("s3://b/.x.chunkgraph")
    >>> str(layers_place(root, "f00d", given=True, remote_workers=False))
    's3://b/.x.chunkgraph/f00d/layers'
    """
    if root.remote and not (given or remote_workers):
        return StateRoot.of(scratch_layers(root, flow_id))
    return root.join(flow_id, LAYERS_NAME)


def state_root(intermediates: str | os.PathLike[str] | None, dst: Volume) -> StateRoot:
    """Where a flow keeps its state: ``intermediates`` as given (a folder or an
    object-store URL), else beside dst (on its disk, or in its object store), else the temp
    dir; in an object store, reached as dst is (its storage_options: an endpoint, say).
    Deterministic, so that a resumed run finds the previous one's.

    ConfigError (``field="intermediates"``) when a file stands where a folder must be.
    """
    root = _given_or_default(intermediates, dst)
    return root.reached_with(dst.storage_options) if root.remote else root


def _given_or_default(intermediates: str | os.PathLike[str] | None, dst: Volume) -> StateRoot:
    if intermediates is not None:
        root = StateRoot.of(intermediates)
        if root.local is not None:
            _check_not_a_file(root.local)
        return root
    where = dst.location.local_dir
    if where is not None:
        return StateRoot.of(default_root(where))
    if is_object_url(dst.path):
        return default_state_root(dst.path)
    return StateRoot.of(Path(tempfile.gettempdir()) / "chunkgraph-intermediates")


def _check_not_a_file(intermediates: Path) -> None:
    """ConfigError when a file stands at ``intermediates`` or above it."""
    # The nearest existing path decides: a file there (the path itself or a parent)
    # would fail only at mkdir, as a bare NotADirectoryError.
    existing = next((p for p in (intermediates, *intermediates.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        what = "is a file" if existing == intermediates else f"is under {str(existing)!r}, a file"
        raise ConfigError(
            f"intermediates={str(intermediates)!r} {what}; give a directory (created if "
            "missing) where the flow may keep its temporary layers and markers, or None for "
            "the default beside dst",
            field="intermediates",
        )


def clean_command(root: StateRoot, flow_id: str | None = None) -> str:
    """The command that removes the stale flows under ``root`` (or one flow, by id).

    >>> clean_command(StateRoot.of("data/.smooth.zarr.chunkgraph"))
    'chunkgraph clean data/smooth.zarr --stale'
    >>> clean_command(StateRoot.of("data/.smooth.zarr.chunkgraph"), "f00d")
    'chunkgraph clean data/smooth.zarr f00d'
    >>> clean_command(StateRoot.of("/scratch/tmp"), "f00d")
    'chunkgraph clean --intermediates /scratch/tmp f00d'
    >>> clean_command(StateRoot.of("/scratch/tmp"))
    'chunkgraph clean --intermediates /scratch/tmp --stale'
    """
    dst = dst_of_state_root(root)
    if dst is None:
        return f"chunkgraph clean --intermediates {root} {flow_id or '--stale'}"
    return f"chunkgraph clean {dst} {flow_id}" if flow_id else f"chunkgraph clean {dst} --stale"


def status_command(root: StateRoot) -> str:
    """The command that lists the flows under ``root``.

    >>> roots = StateRoot.of("data/.smooth.zarr.chunkgraph"), StateRoot.of("/tmp/x")
    >>> status_command(roots[0]), status_command(roots[1])
    ('chunkgraph status data/smooth.zarr', 'chunkgraph status --intermediates /tmp/x')
    """
    dst = dst_of_state_root(root)
    return f"chunkgraph status {dst}" if dst else f"chunkgraph status --intermediates {root}"
