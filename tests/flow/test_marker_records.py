"""Done markers in bulk: one record per batch of top tasks (``MarkerStore.mark_done_many``).

A batch of top tasks rewrites one record of the keys it finished, so a flow of 10^6
top tasks leaves thousands of objects in a bucket, not millions, and ``done_keys``,
resume and ``chunkgraph status`` read them as they read plain markers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkgraph._errors import ConfigError
from chunkgraph.flow.state._markers import REDUCE, TOP, MarkerStore
from chunkgraph.flow.state._root import StateRoot


@pytest.fixture(params=["dir", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> StateRoot:
    if request.param == "dir":
        return StateRoot.of(tmp_path / "flow")
    bucket = request.getfixturevalue("bucket")
    return StateRoot.of(f"s3://{bucket}/root/f00d")


def test_a_record_rewritten_with_more_keys_replaces_the_old_one(root: StateRoot) -> None:
    markers = MarkerStore(root)
    assert markers.record_keys(TOP, "b-0") == set()
    markers.mark_done_many(TOP, ["0_0", "0_1"], "b-0")
    assert markers.record_keys(TOP, "b-0") == {"0_0", "0_1"}
    markers.mark_done_many(TOP, ["0_0", "0_1", "0_2"], "b-0")
    assert markers.record_keys(TOP, "b-0") == {"0_0", "0_1", "0_2"}
    assert markers.record_keys(REDUCE, "b-0") == set()  # records are per kind


def test_done_keys_are_plain_markers_and_every_record_s_keys(root: StateRoot) -> None:
    markers = MarkerStore(root)
    markers.mark_done(TOP, "9_9")
    markers.mark_done_many(TOP, ["0_0", "0_1"], "batch_0")
    markers.mark_done_many(TOP, {"1_0", "0_1"}, "batch_1")  # overlapping: counted once
    markers.mark_done_many(REDUCE, ["5"], "batch_0")
    assert markers.done_keys(TOP) == {"9_9", "0_0", "0_1", "1_0"}
    assert markers.done_keys(REDUCE) == {"5"}
    markers.clear((REDUCE,))
    assert markers.done_keys(REDUCE) == set()
    assert markers.done_keys(TOP) == {"9_9", "0_0", "0_1", "1_0"}
    markers.clear()
    assert markers.done_keys(TOP) == set()
    assert markers.record_keys(TOP, "batch_1") == set()


@pytest.mark.parametrize("record", ["", "a/b", "../x", ".hidden", "x y", "é", "a" * 129])
def test_a_record_name_outside_letters_digits_dash_underscore_is_refused(
    tmp_path: Path, record: str
) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    with pytest.raises(ConfigError, match="letters, digits"):
        markers.mark_done_many(TOP, ["0_0"], record)
    with pytest.raises(ConfigError, match="letters, digits"):
        markers.record_keys(TOP, record)
    assert markers.done_keys(TOP) == set()


def test_a_key_with_a_line_break_is_refused(tmp_path: Path) -> None:
    markers = MarkerStore(StateRoot.of(tmp_path))
    with pytest.raises(ConfigError, match="line break"):
        markers.mark_done_many(TOP, ["0_0", "0\n1"], "b")
    assert markers.done_keys(TOP) == set()
