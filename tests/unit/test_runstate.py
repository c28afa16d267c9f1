"""Run records under a temporary RUN_ROOT: modes, checks, hostile records, cleanup.

Nothing here needs root or creates a namespace: the namespace names used
are ones that cannot exist, and pyroute2's netns.remove is replaced by a
trap so that a mistake cannot remove a real namespace.  Every hostile
record is also given to ``fabric-emu down`` and ``clean``, which must
refuse it in one line and touch nothing: not the record, not what it
points at outside the run root.
"""

import fcntl
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from emulator import cli
from emulator.kernel import processes
from emulator.fabric import runstate
from emulator.errors import FabricError
from emulator.fabric.runstate import BadRecord, Removed, RunState


@pytest.fixture(autouse=True)
def run_root(tmp_path, monkeypatch):
    root = tmp_path / "fabric-emu"
    monkeypatch.setattr(runstate, "RUN_ROOT", str(root))

    def trap(name):
        raise AssertionError(f"test tried to remove namespace {name!r}")

    monkeypatch.setattr(runstate, "remove_namespace", trap)
    return root


@pytest.fixture
def outside(tmp_path):
    """A directory beside the run root that nothing may touch; ``snapshot()`` tells."""
    where = tmp_path / "outside"
    where.mkdir()
    (where / "keep.txt").write_text("precious\n")
    (where / "zzdemo").mkdir()
    (where / "zzdemo" / "state.json").write_text(json.dumps(record("zzdemo")))
    return where


