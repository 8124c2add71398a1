"""GPU contexts: CuPy arrays in graphs and volume flows.

``_backend``: the one place that touches CuPy (and the counted fake for tests);
``_detect``: which GPUs this process may use; ``_residency``: where a run's
arrays live while tasks on GPUs and CPUs pass them on (the local executor's).
"""

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
