"""Integration tier: real namespaces, veths, tc and switch agents; needs root.

Without root (or without network namespaces) every test here is skipped
with the reason printed by ``-ra``.  Under CI (``CI`` set) a missing
capability fails the tests instead: CI runs as root on a machine with
namespaces, and a silent skip there would hide a broken set-up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from emulator.kernel import processes
from emulator.fabric import runstate
from emulator.kernel.netns import existing_namespaces
from emulator.kernel.processes import ProcessId


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


def fabric_processes() -> set[ProcessId]:
    """Processes a fabric may have started: any in another network namespace than ours, and agents
    (which start in ours and enter their node's namespace after their imports)."""
    ours = os.stat("/proc/self/ns/net")
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or processes.is_zombie(int(entry)):
            continue
        try:
            netns = os.stat(f"/proc/{entry}/ns/net")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if (netns.st_dev, netns.st_ino) != (ours.st_dev, ours.st_ino) or AGENT_COMMAND.search(cmdline):
            found.add(processes.identify(int(entry)))
    return found - {None}


AGENT_COMMAND = re.compile(rb"emulator\.(switch|host)\.agent")


def _run_names() -> set[str]:
    found = runstate.scan()
    return {s.run for s in found.runs} | set(found.orphans)


def leaked_processes(before: set[ProcessId]) -> list[str]:
    """Fabric processes that were not there ``before`` and do not end within REAP_WAIT; their
    command lines.  They are killed, so that one leak does not spoil the next test."""
    deadline = time.monotonic() + processes.REAP_WAIT
    while (new := fabric_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    leaked = sorted(_command(p.pid) for p in new)
    processes.terminate(list(new), grace=0.5)
    return leaked


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid}: (gone)"


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test must leave no namespace, run directory or process behind.

    Only what appeared during the test counts, and only that is removed: a run
    that was up before (a user's ``fabric-emu up``, another suite on the same
    machine) is neither blamed on the test nor touched."""
    before, before_procs, before_runs = existing_namespaces(), fabric_processes(), _run_names()
    yield
    found = runstate.scan()
    new_states = [s for s in found.runs if s.run not in before_runs]
    new_orphans = [name for name in found.orphans if name not in before_runs]
    runs = sorted([s.run for s in new_states] + new_orphans)
    leaked = sorted(existing_namespaces() - before)
    removed = runstate.Removed()
    for state in new_states:
        runstate.destroy(state, removed)
    for name in new_orphans:
        runstate.remove_run_dir(name, removed)
    procs = leaked_processes(before_procs)
    assert not runs, f"test left runs behind: {runs}"
    assert not leaked, f"test left namespaces behind: {leaked}"
    assert not procs, f"test left processes behind: {procs}"
