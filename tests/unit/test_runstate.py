"""Run records under a temporary RUN_ROOT, and process cleanup on real children.

Nothing here needs root or creates a namespace: the namespace names used
are ones that cannot exist, and pyroute2's netns.remove is replaced by a
trap so that a mistake cannot remove a real namespace.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from emulator import runstate
from emulator.errors import FabricError
from emulator.runstate import Removed, RunState

NO_NS = ["zz-fe-unit-no-such-ns-1", "zz-fe-unit-no-such-ns-2"]


@pytest.fixture(autouse=True)
def run_root(tmp_path, monkeypatch):
    root = tmp_path / "fabric-emu"
    monkeypatch.setattr(runstate, "RUN_ROOT", str(root))

    def trap(name):
        raise AssertionError(f"test tried to remove namespace {name!r}")

    monkeypatch.setattr(runstate, "remove_namespace", trap)
    return root


def make_state(run="demo1", created=1000.0, **extra) -> RunState:
    return RunState(
        run=run, owner_pid=os.getpid(), created=created, topo="star,2",
        namespaces=[f"{run}-h1", f"{run}-s1"],
        nodes={"h1": {"kind": "host", "netns": f"{run}-h1", "ip": "10.0.0.1"},
               "s1": {"kind": "switch", "netns": f"{run}-s1", "ip": None}},
        **extra,
    )


# --- records -----------------------------------------------------------------------


def test_save_load_round_trip(run_root):
    state = make_state(agents={"s1": 4242}, detached=True)
    state.save()
    path = run_root / "demo1" / "state.json"
    assert path.is_file()
    assert not (run_root / "demo1" / "state.json.tmp").exists()
    assert json.loads(path.read_text())["agents"] == {"s1": 4242}
    loaded = runstate.load("demo1")
    assert loaded == state
    assert loaded.directory == str(run_root / "demo1")


def test_save_overwrites(run_root):
    state = make_state()
    state.save()
    state.agents["s1"] = 77
    state.detached = True
    state.save()
    loaded = runstate.load("demo1")
    assert loaded.agents == {"s1": 77} and loaded.detached is True


def test_defaults():
    state = make_state()
    assert state.agents == {} and state.detached is False


def test_load_unknown_run():
    with pytest.raises(FabricError, match="no run named 'nosuch'"):
        runstate.load("nosuch")


def test_runs_oldest_first_ignoring_junk(run_root):
    make_state("late", created=3000.0).save()
    make_state("early", created=1000.0).save()
    make_state("middle", created=2000.0).save()
    (run_root / "emptydir").mkdir()
    (run_root / "badjson").mkdir()
    (run_root / "badjson" / "state.json").write_text("{not json")
    (run_root / "wrongkeys").mkdir()
    (run_root / "wrongkeys" / "state.json").write_text(json.dumps({"run": "wrongkeys", "colour": "red"}))
    (run_root / "alist").mkdir()
    (run_root / "alist" / "state.json").write_text("[]")
    assert [s.run for s in runstate.runs()] == ["early", "middle", "late"]


def test_runs_without_run_root():
    assert runstate.runs() == []
    assert runstate.orphan_dirs() == []


def test_runs_ignore_a_stray_file_in_run_root(run_root):
    make_state("real").save()
    (run_root / "README").write_text("not a run\n")
    assert [s.run for s in runstate.runs()] == ["real"]


def test_orphan_dirs(run_root):
    make_state("good").save()
    (run_root / "crashed").mkdir()                      # died before the first save
    (run_root / "halfway").mkdir()
    (run_root / "halfway" / "state.json.tmp").write_text("{")
    assert sorted(runstate.orphan_dirs()) == ["crashed", "halfway"]


def test_unreadable_record_is_an_orphan(run_root):
    """orphan_dirs() promises directories 'without a readable state record';
    one whose state.json cannot be loaded is neither a run nor an orphan
    otherwise, so clean_all() would never remove it."""
    (run_root / "corrupt").mkdir(parents=True)
    (run_root / "corrupt" / "state.json").write_text(json.dumps({"run": "corrupt"}))
    assert runstate.runs() == []
    assert runstate.orphan_dirs() == ["corrupt"]


def test_owner_alive():
    assert make_state().owner_alive()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    state = make_state()
    state.owner_pid = child.pid
    assert not state.owner_alive()


# --- names -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo1", "a", "abcdefghijkl", "x0", "fe3a7c"])
def test_check_run_name_accepts(name):
    runstate.check_run_name(name)


@pytest.mark.parametrize("name", ["Demo", "1abc", "a-b", "abcdefghijklm", "", "a_b", "a b", "demo1\n", "ü"])
def test_check_run_name_rejects(name):
    with pytest.raises(FabricError, match="bad run name"):
        runstate.check_run_name(name)


def test_new_run_name_format():
    for _ in range(20):
        name = runstate.new_run_name()
        assert re.fullmatch(r"fe[0-9a-f]{4}", name)
        runstate.check_run_name(name)


def test_new_run_name_avoids_existing_runs(run_root, monkeypatch):
    make_state("fe0000").save()
    tokens = iter(["0000", "0000", "beef"])
    monkeypatch.setattr(runstate.secrets, "token_hex", lambda n: next(tokens))
    assert runstate.new_run_name() == "febeef"


def test_run_dir(run_root):
    assert runstate.run_dir("abc") == os.path.join(str(run_root), "abc")


# --- Removed ------------------------------------------------------------------------


def test_removed_summary():
    assert Removed().summary() == "nothing to remove"
    assert Removed(processes=[12, 34]).summary() == "removed 2 processes (12, 34)"
    full = Removed(processes=[7], namespaces=["r-h1", "r-s1"], directories=["/run/fabric-emu/r"])
    assert full.summary() == ("removed 1 processes (7); 2 namespaces (r-h1, r-s1); "
                              "1 run directories (/run/fabric-emu/r)")
    assert Removed(directories=["/x"]).summary() == "removed 1 run directories (/x)"


# --- processes ------------------------------------------------------------------------


def test_processes_in_nothing():
    assert runstate.processes_in([]) == []
    assert runstate.processes_in(["no-such-ns"]) == []
    assert runstate.processes_in(NO_NS) == []


def test_kill_processes_terminates_a_child():
    child = subprocess.Popen(["sleep", "30"])
    try:
        began = time.monotonic()
        assert runstate.kill_processes([child.pid], grace=2.0) == [child.pid]
        assert time.monotonic() - began < 1.5   # it went on SIGTERM, without waiting out the grace
        assert child.wait(timeout=1) == -15     # SIGTERM, not SIGKILL
    finally:
        child.kill()
        child.wait()


def test_kill_processes_kills_what_ignores_sigterm():
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('r', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "r\n"
        began = time.monotonic()
        runstate.kill_processes([child.pid], grace=0.3)
        elapsed = time.monotonic() - began
        assert child.wait(timeout=1) == -9
        assert 0.3 <= elapsed <= 1.3 + 0.2
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_kill_processes_with_gone_pids():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    began = time.monotonic()
    assert runstate.kill_processes([child.pid], grace=2.0) == [child.pid]
    assert time.monotonic() - began < 0.5
    assert runstate.kill_processes([], grace=2.0) == []


# --- destroy and clean ---------------------------------------------------------------------


def test_destroy_without_namespaces_removes_only_the_directory(run_root):
    state = make_state("gone1")
    state.namespaces = list(NO_NS)
    state.save()
    (run_root / "gone1" / "s1.log").write_text("agent log\n")
    (run_root / "other").mkdir()
    make_state("keep").save()
    removed = runstate.destroy(state)
    assert removed.processes == []
    assert removed.namespaces == []
    assert removed.directories == [str(run_root / "gone1")]
    assert not (run_root / "gone1").exists()
    assert (run_root / "other").is_dir()
    assert [s.run for s in runstate.runs()] == ["keep"]
    # twice is harmless
    again = runstate.destroy(state)
    assert (again.processes, again.namespaces, again.directories) == ([], [], [])


def test_destroy_accumulates_into_removed(run_root):
    first, second = make_state("one"), make_state("two")
    first.namespaces = second.namespaces = list(NO_NS)
    first.save()
    second.save()
    removed = Removed(processes=[1])
    assert runstate.destroy(first, removed) is removed
    runstate.destroy(second, removed)
    assert removed.directories == [str(run_root / "one"), str(run_root / "two")]
    assert removed.processes == [1]


def test_clean_all_removes_runs_and_orphans(run_root):
    for name, created in (("b", 2.0), ("a", 1.0)):
        state = make_state(name, created=created)
        state.namespaces = list(NO_NS)
        state.save()
    (run_root / "orphan").mkdir()
    removed = runstate.clean_all()
    assert removed.directories == [str(run_root / "a"), str(run_root / "b"), str(run_root / "orphan")]
    assert removed.namespaces == [] and removed.processes == []
    assert os.listdir(run_root) == []
    assert runstate.clean_all().summary() == "nothing to remove"
