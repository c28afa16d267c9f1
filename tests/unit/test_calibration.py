"""This machine's calibration: fastest faithful rates per shape, cached, shown, used by bw = "calibrated"."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from emulator.errors import FabricError
from emulator.study import calibration
from emulator.study.runner import _calibrate
from emulator.study.experiment import load_experiment
from test_experiment import load_text


def variant(name, fabric, bw_faithful, collective="incast", mtu=4096, backend="emulator"):
    return {"name": name, "backend": backend, "topo": "star,8", "collective": collective, "fabric": fabric,
            "mtu": mtu, "fidelity": {"faithful": bw_faithful, "unfaithful": {}}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = str(tmp_path / "cache" / "calibration.json")
    monkeypatch.setattr(calibration, "CACHE", path)
    return path


def test_the_fastest_faithful_swept_rate_of_each_shape():
    variants = [variant("a5", "ib", True), variant("a10", "ib", True), variant("a20", "ib", False),
                variant("b5", "lossy", False), variant("other", "ib", True)]
    shapes = calibration.measured(variants, {"a5": "5mbit", "a10": "10mbit", "a20": "20mbit", "b5": "5mbit"})
    assert shapes == {
        "star,8 incast ib mtu 4096": {"fastest_faithful_bps": 10_000_000,
                                      "points": [[5_000_000, True], [10_000_000, True], [20_000_000, False]]},
        "star,8 incast lossy mtu 4096": {"fastest_faithful_bps": None, "points": [[5_000_000, False]]}}


def test_a_calibration_is_per_path_mtu(cache, tmp_path):
    """A quarter of the frames per byte: the rate a 1024-byte MTU kept up with says nothing of 4096's."""
    shapes = calibration.measured([variant("a", "ib", True, mtu=1024)], {"a": "20mbit"})
    calibration.save(calibration.merge(None, shapes, "t"))
    text = 'name = "c"\ntopo = "star,8"\ncollective = "incast"\nsize = "64KiB"\nlink = { bw = "calibrated" }\n' \
           'fabric = "ib"\n[[variants]]\nname = "v"\n'
    with pytest.raises(FabricError, match="the calibration has no 'star,8 incast ib mtu 4096'"):
        load_text(tmp_path, text)
    [v] = load_text(tmp_path, text + 'mtu = 1024\n').variants
    assert v.link["bw"] == "20000000bit" and v.mtu == 1024


def test_a_sweep_over_the_rate_is_cached_and_used_by_bw_calibrated(cache, tmp_path):
    experiment = load_experiment("fidelity")
    results = {"created_utc": "2026-12-03T18:00:00Z", "variants": [
        {**variant(v.name, v.fabric, v.params["bw"] in ("5mbit", "10mbit"), v.collective)}
        for v in experiment.variants]}
    logged = []
    _calibrate(experiment, results, logged.append)
    assert "calibration: star,8 incast lossless mtu 4096: fastest faithful rate 10 Mbit/s" in logged
    saved = json.load(open(cache))
    assert saved["machine"] == calibration.machine() and len(saved["shapes"]) == 6
    text = 'name = "c"\ntopo = "star,8"\ncollective = "allreduce"\nsize = "512KiB"\nmodel = "400gbit"\n' \
           'link = { bw = "calibrated" }\n[[variants]]\nname = "v"\nfabric = "ib"\n'
    [v] = load_text(tmp_path, text).variants
    assert v.link["bw"] == "10000000bit" and v.dilation == 40_000
    lines = calibration.lines(calibration.load())
    assert lines[1].startswith("  'star,8 allreduce ib mtu 4096': fastest faithful 10 Mbit/s (measured ")


def test_bw_calibrated_without_a_calibration_or_a_faithful_rate_is_one_line(cache, tmp_path):
    text = 'name = "c"\ntopo = "star,4"\ncollective = "incast"\nsize = "64KiB"\nlink = { bw = "calibrated" }\n' \
           '[[variants]]\nname = "v"\n'
    with pytest.raises(FabricError, match="this machine has no calibration") as info:
        load_text(tmp_path, text)
    assert "\n" not in str(info.value) and 'key "bw"' in str(info.value)
    calibration.save(calibration.merge(None, {"star,4 incast lossless mtu 4096": {
        "fastest_faithful_bps": None, "points": [[5_000_000, False]]}}, "t"))
    with pytest.raises(FabricError, match="no rate of 'star,4 incast lossless mtu 4096' was faithful"):
        load_text(tmp_path, text)
    with pytest.raises(FabricError, match="the calibration has no 'star,4 incast lossy mtu 4096'"):
        load_text(tmp_path, text.replace('name = "v"', 'name = "v"\nfabric = "lossy"'))


