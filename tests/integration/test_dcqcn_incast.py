"""DCQCN on a real lossless incast: CNPs on the wire, rates that fall and recover, fewer pauses than PFC alone."""

from __future__ import annotations

import csv
import json
import subprocess

from emulator.fabric.capture import malformed_count
from emulator.study.pcapfile import read_frames
from emulator._core.roce import CNP_DSCP, decode
from emulator._core.transport import Opcode
from experiment_run import run_experiment
from faithful import judge_only_if_faithful

INCAST = """
name = "cc"
description = "a lossless incast with and without DCQCN"
topo = "star,8"
link = { bw = "20mbit" }
switch = { buffer = "1MiB", headroom = "72KiB" }
collective = "incast"
size = "256KiB"
iterations = 2
warmup = 1
capture = true

[[variants]]
name = "pfc"
cc = "none"

[[variants]]
name = "dcqcn"
cc = "dcqcn"
"""
LINE_BPS = 20_000_000


def test_dcqcn_incast_sends_cnps_and_pauses_less(tmp_path):
    directory, variants, _ = run_experiment(tmp_path, "cc", INCAST)
    pfc, dcqcn = variants["pfc"], variants["dcqcn"]
    assert (pfc["cc"], dcqcn["cc"]) == ("none", "dcqcn")
    assert pfc["drops"] == dcqcn["drops"] == 0 and pfc["retransmissions"] == dcqcn["retransmissions"] == 0
    assert pfc["pfc_sent"] > 0 and pfc["cnps"] == pfc["paced_waits"] == 0
    assert dcqcn["pfc_sent"] < pfc["pfc_sent"], (dcqcn["pfc_sent"], pfc["pfc_sent"])
    assert dcqcn["paced_waits"] > 0  # the measured iterations ran under the rates the CNPs set
    totals = json.load(open(directory / "telemetry" / "dcqcn" / "stats.json"))["totals"]
    assert totals["cnps_sent"] == totals["cnps_received"] > 0  # warm-up included

    # CNPs on the receiver's wire: ours decode them with a good ICRC, tshark sees opcode 129, nothing malformed.
    capture = str(directory / "pcap" / "dcqcn" / "h1-eth0.pcapng")
    with open(capture, "rb") as f:
        cnps = [d for frame in read_frames(f, capture) if (d := decode(frame.data)) is not None
                and d.packet.opcode == Opcode.CNP]
    assert cnps and all(d.icrc_ok and d.src_ip == "10.0.0.1" for d in cnps)
    assert set(_tshark(capture, "ip.dsfield.dscp", "infiniband.bth.opcode == 129")) == {str(CNP_DSCP)}
    assert len(_tshark(capture, "frame.number", "infiniband.bth.opcode == 129")) == len(cnps)
    assert malformed_count(capture) == 0

    # The senders' rate trace: cut below the line rate by CNPs, raised again by the increase timer.
    with open(directory / "telemetry" / "dcqcn" / "rates.csv") as f:
        rows = list(csv.DictReader(f))
    assert {row["event"] for row in rows} >= {"cnp", "timer"}
    by_qp: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in rows:
        by_qp.setdefault((row["host"], row["qpn"]), []).append(row)
    recovered = 0
    for trace in by_qp.values():
        rates = [int(row["rate_bps"]) for row in trace]
        lowest = rates.index(min(rates))
        assert trace[0]["event"] == "cnp" and rates[0] < LINE_BPS
        recovered += any(rate > rates[lowest] for rate in rates[lowest:])
    assert recovered == len(by_qp) == 7, by_qp.keys()
    # The DCQCN incast is off its link-time bound by DCQCN's own doing (senders held to their rates): that must
    # not read as the machine's lag.  Judged only where the agents kept up.
    judge_only_if_faithful({**dcqcn["fidelity"], "unfaithful": {k: v for k, v in dcqcn["fidelity"]["unfaithful"].items()
                                                                if k != "collective"},
                            "faithful": all(k == "collective" for k in dcqcn["fidelity"]["unfaithful"])},
                           "the DCQCN incast")
    assert dcqcn["fidelity"]["faithful"], dcqcn["fidelity"]["unfaithful"]


def _tshark(path: str, field: str, display_filter: str) -> list[str]:
    out = subprocess.run(["tshark", "-r", path, "-n", "-Y", display_filter, "-T", "fields", "-E", "occurrence=f",
                          "-e", field], capture_output=True, text=True, check=True).stdout
    return out.split()
