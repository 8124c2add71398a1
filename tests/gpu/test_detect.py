"""GPU detection: nvidia-smi text as real machines print it, and the device backend.

No GPU runs here: a ``FakeBackend`` stands for CuPy (``test_real_gpu.py``
holds the tests that run on a real device).
"""

from __future__ import annotations

import math

import pytest

from chunkgraph.gpu import FakeBackend, use_backend
from chunkgraph.gpu._detect import visible_gpus
from chunkgraph.planning import local_contexts

TWO_A100 = """\
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-6e1b7c5a-3f2d-4a8e-9c1b-0123456789ab)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-9f00aa11-2b3c-4d5e-8f90-abcdefabcdef)
"""
TWO_A100_MEMORY = "0, 81920\n1, 81920\n"

MIG = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5c1e2d3f-1111-2222-3333-444455556666)
  MIG 3g.20gb     Device  0: (UUID: MIG-4d1a9b8c-aaaa-bbbb-cccc-ddddeeeeffff)
  MIG 2g.10gb     Device  1: (UUID: MIG-7c2e0f1d-1234-5678-9abc-def012345678)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0a0b0c0d-9999-8888-7777-666655554444)
"""
MIG_MEMORY = "0, 40960\n1, 40960\n"

GIB = float(1 << 30)


def test_every_gpu_when_cuda_visible_devices_is_unset() -> None:
    assert visible_gpus(TWO_A100, TWO_A100_MEMORY) == [80 * GIB, 80 * GIB]


def test_an_empty_cuda_visible_devices_hides_every_gpu() -> None:
    assert visible_gpus(TWO_A100, TWO_A100_MEMORY, visible="") == []


def test_cuda_visible_devices_by_index_keeps_its_order_and_stops_at_an_invalid_entry() -> None:
    memory = "0, 81920\n1, 40960\n"
    assert visible_gpus(TWO_A100, memory, visible="1,0") == [40 * GIB, 80 * GIB]
    assert visible_gpus(TWO_A100, memory, visible="1,7,0") == [40 * GIB]  # as CUDA does


def test_cuda_visible_devices_by_uuid_prefix() -> None:
    assert visible_gpus(TWO_A100, TWO_A100_MEMORY, visible="GPU-9f00") == [80 * GIB]
    assert visible_gpus(TWO_A100, TWO_A100_MEMORY, visible="GPU-") == []  # ambiguous


def test_a_device_named_twice_ends_the_list_there_as_an_invalid_entry_does() -> None:
    memory = "0, 81920\n1, 40960\n"
    assert visible_gpus(TWO_A100, memory, visible="0,0") == [80 * GIB]
    assert visible_gpus(TWO_A100, memory, visible="0,0,1") == [80 * GIB]
    assert visible_gpus(TWO_A100, memory, visible="0,GPU-6e1b,1") == [80 * GIB]  # 0's UUID
    assert visible_gpus(TWO_A100, memory, visible="1,0") == [40 * GIB, 80 * GIB]
    whole_then_instance = "0,MIG-7c2e0f1d"  # GPU 0 is its MIG instances, 7c2e among them
    assert visible_gpus(MIG, MIG_MEMORY, visible=whole_then_instance) == [20 * GIB, 10 * GIB]


def test_mig_instances_are_devices_with_their_profile_memory() -> None:
    assert visible_gpus(MIG, MIG_MEMORY) == [20 * GIB, 10 * GIB, 40 * GIB]


def test_cuda_visible_devices_naming_one_mig_instance() -> None:
    visible = "MIG-7c2e0f1d-1234-5678-9abc-def012345678"
    assert visible_gpus(MIG, MIG_MEMORY, visible=visible) == [10 * GIB]


def test_unknown_memory_is_unbounded() -> None:
    assert visible_gpus(TWO_A100, "0, [N/A]\n") == [math.inf, math.inf]


def test_no_nvidia_smi_output_means_no_gpu() -> None:
    assert visible_gpus("", "", visible=None) == []


def test_local_contexts_has_a_gpu_context_per_device_of_the_active_backend() -> None:
    with use_backend(FakeBackend(2, memory=3 << 30)):
        gpus = [c for c in local_contexts() if c.kind == "gpu"]
        assert [(c.name, c.slots, c.memory) for c in gpus] == [
            ("gpu0", 1, 3 * GIB),
            ("gpu1", 1, 3 * GIB),
        ]
        assert all(c.kind == "cpu" for c in local_contexts(gpus=False))
    # The backend is gone: its GPUs are too (this machine has none).
    assert not any(c.name == "gpu1" and c.memory == 3 * GIB for c in local_contexts())


@pytest.mark.parametrize("count", [0, 3])
def test_detection_follows_each_backend_installed(count: int) -> None:
    with use_backend(FakeBackend(count)):
        assert sum(c.kind == "gpu" for c in local_contexts()) == count
