"""Rates and times are the fabric's only while the emulator kept up: ask the fidelity monitor first.

A test of a rate (goodput) or a time (how long a pause holds) checks
everything else unconditionally, then calls :func:`judge_only_if_faithful`
before those figures: if the monitor says an agent did not keep up (a
loaded or stolen CPU), the figure measures the machine, and the test
stops there with a skip that says so and names the agents and reasons
(pytest -rs shows them).  A figure off while the monitor says faithful
still fails.
"""

from __future__ import annotations

from typing import Any

import pytest


def judge_only_if_faithful(fidelity: dict[str, Any], what: str) -> None:
    if not fidelity["faithful"]:
        pytest.skip(f"{what} not judged: the machine did not keep up, so the figure is the machine's "
                    f"(fidelity monitor: {fidelity['unfaithful']})")
