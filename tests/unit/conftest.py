"""Unit tier settings: hypothesis profiles for the fuzz tests.

Fuzz tests (``test_fuzz_*``) feed hostile input to every parser and
per-frame path and assert "dropped and counted" or "one-line error", never
an exception.  The default profile keeps the suite fast and reproducible
(a fixed number of examples per target, derandomized); ``FUZZ=deep`` tries
many more (``FUZZ_EXAMPLES``, default 20000) with fresh randomness, as
``scripts/fuzz.sh`` does to produce the figures in docs/reliability.md.
Fixtures of function scope are shared by a test's examples on purpose: an
agent that survived one hostile frame meets the next one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from fake_agents import fake_wire, make_rnic

assert fake_wire  # a fixture, used by name below

settings.register_profile("default", max_examples=300, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("deep", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "20000")), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile("deep" if os.environ.get("FUZZ") == "deep" else "default")


@pytest.fixture
def rnic(fake_wire: None, tmp_path: Any) -> Iterator[Any]:
    """Host h1's RNIC on a fake wire (tests/unit/fake_agents.py), closed after the test."""
    agent, _loop = make_rnic(str(tmp_path))
    yield agent
    agent.close()