def snapshot(path):
    return sorted((str(p.relative_to(path)), p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
                  for p in path.rglob("*"))


def record(run="zzdemo", created=1000.0, **extra) -> dict:
    """A good record of run ``run`` with two nodes, as JSON data."""
    data = {"run": run, "owner_pid": os.getpid(), "created": created, "topo": "star,1",
            "namespaces": [f"{run}-h1", f"{run}-s1"],
            "nodes": {"h1": {"kind": "host", "netns": f"{run}-h1", "ip": "10.0.0.1"},
                      "s1": {"kind": "switch", "netns": f"{run}-s1", "ip": None}}}
    data.update(extra)
    return data


def make_state(run="zzdemo", created=1000.0, **extra) -> RunState:
    return RunState(**record(run, created, **extra))


def write_record(root, run, content) -> None:
    (root / run).mkdir(parents=True, exist_ok=True)
    raw = content if isinstance(content, bytes) else json.dumps(content).encode()
    (root / run / "state.json").write_bytes(raw)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def one_line(text: str) -> bool:
    return text.count("\n") == 0 and 0 < len(text) <= 300


# --- records and their files ---------------------------------------------------------------


def test_save_load_round_trip(run_root):
    state = make_state(agents={"s1": 4242}, detached=True, started={"4242": 77})
    state.save()
    path = run_root / "zzdemo" / "state.json"
    assert json.loads(path.read_text())["agents"] == {"s1": 4242}
    assert not (run_root / "zzdemo" / "state.json.tmp").exists()
    loaded = runstate.load("zzdemo")
    assert loaded == state
    assert loaded.directory == str(run_root / "zzdemo")
    assert loaded.process(4242) == processes.ProcessId(4242, 77) and loaded.process(1) is None


def test_modes_are_explicit_whatever_the_umask(run_root):
    old = os.umask(0)
    try:
        make_state().save()
        with runstate.create_file(str(run_root / "zzdemo" / "h1.log")) as f:
            f.write("x")
    finally:
        os.umask(old)
    assert mode(run_root) == 0o755  # the runs' names for anyone (list without root), nothing more
    assert mode(run_root / "zzdemo") == 0o700
    assert mode(run_root / "zzdemo" / "state.json") == 0o600
    assert mode(run_root / "zzdemo" / "h1.log") == 0o600


@pytest.mark.parametrize("found", [0o777, 0o700], ids=["wider", "an-older-fabric-emu's"])
def test_an_existing_run_root_is_set_to_0755(run_root, found):
    run_root.mkdir(mode=0o755)
    os.chmod(run_root, found)
    make_state().save()
    assert mode(run_root) == 0o755


def test_create_file_never_writes_through_a_link(run_root, outside):
    make_state().save()
    os.symlink(outside / "keep.txt", run_root / "zzdemo" / "s1.json")
    with pytest.raises(OSError):
        runstate.create_file(str(run_root / "zzdemo" / "s1.json"))
    assert (outside / "keep.txt").read_text() == "precious\n"


def test_a_symlinked_run_root_is_refused(run_root, outside):
    before = snapshot(outside)
    os.symlink(outside, run_root)
    for action in (make_state().save, runstate.scan, runstate.clean, lambda: runstate.load("zzdemo")):
        with pytest.raises(FabricError, match="fabric-emu: a symbolic link$") as err:
            action()
        assert one_line(str(err.value))
    assert snapshot(outside) == before


def foreign(path, monkeypatch) -> None:
    """Make ``path`` someone else's: chown it as root; otherwise pretend to be another user."""
    if os.geteuid() == 0:
        os.lchown(path, 4242, 4242)
    else:
        monkeypatch.setattr(runstate.os, "geteuid", lambda: 4242)


def test_a_run_root_of_another_owner_is_refused(run_root, monkeypatch):
    run_root.mkdir(mode=0o700)
    foreign(run_root, monkeypatch)
    with pytest.raises(FabricError, match="belongs to uid"):
        make_state().save()
    with pytest.raises(FabricError, match="belongs to uid"):
        runstate.scan()
    assert os.listdir(run_root) == []


def test_save_overwrites(run_root):
    state = make_state()
    state.save()
    state.agents["s1"] = 77
    state.detached = True
    state.save()
    loaded = runstate.load("zzdemo")
    assert loaded.agents == {"s1": 77} and loaded.detached is True


def test_defaults():
    state = make_state()
    assert state.agents == {} and state.started == {} and state.detached is False


def test_load_unknown_run():
    with pytest.raises(FabricError, match="no run named 'nosuch'"):
        runstate.load("nosuch")


def test_load_checks_the_name_before_building_a_path(outside):
    for name in ("../outside", "/etc", "..", "a/b"):
        with pytest.raises(FabricError, match="bad run name"):
            runstate.load(name)


@pytest.mark.parametrize("field, value", [
    ("namespaces", ["../../x"]), ("namespaces", ["zzother-h1"]), ("topo", "star\n2"), ("capture_dir", "caps"),
    ("agents", {"h9": 5}), ("run", "Bad"),
])
def test_save_refuses_what_it_could_not_read_back(run_root, field, value):
    state = make_state()
    setattr(state, field, value)
    with pytest.raises(FabricError):
        state.save()
    assert not run_root.exists() or os.listdir(run_root) == []


def test_runs_oldest_first(run_root):
    make_state("late", created=3000.0).save()
    make_state("early", created=1000.0).save()
    make_state("middle", created=2000.0).save()
    assert [s.run for s in runstate.runs()] == ["early", "middle", "late"]


def test_runs_without_run_root():
    assert runstate.runs() == []
    assert runstate.orphan_dirs() == []
    assert runstate.scan().refused == []


def test_what_is_not_a_run_is_reported_and_left_alone(run_root, outside):
    make_state("real").save()
    (run_root / "README").write_text("not a run\n")
    (run_root / "stray").write_text("a file with a run's name\n")
    (run_root / "Bad_Name").mkdir()
    (run_root / "x\x1b[2J").mkdir()
    os.symlink(outside / "zzdemo", run_root / "zzdemo")
    found = runstate.scan()
    assert [s.run for s in found.runs] == ["real"] and found.orphans == []
    assert sorted(found.refused) == sorted([
        f"{run_root}: entry 'Bad_Name' is not a run name; left alone",
        f"{run_root}: entry 'README' is not a run name; left alone",
        f"{run_root}: entry 'x\\x1b[2J' is not a run name; left alone",
        f"{run_root}/stray: not a directory; left alone",
        f"{run_root}/zzdemo: a symbolic link; left alone",
    ])


def test_orphan_dirs(run_root):
    make_state("good").save()
    (run_root / "crashed").mkdir()                      # died before the first save
    (run_root / "halfway").mkdir()
    (run_root / "halfway" / "state.json.tmp").write_text("{")
    assert sorted(runstate.orphan_dirs()) == ["crashed", "halfway"]


def test_a_bad_record_is_refused_not_removed(run_root):
    """save() is atomic, so a record that fails a check was not written by fabric-emu: a person must look."""
    write_record(run_root, "corrupt", {"run": "corrupt"})
    found = runstate.scan()
    assert found.runs == [] and found.orphans == []
    assert found.refused == [f"{run_root}/corrupt/state.json: missing field 'created'; left alone"]
    removed = runstate.clean()
    assert (removed.directories, removed.refused) == ([], found.refused)
    assert (run_root / "corrupt" / "state.json").is_file()


def test_owner_alive():
    state = make_state()
    state.note_started([os.getpid()])
    assert state.owner_alive()
    child = subprocess.Popen(["true"])
    state.owner_pid = child.pid
    state.note_started([child.pid])
    child.wait()
    assert not state.owner_alive()
    state.owner_pid = os.getpid()
    state.started[str(os.getpid())] += 1   # our pid, but not our start time: someone else
    assert not state.owner_alive()


# --- hostile records -----------------------------------------------------------------------------


def _mutated(**changes):
    return json.dumps(record(**{k: v for k, v in changes.items() if k == "run"}) | changes).encode()


HOSTILE = {
    "run is ..": _mutated(run=".."),
    "run climbs out": _mutated(run="../../outside"),
    "run is absolute": _mutated(run="/etc"),
    "run is another run": json.dumps(record("zzother")).encode(),
    "owner_pid is text": _mutated(owner_pid="12"),
    "owner_pid is negative": _mutated(owner_pid=-1),
    "owner_pid is true": _mutated(owner_pid=True),
    "created is infinite": _mutated().replace(b'"created": 1000.0', b'"created": 1e400'),
    "created is Infinity": _mutated(created=float("inf")),
    "namespace is absolute": _mutated(namespaces=["/etc"]),
    "namespace climbs out": _mutated(namespaces=["zzdemo-../../x"]),
    "namespace of another run": _mutated(namespaces=["zzother-h1"]),
    "namespaces not a list": _mutated(namespaces="zzdemo-h1"),
    "node name climbs out": _mutated(nodes={"../x": {"kind": "host", "netns": "zzdemo-../x", "ip": "10.0.0.1"}}),
    "node in another's namespace": _mutated(nodes={"h1": {"kind": "host", "netns": "zzother-h1", "ip": "10.0.0.1"}}),
    "node is a list": _mutated(nodes={"h1": []}),
    "bad address": _mutated(nodes={"h1": {"kind": "host", "netns": "zzdemo-h1", "ip": "10.0.0.300"}}),
    "agent of no node": _mutated(agents={"h9": 5}),
    "agent pid is text": _mutated(agents={"h1": "5"}),
    "agents is a list": _mutated(agents=[5]),
    "capture climbs out": _mutated(captures={"../../etc/passwd": 5}),
    "capture of no node": _mutated(captures={"h9-eth0": 5}),
    "capture_dir relative": _mutated(capture_dir="caps"),
    "capture_dir climbs": _mutated(capture_dir="/tmp/../etc"),
    "telemetry_dir a number": _mutated(telemetry_dir=5),
    "unknown fabric": _mutated(fabric="ethernet"),
    "detached is text": _mutated(detached="yes"),
    "started key not a pid": _mutated(started={"abc": 1}),
    "started key unicode digit": _mutated(started={"\u00b2": 1}),
    "started negative": _mutated(started={"12": -1}),
    "unknown field": _mutated(colour="red"),
    "missing field": json.dumps({k: v for k, v in record().items() if k != "nodes"}).encode(),
    "not an object": b"[]",
    "empty": b"",
    "not UTF-8": b'{"run": "zz\xff\xfe"}',
    "NaN": _mutated().replace(b'"created": 1000.0', b'"created": NaN'),
    "huge integer": _mutated().replace(b'"owner_pid": ', b'"owner_pid": ' + b"9" * 5000 + b", \"x\": "),
    "nested deeply": b"[" * 100_000 + b"]" * 100_000,
    "huge file": b" " * (runstate.MAX_RECORD_BYTES + 1),
}


@pytest.fixture
def handlers_kept():
    """cli.main() installs SIGTERM and SIGHUP handlers; give pytest its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_record_is_refused_in_one_line_and_not_followed(run_root, outside, case, capsys, monkeypatch,
                                                                  handlers_kept):
    write_record(run_root, "zzdemo", HOSTILE[case])
    before, inside = snapshot(outside), snapshot(run_root)
    with pytest.raises(FabricError) as err:
        runstate.load("zzdemo")
    assert one_line(str(err.value)) and str(err.value).startswith(f"{run_root}/zzdemo/state.json: ")
    found = runstate.scan()
    assert found.runs == [] and found.orphans == [] and len(found.refused) == 1 and one_line(found.refused[0])
    monkeypatch.setattr(cli, "require_root", lambda: None)
    for argv in (["down", "--run", "zzdemo"], ["down"], ["clean"]):
        code = cli.main(argv)
        out, errors = capsys.readouterr()
        assert code == 1, argv
        assert errors.count("\n") == 1 and errors.startswith("fabric-emu: ") and "Traceback" not in errors, argv
    assert snapshot(outside) == before and snapshot(run_root) == inside


def test_a_symlinked_record_is_refused(run_root, outside):
    (run_root / "zzdemo").mkdir(parents=True)
    os.symlink(outside / "zzdemo" / "state.json", run_root / "zzdemo" / "state.json")
    with pytest.raises(FabricError, match="state.json: not a regular file"):
        runstate.load("zzdemo")


def test_a_fifo_record_is_refused_without_blocking(run_root):
    (run_root / "zzdemo").mkdir(parents=True)
    os.mkfifo(run_root / "zzdemo" / "state.json")
    began = time.monotonic()
    assert len(runstate.scan().refused) == 1
    assert time.monotonic() - began < 1


def test_a_symlinked_run_directory_is_refused_and_its_target_kept(run_root, outside):
    run_root.mkdir(mode=0o700)
    os.symlink(outside / "zzdemo", run_root / "zzdemo")
    before = snapshot(outside)
    with pytest.raises(FabricError, match="a symbolic link; left alone"):
        runstate.load("zzdemo")
    removed = runstate.clean()
    assert removed.directories == [] and removed.refused == [f"{run_root}/zzdemo: a symbolic link; left alone"]
    assert snapshot(outside) == before and os.path.islink(run_root / "zzdemo")


def test_a_run_directory_of_another_owner_is_refused(run_root, monkeypatch):
    write_record(run_root, "zzdemo", record())
    os.chmod(run_root, 0o700)
    if os.geteuid() == 0:
        os.lchown(run_root / "zzdemo", 4242, 4242)
        assert runstate.scan().refused == [f"{run_root}/zzdemo: owned by uid 4242, neither root nor us; left alone"]
    else:
        pytest.skip("needs root to give a directory away")  # the root-owner case is tested above either way


# --- cleanup --------------------------------------------------------------------------------------


def test_destroy_without_namespaces_removes_only_the_directory(run_root):
    state = make_state("zzgone")
    state.save()
    (run_root / "zzgone" / "s1.log").write_text("agent log\n")
    (run_root / "other").mkdir()
    make_state("zzkeep").save()
    removed = runstate.destroy(state)
    assert (removed.processes, removed.namespaces) == ([], [])
    assert removed.directories == [str(run_root / "zzgone")]
    assert not (run_root / "zzgone").exists()
    assert (run_root / "other").is_dir()
    assert [s.run for s in runstate.runs()] == ["zzkeep"]
    # twice is harmless
    again = runstate.destroy(state)
    assert (again.processes, again.namespaces, again.directories) == ([], [], [])


def test_destroy_accumulates_into_removed(run_root):
    first, second = make_state("zzone"), make_state("zztwo")
    first.save()
    second.save()
    removed = Removed(processes=[1])
    assert runstate.destroy(first, removed) is removed
    runstate.destroy(second, removed)
    assert removed.directories == [str(run_root / "zzone"), str(run_root / "zztwo")]
    assert removed.processes == [1]


def test_destroy_refuses_a_record_that_fails_a_check(run_root, outside):
    state = make_state()
    state.save()
    state.run = "../outside"
    with pytest.raises(BadRecord, match="bad run name"):
        runstate.destroy(state)
    assert (run_root / "zzdemo" / "state.json").is_file() and (outside / "keep.txt").is_file()


def test_destroy_leaves_a_run_directory_that_became_a_link(run_root, outside):
    state = make_state()
    state.save()
    os.rename(run_root / "zzdemo", run_root / "moved")
    os.symlink(outside / "zzdemo", run_root / "zzdemo")
    removed = runstate.destroy(state)
    assert removed.directories == [] and removed.refused == [f"{run_root}/zzdemo: a symbolic link; left alone"]
    assert (outside / "zzdemo" / "state.json").is_file()


def test_destroy_signals_recorded_agents_only_while_they_are_ours(run_root):
    """PID reuse: an agent recorded with another start time is someone else now, and survives."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        state = make_state("zzpids", agents={"h1": child.pid})
        state.note_started([child.pid])
        state.started[str(child.pid)] += 1
        state.save()
        assert runstate.destroy(runstate.load("zzpids")).processes == []
        time.sleep(0.1)
        assert child.poll() is None
        state.note_started([child.pid])
        state.save()
        assert runstate.destroy(runstate.load("zzpids")).processes == [child.pid]
        assert child.wait(timeout=2) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_clean_all_removes_runs_and_orphans(run_root):
    for name, created in (("zzb", 2.0), ("zza", 1.0)):
        make_state(name, created=created).save()
    (run_root / "orphan").mkdir()
    removed = runstate.clean()
    assert removed.directories == [str(run_root / "zza"), str(run_root / "zzb"), str(run_root / "orphan")]
    assert removed.namespaces == [] and removed.processes == [] and removed.refused == []
    assert os.listdir(run_root) == []
    assert runstate.clean().summary() == "nothing to remove"


@pytest.fixture
def sleeper():
    """A process standing for an agent or an owner that still runs."""
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


def test_clean_leaves_runs_in_use_alone_and_says_why(run_root, sleeper):
    """Issue 23: clean removed a run that was up and one an experiment held (it died at iteration 145 of 201)."""
    held = make_state("zzheld", created=1.0)  # its owner (this test) runs: an experiment's fabric
    held.note_started([held.owner_pid])
    held.save()
    up = make_state("zzup", created=2.0, detached=True, owner_pid=0, agents={"h1": sleeper.pid, "s1": sleeper.pid})
    up.note_started([sleeper.pid])
    up.save()
    make_state("zzstale", created=3.0).save()  # its owner's start time was never recorded: not running
    make_state("zzdead", created=4.0, detached=True, owner_pid=0, agents={"h1": 999999}).save()  # agents gone
    (run_root / "orphan").mkdir()
    removed = runstate.clean()
    assert removed.directories == [str(run_root / r) for r in ("zzstale", "zzdead", "orphan")]
    assert removed.processes == [] and removed.refused == []
    assert removed.left == [
        f"run zzheld is held by pid {os.getpid()}, which removes it when it ends: left alone; "
        "fabric-emu clean --run zzheld --force removes it now",
        "run zzup is up (2/2 agents running): left alone; fabric-emu down --run zzup takes it down"]
    assert sorted(os.listdir(run_root)) == ["zzheld", "zzup"] and sleeper.poll() is None
    again = runstate.clean("zzup")  # one run, still in use: left
    assert again.left == removed.left[1:] and again.directories == []
    forced = runstate.clean("zzup", force=True)
    assert forced.directories == [str(run_root / "zzup")] and forced.processes == [sleeper.pid]
    assert sleeper.wait(timeout=5) == -signal.SIGTERM
    assert runstate.clean(force=True).directories == [str(run_root / "zzheld")]
    assert runstate.clean("zznone").summary() == "nothing to remove"  # as a second clean finds it
    with pytest.raises(FabricError, match="bad run name"):
        runstate.clean("../etc")


def test_clean_in_the_command_line_lists_what_it_left(run_root, monkeypatch, capsys, sleeper):
    monkeypatch.setattr(cli, "require_root", lambda: None)
    up = make_state("zzup", detached=True, owner_pid=0, agents={"h1": sleeper.pid})
    up.note_started([sleeper.pid])
    up.save()
    assert cli.main(["clean"]) == 0
    assert capsys.readouterr() == ("nothing to remove\nrun zzup is up (1/1 agents running): left alone; "
                                   "fabric-emu down --run zzup takes it down\n", "")
    assert cli.main(["clean", "--run", "zzup"]) == 1  # the one run asked for was not removed
    assert "left alone" in capsys.readouterr().out
    assert cli.main(["clean", "--run", "zzup", "--force"]) == 0
    assert capsys.readouterr().out.startswith("removed 1 processes")
    assert not (run_root / "zzup").exists()


def test_down_leaves_a_run_its_owner_holds_unless_forced(run_root, monkeypatch, capsys):
    """Decided for issue 23: an experiment's fabric is the experiment's to remove; `down` says so in one line."""
    monkeypatch.setattr(cli, "require_root", lambda: None)
    held = make_state()
    held.note_started([held.owner_pid])
    held.save()
    assert cli.main(["down", "--run", "zzdemo"]) == 1
    assert capsys.readouterr() == ("", f"fabric-emu: run zzdemo is held by pid {os.getpid()}, which removes it when "
                                       "it ends: left alone; fabric-emu down --run zzdemo --force takes it down now\n")
    assert (run_root / "zzdemo" / "state.json").is_file()
    assert cli.main(["down", "--run", "zzdemo", "--force"]) == 0
    assert capsys.readouterr().out.startswith("run zzdemo is down: removed 1 run directories")
    make_state().save()  # a stale run, as before
    assert cli.main(["down", "--run", "zzdemo"]) == 0 and not (run_root / "zzdemo").exists()


@pytest.mark.parametrize("argv", [["down", "--run", "zzdemo"], ["fault", "--run", "zzdemo", "h1", "stall"],
                                  ["clean", "--run", "zzdemo"]])
def test_down_fault_and_clean_wait_for_a_run_another_command_is_changing(run_root, monkeypatch, capsys, argv):
    """Issue 23: `down` racing `link` pulled the agents from under it (a traceback, the cable down for good)."""
    monkeypatch.setattr(cli, "require_root", lambda: None)
    monkeypatch.setattr(runstate, "LOCK_WAIT_S", 0.2, raising=False)  # (the code before issue 23 had no lock)
    make_state().save()
    fd = _hold(run_root, "zzdemo")  # a link under way
    try:
        assert cli.main(argv) == 1
    finally:
        os.close(fd)
    out, err = capsys.readouterr()
    busy = "run zzdemo is busy: another command (link, fault, down, clean or its runner's teardown) still held it " \
           "after 0.2 s; try again"
    assert (out, err) == (("nothing to remove\n", f"fabric-emu: {busy}; left alone\n") if argv[0] == "clean"
                          else ("", f"fabric-emu: {busy}\n"))
    assert (run_root / "zzdemo" / "state.json").is_file()


def _hold(run_root, run: str) -> int:
    """Another command's hold on run ``run``'s lock (an flock of its directory through a descriptor of our own)."""
    fd = os.open(run_root / run, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_the_run_lock_waits_for_another_holder_and_says_so_in_one_line(run_root, monkeypatch):
    monkeypatch.setattr(runstate, "LOCK_WAIT_S", 0.2)
    make_state().save()
    fd = _hold(run_root, "zzdemo")
    try:
        began = time.monotonic()
        with pytest.raises(runstate.RunBusy) as err:
            with runstate.run_lock("zzdemo"):
                pass
        assert 0.2 <= time.monotonic() - began < 2 and one_line(str(err.value))
        assert str(err.value).startswith("run zzdemo is busy: another command (link, fault, down, clean or its ")
        removed = runstate.clean(force=True)  # a teardown under way: left to it
        assert removed.directories == [] and removed.refused == [f"{err.value}; left alone"]
    finally:
        os.close(fd)
    with runstate.run_lock("zzdemo") as present:
        assert present
        with runstate.run_lock("zzdemo", wait_s=0) as again:  # the same thread: held already
            assert again
    assert not any(p.name.startswith("zzdemo") for p in run_root.iterdir() if p.name != "zzdemo")
    assert os.listdir(run_root / "zzdemo") == ["state.json"]  # nothing created for the lock


def test_the_run_lock_tells_who_waited_that_the_run_went_meanwhile(run_root):
    make_state().save()
    fd = _hold(run_root, "zzdemo")
    outcome = []

    def waiter():
        with runstate.run_lock("zzdemo", wait_s=10) as present:
            outcome.append(present)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.1)
    shutil.rmtree(run_root / "zzdemo")  # a down, holding the lock, removed the run
    os.close(fd)
    thread.join(timeout=5)
    assert outcome == [False]
    with runstate.run_lock("zzdemo") as present:  # no directory at all
        assert not present


def test_the_run_lock_follows_no_link(run_root, outside):
    run_root.mkdir()
    os.symlink(outside / "zzdemo", run_root / "zzdemo")
    with pytest.raises(FabricError, match="zzdemo: a symbolic link; left alone"):
        with runstate.run_lock("zzdemo"):
            pass


def test_replace_file_is_whole_or_nothing_and_follows_no_link(run_root, outside):
    make_state().save()
    path = str(run_root / "zzdemo" / "links_down.json")
    runstate.replace_file(path, "[]")
    assert open(path).read() == "[]" and mode(path) == 0o600
    os.symlink(outside / "keep.txt", path + ".tmp")  # planted where the temporary file goes
    before = snapshot(outside)
    with pytest.raises(OSError):
        runstate.replace_file(path, '[["s1", "s3"]]')
    assert open(path).read() == "[]" and snapshot(outside) == before
    assert not os.path.lexists(path + ".tmp")


def test_removed_summary():
    assert Removed().summary() == "nothing to remove"
    assert Removed(processes=[12, 34]).summary() == "removed 2 processes (12, 34)"
    full = Removed(processes=[7], namespaces=["r-h1", "r-s1"], directories=["/run/fabric-emu/r"])
    assert full.summary() == ("removed 1 processes (7); 2 namespaces (r-h1, r-s1); "
                              "1 run directories (/run/fabric-emu/r)")


# --- names ------------------------------------------------------------------------------------


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
    with pytest.raises(FabricError, match="bad run name"):
        runstate.run_dir("../abc")


# --- signals during cleanup -----------------------------------------------------------------------


class Stopped(Exception):
    pass


@pytest.fixture
def sigterm_raises():
    def handler(signum, frame):
        raise Stopped(signum)

    saved = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, saved)


