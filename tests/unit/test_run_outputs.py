"""What a run writes as root into directories the user chose: --telemetry and --capture.

The directories are made and checked before anything is built (output_dirs), one per run; the files are
written at teardown through no link (write_telemetry, convert_to_pcapng).  No root needed: the run record
lives under a temporary RUN_ROOT, the agents' files are written by hand.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from capture_files import classic_pcap
from emulator.errors import FabricError
from emulator.fabric import output_dirs, runstate
from emulator.fabric.capture import convert_to_pcapng
from emulator.fabric.teardown import write_telemetry

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "RUN_ROOT", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def outside(tmp_path):
    """A file of the user's, outside every directory a run writes into, that links will point to."""
    path = tmp_path / "outside.txt"
    path.write_text("the user's own file")
    return path


def finished_run(run_root, telemetry=None):
    """The record of a run whose one switch agent stopped and left its counters' series behind."""
    state = runstate.RunState(run="setel1", owner_pid=0, created=1.0, topo="star,1", namespaces=[],
                              nodes={"s1": {"kind": "switch", "netns": "setel1-s1", "ip": None}}, agents={"s1": 1},
                              telemetry_dir=telemetry)
    os.makedirs(state.directory)
    with open(os.path.join(state.directory, "s1.occupancy.csv"), "w") as f:
        f.write("time_ns,switch\n1,s1\n")
    return state


def one_line(info, *fragments):
    text = str(info.value)
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text


# --- write_telemetry ------------------------------------------------------------------------------


def test_telemetry_is_never_written_through_a_link(run_root, tmp_path, outside):
    """Links put at stats.json and occupancy.csv of the --telemetry directory during the run: replaced, the file
    they point to left alone."""
    directory = tmp_path / "telemetry"
    directory.mkdir()
    os.symlink(outside, directory / "stats.json")
    os.symlink(outside, directory / "occupancy.csv")
    write_telemetry(finished_run(run_root), str(directory))
    assert outside.read_text() == "the user's own file"
    assert sorted(os.listdir(directory)) == ["occupancy.csv", "stats.json"]
    assert all(stat.S_ISREG(os.lstat(directory / name).st_mode) for name in os.listdir(directory))
    assert json.loads((directory / "stats.json").read_text())["run"] == "setel1"
    assert (directory / "occupancy.csv").read_text() == "time_ns,switch\n1,s1\n"


def test_a_telemetry_directory_that_cannot_be_made_is_one_line(run_root):
    with pytest.raises(FabricError) as info:
        write_telemetry(finished_run(run_root), "/dev/null/x")
    one_line(info, "telemetry not written: cannot create /dev/null/x: Not a directory")


# --- convert_to_pcapng ----------------------------------------------------------------------------


def test_captures_are_converted_through_no_link(tmp_path, outside):
    """A link at a capture's pcapng name is replaced, not written through; a link at its pcap name is not read
    (nor its target removed): one line."""
    directory = tmp_path / "captures"
    directory.mkdir()
    (directory / "s1-eth1.pcap").write_bytes(classic_pcap([(1, bytes(60))], nanoseconds=True))
    os.symlink(outside, directory / "s1-eth1.pcapng")
    assert convert_to_pcapng([str(directory / "s1-eth1.pcap")]) == [str(directory / "s1-eth1.pcapng")]
    assert outside.read_text() == "the user's own file"
    assert (directory / "s1-eth1.pcapng").read_bytes()[:4] == PCAPNG_MAGIC
    assert sorted(os.listdir(directory)) == ["s1-eth1.pcapng"]
    os.symlink(outside, directory / "s1-eth2.pcap")
    with pytest.raises(FabricError) as info:
        convert_to_pcapng([str(directory / "s1-eth2.pcap")])
    one_line(info, "editcap could not convert", "s1-eth2.pcap is a symbolic link: not followed")
    assert outside.read_text() == "the user's own file"
    assert sorted(os.listdir(directory)) == ["s1-eth1.pcapng", "s1-eth2.pcap"]


def test_a_capture_editcap_refuses_is_one_line_and_leaves_no_output(tmp_path):
    directory = tmp_path / "captures"
    directory.mkdir()
    (directory / "s1-eth1.pcap").write_bytes(b"not a capture")
    with pytest.raises(FabricError) as info:
        convert_to_pcapng([str(directory / "s1-eth1.pcap")])
    one_line(info, "editcap could not convert", "s1-eth1.pcap: ")
    assert sorted(os.listdir(directory)) == ["s1-eth1.pcap"]


# --- output_dirs: before anything is built --------------------------------------------------------


@pytest.mark.parametrize("flag", ["--capture", "--telemetry"])
def test_a_directory_that_cannot_be_made_is_refused_before_the_build(run_root, tmp_path, flag):
    """`up --telemetry /dev/null/x` failed only at down, losing the telemetry; --capture half-way through the
    build with a traceback."""
    given = {"--capture": None, "--telemetry": None}
    for directory, reason in (("/dev/null/x", "cannot create /dev/null/x: Not a directory"),
                              (str(tmp_path / "file"), "not a directory")):
        (tmp_path / "file").write_text("")
        with pytest.raises(FabricError) as info:
            output_dirs.prepare(**{k[2:]: directory if k == flag else v for k, v in given.items()})
        one_line(info, f"{flag} {directory}: {reason}")


