"""Peak memory shared by the benchmarks: a process's own high-water mark.

Linux's VmHWM, not ``ru_maxrss``: a case started by ``subprocess`` (vfork, then
exec) keeps in ``ru_maxrss`` the peak of the driver it came from, so every case
smaller than the driver would show the driver's peak (a driver that once held
500 MiB shows 500 MiB for a child that held 9).
"""

from __future__ import annotations

import resource


def peak_rss_bytes() -> int:
    """This process's own peak resident set, in bytes (``ru_maxrss`` where there is no
    /proc)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
