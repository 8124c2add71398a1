"""GPU contexts: CuPy arrays in graphs and volume flows (see ``_backend``)."""

from chunkgraph.gpu._backend import (
    CupyBackend,
    DeviceBackend,
    FakeBackend,
    FakeDeviceArray,
    active_backend,
    use_backend,
)

__all__ = [
    "CupyBackend",
    "DeviceBackend",
    "FakeBackend",
    "FakeDeviceArray",
    "active_backend",
    "use_backend",
]
