"""The floor of a packet loop on this machine, in Python and compiled: what no agent on these sockets can beat.

Run as root from the repository root::

    sudo .venv/bin/python bench/bench_python_floor.py [--seconds 3]

It builds star,1 (for its namespace, which cleanup knows by the run's
prefix), and inside host h1 makes two veth pairs with no qdisc of ours
(they go with the namespace).  It then measures, with AF_PACKET sockets
and one ``send`` or ``recv`` system call per frame, as the agents do:

  * send only: 64-byte frames into a veth in a tight loop, on one core;
  * forwarding: a loop that only receives a frame on one veth and sends it
    on the other, pinned to CPU 0, fed by a sender pinned to CPU 1;
  * the same forwarding compiled (``emulator._core.io.forward_frames``:
    ``recvmmsg`` and ``sendmmsg``, 64 frames a call, through the qdisc;
    then frames read in place from a TPACKET_V2 ring), fed by a compiled
    sender (``send_frames``, 64 frames a call), so that the sender offers
    more than the loop takes.

The agents do this plus their work per frame (parsing, the MMU, the
models, tc's HTB, epoll).  Figures: docs/performance.md ("Pinned
processes, agent by agent", and "The compiled data plane's floor").
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator._core.io import forward_frames, send_frames  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from topologies import StarTopo  # noqa: E402

FRAME = b"\x02" * 6 + b"\x04" * 6 + b"\x88\xb5" + bytes(50)  # 64 bytes, the local experimental EtherType
ETH_P_LOCAL = 0x88B5
SEND_ONLY_FRAMES = 200_000
COMPILED_CHUNK = 100_000  # frames per call of the compiled sender (its loop checks the time between calls)


def measure(seconds: float) -> None:
    """Inside the node's namespace: make the veths, print the two figures."""
    for a, b in (("fla", "flb"), ("flc", "fld")):
        subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    for ifname in ("fla", "flb", "flc", "fld"):
        subprocess.run(["ip", "link", "set", ifname, "up"], check=True)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    tx.bind(("fla", 0))
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(SEND_ONLY_FRAMES):
        tx.send(FRAME)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"send only: {SEND_ONLY_FRAMES / wall:,.0f} frames/s, {cpu / SEND_ONLY_FRAMES * 1e6:.1f} us of CPU per frame")

    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_LOCAL))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.bind(("flb", ETH_P_LOCAL))
    out = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    out.bind(("flc", 0))
    child = os.fork()
    if child == 0:  # the sender
        os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(1000):
                tx.send(FRAME)
        os._exit(0)
    os.sched_setaffinity(0, {0})
    rx.settimeout(1.0)
    recv, send, forwarded = rx.recv, out.send, 0
    started, cpu = time.perf_counter(), time.process_time()
    try:
        while True:
            send(recv(2048))
            forwarded += 1
    except socket.timeout:  # the sender has stopped
        pass
    wall, cpu = time.perf_counter() - started - 1.0, time.process_time() - cpu
    os.waitpid(child, 0)
    print(f"receive and send (forwarding): {forwarded / wall:,.0f} frames/s, "
          f"{cpu / max(forwarded, 1) * 1e6:.1f} us of CPU per frame forwarded")
    measure_compiled(seconds)


def measure_compiled(seconds: float) -> None:
    """The same forwarding, compiled and batched, fed by a compiled sender on the other core: frames read with
    ``recvmmsg``, then read in place from a TPACKET_V2 ring."""
    for ring in (False, True):
        child = os.fork()
        if child == 0:  # the sender
            os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
            sent, wall_ns, end = 0, 0, time.monotonic() + seconds
            while time.monotonic() < end:
                done = send_frames("fla", FRAME, COMPILED_CHUNK)
                sent, wall_ns = sent + done["frames"], wall_ns + done["wall_ns"]
            print(f"compiled sender: {sent / (wall_ns / 1e9):,.0f} frames/s offered", flush=True)
            os._exit(0)
        os.sched_setaffinity(0, {0})
        done = forward_frames("flb", "flc", ETH_P_LOCAL, idle_s=1.0, ring=ring)
        os.waitpid(child, 0)
        frames = done["frames"]
        how = "a TPACKET_V2 ring read in place, sendmmsg" if ring else "recvmmsg and sendmmsg"
        print(f"compiled receive and send ({how}, 64 a call): "
              f"{frames / max(done['busy_ns'] / 1e9, 1e-9):,.0f} frames/s, "
              f"{done['cpu_ns'] / max(frames, 1) / 1e3:.2f} us of CPU per frame forwarded "
              f"({frames:,} frames, {done['refused']} refused)", flush=True)


def main() -> None:
    parser = flags.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=flags.real("--seconds", (0.5, 60.0)), default=3.0,
                        help="how long the sender offers frames (0.5 to 60, default 3)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_checked()
    if args.inside:
        measure(args.seconds)
        return
    if os.geteuid() != 0:
        sys.exit("bench_python_floor: needs root (it makes a namespace and veths)")
    print(f"kernel {os.uname().release}, {os.cpu_count()} cores")
    with Fabric(StarTopo(n=1)) as net:
        done = net["h1"].run([sys.executable, os.path.abspath(__file__), "--inside", "--seconds", str(args.seconds)])
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"bench_python_floor: the measurement failed: {last}")


if __name__ == "__main__":
    main()
