"""Which input chunks a flow reads again, and how often: the counts its own caches keep by.

Policy. A top-level task reads its chunk padded by the flow's context pad, so
neighbouring tasks share the halo storage chunks between them. The plan knows
every read in advance: for a storage chunk of an input, its readers are the
pending top-level tasks whose padded read covers it, plus the probe when it
reads it first. ``plan_input_reads`` hands that count, and the part of the chunk
each of those reads takes (``ChunkReaders.parts``), to each input cache the flow
owns (``Volume.plan_reads``); the cache then keeps of a fetched chunk only what
the readers still to come take, and drops it after its last one (``_cache``).
So it holds one shared halo layer and the pad-thick slab of the other, and the
probe's region, never a whole task's read, and reuse does not depend on the order
a task's parallel pieces, or the probe, arrive in::

    chunks along the sweep (64), pad 8, top chunk 128:  task k reads [x-8, x+136)
    2k+1 = [x+64, x+128)    read whole by k; k+1 takes [x+120, x+128): 8 layers kept
    2k+2 = [x+128, x+192)   k takes 8 layers first; k+1 takes it whole: kept whole

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
        ranges, lo_hi = self._tasks(key)
        count = 1
        for r in ranges:
            count *= len(r)
        if count and self._done:
            count -= sum(grid_key(i) in self._done for i in itertools.product(*ranges))
        return count + (self._probe_part(lo_hi) is not None)

    def parts(self, key: tuple[int, ...]) -> list[Box]:
        """The part (global box, in the input's voxels) of the chunk at ``key`` that each
        of its ``self(key)`` reads takes: the cache keeps no more than the parts of the
        reads still to come (``ChunkCache.plan_readers``).

        >>> from chunkgraph.flow.plan import LevelSpec
        >>> from types import SimpleNamespace
        >>> from fractions import Fraction
        >>> spec = SimpleNamespace(bbox=Box((0,), (256,)), levels=(LevelSpec((64,), (8,),
        ...     (0,), "linear"),), context_pad=(8,), top_grid=(4,),
        ...     scale_of=lambda n: (Fraction(1),))
        >>> vol = SimpleNamespace(read_chunks=(32,), offset=(0,), bounds=Box((0,), (256,)))
        >>> ChunkReaders(spec, vol, "src", probe=False).parts((1,))  # tasks 0 and 1
        [Box(start=(32,), stop=(64,)), Box(start=(56,), stop=(64,))]
        """
        ranges, lo_hi = self._tasks(key)
        out = []
        for index in itertools.product(*ranges):
            if self._done and grid_key(index) in self._done:
                continue
            spans = enumerate(zip(index, lo_hi, strict=True))
            bounds = [
                (max(self._lo[a][t], c0), min(self._hi[a][t], c1)) for a, (t, (c0, c1)) in spans
            ]
            out.append(Box(tuple(b[0] for b in bounds), tuple(b[1] for b in bounds)))
        probe = self._probe_part(lo_hi)
        return out if probe is None else [*out, probe]

    def _tasks(self, key: tuple[int, ...]) -> tuple[list[range], list[tuple[int, int]]]:
        """Per axis, the top tasks whose read meets the chunk at ``key``, and its span."""
        ranges = []
        lo_hi = []
        for a, k in enumerate(key):
            c0 = self._origin[a] + k * self._chunks[a]
            c1 = min(c0 + self._chunks[a], self._stop[a])
            lo_hi.append((c0, c1))
            first = bisect.bisect_right(self._hi[a], c0)  # the first task reaching past c0
            last = bisect.bisect_left(self._lo[a], c1)  # one past the last starting before c1
            ranges.append(range(first, max(first, last)))
        return ranges, lo_hi

    def _probe_part(self, lo_hi: list[tuple[int, int]]) -> Box | None:
        """The probe's part of the chunk spanning ``lo_hi`` (None: it reads none)."""
        probe = self._probe
        if probe is None or not all(
            p0 < c1 and c0 < p1
            for (c0, c1), p0, p1 in zip(lo_hi, probe.start, probe.stop, strict=True)
        ):
            return None
        return Box(
            tuple(max(p, c0) for p, (c0, _) in zip(probe.start, lo_hi, strict=True)),
            tuple(min(p, c1) for p, (_, c1) in zip(probe.stop, lo_hi, strict=True)),
        )


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
        readers = ChunkReaders(spec, vol, name, done=done, probe=probe)
        vol.plan_reads(readers, readers.parts)

    def undo() -> None:
        for _, vol in owned:
            vol.plan_reads(None)

    return undo
