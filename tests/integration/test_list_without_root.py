"""`fabric-emu list` without root: the runs' names, and one line on what it cannot see.

The run root is root's and each run's directory 0700; before, the root was 0700 too, and `list` without
root failed ("cannot use /run/fabric-emu: permission denied") once any run had been made, although the
README says it needs no root.  Here the run root is a directory of the test's (runstate.RUN_ROOT set in
both processes), the run is recorded as root, and list runs as nobody.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from emulator.fabric import runstate

LIST_AS_NOBODY = """
import sys
from emulator import cli
from emulator.fabric import runstate
runstate.RUN_ROOT = sys.argv[1]
sys.exit(cli.main(["list", *sys.argv[2:]]))
"""


@pytest.fixture
def run_root(monkeypatch):
    parent = tempfile.mkdtemp(prefix="fabric-emu-test-list-")
    os.chmod(parent, 0o755)  # nobody must reach the run root inside
    root = os.path.join(parent, "run")
    monkeypatch.setattr(runstate, "RUN_ROOT", root)
    yield root
    shutil.rmtree(parent)


def _list_as_nobody(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", LIST_AS_NOBODY, root, *args],
                          capture_output=True, text=True, timeout=60, cwd="/")


def test_list_without_root_names_the_runs_and_says_what_it_cannot_see(run_root):
    assert _list_as_nobody(run_root).stdout == "no fabric is up\n"  # no run root yet
    runstate.RunState(run="sblist", owner_pid=os.getpid(), created=time.time(), topo="star,2",
                      namespaces=["sblist-h1"], nodes={"h1": {"kind": "host", "netns": "sblist-h1",
                                                              "ip": "10.0.0.1"}}).save()
    done = _list_as_nobody(run_root)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("fabric-emu: without root only the runs' names are listed (1 of them): their records "
                           "are root's; sudo fabric-emu list shows them whole\n")
    assert done.stdout.splitlines()[1].split() == ["sblist", "-", "-", "-", "unknown", "without", "root"]
    listed = _list_as_nobody(run_root, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"run": "sblist", "topo": None, "nodes": None, "owner_pid": None,
                                          "detached": None}]
    # What stays root's: the run's directory, so its record, logs and sockets.
    assert os.stat(run_root).st_mode & 0o777 == 0o755
    assert os.stat(runstate.run_dir("sblist")).st_mode & 0o777 == 0o700
