"""Settings for the whole suite."""

from __future__ import annotations

import signal

from hypothesis import HealthCheck, settings

# A loaded machine can stretch an example past Hypothesis's 200 ms deadline, or its
# data generation past the too_slow health check: speed is measured in benchmarks/,
# never in tests.
settings.register_profile("chunkgraph", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("chunkgraph")

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests would then test
# nothing but that. Python's own handler here restores it, for this process and, since a
# caught signal is reset to its default on exec, for the processes the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
