"""Integration tier: real namespaces, veths, tc and switch agents; needs root.

Without root (or without network namespaces) every test here is skipped
with the reason printed by ``-ra``.  Under CI (``CI`` set) a missing
capability fails the tests instead: CI runs as root on a machine with
namespaces, and a silent skip there would hide a broken set-up.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emulator import runstate
from emulator.netns import existing_namespaces


def _missing_capability() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, tc): run sudo scripts/test.sh"
    probe = subprocess.run(
        [sys.executable, "-c", "import os; os.unshare(os.CLONE_NEWNET)" if sys.version_info >= (3, 12)
         else "import ctypes; l = ctypes.CDLL(None, use_errno=True); raise SystemExit(l.unshare(0x40000000))"],
        capture_output=True,
    )
    if probe.returncode != 0:
        return "this kernel or sandbox does not allow network namespaces"
    return None


MISSING = _missing_capability()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MISSING is None:
        return
    integration = [item for item in items if "integration" in str(item.fspath)]
    if integration and os.environ.get("CI"):
        raise pytest.UsageError(f"CI must run the integration tests, but: {MISSING}")
    for item in integration:
        item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test must leave no namespace, run directory or agent behind."""
    before = existing_namespaces()
    yield
    runs = [s.run for s in runstate.runs()]
    leaked = sorted(existing_namespaces() - before)
    if runs or leaked:
        runstate.clean_all()
    assert not runs, f"test left runs behind: {runs}"
    assert not leaked, f"test left namespaces behind: {leaked}"
