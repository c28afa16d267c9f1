"""The RNIC serves its QPs in turn across the kernel queue's back-pressure, as the simulated RNIC does.

A real RNIC's scheduler arbitrates among QPs with work, one packet each in turn.  The emulated RNIC
pulls packets until the kernel's queue is full and resumes when it has room; the turn must carry on
from where it stopped, or the QP made first gets every slot that frees (found by the victim
experiment: its sender's incast flow outran the victim flow beside it, which the simulation did not).
"""

from __future__ import annotations

import os

from emulator.agents.memory import ACCESS_ALL
from emulator._core.rc import WrOpcode
from emulator._core.roce import decode
from fake_agents import App, sealed_memfd

REGION = 64 << 10


def qp_to(app: App, key: int, remote_qpn: int) -> int:
    cq = app({"op": "create_cq"})["cq"]
    qpn = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"]
    assert app({"op": "connect", "qpn": qpn, "remote_qpn": remote_qpn, "remote_psn": 0,
                "remote_gid": "10.0.0.2", "mtu": 1024}) == {}
    return qpn


def test_two_qps_alternate_when_the_kernel_queue_takes_one_frame_at_a_time(rnic, tmp_path):
    app = App(rnic, str(tmp_path / "h1.verbs"))
    fd = sealed_memfd(REGION)
    try:
        key = app({"op": "reg_mr", "addr": 0x10000, "length": REGION, "access": ACCESS_ALL}, [fd])["lkey"]
    finally:
        os.close(fd)
    qps = [qp_to(app, key, remote) for remote in (0x91, 0x92)]
    for i, qpn in enumerate(qps):  # 16 KiB each: 16 packets of 1 KiB
        wr = [i + 1, int(WrOpcode.RDMA_WRITE), 0x10000, 16 << 10, key, 0x5000, 0x77, 0, True]
        assert app({"op": "post_send", "qpn": qpn, "wrs": [wr]}) == {}
    nic = rnic.nic
    nic.room(0)  # frames the kernel's queue takes before it is full again
    nic.after_events(1_000)  # the queue is full from the start: one frame waits
    for step in range(20):  # a frame left the kernel's queue: room for one
        nic.room(1)
        nic.writable(2_000 + step)
    remotes = [decode(frame).packet.dest_qp for frame in nic.take_sent()]
    assert len(remotes) == 20
    assert remotes.count(0x91) == remotes.count(0x92) == 10, remotes
    assert all(a != b for a, b in zip(remotes, remotes[1:])), remotes  # one each in turn
