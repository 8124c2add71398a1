"""Done markers cost one ``open`` on a disk: no temporary file, no rename.

A top-level task's marker is its last write; a rename per marker (the path the
flow's other state takes) costs up to milliseconds on a busy disk, once per
task. A marker holds no bytes, so it is whole as soon as it exists.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from chunkgraph.flow.state import _store
from chunkgraph.flow.state._markers import REDUCE, TOP, MarkerStore
from chunkgraph.flow.state._root import StateRoot
from chunkgraph.flow.state._store import StateStore, state_store


@pytest.fixture(params=["dir", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "dir":
        return state_store(StateRoot.of(tmp_path / "root"))
    bucket = request.getfixturevalue("bucket")
    return state_store(StateRoot.of(f"s3://{bucket}/root"))


def test_touch_makes_an_empty_entry_in_either_store(store: StateStore) -> None:
    store.touch("f/markers/top/0_1")  # its folders made on the way
    store.touch("f/markers/top/0_1")  # again: still there, still empty
    assert store.names("f/markers/top") == ["0_1"]
    assert store.read("f/markers/top/0_1") == b""


def test_a_marker_on_a_disk_is_one_open_without_a_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames: list[Any] = []
    real_replace = os.replace

    def counted(*args: Any, **kwargs: Any) -> None:
        renames.append(args)
        real_replace(*args, **kwargs)

    markers = MarkerStore(StateRoot.of(tmp_path))
    monkeypatch.setattr(_store.os, "replace", counted)
    for i in range(5):
        markers.mark_done(TOP, f"{i}_0")
    markers.mark_done(REDUCE, "0_0")
    assert renames == []
    assert markers.done_keys(TOP) == {f"{i}_0" for i in range(5)}
    folder = tmp_path / "markers" / "top"
    assert sorted(p.name for p in folder.iterdir()) == [f"{i}_0" for i in range(5)]
    assert all(p.stat().st_size == 0 for p in folder.iterdir())


def test_a_marker_whose_folder_was_removed_makes_it_again(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    shutil.rmtree(tmp_path / "markers")
    markers.mark_done(TOP, "1_2")
    assert markers.done_keys(TOP) == {"1_2"}


def test_a_marker_that_cannot_be_written_names_its_file(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    top = tmp_path / "markers" / "top"
    shutil.rmtree(top)
    top.write_text("a file where the folder should be")
    with pytest.raises(OSError, match=r"writing the flow's state.*markers/top/0_0"):
        markers.mark_done(TOP, "0_0")
