"""Which input chunks a flow reads again, and how often: the counts its own caches keep by.

Policy. A top-level task reads its chunk padded by the flow's context pad, so
neighbouring tasks share the halo storage chunks between them. The plan knows
every read in advance: for a storage chunk of an input, its readers are the
pending top-level tasks whose padded read covers it, plus the probe when it
reads it first. ``plan_input_reads`` hands that count to each input cache the
flow owns (``Volume.plan_reads``); the cache then keeps a fetched chunk only
while a reader is still to come and drops it after its last one (``_cache``).
So it holds the shared halo layers and the probe's region, never a whole task's
read, and reuse does not depend on the order a task's parallel pieces, or the
probe, arrive in.

The count of a chunk is a product over axes: the top-level tasks along an axis
whose read span (in the input's voxels) meets the chunk's span, found by
bisection in the sorted spans, so nothing is enumerated per chunk up front::

    axis a, top chunk C, pad P:  task t reads [s + t*C - P, s + (t+1)*C + P)
    chunk [c0, c1) is read by the tasks t with  lo_t < c1  and  hi_t > c0

Tasks already done (a resumed run) are subtracted one by one: only the few
tasks around the chunk are looked at.

Only caches ``apply`` owns get counts, and only where tasks share the driver's
volumes (an in-process executor): a process or cluster worker reads through its
own copy, whose cache stays LRU (it cannot know which tasks it will run).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Collection, Mapping

from chunkgraph.flow.plan import FlowSpec, scaled
from chunkgraph.flow.run._probe import probe_read_box
from chunkgraph.flow.state import grid_key
from chunkgraph.geometry import Box
from chunkgraph.volume import Volume


class ChunkReaders:
    """``readers(key)``: how many reads the flow makes of the input chunk at ``key``.

    Args:
        spec: The flow.
        vol: The input, read at ``spec.scale_of(name)``.
        name: The input's name in ``spec``.
        done: Grid keys of top-level tasks already done (they read nothing).
        probe: Whether the probe reads its region first.

    >>> from chunkgraph.flow.plan import LevelSpec
    >>> from types import SimpleNamespace
    >>> from fractions import Fraction
    >>> one = (Fraction(1),)
    >>> spec = SimpleNamespace(bbox=Box((0,), (256,)), levels=(LevelSpec((64,), (8,), (0,),
    ...     "linear"),), context_pad=(8,), top_grid=(4,), scale_of=lambda n: one)
    >>> vol = SimpleNamespace(read_chunks=(32,), offset=(0,), bounds=Box((0,), (256,)))
    >>> readers = ChunkReaders(spec, vol, "src", probe=False)
    >>> [readers((k,)) for k in range(8)]
    [1, 2, 2, 2, 2, 2, 2, 1]
    >>> ChunkReaders(spec, vol, "src", done={"0"}, probe=True)((0,))
    1
    """

    def __init__(
        self,
        spec: FlowSpec,
        vol: Volume,
        name: str,
        *,
        done: Collection[str] = (),
        probe: bool,
    ) -> None:
        scale = spec.scale_of(name)
        top, pad, start = spec.levels[0].chunk, spec.context_pad, spec.bbox.start
        self._lo: list[list[int]] = []
        self._hi: list[list[int]] = []
        for a, n in enumerate(spec.top_grid):
            spans = [
                scaled(_span(start[a] + t * top[a] - pad[a], top[a] + 2 * pad[a]), scale[a : a + 1])
                for t in range(n)
            ]
            self._lo.append([s.start[0] for s in spans])
            self._hi.append([s.stop[0] for s in spans])
        self._chunks = tuple(vol.read_chunks)
        self._origin = tuple(vol.offset)
        self._stop = tuple(vol.bounds.stop)
        self._done = frozenset(done)
        self._probe = scaled(probe_read_box(spec), scale) if probe else None

    def __call__(self, key: tuple[int, ...]) -> int:
        ranges = []
        lo_hi = []
        for a, k in enumerate(key):
            c0 = self._origin[a] + k * self._chunks[a]
            c1 = min(c0 + self._chunks[a], self._stop[a])
            lo_hi.append((c0, c1))
            first = bisect.bisect_right(self._hi[a], c0)  # the first task reaching past c0
            last = bisect.bisect_left(self._lo[a], c1)  # one past the last starting before c1
            if last <= first:
                ranges.append(range(0))
            else:
                ranges.append(range(first, last))
        count = 1
        for r in ranges:
            count *= len(r)
        if count and self._done:
            count -= sum(grid_key(i) in self._done for i in itertools.product(*ranges))
        probe = self._probe
        if probe is not None and all(
            p0 < c1 and c0 < p1
            for (c0, c1), p0, p1 in zip(lo_hi, probe.start, probe.stop, strict=True)
        ):
            count += 1
        return count


def _span(start: int, length: int) -> Box:
    return Box((start,), (start + length,))


def plan_input_reads(
    spec: FlowSpec,
    inputs: Mapping[str, Volume],
    given: Mapping[str, Volume],
    *,
    done: Collection[str],
    probe: bool,
    in_process: bool,
) -> Callable[[], None]:
    """Give each input cache the flow owns (a handle in ``inputs`` that is not the one
    the caller ``given``) its chunks' reader counts when the tasks read through these
    handles (``in_process``); returns what undoes it."""
    owned = [
        (n, v) for n, v in inputs.items() if in_process and v is not given.get(n) and v.cache_bytes
    ]
    for name, vol in owned:
        vol.plan_reads(ChunkReaders(spec, vol, name, done=done, probe=probe))

    def undo() -> None:
        for _, vol in owned:
            vol.plan_reads(None)

    return undo