def test_uninterrupted_finishes_the_body_then_acts_on_the_signal(sigterm_raises):
    done = []
    with pytest.raises(Stopped):
        with runstate.uninterrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            with runstate.uninterrupted():   # nested: still deferred, not re-raised inside
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
            done.append("body")
    assert done == ["body"]
    assert signal.getsignal(signal.SIGTERM) is sigterm_raises


def test_uninterrupted_as_a_decorator_and_without_signals(sigterm_raises):
    @runstate.uninterrupted()
    def teardown():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        return "finished"

    with pytest.raises(Stopped):
        teardown()
    with runstate.uninterrupted():
        pass
    assert signal.getsignal(signal.SIGTERM) is sigterm_raises


# --- fuzz ----------------------------------------------------------------------------------------


# The run root fixture is the same directory for every example; each example sets it up itself.
FIXTURES_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                              HealthCheck.data_too_large])


def _check_loaded(state: RunState, root: str) -> None:
    """What a record that passed may be used for: every path it leads to is under the run root."""
    assert state.directory == os.path.join(root, state.run)
    assert os.path.dirname(os.path.normpath(state.directory)) == root
    for name in [*state.agents, *state.nodes]:
        sock = os.path.normpath(os.path.join(state.directory, f"{name}.sock"))
        assert os.path.dirname(sock) == state.directory
    assert all(ns.startswith(state.run + "-") and "/" not in ns for ns in state.namespaces)
    for path in (state.capture_dir, state.telemetry_dir):
        assert path is None or (os.path.isabs(path) and os.path.normpath(path) == path)


