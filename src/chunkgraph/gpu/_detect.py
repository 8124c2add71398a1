"""Which GPUs this process may use, and how much memory each has.

Two sources, in this order:

1. the active device backend (``active_backend()``: CuPy, or a fake installed
   with ``use_backend``): ``device_count()`` devices, each with the total of
   ``device_memory(i)``. CUDA has already applied ``CUDA_VISIBLE_DEVICES``.
2. without one, ``nvidia-smi`` (the GPUs are there but nothing here can run
   on them; the planner still sees them). Its text is parsed by the pure
   ``visible_gpus``, which applies ``CUDA_VISIBLE_DEVICES`` the way CUDA does:

       unset          every device
       ""             none
       "1,0"          physical GPUs 1 then 0, seen as devices 0 and 1
       "GPU-8f2c..."  by UUID (a unique prefix is enough)
       "MIG-4d1a..."  one MIG instance
       an entry naming no device ends the list (CUDA ignores it and the rest)
       a device named twice ends the list there too ("0,0", "0,GPU-<0's UUID>")

   A GPU in MIG mode is its MIG instances (each one device), not itself. An
   instance's memory comes from its profile name (``3g.20gb``: 20 GiB).

Devices are numbered as this process sees them: ``gpu0``, ``gpu1``, ...
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-6e1b...)"
_GPU_LINE = re.compile(r"^GPU\s+(\d+):.*\(UUID:\s*(GPU-[^\s)]+)\)")
# "  MIG 3g.20gb     Device  0: (UUID: MIG-4d1a...)"
_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):.*\(UUID:\s*(MIG-[^\s)]+)\)")
_MIG_MEMORY = re.compile(r"\.(\d+)gb", re.IGNORECASE)


@dataclass
class _Gpu:
    index: int
    uuid: str
    memory: float = math.inf
    migs: list[tuple[str, float]] = field(default_factory=list)  # (uuid, memory)


def visible_gpus(listing: str, memory_query: str = "", visible: str | None = None) -> list[float]:
    """Device memory in bytes (inf: unknown) of each GPU this process sees, in its order.

    ``listing``: ``nvidia-smi -L``; ``memory_query``: ``nvidia-smi
    --query-gpu=index,memory.total --format=csv,noheader,nounits`` (MiB);
    ``visible``: ``CUDA_VISIBLE_DEVICES`` (None: unset).

    >>> listing = '''GPU 0: Tesla T4 (UUID: GPU-aa11)
    ... GPU 1: Tesla T4 (UUID: GPU-bb22)'''
    >>> visible_gpus(listing, "0, 15360\\n1, 15360", visible="1")
    [16106127360.0]
    """
    gpus = _parse_listing(listing)
    for line in memory_query.splitlines():
        index, _, mib = line.partition(",")
        gpu = next((g for g in gpus if str(g.index) == index.strip()), None)
        if gpu is not None and mib.strip().isdigit():  # "[N/A]" when unknown
            gpu.memory = float(int(mib.strip()) << 20)
    if visible is None:
        return [m for gpu in gpus for _, m in _devices_of(gpu)]
    out: list[float] = []
    seen: set[str] = set()
    for entry in (e.strip() for e in visible.split(",")):
        found = _lookup(gpus, entry)
        # As CUDA documents for an invalid entry: it hides itself and everything after
        # it. A device named again (by index or UUID) is invalid the same way: CUDA
        # never makes one physical device two (its docs say nothing more on repeats;
        # PyTorch's parser reads a repeat as no device at all, which we do not follow:
        # one rule, the documented one, for every entry that names no new device).
        if found is None or any(uuid in seen for uuid, _ in found):
            break
        seen.update(uuid for uuid, _ in found)
        out.extend(memory for _, memory in found)
    return out


def _parse_listing(listing: str) -> list[_Gpu]:
    gpus: list[_Gpu] = []
    for line in listing.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            gpus.append(_Gpu(int(gpu.group(1)), gpu.group(2)))
            continue
        mig = _MIG_LINE.match(line)
        if mig and gpus:
            size = _MIG_MEMORY.search(mig.group(1))
            memory = float(int(size.group(1)) << 30) if size else math.inf
            gpus[-1].migs.append((mig.group(3), memory))
    return gpus


def _devices_of(gpu: _Gpu) -> list[tuple[str, float]]:
    """``(uuid, memory)`` of its devices: a GPU in MIG mode is its instances; else itself."""
    return list(gpu.migs) if gpu.migs else [(gpu.uuid, gpu.memory)]


def _lookup(gpus: list[_Gpu], entry: str) -> list[tuple[str, float]] | None:
    """``(uuid, memory)`` of the devices one ``CUDA_VISIBLE_DEVICES`` entry names, or
    None when it names none."""
    if not entry:
        return None
    if entry.isdigit():
        gpu = next((g for g in gpus if g.index == int(entry)), None)
        return None if gpu is None else _devices_of(gpu)
    if entry.startswith("MIG-"):
        hits = [(uuid, m) for g in gpus for uuid, m in g.migs if uuid.startswith(entry)]
        return hits if len(hits) == 1 else None
    prefix = entry if entry.startswith("GPU-") else "GPU-" + entry
    matches = [g for g in gpus if g.uuid.startswith(prefix)]
    return _devices_of(matches[0]) if len(matches) == 1 else None


def nvidia_smi_gpus(visible: str | None) -> list[float]:
    """``visible_gpus`` of this machine's ``nvidia-smi`` (none without it)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        listing = _smi(exe, "-L")
        query = _smi(exe, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits")
    except (OSError, subprocess.SubprocessError):
        return []
    return visible_gpus(listing, query, visible)


def _smi(exe: str, *args: str) -> str:
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout
