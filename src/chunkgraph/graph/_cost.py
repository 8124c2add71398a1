"""Value types attached to a task: its estimated ``Cost`` and the ``Resources`` it occupies.

Both are frozen and hashable. A Graph does not keep one ``Cost`` object per task:
it unpacks the fields into numpy columns (see ``_graph.py``), so these types are
only the way costs enter and leave the graph. ``Resources`` are interned by the
graph (one shared object per distinct value), and most tasks use the default
``{"cpu": 1}`` without storing anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from chunkgraph._errors import ConfigError

# A task with no cost estimate is planned as a small task of this many seconds.
# Its absolute value only matters relative to tasks that do carry estimates: too
# large and unknown tasks dominate the critical path, too small and they are
# treated as free. One millisecond is the order of a small numpy call.
DEFAULT_SECONDS = 1e-3


@dataclass(frozen=True, slots=True)
class Cost:
    """Estimated cost of one task: run time, peak memory, size of its result.

    Attributes:
        seconds: One number (seconds on a context of ``speed`` 1; a faster context
            divides it by its speed), or ``{context name or kind: seconds}``; a context
            with no entry (neither its name nor its kind) cannot run the task.
        memory: The task's peak bytes while it runs.
        output_bytes: The size of the result it hands to each consumer
            (``Graph.set_edge_bytes`` sets one consumer's share apart).

    >>> Cost(seconds=2.0, memory=1 << 20)
    Cost(seconds=2.0, memory=1048576, output_bytes=0)
    >>> Cost(seconds={"cpu": 14, "gpu": 2}).seconds
    ContextSeconds(cpu=14, gpu=2)
    """

    seconds: float | ContextSeconds = DEFAULT_SECONDS
    memory: int = 0
    output_bytes: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.seconds, Mapping):
            if not isinstance(self.seconds, ContextSeconds):
                object.__setattr__(self, "seconds", ContextSeconds(self.seconds))
        else:
            _check_seconds("Cost.seconds", self.seconds)
        for field in ("memory", "output_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                raise ConfigError(
                    f"Cost.{field} must be an int from 0 to 2**63 - 1 (bytes), got {value!r}"
                )


def _check_seconds(what: str, value: object) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{what} must be a finite number >= 0 (seconds), got {value!r}")


class ContextSeconds(Mapping[str, float]):
    """Seconds a task takes per context name or kind: ``{"cpu": 14, "gpu": 2}``.

    Immutable and hashable. ``mean`` is the number the graph's single
    ``seconds`` column holds for it (the average over the entries, as HEFT's
    ranks use).

    Args:
        mapping: Seconds (finite, >= 0) by context name or kind; at least one entry.

    Raises:
        ConfigError: When ``mapping`` is empty, a key is not a non-empty string, or a
            value is not a finite number >= 0.
    """

    __slots__ = ("_items",)

    def __init__(self, mapping: Mapping[str, float]) -> None:
        if not mapping:
            raise ConfigError(
                "Cost.seconds as a mapping needs at least one entry, e.g. {'cpu': 2.0, 'gpu': 0.5}"
            )
        for key, value in mapping.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"Cost.seconds keys must be context names or kinds (strings), got {key!r}"
                )
            _check_seconds(f"Cost.seconds[{key!r}]", value)
        self._items: tuple[tuple[str, float], ...] = tuple(sorted(mapping.items()))

    @property
    def mean(self) -> float:
        return sum(v for _, v in self._items) / len(self._items)

    def __getitem__(self, key: str) -> float:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in self._items)
        return f"ContextSeconds({inner})"


class Resources(Mapping[str, float]):
    """What a task occupies while it runs, e.g. ``{"cpu": 1}`` or ``{"gpu": 1}``.

    An immutable, hashable mapping of resource name to a positive amount.

    Args:
        mapping: Amounts by resource name (``{"gpu": 1}``); None: none from here.
        **amounts: More amounts as keywords (``gpu=1``), over ``mapping``'s. With no
            amount at all the resources are the default ``{"cpu": 1}``.

    Raises:
        ConfigError: When a name is empty or a miscased ``"CPU"``/``"GPU"``, or an amount
            is not a positive number.

    >>> Resources(gpu=1)
    Resources(gpu=1)
    >>> Resources() == Resources(cpu=1)
    True
    """

    __slots__ = ("_items",)

    def __init__(self, mapping: Mapping[str, float] | None = None, **amounts: float) -> None:
        merged = dict(mapping or {})
        merged.update(amounts)
        if not merged:
            merged = {"cpu": 1}
        for key, value in merged.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"resource names must be non-empty strings, got {key!r}")
            if key != key.lower() and key.lower() in ("cpu", "gpu"):
                # Dask spells its GPU resource "GPU"; here it would be a custom resource
                # that no context kind matches, and the task would run on a CPU.
                raise ConfigError(
                    f"resource {key!r}: the context kinds are spelled {key.lower()!r} (a task "
                    f"asks for them as {{{key.lower()!r}: 1}}); on Dask, chunkgraph turns "
                    "'gpu' into the workers' 'GPU' resource itself"
                )
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ConfigError(
                    f"resource {key!r} must be a positive number, got {value!r}; "
                    f'e.g. Resources(cpu=1) or {{"gpu": 1}}'
                )
        self._items: tuple[tuple[str, float], ...] = tuple(sorted(merged.items()))

    @classmethod
    def coerce(cls, value: Resources | Mapping[str, float] | None) -> Resources:
        """Return ``value`` as Resources (None is the default ``{"cpu": 1}``).

        Args:
            value: Resources (returned as they are), a mapping of name to amount, or None.

        Raises:
            ConfigError: When ``value`` is none of these, or its amounts are invalid.
        """
        if isinstance(value, Resources):
            return value
        if value is None:
            return DEFAULT_RESOURCES
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"resources must be a mapping like {{'cpu': 1}}, got {type(value).__name__}"
            )
        return cls(value)

    def __getitem__(self, key: str) -> float:
        for name, amount in self._items:
            if name == key:
                return amount
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={amount!r}" for name, amount in self._items)
        return f"Resources({inner})"


DEFAULT_RESOURCES = Resources(cpu=1)
