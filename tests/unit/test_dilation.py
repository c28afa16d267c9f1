"""Time dilation: a modelled rate, D = modelled / emulated, modelled delays scaled, results in modelled time."""

from __future__ import annotations

import math

import pytest

from emulator.errors import FabricError
from emulator.model.dilation import MAX_DILATION, dilation, emulated_ns, modelled_us
from emulator.study import report
from emulator.study.experiment import load_experiment
from emulator.study.runner import link_time_us, modelled
from test_experiment import load_text

BASE = 'name = "d"\ntopo = "star,4"\ncollective = "incast"\nsize = "64KiB"\n'


def test_the_factor_is_modelled_over_emulated_and_bounded():
    assert dilation(400_000_000_000, 20_000_000) == 20_000
    assert dilation(20_000_000, 20_000_000) == 1.0
    with pytest.raises(FabricError, match="below the emulated link rate"):
        dilation(10_000_000, 20_000_000)
    with pytest.raises(FabricError, match="at most"):
        dilation(MAX_DILATION * 1_000_001, 1_000_000)
    assert emulated_ns(1_000, 20_000) == 20_000_000  # 1 us of cable at 400 Gbit/s: 20 ms at 20 Mbit/s
    assert modelled_us(776_000.0, 20_000) == 38.8


def test_a_modelled_fabric_waits_its_delays_d_times(tmp_path):
    exp = load_text(tmp_path, BASE + 'model = "400gbit"\nlink = { bw = "20mbit", delay = "1us" }\n'
                    '[[variants]]\nname = "v"\n')
    [variant] = exp.variants
    assert (variant.model, variant.dilation) == ("400gbit", 20_000)
    assert variant.link["delay"] == "20000000ns" and variant.link["bw"] == "20mbit"
    plain = load_text(tmp_path, BASE + 'link = { bw = "20mbit", delay = "1us" }\n[[variants]]\nname = "v"\n')
    assert (plain.variants[0].model, plain.variants[0].dilation, plain.variants[0].link["delay"]) == (None, 1.0, "1us")


@pytest.mark.parametrize("setting, message", [
    ('model = "1mbit"', 'key "model": modelled rate 1 Mbit/s is below the emulated link rate'),
    ('model = "fast"', 'key "model": bad rate'),
    ('model = "400gbit"\nlink = { bw = "20mbit", delay = "100us" }', 'is 2 s at D = 20000: at most 1 s'),
])
def test_bad_models_are_one_line_errors(tmp_path, setting, message):
    with pytest.raises(FabricError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_text(tmp_path, BASE + setting + '\n[[variants]]\nname = "v"\n')
    assert "\n" not in str(info.value)


def test_results_in_modelled_time_state_d():
    variant = next(v for v in load_experiment("fidelity").variants if v.name == "incast-lossless-bw20mbit")
    assert variant.dilation == 20_000
    bound = link_time_us(variant)
    entry = modelled(variant, [bound, bound * 1.5], bound)
    assert entry["rate"] == "400gbit" and entry["dilation"] == 20_000
    assert math.isclose(entry["link_time_us"], bound / 20_000, rel_tol=1e-3)
    assert math.isclose(entry["cct_us"]["mean"], 1.25 * bound / 20_000, rel_tol=1e-3)
    # 7 x 64 KiB at 400 Gbit/s, with the packets' headers: about 10 us
    assert 9.0 < entry["link_time_us"] < 11.0


def test_the_report_prints_modelled_times_and_skips_odd_shapes():
    good = {"name": "v", "model": {"rate": "400gbit", "dilation": 20000, "link_time_us": 38.78,
                                   "cct_us": {"p50": 39.1, "p99": 40.2, "mean": 39.5}}}
    [line] = report.modelled_lines([good, {"name": "plain", "model": None}, {"model": {"dilation": "x"}},
                                    {"model": {"dilation": 0, "cct_us": {}}}, {"model": "400gbit"}])
    assert line == "  v: modelled 400gbit, D = 20000: CCT p50 39.10 us, p99 40.20 us, mean 39.50 us; link time 38.78 us"


def test_the_envelope_takes_swept_rates_and_verdicts():
    def point(fabric, bw, ratio, faithful):
        return {"name": f"x-{bw}", "collective": "allreduce", "fabric": fabric, "params": {"bw": bw},
                "cct_over_link_time": ratio, "fidelity": {"faithful": faithful, "unfaithful": {}}}
    series = report.envelope_points([point("ib", "100mbit", 2.3, False), point("ib", "5mbit", 1.02, True),
                                     point("lossy", "5mbit", 1.01, True), {"params": {"bw": "fast"}},
                                     {"params": "x", "cct_over_link_time": 1.0}, point("ib", ["x"], 1.0, True)])
    assert series == {"allreduce ib": [(5.0, 1.02, True), (100.0, 2.3, False)], "allreduce lossy": [(5.0, 1.01, True)]}
