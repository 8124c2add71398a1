"""The public surface of chunkgraph.parallel is exactly what is documented."""

from __future__ import annotations

import chunkgraph.parallel as parallel

EXPECTED = {
    "ActivationEvent",
    "CostModel",
    "LengthSplitter",
    "OpKind",
    "PartitionRunner",
    "PoolStats",
    "Splitter",
    "Topology",
    "WorkStealingPool",
    "get_pool",
    "parallel_for",
    "parallel_map",
    "parallel_reduce",
    "parallel_sort",
    "plan_pieces",
    "set_workers",
    "usable_cores",
}


def test_all_lists_exactly_the_public_names() -> None:
    assert set(parallel.__all__) == EXPECTED
    assert all(callable(getattr(parallel, name)) for name in parallel.__all__)


def test_no_private_module_leaks_a_public_looking_name() -> None:
    public = {name for name in vars(parallel) if not name.startswith("_")}
    assert public == EXPECTED
