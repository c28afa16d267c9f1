"""What a run created, on disk, so that anything can remove exactly that.

Every run has a directory /run/fabric-emu/<run>/ whose state.json names all
the namespaces the run *will* create, written before the first one exists.
Cleanup trusts only that record (Kathara-style tagging): it kills the
processes whose network namespace is one of the run's, removes those
namespaces (their veths and tc go with them) and then the directory.  So a
runner killed with SIGKILL at any point leaves nothing ``fabric-emu clean``
cannot find, and cleanup never touches what another program made.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from emulator.errors import FabricError
from emulator.netns import existing_namespaces, namespace_inode, remove_namespace

RUN_ROOT = "/run/fabric-emu"
RUN_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
STATE_FILE = "state.json"
# Some inits reap orphans only about once a second (seen on this CI kind).
REAP_WAIT = 3.0


@dataclass
class RunState:
    """The record of one run: who owns it and every name it creates."""

    run: str
    owner_pid: int
    created: float
    topo: str
    namespaces: list[str]
    nodes: dict[str, dict[str, Any]]  # name -> kind, netns, ip
    agents: dict[str, int] = field(default_factory=dict)  # switch -> pid
    features: dict[str, bool] = field(default_factory=dict)  # what the kernel offered
    fabric: str = "lossless"
    capture_dir: str | None = None
    captures: dict[str, int] = field(default_factory=dict)  # ifname -> tcpdump pid
    telemetry_dir: str | None = None
    detached: bool = False  # True once `fabric-emu up` handed the run over

    @property
    def directory(self) -> str:
        return run_dir(self.run)

    def save(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = os.path.join(self.directory, STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=1)
        os.replace(tmp, os.path.join(self.directory, STATE_FILE))

    def owner_alive(self) -> bool:
        return alive(self.owner_pid)


def run_dir(run: str) -> str:
    return os.path.join(RUN_ROOT, run)


def new_run_name() -> str:
    """A short random run name; namespaces are called <run>-<node>."""
    while True:
        name = "fe" + secrets.token_hex(2)
        if not os.path.exists(run_dir(name)):
            return name


def check_run_name(name: str) -> None:
    if not RUN_NAME.fullmatch(name):
        raise FabricError(f"bad run name {name!r}: use 1 to 12 lowercase letters and digits, starting with a letter")


def load(run: str) -> RunState:
    path = os.path.join(run_dir(run), STATE_FILE)
    try:
        with open(path) as f:
            return RunState(**json.load(f))
    except FileNotFoundError:
        raise FabricError(f"no run named {run!r} (fabric-emu list shows the runs)") from None


def _run_dirs() -> list[str]:
    if not os.path.isdir(RUN_ROOT):
        return []
    return sorted(d for d in os.listdir(RUN_ROOT) if os.path.isdir(run_dir(d)))


def _load_or_none(run: str) -> RunState | None:
    try:
        return load(run)
    except (FabricError, OSError, ValueError, TypeError):
        return None


def runs() -> list[RunState]:
    """All runs with a readable state record, oldest first."""
    found = [s for s in map(_load_or_none, _run_dirs()) if s is not None]
    return sorted(found, key=lambda s: s.created)


def orphan_dirs() -> list[str]:
    """Run directories without a readable state record (crash before save)."""
    return [d for d in _run_dirs() if _load_or_none(d) is None]


def alive(pid: int) -> bool:
    """Whether ``pid`` is in the process table (a zombie counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes_in(namespaces: list[str]) -> list[int]:
    """PIDs of every process whose network namespace is one of ``namespaces``."""
    inodes = {ino for ino in (namespace_inode(n) for n in namespaces) if ino is not None}
    if not inodes:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_processes(pids: list[int], grace: float = 2.0) -> list[int]:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL what is left.

    Returns once every process is gone from the process table (its parent
    or init reaped it), or after REAP_WAIT more seconds, so that the caller sees
    the table as it was before the run.
    """
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _wait_gone(pids, grace, count_zombies=False)
    for pid in pids:
        if alive(pid) and not is_zombie(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _wait_gone(pids, REAP_WAIT, count_zombies=True)
    return pids


def _wait_gone(pids: list[int], seconds: float, count_zombies: bool) -> None:
    """Wait for ``pids`` to end; with ``count_zombies`` also to be reaped.

    Our own children's zombies do not count: their Popen objects reap them.
    """
    me = os.getpid()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(
            alive(p) and not (is_zombie(p) and (not count_zombies or _parent(p) == me)) for p in pids
        ):
            return
        time.sleep(0.02)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@dataclass
class Removed:
    """What a cleanup removed, for the user to read."""

    processes: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not (self.processes or self.namespaces or self.directories):
            return "nothing to remove"
        parts = []
        if self.processes:
            parts.append(f"{len(self.processes)} processes ({', '.join(map(str, self.processes))})")
        if self.namespaces:
            parts.append(f"{len(self.namespaces)} namespaces ({', '.join(self.namespaces)})")
        if self.directories:
            parts.append(f"{len(self.directories)} run directories ({', '.join(self.directories)})")
        return "removed " + "; ".join(parts)


def destroy(state: RunState, removed: Removed | None = None) -> Removed:
    """Remove everything ``state`` records: processes, namespaces, directory."""
    removed = removed or Removed()
    removed.processes += kill_processes(processes_in(state.namespaces))
    present = existing_namespaces()
    for name in state.namespaces:
        if name in present:
            remove_namespace(name)
            removed.namespaces.append(name)
    if os.path.isdir(state.directory):
        shutil.rmtree(state.directory)
        removed.directories.append(state.directory)
    return removed


def clean_all() -> Removed:
    """Remove every run on this machine, also those whose runner died."""
    removed = Removed()
    for state in runs():
        destroy(state, removed)
    for name in orphan_dirs():
        path = run_dir(name)
        shutil.rmtree(path)
        removed.directories.append(path)
    return removed
