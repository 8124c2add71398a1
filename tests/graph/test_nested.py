"""The one container rule: what is opened, what is a leaf, what type a rebuilt container has."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import numpy as np

from chunkgraph.graph import collect_leaves, has_leaf, replace_leaves

Pair = namedtuple("Pair", "left right")


class Tagged(list[Any]):
    """A list subclass with an attribute of its own."""

    tag = "plain"


def test_subclasses_are_opened_and_keep_their_type() -> None:
    tagged = Tagged([1, 2])
    tagged.tag = "kept"
    counts: defaultdict[str, Any] = defaultdict(list, a=1)
    value = [Pair(1, (2, 3)), OrderedDict(b=4), counts, tagged, {5}, np.arange(2)]
    out = replace_leaves(value, lambda x: x * 10 if isinstance(x, int) else x)
    assert out[0] == Pair(10, (20, 30)) and type(out[0]) is Pair
    assert out[1] == OrderedDict(b=40) and type(out[1]) is OrderedDict
    assert type(out[2]) is defaultdict and out[2]["a"] == 10 and out[2]["new"] == []
    assert type(out[3]) is Tagged and out[3] == [10, 20] and out[3].tag == "kept"
    assert out[4] == {5}  # a set is a leaf: never looked inside
    assert out[5] is value[5]  # so is an array
    assert value[0] == Pair(1, (2, 3)) and counts["a"] == 1  # the input is unchanged


def test_rebuilt_containers_are_fresh_even_without_replacements() -> None:
    value = {"k": [1, 2]}
    out = replace_leaves(value, lambda x: x)
    assert out == value and out is not value and out["k"] is not value["k"]


def test_collect_and_has_leaf_agree_on_what_is_opened() -> None:
    array = np.zeros(3)
    value = (Pair(array, 1), {"x": [array]}, {array.tobytes()})
    found: list[Any] = []
    assert collect_leaves(value, lambda x: x is array, found) and found == [array, array]
    assert has_leaf(value, lambda x: x is array)
    assert not has_leaf({1: "a", 2: ("b",)}, lambda x: x is array)
    assert has_leaf(array, lambda x: x is array)  # a leaf on its own
