"""Process identity, signalling and termination, on real children of this test.

Nothing here needs root.  The namespace scan is only given names that do
not exist, or, through a patched namespace_id, our own namespace (which it
must refuse to treat as a run's).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.kernel import processes
from emulator.kernel.processes import ProcessId


@pytest.fixture
def sleeper():
    child = subprocess.Popen(["sleep", "30"])
    yield child
    child.kill()
    child.wait()


def test_start_time_is_field_22_of_stat(sleeper):
    with open(f"/proc/{sleeper.pid}/stat") as f:
        fields = f.read().split()
    assert processes.start_time(sleeper.pid) == int(fields[21])
    assert processes.identify(sleeper.pid) == ProcessId(sleeper.pid, int(fields[21]))


def test_start_time_with_a_hostile_process_name(tmp_path):
    """The name in /proc/PID/stat may hold spaces and ')'; the fields after it still count."""
    odd = tmp_path / "a) b c ) d"
    os.symlink("/bin/sleep", odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        time.sleep(0.05)
        assert processes.start_time(child.pid) == processes.start_time(child.pid) is not None
        assert not processes.is_zombie(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_gone_process():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = processes.identify(child.pid)
    child.wait()
    assert processes.start_time(child.pid) is None and processes.identify(child.pid) is None
    assert not processes.exists(proc) and not processes.running(proc)
    assert processes.send_signal(proc, signal.SIGTERM) is False


def test_a_zombie_exists_but_does_not_run():
    child = subprocess.Popen(["true"])
    proc = processes.identify(child.pid)
    deadline = time.monotonic() + 5
    while not processes.is_zombie(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processes.exists(proc) and not processes.running(proc)
    child.wait()


def test_a_reused_pid_is_not_signalled(sleeper):
    """A recorded pid whose start time is not the living process's: that process survives."""
    start = processes.start_time(sleeper.pid)
    for wrong in (ProcessId(sleeper.pid, start + 1), ProcessId(sleeper.pid, start - 1)):
        assert not processes.exists(wrong)
        assert processes.send_signal(wrong, signal.SIGKILL) is False
        assert processes.terminate([wrong], grace=0.2) == []
    time.sleep(0.1)
    assert sleeper.poll() is None
    assert processes.send_signal(ProcessId(sleeper.pid, start), signal.SIGTERM) is True
    assert sleeper.wait(timeout=2) == -signal.SIGTERM


def test_terminate_ends_a_child_on_sigterm(sleeper):
    began = time.monotonic()
    assert processes.terminate([processes.identify(sleeper.pid)], grace=2.0) == [sleeper.pid]
    assert time.monotonic() - began < 1.5   # it went on SIGTERM, without waiting out the grace
    assert sleeper.wait(timeout=1) == -signal.SIGTERM


def test_terminate_kills_what_ignores_sigterm():
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('r', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "r\n"
        began = time.monotonic()
        processes.terminate([processes.identify(child.pid)], grace=0.3)
        elapsed = time.monotonic() - began
        assert child.wait(timeout=1) == -signal.SIGKILL
        assert 0.3 <= elapsed <= 1.3 + 0.2
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_terminate_skips_gone_processes():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = processes.identify(child.pid)
    child.wait()
    began = time.monotonic()
    assert processes.terminate([proc], grace=2.0) == []
    assert time.monotonic() - began < 0.5
    assert processes.terminate([], grace=2.0) == []


def test_no_processes_in_namespaces_that_do_not_exist():
    assert processes.in_namespaces([]) == []
    assert processes.in_namespaces(["zzunit1-h1", "zzunit1-s1"]) == []


def test_our_own_namespace_is_never_taken_for_a_runs(monkeypatch):
    """Were a run's namespace file our own namespace (or init's), every process here would be 'in the run'."""
    ours = os.stat("/proc/self/ns/net")
    monkeypatch.setattr(processes, "namespace_id", lambda name: (ours.st_dev, ours.st_ino))
    assert processes.in_namespaces(["zzunit1-h1"]) == []


def test_a_plain_file_with_a_namespaces_inode_number_is_not_that_namespace(monkeypatch):
    """A half-removed namespace leaves a plain file; its inode number may equal some namespace's."""
    ours = os.stat("/proc/self/ns/net")
    monkeypatch.setattr(processes, "namespace_id", lambda name: (ours.st_dev + 1, ours.st_ino))
    assert processes.in_namespaces(["zzunit1-h1"]) == []
