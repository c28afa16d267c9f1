"""The compiled data plane's socket I/O (crates/fabric-io through ``emulator._core.io``) on real veths.

What the floor benchmark relies on: sockets opened inside a namespace from outside it (``setns`` on a
thread of its own), batched receive (``recvmmsg``, or a TPACKET_V2 ring read in place) and send through
the qdisc, every frame moved byte for byte and in order, and a bad interface or namespace refused in one
line.
"""

from __future__ import annotations

import socket
import threading

import pytest
from pyroute2 import NetNS

from emulator._core.io import forward_frames, send_frames
from emulator.kernel.netns import create_namespace, entered, netns_path, remove_namespace

ETH_P_LOCAL = 0x88B5  # the local experimental EtherType: nothing else in the namespace sends it
NAME = "zzio-ns"


def frame(seq: int, size: int = 64) -> bytes:
    return b"\x02" * 6 + b"\x04" * 6 + ETH_P_LOCAL.to_bytes(2, "big") + seq.to_bytes(4, "big") + bytes(size - 18)


@pytest.fixture
def namespace():
    """A namespace with two veth pairs, ia-ib and ic-id, up."""
    create_namespace(NAME)
    try:
        with NetNS(NAME) as ipr:
            for a, b in (("ia", "ib"), ("ic", "id")):
                ipr.link("add", ifname=a, kind="veth", peer=b)
            for ifname in ("ia", "ib", "ic", "id"):
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up")
        yield NAME
    finally:
        remove_namespace(NAME)


def local_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_LOCAL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)  # every frame of the test fits unread
    s.bind((ifname, ETH_P_LOCAL))
    s.settimeout(2.0)
    return s


@pytest.mark.parametrize("ring", [False, True], ids=["recvmmsg", "ring"])
def test_frames_cross_the_compiled_loop_byte_for_byte_and_in_order(namespace, ring):
    with entered(namespace):  # the Python ends of the test live in the namespace; the loop opens its own
        source, sink = local_socket("ia"), local_socket("id")
    result: dict = {}
    loop = threading.Thread(target=lambda: result.update(
        forward_frames("ib", "ic", ETH_P_LOCAL, idle_s=0.5, batch=16, netns=netns_path(namespace), ring=ring)))
    loop.start()
    try:
        # The loop's sockets exist once a probe comes through; then the frames that count.
        sink.settimeout(0.05)
        for _probe in range(100):  # 5 s at most
            assert loop.is_alive(), "the loop ended before a frame came through"
            source.send(frame(0))
            try:
                if sink.recv(2048) == frame(0):
                    break
            except socket.timeout:
                continue
        else:
            pytest.fail("no probe came through the loop in 5 s")
        sink.settimeout(2.0)
        sent = [frame(seq, 64 + seq % 1400) for seq in range(1, 301)]
        for f in sent:
            source.send(f)
        got = []
        while len(got) < len(sent):  # a late probe may come first; a frame missing times out
            f = sink.recv(2048)
            if f != frame(0):
                got.append(f)
    finally:
        loop.join()
        source.close()
        sink.close()
    assert got == sent
    assert result["frames"] >= len(sent) and result["refused"] == 0 and result["truncated"] == 0
    assert result["cpu_ns"] > 0 and result["busy_ns"] > 0


def test_the_compiled_sender_sends_every_copy(namespace):
    with entered(namespace):
        sink = local_socket("ib")
    try:
        done = send_frames("ia", frame(7), 200, batch=32, netns=netns_path(namespace))
        got = [sink.recv(2048) for _ in range(200)]
    finally:
        sink.close()
    assert done["frames"] == 200 and done["refused"] == 0
    assert got == [frame(7)] * 200


def test_a_bad_interface_or_namespace_is_one_line(namespace):
    with pytest.raises(OSError, match="cannot open nosuch0 and ic"):
        forward_frames("nosuch0", "ic", ETH_P_LOCAL, idle_s=0.01, netns=netns_path(namespace))
    with pytest.raises(OSError, match="cannot open ia"):
        send_frames("ia", frame(1), 1, netns="/nonexistent/netns")
    with pytest.raises(ValueError, match="batch must be"):
        send_frames("ia", frame(1), 1, batch=0)
    with pytest.raises(ValueError, match="idle_s"):
        forward_frames("ib", "ic", ETH_P_LOCAL, idle_s=0)
