"""The report on synthetic results directories: loading, table, plots, command.

Each test writes a results directory by hand in the format that
``fabric-emu run`` writes (docs/results.md), so nothing here needs root or
a fabric.
"""

import io
import json
import os
from pathlib import Path

import pytest

from emulator.study import report
from emulator.errors import FabricError
from emulator.study.report import Sample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A DCQCN rate trace as the RNICs write it: h2's QP cut twice and raised once, h3's cut once.
RATES = ("time_ns,host,qpn,remote,rate_bps,target_bps,alpha,event\n"
         "2000000,h2,17,10.0.0.1,10000000,20000000,1.000000,cnp\n"
         "1000000,h3,17,10.0.0.1,10000000,20000000,1.000000,cnp\n"
         "3000000,h2,17,10.0.0.1,5000000,10000000,1.000000,cnp\n"
         "4000000,h2,17,10.0.0.1,7500000,10000000,0.996094,timer\n")


def variant(name, fabric, collective="incast", p50=700.0, p99=750.0, mean=710.0, **extra):
    return {"name": name, "fabric": fabric, "collective": collective, "topo": "star,8", "hosts": 8,
            "size": 262144, "iterations": 3, "warmup": 2, "params": {"bw": "20mbit", "loss": 0.0},
            "cct_us": {"p50": p50, "p99": p99, "max": p99 + 10, "mean": mean, "min": p50 - 10},
            "algbw_gbps": 0.01, "busbw_gbps": 0.01, "drops": 0 if fabric == "lossless" else 41,
            "retransmissions": 0 if fabric == "lossless" else 7, "timeouts": 0, "pfc_sent": 12, "ecn_marked": 3,
            "paused_ms": 4.2, "start_skew_us": 80.0, "start_skew_p99_us": 70.0,
            "stragglers": {"retransmission": 0, "pause": 2, "queueing": 1}, "verified": True, **extra}


def straggler(name, p, mean, hit):
    pred = {"p": p, "packets": 2048, "hit_probability": hit, "recovery_gbn_us": 11000.0,
            "recovery_rto_us": 67108.9, "baseline_mean_us": 700000.0,
            "predicted_gbn_us": 700000.0 + hit * 11000.0, "predicted_rto_us": 700000.0 + hit * 67108.9}
    return variant(name, "lossy", mean=mean, p50=mean, p99=mean, prediction=pred)


# time_ns,switch,port,priority,ingress_bytes,egress_bytes,egress_paused,xoff -- change-only rows
OCCUPANCY = [
    (1_000_000, "s1", "eth1", 3, 0, 2048, 0, 0),
    (1_000_000, "s1", "eth2", 3, 0, 1024, 0, 0),
    (2_000_000, "s1", "eth1", 3, 4096, 30000, 0, 1),   # s1 asserts XOFF on eth1 at 1 ms
    (2_000_000, "s1", "eth1", 0, 0, 10000, 0, 0),      # eth1 total 40000: the busiest
    (2_000_000, "s1", "eth2", 3, 0, 35000, 1, 0),      # eth2 alone reaches 35000, and its egress is paused
    (3_000_000, "s1", "eth2", 3, 0, 0, 0, 0),
    (4_000_000, "s1", "eth1", 3, 0, 5000, 0, 0),       # XOFF released at 3 ms
    (4_000_000, "s2", "eth1", 3, 0, 39000, 0, 1),      # another switch: not s1's pause
    (5_000_000, "s1", "eth1", 0, 0, 0, 0, 0),
]