def _outcome(raw: bytes, root: str) -> str:
    """'ok' or 'refused'; any other exception escapes and fails the fuzz test."""
    try:
        state = runstate.parse_record("zzdemo", raw)
    except BadRecord as err:
        assert one_line(str(err)), str(err)
        event("refused")
        return "refused"
    _check_loaded(state, root)
    event("loaded")
    return "ok"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
names_like = st.sampled_from(["h1", "s1", "zzdemo-h1", "../x", "/etc", "zzother-h1", "h1-eth0", "H1", "", "12"])


@FIXTURES_OK
@given(raw=st.binary(max_size=2000) | st.builds(lambda d: json.dumps(d).encode(), json_values))
def test_fuzz_state_record_bytes(run_root, raw):
    """Any bytes or JSON as state.json: a good record or a one-line refusal."""
    assert _outcome(raw, str(run_root)) in ("ok", "refused")


GOOD = {  # values a record may hold, so that the fuzzer also builds records that pass and get followed
    "run": ["zzdemo"], "owner_pid": [0, 1, runstate.PID_MAX], "created": [0, 1.5, 1e10], "topo": ["", "fattree,4"],
    "namespaces": [[], ["zzdemo-probe"], ["zzdemo-h1", "zzdemo-leaf-1"]], "nodes": [{}],
    "agents": [{}, {"h1": 5, "s1": runstate.PID_MAX}], "features": [{}, {"htb": True, "netem": False}],
    "fabric": ["lossy", "ib"], "capture_dir": [None, "/tmp/caps"], "captures": [{}, {"h1-eth0": 7, "s1-eth12": 8}],
    "telemetry_dir": [None, "/"], "detached": [True, False], "started": [{}, {"5": 0, "4194304": 2**63 - 1}],
}


