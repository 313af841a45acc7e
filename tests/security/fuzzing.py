"""The fuzzers' shared hypothesis settings: ``TOOLCORE_FUZZ_EXAMPLES`` examples a test (6 in
CI), the same ones every run, no deadline (a request may wait on the database), no example
database, and no health check (the fixtures are slow on purpose: a real site)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

EXAMPLES = int(os.environ.get("TOOLCORE_FUZZ_EXAMPLES", "6"))

FUZZ = hypothesis_settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