def write_directory(path, variants, complete=True, occupancy=None, iterations=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({  # as emulator.study.experiment.run_config writes it
        "experiment": "headline", "description": "lossless against lossy", "source": "built-in:headline",
        "created_utc": "2026-12-03T08:30:00Z", "git_commit": "abc123", "kernel": "6.18.44", "python": "3.11.7",
        "cpus": 2, "cpu_model": "x", "memory_bytes": 1 << 34, "features": {"htb": True, "tbf": True, "netem": False},
        "seeds": [1], "variants": []}))
    (path / "results.json").write_text(json.dumps({
        "experiment": "headline", "created_utc": "2026-12-03T08:30:00Z", "complete": complete, "variants": variants}))
    if iterations is None:
        iterations = [(v["name"], i, v["cct_us"]["mean"] + 10 * i) for v in variants for i in range(2, 5)]
    lines = ["variant,iteration,start_ns,cct_us,start_skew_us,last_src,last_dst,cause,retransmissions,paused_us"]
    lines += [f"{name},{i},{1000 * i},{cct},5.0,h2,h1,pause,0,100.0" for name, i, cct in iterations]
    (path / "iterations.csv").write_text("\n".join(lines) + "\n")
    (path / "flows.csv").write_text("variant,iteration,src,dst,bytes,fct_us,retransmissions,timeouts\n")
    for name, rows in (occupancy or {}).items():
        telemetry = path / "telemetry" / name
        telemetry.mkdir(parents=True)
        text = "time_ns,switch,port,priority,ingress_bytes,egress_bytes,egress_paused,xoff\n"
        (telemetry / "occupancy.csv").write_text(text + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def headline(tmp_path):
    return write_directory(tmp_path / "headline",
                           [variant("incast-lossless", "lossless"),
                            variant("incast-lossy", "lossy", p99=2032.5, mean=1704.0),
                            variant("allreduce-lossless", "lossless", collective="allreduce")],
                           occupancy={"incast-lossless": OCCUPANCY})


def samples(rows):
    return [Sample(t, sw, port, prio, ing, eg, bool(paused), bool(xoff))
            for t, sw, port, prio, ing, eg, paused, xoff in rows]


# --- loading ---------------------------------------------------------------------------------------


def assert_one_line(err, *fragments):
    text = str(err.value)
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text


def test_missing_directory(tmp_path):
    with pytest.raises(FabricError) as err:
        report.load_results(str(tmp_path / "nope"))
    assert_one_line(err, "no such directory", "nope")


def test_directory_without_results(tmp_path):
    with pytest.raises(FabricError) as err:
        report.load_results(str(tmp_path))
    assert_one_line(err, f"no results.json in {tmp_path}: not a results directory")


def test_bad_json(tmp_path):
    (tmp_path / "results.json").write_text('{"variants": [')
    with pytest.raises(FabricError) as err:
        report.load_results(str(tmp_path))
    assert_one_line(err, "results.json line 1 column 15: not valid JSON")


def test_results_without_variants(tmp_path):
    (tmp_path / "results.json").write_text('{"experiment": "x", "variants": [{"fabric": "lossy"}]}')
    with pytest.raises(FabricError) as err:
        report.load_results(str(tmp_path))
    assert_one_line(err, "results.json", "variants")


def test_malformed_csv_row_names_file_and_line(tmp_path, headline):
    with open(os.path.join(headline, "iterations.csv"), "a") as f:
        f.write("incast-lossy,seven,0,1.0,0,h2,h1,pause,0,0\n")
    with pytest.raises(FabricError) as err:
        report.load_results(headline)
    assert_one_line(err, "iterations.csv line 11: bad value 'seven' in column iteration (expected an integer")


def test_occupancy_without_a_column(tmp_path, headline):
    path = os.path.join(headline, "telemetry", "incast-lossless", "occupancy.csv")
    with open(path, "w") as f:
        f.write("time_ns,switch,port,priority,egress_bytes\n1,s1,eth1,3,10\n")
    with pytest.raises(FabricError) as err:
        report.load_results(headline).occupancy("incast-lossless")
    assert_one_line(err, "occupancy.csv", "ingress_bytes", "egress_paused", "xoff")


def test_load(headline):
    results = report.load_results(headline)
    assert [v["name"] for v in results.variants] == ["incast-lossless", "incast-lossy", "allreduce-lossless"]
    assert results.config["git_commit"] == "abc123"
    assert results.iterations[0] == report.IterationRow("incast-lossless", 2, 730.0)
    assert results.occupancy("incast-lossless") == samples(OCCUPANCY)
    assert results.occupancy("incast-lossy") is None


# --- the table -------------------------------------------------------------------------------------


def test_the_table_flags_an_unfaithful_variant_with_its_agents_and_reasons():
    faithful = {"name": "incast-lossless", "fidelity": {"faithful": True, "unfaithful": {}}}
    starved = {"name": "allreduce-ib", "fidelity": {"faithful": False, "unfaithful": {
        "s1": ["the wire stalled 4.5% of its busy time (longest 4810 us) while frames waited for a CPU"],
        "h3": ["timers late by 3146 us at p99, over 1 frame time (606 us)"]}}}
    assert report._variant_row(faithful)[-1] == "yes" and report._variant_row(starved)[-1] == "NO"
    lines = report.fidelity_lines([faithful, starved])
    assert lines[0].startswith("allreduce-ib: NOT faithful")
    assert lines[1] == "  s1: the wire stalled 4.5% of its busy time (longest 4810 us) while frames waited for a CPU"
    assert lines[2].startswith("  h3: timers late")
    # Someone else's results.json: odd shapes give "-" or are skipped, never a traceback; control bytes escaped.
    for odd in ({"fidelity": "yes"}, {"fidelity": {"faithful": 1}}, {"fidelity": None}, {}):
        assert report._variant_row({"name": "x", **odd})[-1] == "-"
        assert report.fidelity_lines([{"name": "x", **odd}]) == []
    hostile = {"name": "v\x1b[2J", "fidelity": {"faithful": False, "unfaithful": {"s\x07": "not a list"}}}
    assert "\x1b" not in "\n".join(report.fidelity_lines([hostile]))


def test_table_rows_and_ratios(headline):
    text = report.table(report.load_results(headline))
    lines = text.splitlines()
    assert lines[0] == "headline: 3 variants (lossless against lossy)"
    assert lines[1] == "created 2026-12-03T08:30:00Z, git abc123, kernel 6.18.44, seeds 1"
    header = next(line for line in lines if line.startswith("VARIANT"))
    for column in ("FABRIC", "COLLECTIVE", "ITERS", "CCT p50 ms", "CCT p99 ms", "CCT max ms", "CCT mean ms",
                   "x LINK TIME", "DROPS", "RETRANS", "PFC", "ECN", "CNP", "SKEW max us", "FAITHFUL"):
        assert column in header
    lossy = next(line for line in lines if line.startswith("incast-lossy "))
    assert lossy.split() == ["incast-lossy", "lossy", "incast", "3", "0.70", "2.03", "2.04", "1.70",
                             "-", "41", "7", "12", "3", "-", "80.0", "-"]  # from before the monitor and DCQCN: no verdict, no CNPs
    for name in ("incast-lossless", "allreduce-lossless"):
        assert any(line.startswith(name + " ") for line in lines)
    # 2032.5 / 750 and 1704 / 710; allreduce has no lossy twin
    assert "incast: lossy p99 / lossless p99 = 2.71x (incast-lossy / incast-lossless)" in lines
    assert "incast: lossy mean / lossless mean = 2.40x (incast-lossy / incast-lossless)" in lines
    assert not any(line.startswith("allreduce:") for line in lines)
    assert "straggler" not in text and "incomplete" not in text


def test_ratio_needs_equal_setup():
    other_size = variant("incast-lossy", "lossy", p99=2000.0)
    other_size["size"] = 1024
    assert report.ratio_lines([variant("incast-lossless", "lossless"), other_size]) == []


def test_ratio_lines_name_the_congestion_control():
    """A lossless variant under DCQCN is PFC and DCQCN: multi-job's ratio lines called it "lossless"."""
    lines = report.ratio_lines([variant("lossless", "lossless", mean=1000.0),
                                variant("dcqcn", "lossless", mean=2000.0, cc="dcqcn"),
                                variant("lossy", "lossy", mean=3000.0, cc="none"),
                                variant("lossy-dcqcn", "lossy", mean=3000.0, cc="dcqcn,rai=5mbit")])
    assert [line for line in lines if "mean" in line] == [
        "incast: lossy mean / lossless mean = 3.00x (lossy / lossless)",
        "incast: lossy mean / lossless+dcqcn mean = 1.50x (lossy / dcqcn)",
        "incast: lossy+dcqcn mean / lossless mean = 3.00x (lossy-dcqcn / lossless)",
        "incast: lossy+dcqcn mean / lossless+dcqcn mean = 1.50x (lossy-dcqcn / dcqcn)"]


def test_ratio_lines_name_ib_adaptive_routing_and_uet_spraying():
    lines = report.ratio_lines([variant("lossless", "lossless", mean=1000.0),
                                variant("ib", "ib", mean=800.0, routing="static"),
                                variant("ib-ar", "ib", mean=600.0, routing="adaptive"),
                                variant("uet", "uet", mean=700.0, spray="oblivious")])
    assert [line for line in lines if "mean" in line] == [
        "incast: ib mean / lossless mean = 0.80x (ib / lossless)",
        "incast: ib+ar mean / lossless mean = 0.60x (ib-ar / lossless)",
        "incast: uet+oblivious mean / lossless mean = 0.70x (uet / lossless)"]


def test_ratio_pairs_a_swept_fabric_point_by_point():
    def point(fabric, senders, p99):
        return variant(f"incast-fabric{fabric}-senders{senders}", fabric, p99=p99, senders=senders,
                       params={"fabric": fabric, "senders": senders})

    lines = report.ratio_lines([point("lossless", 1, 100.0), point("lossless", 7, 200.0),
                                point("lossy", 1, 150.0), point("lossy", 7, 1000.0)])
    assert [line.split(" (")[0] for line in lines if "p99" in line] == [
        "incast: lossy p99 / lossless p99 = 1.50x", "incast: lossy p99 / lossless p99 = 5.00x"]
    assert "(incast-fabriclossy-senders7 / incast-fabriclossless-senders7)" in lines[2]


def test_missing_optional_keys_show_a_dash(tmp_path):
    sparse = {"name": "bare", "fabric": "lossy"}
    text = report.table(report.load_results(write_directory(tmp_path / "d", [sparse], iterations=[])))
    row = next(line for line in text.splitlines() if line.startswith("bare"))
    assert row.split() == ["bare", "lossy"] + ["-"] * 14


def test_incomplete_run(tmp_path):
    directory = write_directory(tmp_path / "d", [variant("incast-lossless", "lossless")], complete=False)
    text = report.table(report.load_results(directory))
    assert "incomplete run: it was interrupted; results for the finished variants only" in text.splitlines()


def test_prediction_table(tmp_path):
    directory = write_directory(tmp_path / "d", [straggler("loss-1e-3", 0.001, 717000.0, 0.87),
                                                 straggler("loss-1e-4", 0.0001, 704000.0, 0.185)])
    lines = report.table(report.load_results(directory)).splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("straggler:"))
    assert "P(hit)=1-(1-p)^n" in lines[title]
    header, first, second = lines[title + 2: title + 5]
    assert header.split()[:4] == ["VARIANT", "LOSS", "p", "PACKETS"]
    # sorted by p; predicted GBN 700000 + 0.185 * 11000 = 702035 us, RTO 700000 + 0.185 * 67108.9 = 712415.1 us
    assert first.split() == ["loss-1e-4", "0.0001", "2048", "0.185", "704.00", "702.03", "+0.3%", "712.42", "-1.2%",
                             "4.00"]
    # GBN 709570 us (measured +1.0%), RTO 758384.7 us (measured -5.5%)
    assert second.split() == ["loss-1e-3", "0.001", "2048", "0.870", "717.00", "709.57", "+1.0%", "758.38", "-5.5%",
                              "17.00"]


