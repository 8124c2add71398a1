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

    >>> Cost(seconds=2.0, memory=1 << 20)
    Cost(seconds=2.0, memory=1048576, output_bytes=0)
    """

    seconds: float = DEFAULT_SECONDS
    memory: int = 0
    output_bytes: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, int | float) and math.isfinite(self.seconds)):
            raise ConfigError(f"Cost.seconds must be a finite number >= 0, got {self.seconds!r}")
        if self.seconds < 0:
            raise ConfigError(f"Cost.seconds must be >= 0, got {self.seconds!r}")
        for field in ("memory", "output_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"Cost.{field} must be an int >= 0 (bytes), got {value!r}")


class Resources(Mapping[str, float]):
    """What a task occupies while it runs, e.g. ``{"cpu": 1}`` or ``{"gpu": 1}``.

    An immutable, hashable mapping of resource name to a positive amount.

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
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ConfigError(
                    f"resource {key!r} must be a positive number, got {value!r}; "
                    f'e.g. Resources(cpu=1) or {{"gpu": 1}}'
                )
        self._items: tuple[tuple[str, float], ...] = tuple(sorted(merged.items()))

    @classmethod
    def coerce(cls, value: Resources | Mapping[str, float] | None) -> Resources:
        """Return ``value`` as Resources (None is the default ``{"cpu": 1}``)."""
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
