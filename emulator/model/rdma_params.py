"""What the RNIC offers and what its packets cost on a link, for everyone who checks a path MTU.

The verbs server, ``perf``, the CLI and the experiment files all refuse a
path MTU the RNIC would refuse, and the collective runner predicts frame
times from the same overheads, so they take them from here rather than from
the RNIC's daemon module.
"""

from __future__ import annotations

from emulator.wire import ib, roce

PATHS_MTU = (256, 512, 1024, 2048, 4096)  # the IB path MTUs
# The RNIC's largest memory region, and so its largest message: the RNIC agent refuses to register more,
# the RC model to send more, and an experiment whose plan gives a rank a larger region is refused before
# anything is built, on either backend (the simulated RNIC runs the same RC model).
MAX_MR_BYTES = 1 << 30
RETH_LEN, IMMDT_LEN = 16, 4  # the largest a path-MTU packet's extension headers get: RDMA WRITE with immediate
# What a path-MTU payload needs on top in a link's MTU: IPv4 + UDP + BTH + RETH + ImmDt + ICRC.
ROCE_OVERHEAD = roce.IP_LEN + roce.UDP_LEN + roce.BTH_LEN + RETH_LEN + IMMDT_LEN + roce.ICRC_LEN
# The most an IB packet carries on top of a path-MTU payload: LRH, BTH, RETH, ImmDt, ICRC, VCRC.
IB_OVERHEAD = ib.LRH_LEN + ib.BTH_LEN + RETH_LEN + IMMDT_LEN + ib.ICRC_LEN + ib.VCRC_LEN


def message_wire_bytes(length: int, mtu: int, native_ib: bool) -> int:
    """Bytes one RDMA WRITE of ``length`` puts on a link: path-MTU packets, each with its headers.

    Every packet carries the 14-byte Ethernet header the veth links frame
    it with, then IPv4, UDP, BTH and ICRC (RoCEv2) or LRH, BTH, ICRC and
    VCRC (native IB); the first carries a RETH too.  The ACKs going the
    other way are left out: this is a link-time lower bound's numerator.
    """
    packets = max(1, -(-length // mtu))
    per_packet = 14 + (ib.LRH_LEN + ib.BTH_LEN + ib.ICRC_LEN + ib.VCRC_LEN if native_ib
                       else roce.IP_LEN + roce.UDP_LEN + roce.BTH_LEN + roce.ICRC_LEN)
    return length + packets * per_packet + RETH_LEN