# --- occupancy -------------------------------------------------------------------------------------


def test_busiest_port_sums_priorities_with_held_values():
    # eth2 alone peaks higher (35000) than either priority of eth1 (30000, 10000), but eth1's sum is 40000;
    # s2 eth1 (39000) is lower still
    assert report.busiest_port(samples(OCCUPANCY)) == ("s1", "eth1")
    assert report.busiest_port([]) is None


def test_busiest_port_carries_values_forward():
    rows = samples([(1, "s1", "a", 0, 0, 600, 0, 0), (2, "s1", "a", 3, 0, 600, 0, 0),   # a: 600 + 600
                    (1, "s1", "b", 0, 0, 1000, 0, 0)])                                 # b: 1000
    assert report.busiest_port(rows) == ("s1", "a")


def test_xoff_intervals_any_port_of_the_switch():
    rows = samples(OCCUPANCY + [
        (2_500_000, "s1", "eth2", 0, 0, 0, 0, 1),  # overlaps eth1's XOFF and outlasts it
        (4_500_000, "s1", "eth2", 0, 0, 0, 0, 0),
        (4_800_000, "s1", "eth1", 5, 0, 0, 0, 1),  # still asserted at the last sample
    ])
    assert report.xoff_intervals(rows, "s1") == [(1.0, 3.5), (3.8, 4.0)]
    assert report.xoff_intervals(rows, "s2") == [(3.0, 4.0)]
    assert report.xoff_intervals(rows, "s3") == []


