"""Task functions for the executor tests, importable by worker processes.

Workers import a task's function by module name, so these live in a module of
their own (``tests.execute._tasks``) that needs only the repository root on the
path.
"""

from __future__ import annotations

import os
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np


def mix(i: int, *inputs: int) -> int:
    """An order-sensitive combination, so a wrong input or a swapped one shows."""
    value = i + 1
    for k, x in enumerate(inputs):
        value = (value * 31 + (k + 1) * x) % 1_000_003
    return value


def mix_nested(i: int, box: dict[str, list[tuple[int, ...]]]) -> int:
    return mix(i, *box["in"][0])


def mix_kw(i: int, inputs: list[int]) -> int:
    return mix(i, *inputs)


def add_arrays(*arrays: np.ndarray) -> np.ndarray:
    return np.sum(arrays, axis=0)


def flaky(counter: str, failures: int, value: int) -> int:
    """Fail the first ``failures`` calls (counted in the file ``counter``), then return."""
    path = Path(counter)
    calls = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(calls))
    if calls <= failures:
        raise RuntimeError(f"flaky call {calls} of {failures} failing")
    return value


def exit_once(marker: str, value: int) -> int:
    """Kill the worker process on the first call (marker file absent), then return."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(3)
    return value


def always_exit() -> None:
    os._exit(4)


def fail(message: str) -> None:
    raise ValueError(message)


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def interrupt() -> None:
    raise KeyboardInterrupt


def copy_of(value: Any) -> Any:
    return value


class Unbuildable(namedtuple("Unbuildable", "ref other")):
    """A named tuple that refuses to be rebuilt with substituted fields."""

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        raise TypeError("Unbuildable cannot be rebuilt")


def interrupt_counted(counter: str) -> None:
    """Count the call in the file ``counter``, then raise KeyboardInterrupt as a task's own code."""
    path = Path(counter)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    raise KeyboardInterrupt


def big(i: int) -> np.ndarray:
    """A 320 KB array: above the shared-memory threshold, so it travels as a segment."""
    return np.full(40_000, float(i))


def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def hang_once(marker: str, value: int) -> int:
    """The first call (marker absent) writes its pid to ``marker`` and hangs; later calls return."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        time.sleep(1000)
    return value


def announce_then_sleep(seconds: float, *_: Any) -> None:
    """Print "started" on stdout (a driver script's signal to go on), then sleep."""
    print("started", flush=True)
    time.sleep(seconds)


class StubbornError(Exception):
    """A user's error class that says another try cannot succeed."""

    permanent = True


def fail_counted(counter: str, kind: str, *_inputs: object) -> None:
    """Count the call in the file ``counter``, then raise the error named by ``kind``: a
    permanent one, a transient one, or loop groups around one of each (``_inputs``:
    results of other tasks, unused)."""
    from chunkgraph._errors import CorruptChunkError, FlowOutputError

    path = Path(counter)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    corrupt = CorruptChunkError(
        "chunk (1, 0, 1) cannot be decoded", volume="in.zarr", chunks=[(1, 0, 1)],
        keys=["c/1/0/1"], files=["in.zarr/c/1/0/1"],
    )  # fmt: skip
    errors: dict[str, BaseException] = {
        "corrupt": corrupt,
        "nan": FlowOutputError("fn returned 3 NaN value(s) for an integer dst"),
        "user": StubbornError("no such sample in the catalogue"),
        "grouped-corrupt": ExceptionGroup(
            "parallel_map over 16 elements: 1 piece(s) failed", [corrupt]
        ),
        "transient": OSError(5, "Input/output error"),
        "grouped-mixed": ExceptionGroup(
            "parallel_map over 16 elements: 2 piece(s) failed", [corrupt, TimeoutError("slow")]
        ),
    }
    raise errors[kind]
