"""Settings for the whole suite."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# A loaded machine can stretch an example past Hypothesis's 200 ms deadline, or its
# data generation past the too_slow health check: speed is measured in benchmarks/,
# never in tests.
settings.register_profile("chunkgraph", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("chunkgraph")