def test_egress_paused_intervals():
    rows = samples(OCCUPANCY)
    assert report.egress_paused_intervals(rows, "s1", "eth2") == [(1.0, 2.0)]
    assert report.egress_paused_intervals(rows, "s1", "eth1") == []


def test_port_series_holds_last_value_to_the_end():
    series = report.port_series(samples(OCCUPANCY), "s1", "eth1")
    assert sorted(series) == [0, 3]
    assert series[3] == ([0.0, 1.0, 3.0, 4.0], [2.0, 30000 / 1024, 5000 / 1024, 5000 / 1024])
    assert series[0] == ([1.0, 4.0, 4.0], [10000 / 1024, 0.0, 0.0])


# --- plots and the command -------------------------------------------------------------------------


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert os.path.getsize(path) > 1000


def test_make_plots(headline):
    written = report.make_plots(report.load_results(headline))
    assert written == [os.path.join(headline, "plots", name)
                       for name in ("cct_cdf.png", "cct_per_iteration.png", "queue_incast-lossless.png")]
    for path in written:
        assert_png(path)
    assert sorted(os.listdir(os.path.join(headline, "plots"))) == sorted(map(os.path.basename, written))


def test_deadlock_lines():
    stuck = {**variant("pfc", "lossless"), "deadlocked": True, "recovered_after_ms": None, "longest_stall_ms": 10009.2,
             "pfcwd": {"pfcwd_storms": 0, "pfcwd_drops": 0}}
    broken = {**variant("pfcwd", "lossless"), "deadlocked": False, "recovered_after_ms": 1538.4,
              "longest_stall_ms": 1435.7, "pfcwd": {"pfcwd_storms": 12, "pfcwd_drops": 2281}}
    assert report.deadlock_lines([stuck, broken, variant("incast-lossless", "lossless")]) == [
        "pfc: DEADLOCKED: no goodput for 10009 ms, never recovered",
        "pfcwd: no deadlock; longest stall 1436 ms, recovered after 1538 ms; PFC watchdog: 12 storms, 2281 frames dropped"]
    assert report.deadlock_lines([{**stuck, "longest_stall_ms": "x", "pfcwd": 5}]) == [
        "pfc: DEADLOCKED: no goodput for - ms, never recovered"]