@FIXTURES_OK
@given(data=st.data())
def test_fuzz_state_record_fields(run_root, data):
    """A good record with one field replaced by anything: loaded and safe to follow, or refused in one line."""
    field = data.draw(st.sampled_from(sorted(GOOD) + ["colour"]), label="field")
    hostile = (json_values | names_like | st.dictionaries(names_like, json_values | names_like, max_size=3)
               | st.lists(names_like, max_size=3))
    good = data.draw(st.booleans(), label="good")
    value = data.draw(st.sampled_from(GOOD.get(field, [None])) if good else hostile, label="value")
    content = record()
    content[field] = value
    assert _outcome(json.dumps(content).encode(), str(run_root)) in ("ok", "refused")


@FIXTURES_OK
@given(entry=st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1,
                     max_size=40).filter(lambda s: s not in (".", "..")),
       content=st.sampled_from([None, b"{}", json.dumps(record()).encode()]))
def test_fuzz_run_root_entries(run_root, entry, content):
    """Any directory name under the run root: a run, an orphan, or one refusal line; nothing else."""
    shutil.rmtree(run_root, ignore_errors=True)
    run_root.mkdir(mode=0o700)
    try:
        (run_root / entry).mkdir()
    except OSError:  # a name too long for the file system
        return
    if content is not None:
        (run_root / entry / "state.json").write_bytes(content)
    found = runstate.scan()
    assert len(found.runs) + len(found.orphans) + len(found.refused) == 1
    assert all(one_line(line) and "\x1b" not in line for line in found.refused)
    for state in found.runs:
        _check_loaded(state, str(run_root))
        assert state.run == entry == "zzdemo"
    assert all(runstate.run_dir(name) == str(run_root / name) for name in found.orphans)


