"""The probe's output stands in for the first bottom chunk's own call of ``fn``.

The probe (``_probe``) calls ``fn`` on exactly what the first bottom chunk's call
will get: the same box, inputs read over the same padded region. Calling it again
in the first top task would compute that chunk twice: one bottom chunk's compute
before any task starts (a 128 x 256 x 128 median, 0.7 s on one core, while the
other cores wait). So the driver keeps the probe's checked output under the
run's token, and the first call of ``fn`` on that box in the run takes it instead
(once; a retry computes it again).

Only where the tasks share the driver's memory (threads, sync) and the host's
arrays (no device), and not in place, where dst is an input and the first task
may read voxels another task wrote after the probe read them. Whatever is not
taken is dropped when the run ends (``drop_probe_output``): a resumed run whose first task
was done never takes it.
"""

from __future__ import annotations

import threading

import numpy as np

from chunkgraph.geometry import Box

_KEPT: dict[str, tuple[Box, np.ndarray]] = {}
_GUARD = threading.Lock()


def keep_probe_output(token: str, chunk: Box, output: np.ndarray) -> None:
    """Keep the probe's ``output`` for ``chunk`` until the run ``token`` takes or drops it."""
    with _GUARD:
        _KEPT[token] = (chunk, output)


def take_probe_output(token: str, chunk: Box) -> np.ndarray | None:
    """The kept output if it is ``chunk``'s (then no longer kept), else None."""
    if token not in _KEPT:  # the usual case, without the lock
        return None
    with _GUARD:
        kept = _KEPT.get(token)
        if kept is None or kept[0] != chunk:
            return None
        del _KEPT[token]
        return kept[1]


def drop_probe_output(token: str) -> None:
    """Forget what run ``token`` kept and did not take."""
    with _GUARD:
        _KEPT.pop(token, None)
