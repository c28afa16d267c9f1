"""This machine's calibration: fastest faithful rates per shape, cached, shown, used by bw = "calibrated"."""

from __future__ import annotations

import json

import pytest

from emulator.errors import FabricError
from emulator.study import calibration
from emulator.study.runner import _calibrate
from emulator.study.experiment import load_experiment
from test_experiment import load_text


def variant(name, fabric, bw_faithful, collective="incast", mtu=4096):
    return {"name": name, "topo": "star,8", "collective": collective, "fabric": fabric, "mtu": mtu,
            "fidelity": {"faithful": bw_faithful, "unfaithful": {}}}


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


@pytest.mark.parametrize("content", [b"not json", b"[]", b'{"machine": {}, "shapes": {"x": {"fastest_faithful_bps": -1}}}',
                                     b'{"machine": {}, "shapes": {"x": {"fastest_faithful_bps": true}}}',
                                     b'{"machine": 1, "shapes": {}}', b"\xff" * 10])
def test_a_cache_fabric_emu_did_not_write_is_refused_in_one_line(cache, content):
    import os
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(content)
    with pytest.raises(FabricError, match="is not one fabric-emu wrote") as info:
        calibration.load()
    assert "\n" not in str(info.value)


def test_another_machines_calibration_is_not_used(cache, tmp_path):
    calibration.save({"machine": {"machine_id": "elsewhere", "cpus": 64, "kernel": "x"},
                      "shapes": {"star,4 incast lossless": {"fastest_faithful_bps": 10**8, "points": []}}})
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