# --- teardown that cannot convert its captures ------------------------------------------------------


def test_finish_run_removes_the_run_even_if_its_captures_fail(run_root, monkeypatch):
    import emulator.fabric.teardown

    def broken(tcpdumps, directory):
        raise FabricError("editcap could not convert h1-eth0.pcap")

    monkeypatch.setattr(emulator.fabric.teardown, "stop_detached", broken)
    state = make_state("zzcaps", captures={"h1-eth0": 4242}, started={"4242": 1}, capture_dir="/nonexistent/caps")
    state.save()
    with pytest.raises(FabricError, match="editcap could not convert"):
        emulator.fabric.teardown.finish_run(state)
    assert not (run_root / "zzcaps").exists()


def test_a_teardown_after_a_forced_removal_keeps_what_that_removal_kept(run_root, tmp_path, monkeypatch):
    """``down --force`` took the run from its owner and wrote its telemetry; the owner's own teardown, later,
    found the run gone and wrote it again with no agent left to count: empty files over the good ones."""
    import emulator.fabric.teardown

    kept = tmp_path / "telemetry"
    kept.mkdir()
    (kept / "stats.json").write_text("the forced down's counters")
    monkeypatch.setattr(emulator.fabric.teardown, "stop_detached",
                        lambda *args: pytest.fail("captures converted again"))
    state = make_state("zzgone", captures={"h1-eth0": 4242}, started={"4242": 1}, capture_dir=str(tmp_path),
                       telemetry_dir=str(kept))
    emulator.fabric.teardown.finish_run(state)  # never saved: the run directory is gone, as after the forced down
    assert (kept / "stats.json").read_text() == "the forced down's counters"
    assert sorted(p.name for p in kept.iterdir()) == ["stats.json"]


def test_a_capture_converted_by_an_earlier_teardown_is_taken_as_it_is(tmp_path, monkeypatch):
    from emulator.fabric import capture

    (tmp_path / "s1-eth1.pcapng").write_bytes(b"converted")
    monkeypatch.setattr(capture.subprocess, "run", lambda *a, **k: pytest.fail("editcap ran again"))
    assert capture.convert_to_pcapng([str(tmp_path / "s1-eth1.pcap")]) == [str(tmp_path / "s1-eth1.pcapng")]

