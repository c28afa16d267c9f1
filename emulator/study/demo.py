"""``fabric-emu demo``: the emulator shown working in a few minutes, with no experiment file to write.

On a leaf-spine fabric: all-pairs reachability, then iperf3 TCP and UDP
(offered at twice the link rate) between hosts on different leaves: the
switches forward and the kernel shapes every link precisely.  Then incast
on a star, three senders at full rate into one receiver in the lossless
priority, on a lossless and on a lossy fabric: what PFC is for.
"""

from __future__ import annotations

from typing import Callable

from emulator.fabric.builder import Fabric
from emulator.study.incast import run_incast
from emulator.apps.iperf import iperf3
from emulator.fabric.topospec import build_topo
from emulator.units import format_rate, parse_rate

TCP_TARGET = 0.90
UDP_TARGET = (0.92, 1.00)


def run_demo(spec: str, bw: str, seconds: int, log: Callable[[str], None]) -> int:
    """Run the checks, print a table; 0 if every check met its target."""
    rate = parse_rate(bw)
    topo = build_topo(spec, backend="emulator")
    rows = []
    with Fabric(topo, link={"bw": bw}, spec=spec, log=log) as net:
        answered, total, _ = net.pingall()
        rows.append(("pingall", f"{answered}/{total} pairs", "all pairs", answered == total))
        client, server = net.hosts[0], net.hosts[-1]
        log(f"iperf3 TCP {client.name} -> {server.name} for {seconds} s")
        tcp = iperf3(client, server, seconds)
        share = tcp.received_bps / rate
        rows.append((f"TCP {client.name}->{server.name}", f"{format_rate(int(tcp.received_bps))} ({share:.1%})",
                     f">= {TCP_TARGET:.0%} of {format_rate(rate)}", share >= TCP_TARGET))
        log(f"iperf3 UDP {client.name} -> {server.name} offered {format_rate(2 * rate)} for {seconds} s")
        udp = iperf3(client, server, seconds, udp_bps=2 * rate)
        share = udp.received_bps / rate
        rows.append((f"UDP {client.name}->{server.name} at 2x rate", f"{format_rate(int(udp.received_bps))} ({share:.1%}), {udp.lost_packets} lost",
                     f"{UDP_TARGET[0]:.0%}..{UDP_TARGET[1]:.0%} of rate", UDP_TARGET[0] <= share <= UDP_TARGET[1]))
        net.check_agents()
    for fabric in ("lossless", "lossy"):
        log(f"incast on star,4, {fabric}: 3 UDP senders at {format_rate(rate)} each into one receiver for {seconds} s")
        incast = run_incast(fabric, "udp", bw=bw, seconds=seconds, log=log)
        lost = sum(f.lost_packets for f in incast.flows)
        share = incast.aggregate_bps / rate
        result = (f"{lost} lost, {incast.totals['drops']} drops, {incast.totals['pfc_sent']} PFC, "
                  f"{share:.0%} of rate")
        if fabric == "lossless":
            rows.append(("incast 3:1 lossless", result, "0 lost, PFC > 0", lost == 0 and incast.totals["pfc_sent"] > 0))
        else:
            rows.append(("incast 3:1 lossy", result, "loss > 0 (no PFC)", lost > 0))
    print(f"fabric-emu demo on {spec}, every link {format_rate(rate)} (run {net.run_name})")
    print(f"{'CHECK':26} {'RESULT':48} {'TARGET':22} OK")
    for name, result, target, ok in rows:
        print(f"{name:26} {result:48} {target:22} {'yes' if ok else 'NO'}")
    print(f"{spec}: build {net.timings['build_s']:.2f} s, teardown {net.timings['teardown_s']:.2f} s")
    return 0 if all(ok for *_, ok in rows) else 1