def cache_text(entry: str, backend: str = ', "backend": "emulator"') -> bytes:
    """A cache of this machine's whose one shape (star,4 incast lossless mtu 4096) is ``entry``, as JSON text."""
    return (f'{{"machine": {json.dumps(calibration.machine())}{backend}, '
            f'"shapes": {{"star,4 incast lossless mtu 4096": {entry}}}}}').encode()


GOOD_ENTRY = '{"fastest_faithful_bps": 50000000, "points": [[50000000, true]], "measured_utc": "t"}'
CALIBRATED_STAR4 = 'name = "c"\ntopo = "star,4"\ncollective = "incast"\nsize = "64KiB"\n' \
                   'link = { bw = "calibrated" }\n[[variants]]\nname = "v"\n'


@pytest.mark.parametrize("content", [
    b"not json", b"[]", b"{}", b"\xff" * 10, b'{"machine": 1, "shapes": {}, "backend": "emulator"}',
    cache_text("{}"),  # an entry without its fields (a KeyError once)
    cache_text('{"fastest_faithful_bps": 5000000, "points": 5, "measured_utc": "t"}'),  # a TypeError once
    cache_text('{"fastest_faithful_bps": 1' + "0" * 400 + ', "points": [[1' + "0" * 400 + ', true]], '
               '"measured_utc": "t"}'),  # a rate of 10**400 (used once)
    cache_text('{"fastest_faithful_bps": -1, "points": [], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": true, "points": [], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": 5e6, "points": [[5000000, true]], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": 10000000, "points": [[5000000, true]], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": null, "points": [[5000000, 1]], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": null, "points": [[5000000]], "measured_utc": "t"}'),
    cache_text('{"fastest_faithful_bps": null, "points": [], "measured_utc": 7}'),
    cache_text(GOOD_ENTRY, backend=', "backend": "sim"'),
])
def test_a_cache_fabric_emu_did_not_write_is_refused_in_one_line(cache, tmp_path, content):
    """By the calibration's reader and by bw = "calibrated", each in one line; the write after a sweep replaces it."""
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(content)
    with pytest.raises(calibration.UnusableCache, match="is not one fabric-emu wrote; run `fabric-emu run "
                                                        "fidelity` to make a new one") as info:
        calibration.load()
    assert "\n" not in str(info.value)
    with pytest.raises(FabricError, match="is not one fabric-emu wrote") as info:
        load_text(tmp_path, CALIBRATED_STAR4)
    assert "\n" not in str(info.value) and 'key "bw"' in str(info.value)
    experiment = load_experiment("fidelity")
    logged = []
    _calibrate(experiment, {"created_utc": "t", "variants": [
        variant(v.name, v.fabric, True, v.collective) for v in experiment.variants]}, logged.append)
    assert logged[0].endswith("is not one fabric-emu wrote: replaced") and "\n" not in logged[0]
    assert len(calibration.load()["shapes"]) == 6


def test_the_good_entry_of_those_tests_is_read(cache, tmp_path):
    """So each refusal above is the one thing changed in it, not the frame around it."""
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(cache_text(GOOD_ENTRY))
    [v] = load_text(tmp_path, CALIBRATED_STAR4).variants
    assert v.link["bw"] == "50000000bit"


def test_simulated_variants_are_not_recorded(cache, tmp_path):
    """Finding 4: a simulated sweep replaced the measured 50 Mbit/s with 800 Gbit/s, which bw = "calibrated"
    then asked of the emulator."""
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(cache_text(GOOD_ENTRY))
    experiment = load_text(tmp_path, 'name = "s"\ntopo = "star,4"\ncollective = "incast"\nsize = "64KiB"\n'
                                     'backend = "sim"\n[[variants]]\nname = "v"\n[sweep]\nbw = ["100gbit", "800gbit"]\n')
    results = {"created_utc": "t", "variants": [
        {**variant(v.name, v.fabric, True, backend="sim"), "topo": "star,4"} for v in experiment.variants]}
    assert calibration.measured(results["variants"], {v.name: v.params["bw"] for v in experiment.variants}) == {}
    logged = []
    _calibrate(experiment, results, logged.append)
    assert logged == ["calibration: nothing recorded; only emulated variants with a fidelity verdict are "
                      "(a simulation is faithful at any rate)"]
    [v] = load_text(tmp_path, CALIBRATED_STAR4).variants
    assert v.link["bw"] == "50000000bit"