def test_fault_lines():
    storm = {**variant("storm-pfcwd", "lossless"), "faults": 5, "paused_ms_by_host": {"h1": 0.0, "h2": 5005.575},
             "pfcwd": {"pfcwd_storms": 5, "stormed_ports": ["s2:s2-eth4"]}}
    assert report.fault_lines([storm, variant("calm", "lossless")]) == [
        "storm-pfcwd: 5 faults injected; watchdog storms at s2:s2-eth4; hosts paused (ms, whole run): h1 0, h2 5006"]
    hostile = {**storm, "paused_ms_by_host": {"h\n1": "x"}, "pfcwd": {"stormed_ports": "s1"}, "faults": None}
    assert report.fault_lines([hostile]) == [
        "storm-pfcwd: - faults injected; no watchdog storm; hosts paused (ms, whole run): h\\n1 -"]


def test_victim_lines():
    victim = {**variant("victim-pfc", "lossless"), "victim": {"src": "h2", "dst": "h8", "link_share": 0.1234,
                                                             "goodput_mbps": {"mean": 2.468, "p50": 2.5, "min": 1.9}}}
    assert report.victim_lines([victim, variant("incast-lossless", "lossless")]) == [
        "victim h2->h8 in victim-pfc: goodput mean 2.47 Mbit/s, min 1.90 (12% of its link)"]
    hostile = {**victim, "victim": {"goodput_mbps": {"mean": "x\n"}, "link_share": None}}
    assert report.victim_lines([hostile]) == ["victim -->- in victim-pfc: goodput mean - Mbit/s, min - (-% of its link)"]


