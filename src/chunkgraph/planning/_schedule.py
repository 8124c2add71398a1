"""``Schedule``: a strategy's answer for every unit of a Problem, and the strategies' names.

    context[u]   the context index u runs on
    slot[u]      the slot of that context (0 .. slots-1)
    start[u]     expected start, seconds from the run's start
    finish[u]    expected finish
    subgraph[u]  the subgraph (unit of dispatch) u belongs to; subgraphs are
                 numbered 0.., every unit of one subgraph is on one context

A strategy is a function ``(problem, memory_cap) -> Schedule`` where
``memory_cap[c]`` is the byte budget of context c (inf: none). It must keep
every context's live memory (see ``_simulate``) under its cap, or raise
PlanError naming the task that cannot fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(eq=False)
class Schedule:
    """Where and when each unit runs (see the module doc)."""

    context: IntArray
    slot: IntArray
    start: FloatArray
    finish: FloatArray
    subgraph: IntArray

    @classmethod
    def empty(cls, n: int) -> Schedule:
        """A Schedule of ``n`` units with nothing decided yet (context -1, times nan)."""
        return cls(
            np.full(n, -1, np.int64),
            np.full(n, -1, np.int64),
            np.full(n, np.nan),
            np.full(n, np.nan),
            np.arange(n, dtype=np.int64),
        )

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0