def test_a_cache_an_older_version_wrote_is_not_used(cache, tmp_path):
    """It may hold a simulated variant's rate: no backend field, refused in one line, replaced by the next sweep."""
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(cache_text('{"fastest_faithful_bps": 800000000000, "points": [[800000000000, true]], '
                           '"measured_utc": "t"}', backend=""))
    with pytest.raises(FabricError, match="was written by an older fabric-emu, which recorded simulated variants "
                                          "too; run `fabric-emu run fidelity` to make a new one") as info:
        load_text(tmp_path, CALIBRATED_STAR4)
    assert "\n" not in str(info.value)
    experiment = load_experiment("fidelity")
    logged = []
    _calibrate(experiment, {"created_utc": "t", "variants": [
        variant(v.name, v.fabric, True, v.collective) for v in experiment.variants]}, logged.append)
    assert "which recorded simulated variants too: replaced" in logged[0]
    assert calibration.load()["backend"] == "emulator"


def run_calibration_command(cache: str) -> subprocess.CompletedProcess:
    """``fabric-emu calibration`` with its cache at ``cache``, in a child that cannot hang the suite."""
    code = ("import sys; from emulator.study import calibration; from emulator import cli; "
            f"calibration.CACHE = {cache!r}; sys.exit(cli.main(['calibration']))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("kind", ["fifo", "link to a fifo", "link to a file", "directory"])
def test_a_cache_that_is_not_a_regular_file_is_one_line_and_never_hangs(cache, tmp_path, kind):
    """A FIFO at (or linked from) the cache's name hung `calibration`: nothing is followed, only a regular
    file is opened."""
    os.makedirs(os.path.dirname(cache))
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_bytes(cache_text(GOOD_ENTRY))
    if kind == "fifo":
        os.mkfifo(cache)
    elif kind == "directory":
        os.mkdir(cache)
    else:
        os.symlink(tmp_path / ("fifo" if "fifo" in kind else "file"), cache)
    done = run_calibration_command(cache)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    reason = "is a symbolic link: not followed" if "link" in kind else "is not a regular file"
    assert line == (f"fabric-emu: the calibration cache is unusable: {cache} {reason}; "
                    "run `fabric-emu run fidelity` to make a new one")


def test_the_calibration_command_reads_a_good_cache_and_a_missing_one(cache, tmp_path):
    done = run_calibration_command(cache)
    assert done.returncode == 0 and done.stdout.startswith("no calibration on this machine")
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(cache_text(GOOD_ENTRY))
    done = run_calibration_command(cache)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines()[1] == "  'star,4 incast lossless mtu 4096': fastest faithful 50 Mbit/s " \
                                          "(measured 't': 50 Mbit/s yes)"


def test_the_cache_is_written_whole_never_through_a_link(cache, tmp_path):
    """A link at the cache's name, or at the temporary name the writer once used (<cache>.<pid>.tmp), is
    replaced or left alone, never written through; the cache is mode 0644 whatever the umask."""
    os.makedirs(os.path.dirname(cache))
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file")
    os.symlink(outside, cache)
    os.symlink(outside, f"{cache}.{os.getpid()}.tmp")
    old_umask = os.umask(0o077)
    try:
        calibration.save(calibration.merge(None, calibration.measured([variant("a", "ib", True)], {"a": "5mbit"}),
                                           "t"))
    finally:
        os.umask(old_umask)
    assert outside.read_text() == "the user's own file"
    st = os.lstat(cache)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert calibration.load()["shapes"]["star,8 incast ib mtu 4096"]["fastest_faithful_bps"] == 5_000_000
    assert sorted(os.listdir(os.path.dirname(cache))) == sorted(["calibration.json", f"calibration.json.{os.getpid()}.tmp"])


def test_another_machines_calibration_is_not_used(cache, tmp_path):
    calibration.save({"backend": "emulator", "machine": {"machine_id": "elsewhere", "cpus": 64, "kernel": "x"},
                      "shapes": {"star,4 incast lossless": {"fastest_faithful_bps": 10**8, "measured_utc": "t",
                                                            "points": [[10**8, True]]}}})
    with pytest.raises(FabricError, match="measured on another machine"):
        calibration.calibrated_rate("star,4", "incast", "lossless", 4096)
    assert "ANOTHER machine" in calibration.lines(calibration.load())[0]


def test_a_cache_that_cannot_be_written_is_one_line_and_the_run_stands(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(calibration, "CACHE", str(blocker / "calibration.json"))  # its directory is a file
    experiment = load_experiment("fidelity")
    results = {"created_utc": "t", "variants": [variant(v.name, v.fabric, True, v.collective)
                                                for v in experiment.variants]}
    logged = []
    _calibrate(experiment, results, logged.append)
    assert logged[-1].startswith("calibration not saved: ") and "\n" not in logged[-1]