def test_missing_directories_are_made_and_removed_again_while_empty(run_root, tmp_path):
    made = output_dirs.prepare(str(tmp_path / "a" / "captures"), str(tmp_path / "a" / "b" / "telemetry"))
    assert made == [str(tmp_path / "a"), str(tmp_path / "a" / "captures"), str(tmp_path / "a" / "b"),
                    str(tmp_path / "a" / "b" / "telemetry")]
    (tmp_path / "a" / "b" / "telemetry" / "stats.json").write_text("{}")  # a failed build's telemetry stays
    output_dirs.remove_if_empty(made)
    assert sorted(os.listdir(tmp_path / "a")) == ["b"] and os.listdir(tmp_path / "a" / "b") == ["telemetry"]
    os.unlink(tmp_path / "a" / "b" / "telemetry" / "stats.json")
    output_dirs.remove_if_empty(made)
    assert not (tmp_path / "a").exists() and made == []


def test_a_directory_made_for_a_refused_up_is_removed(run_root, tmp_path):
    (tmp_path / "telemetry").mkdir()
    (tmp_path / "telemetry" / "stats.json").write_text("{}")
    with pytest.raises(FabricError):
        output_dirs.prepare(str(tmp_path / "new" / "captures"), str(tmp_path / "telemetry"))
    assert sorted(os.listdir(tmp_path)) == ["telemetry"]


@pytest.mark.parametrize("flag, name, what", [("--telemetry", "stats.json", "telemetry"),
                                              ("--telemetry", "rates.csv", "telemetry"),
                                              ("--capture", "s1-eth1.pcapng", "captures"),
                                              ("--capture", "h1-eth0.pcap", "captures")])
def test_a_directory_holding_another_runs_files_is_refused(run_root, tmp_path, flag, name, what):
    """Two runs given one --telemetry directory overwrote each other's stats.json (and captures, s1-eth1.pcapng)."""
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "notes.txt").write_text("the user's")
    output_dirs.prepare(*(str(directory) if f == flag else None for f in ("--capture", "--telemetry")))
    (directory / name).write_text("")
    with pytest.raises(FabricError) as info:
        output_dirs.prepare(*(str(directory) if f == flag else None for f in ("--capture", "--telemetry")))
    one_line(info, f"{flag} {directory} holds {what} already ({name}), which this run would overwrite; "
                   "give each run a directory of its own")


def test_a_directory_a_run_that_is_up_writes_into_is_refused(run_root, tmp_path):
    """Empty still (the telemetry comes at down), but taken."""
    directory = str(tmp_path / "telemetry")
    state = finished_run(run_root, telemetry=directory)
    state.save()
    with pytest.raises(FabricError) as info:
        output_dirs.prepare(None, directory)
    one_line(info, f"--telemetry {directory}: run setel1 (up) writes there; give each run a directory of its own")
    assert output_dirs.prepare(directory, None) == [directory]  # its captures are another matter


# --- the runner's results directory ---------------------------------------------------------------


def test_the_runners_files_are_never_written_through_a_link(tmp_path, outside):
    """The runner writes results.json (once through a temporary <name>.tmp, a name anyone could predict) and
    appends to iterations.csv and flows.csv as root: a link at any of those names is replaced or refused, what
    it points to left alone."""
    from emulator.collectives.coordinator import Flow, IterationResult
    from emulator.study import runner

    directory = tmp_path / "results"
    directory.mkdir()
    os.symlink(outside, directory / "results.json.tmp")
    os.symlink(outside, directory / "results.json")
    runner._write_json(str(directory / "results.json"), {"complete": False})
    assert outside.read_text() == "the user's own file"
    assert json.loads((directory / "results.json").read_text()) == {"complete": False}
    for name, fields in (("iterations.csv", runner.ITERATION_FIELDS), ("flows.csv", runner.FLOW_FIELDS)):
        runner._write_file(str(directory / name), runner._csv([fields]))
    row = IterationResult(0, 5, 1.25, 2.0, 0.5, "h2", "h1", "queueing", 0, 0.0, True,
                          [Flow("h2", "h1", 4096, 1.25, 0, 0)])
    runner._append_rows(str(directory), runner.csv_rows("v", [row]))
    assert (directory / "iterations.csv").read_text().splitlines()[1] == "v,0,5,1.2,2.0,h2,h1,queueing,0,0.0"
    assert (directory / "flows.csv").read_text().splitlines()[1] == "v,0,h2,h1,4096,1.2,0,0"
    for name in ("iterations.csv", "flows.csv"):
        os.rename(directory / name, tmp_path / name)
        os.symlink(outside, directory / name)
        with pytest.raises(FabricError) as info:
            runner._append_rows(str(directory), runner.csv_rows("v", [row]))
        one_line(info, f"{name} is a symbolic link: not followed")
        assert outside.read_text() == "the user's own file"
        os.unlink(directory / name)
        os.rename(tmp_path / name, directory / name)


def test_appending_refuses_a_fifo_without_opening_it_and_a_missing_file(tmp_path):
    """A FIFO at a CSV's name: refused before it is opened (an open for writing would wait for a reader)."""
    from emulator.safefiles import append_inside

    os.mkfifo(tmp_path / "iterations.csv")
    with pytest.raises(FabricError) as info:
        append_inside(str(tmp_path), "iterations.csv")
    one_line(info, "iterations.csv is not a regular file")
    with pytest.raises(FabricError) as info:
        append_inside(str(tmp_path), "flows.csv")
    one_line(info, "flows.csv: it was removed")
