"""Raw AF_PACKET sockets opened from Python: a host's PFC listener and sender, the pause gates' sender.

The data paths' sockets (a switch port's, an RNIC's) are compiled (crates/fabric-io's ``PacketSocket``).
"""

from __future__ import annotations

import socket


def unbound_packet_socket() -> socket.socket:
    """A raw AF_PACKET socket that receives nothing until it is bound to an interface and EtherType.

    Opened for EtherType 0, the kernel hooks it nowhere; opened for its
    EtherType, it would hear every interface of the namespace until the
    bind, and the bind would first unhook it, waiting for an RCU grace
    period (synchronize_net): 4.3 ms a socket, 19 s of fattree,12's start.
    """
    return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
