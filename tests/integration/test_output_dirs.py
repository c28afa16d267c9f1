"""`up --telemetry DIR` and `--capture DIR`: refused before the build when unusable, one run's each, and written at
down through no link."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from emulator.fabric import runstate
from emulator.kernel.netns import existing_namespaces

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def nothing_of(run: str) -> bool:
    return not any(n.startswith(f"{run}-") for n in existing_namespaces()) \
        and not os.path.lexists(runstate.run_dir(run))


@pytest.mark.parametrize("flag", ["--telemetry", "--capture"])
def test_a_directory_that_cannot_be_made_is_refused_before_anything_is_built(flag):
    """--telemetry /dev/null/x failed only at down, the telemetry lost; --capture /dev/null/x was a traceback."""
    up = cli("up", "--topo", "star,2", "--name", "seout1", flag, "/dev/null/x")
    assert up.returncode == 1 and up.stdout == ""
    assert up.stderr == f"fabric-emu: {flag} /dev/null/x: cannot create /dev/null/x: Not a directory\n"
    assert nothing_of("seout1")


def test_two_runs_never_share_a_telemetry_or_capture_directory(tmp_path):
    """Two runs given one --telemetry directory overwrote each other's stats.json: the second is refused while
    the first is up, and after it is down (its files are there)."""
    telemetry, captures = str(tmp_path / "telemetry"), str(tmp_path / "captures")
    up = cli("up", "--topo", "star,1", "--name", "seout2", "--telemetry", telemetry, "--capture", captures)
    assert up.returncode == 0, up.stderr
    try:
        for flag, directory in (("--telemetry", telemetry), ("--capture", captures)):
            second = cli("up", "--topo", "star,1", "--name", "seout3", flag, directory)
            assert second.returncode == 1
            assert second.stderr == (f"fabric-emu: {flag} {directory}: run seout2 (up) writes there; give each "
                                     "run a directory of its own\n")
            assert nothing_of("seout3")
    finally:
        down = cli("down", "--run", "seout2")
    assert down.returncode == 0, down.stderr
    assert json.loads((tmp_path / "telemetry" / "stats.json").read_text())["run"] == "seout2"
    second = cli("up", "--topo", "star,1", "--name", "seout3", "--telemetry", telemetry)
    assert second.returncode == 1 and second.stderr == (
        f"fabric-emu: --telemetry {telemetry} holds telemetry already (occupancy.csv, stats.json), which this run "
        "would overwrite; give each run a directory of its own\n")
    second = cli("up", "--topo", "star,1", "--name", "seout3", "--capture", captures)
    assert second.returncode == 1 and f"--capture {captures} holds captures already (h1-eth0.pcapng, " \
                                      "s1-eth1.pcapng)" in second.stderr
    assert nothing_of("seout3")


def test_links_put_in_the_directories_during_the_run_are_not_written_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file")
    telemetry, captures = tmp_path / "telemetry", tmp_path / "captures"
    up = cli("up", "--topo", "star,1", "--name", "seout4", "--telemetry", str(telemetry), "--capture", str(captures))
    assert up.returncode == 0, up.stderr
    try:
        for planted in (telemetry / "stats.json", telemetry / "occupancy.csv", captures / "s1-eth1.pcapng"):
            planted.parent.mkdir(exist_ok=True)  # made by up now; before, the telemetry's only at down
            os.symlink(outside, planted)
    finally:
        down = cli("down", "--run", "seout4")
    assert down.returncode == 0, down.stderr
    assert outside.read_text() == "the user's own file"
    written = [telemetry / "stats.json", telemetry / "occupancy.csv", captures / "s1-eth1.pcapng",
               captures / "h1-eth0.pcapng"]
    assert all(stat.S_ISREG(os.lstat(path).st_mode) for path in written)
    assert json.loads((telemetry / "stats.json").read_text())["run"] == "seout4"
    assert sorted(os.listdir(telemetry)) == ["occupancy.csv", "stats.json"]
    assert sorted(os.listdir(captures)) == ["h1-eth0.pcapng", "s1-eth1.pcapng"]