def test_a_dcqcn_variant_gets_a_rate_plot(headline):
    (Path(headline) / "telemetry" / "incast-lossless" / "rates.csv").write_text(RATES)
    loaded = report.load_results(headline)
    assert report.rate_series(loaded.rates("incast-lossless")) == {  # most CNPs first; ms from the first row
        ("h2", 17): ([1.0, 2.0, 3.0], [10.0, 5.0, 7.5], 2), ("h3", 17): ([0.0], [10.0], 1)}
    assert loaded.rates("incast-lossy") is None
    written = report.make_plots(loaded)
    assert os.path.join(headline, "plots", "rates_incast-lossless.png") in written
    assert_png(os.path.join(headline, "plots", "rates_incast-lossless.png"))


def test_plots_cannot_be_a_file(headline):
    with open(os.path.join(headline, "plots"), "w") as f:
        f.write("a file where the directory should be")
    with pytest.raises(FabricError) as err:
        report.make_plots(report.load_results(headline))
    assert_one_line(err, f"{headline}/plots is not a directory")


def test_straggler_plot(tmp_path):
    directory = write_directory(tmp_path / "d", [straggler("loss-0", 0.0, 700000.0, 0.0),
                                                 straggler("loss-1e-3", 0.001, 717000.0, 0.87),
                                                 straggler("loss-1e-2", 0.01, 790000.0, 1.0)])
    written = report.make_plots(report.load_results(directory))
    assert os.path.basename(written[-1]) == "straggler.png"
    assert_png(written[-1])


def test_main_report(headline):
    out = io.StringIO()
    assert report.main_report(headline, out=out) == 0
    text = out.getvalue()
    assert text.startswith("headline: 3 variants")
    assert "incast: lossy p99 / lossless p99 = 2.71x" in text
    assert os.path.join(headline, "plots", "queue_incast-lossless.png") in text
    assert_png(os.path.join(headline, "plots", "cct_cdf.png"))


def test_main_report_defaults_to_stdout_at_call_time(headline, capsys):
    assert report.main_report(headline) == 0
    assert "incast-lossy" in capsys.readouterr().out


def test_a_ratio_of_unfaithful_variants_says_it_is_the_machines():
    faithful = {"faithful": True, "unfaithful": {}}
    starved = {"faithful": False, "unfaithful": {"h1": ["the wire stalled 9.1% of its busy time"]}}
    lossless = variant("allreduce-lossless", "lossless", collective="allreduce", fidelity=faithful)
    ib = variant("allreduce-ib", "ib", collective="allreduce", p99=1500.0, mean=1420.0, fidelity=starved)
    lines = report.ratio_lines([lossless, ib])
    assert lines[1] == ("allreduce: ib mean / lossless mean = 2.00x (allreduce-ib / allreduce-lossless): the "
                        "machine's ratio, not the fabrics' (allreduce-ib NOT faithful)")
    ib["fidelity"] = faithful
    assert report.ratio_lines([lossless, ib])[1] == \
        "allreduce: ib mean / lossless mean = 2.00x (allreduce-ib / allreduce-lossless)"
    advice = report.fidelity_lines([lossless, {**ib, "fidelity": starved}])
    assert advice[0] == "allreduce-ib: NOT faithful, its figures measure this machine, not the fabric:"
    assert advice[-2].startswith("likely cause: ") and advice[-1].startswith("what to change: ")
    assert report.fidelity_lines([lossless]) == []


def _backend_variant(name: str, backend: str, fabric: str, mean: float, p99: float, drops: int = 0) -> dict:
    return {"name": f"{name}-backend{backend}", "backend": backend, "fabric": fabric, "collective": "incast",
            "topo": "star,8", "hosts": 8, "size": 1, "senders": None, "link": {}, "switch": {}, "mtu": 4096,
            "params": {"backend": backend}, "cct_us": {"mean": mean, "p99": p99}, "drops": drops, "pfc_sent": 0,
            "retransmissions": 0, "cc": "none"}


def test_backend_lines_put_each_variant_beside_its_simulation_and_judge_them():
    from emulator.study.report import backend_lines

    variants = [_backend_variant("incast-lossless", "emulator", "lossless", 1000.0, 1010.0),
                _backend_variant("incast-lossless", "sim", "lossless", 1050.0, 1050.0),
                _backend_variant("incast-lossy", "emulator", "lossy", 3000.0, 3100.0, drops=50),
                _backend_variant("incast-lossy", "sim", "lossy", 2800.0, 2800.0, drops=40),
                _backend_variant("incast-ib", "emulator", "ib", 1010.0, 1020.0),
                _backend_variant("incast-ib", "sim", "ib", 990.0, 990.0)]
    lines = backend_lines(variants)
    assert lines[0].startswith("the same variants on both backends")
    row = next(line for line in lines if line.startswith("incast-lossy "))
    assert "3.00" in row and "2.80" in row and "-6.7%" in row and "50 / 40" in row
    assert "mean CCT within 10% on every variant: yes (largest difference -6.7%, incast-lossy)" in lines
    assert "incast: lossy vs lossless mean +200.0% emulated, +166.7% simulated: same sign" in lines
    assert "incast: ib vs lossless mean +1.0% emulated, -5.7% simulated: SIGNS DIFFER" in lines
    dcqcn = {**_backend_variant("incast-dcqcn", "emulator", "lossless", 5000.0, 5000.0), "cc": "dcqcn"}
    assert backend_lines([dcqcn, *variants]) == lines  # DCQCN's lossless variant is nobody's twin but its own
    variants[3]["cct_us"]["mean"] = 3400.0
    assert any(line.startswith("mean CCT within 10% on every variant: NO (largest difference +13.3%")
               for line in backend_lines(variants))
    assert backend_lines([v for v in variants if v["backend"] == "sim"]) == []  # nothing to pair: no section
    # Two variants alike in every shown setting (here: one with a fault, which the summary does not describe)
    # pair with their own twins, by name.
    calm = [_backend_variant("calm", backend, "lossless", 1000.0, 1000.0) for backend in ("emulator", "sim")]
    storm = [_backend_variant("storm", backend, "lossless", mean, mean) for backend, mean in (("emulator", 2000.0),
                                                                                            ("sim", 2050.0))]
    rows = [line for line in backend_lines([calm[0], storm[0], calm[1], storm[1]]) if line.startswith(("calm", "storm"))]
    assert [row.split()[:5] for row in rows] == [["calm", "lossless", "1.00", "1.00", "+0.0%"],
                                                 ["storm", "lossless", "2.00", "2.05", "+2.5%"]]
