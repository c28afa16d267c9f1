"""Raw AF_PACKET sockets of the agents' data paths: a switch port, an RNIC.

Both want the same kernel behaviour: their own frames not looped back to
them (PACKET_IGNORE_OUTGOING: an agent that hears what it sends would
forward or count it again), a send buffer small enough that the kernel's tc
queue stays short and the backlog stays in the agent, a receive buffer that
rides out the agent being scheduled out, the count of frames the kernel
dropped because that buffer was full, and the kernel's receive time stamp
of the last frame read (the fidelity monitor's processing lag).
"""

from __future__ import annotations

import fcntl
import socket
import struct
from typing import Callable

ETH_P_ALL = 0x0003  # every EtherType
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
SIOCGSTAMPNS = 0x8907  # linux/sockios.h: the receive time stamp of the last frame read


def open_packet_socket(ifname: str, protocol: int, send_buffer: int, recv_buffer: int,
                       prepare: Callable[[socket.socket], None] | None = None) -> socket.socket:
    """A non-blocking raw socket on ``ifname`` for EtherType ``protocol``.

    ``prepare`` runs before the bind (e.g. to attach a filter), so that no
    frame reaches the socket unfiltered.  The kernel doubles both buffer
    sizes.  The socket is opened for no EtherType (:func:`unbound_packet_socket`).
    """
    sock = unbound_packet_socket()
    if prepare is not None:
        prepare(sock)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
    sock.bind((ifname, protocol))
    sock.setblocking(False)
    last_receive_ns(sock)  # the first ask turns the kernel's receive time stamps on for this socket
    return sock


def unbound_packet_socket() -> socket.socket:
    """A raw AF_PACKET socket that receives nothing until it is bound to an interface and EtherType.

    Opened for EtherType 0, the kernel hooks it nowhere; opened for its
    EtherType, it would hear every interface of the namespace until the
    bind, and the bind would first unhook it, waiting for an RCU grace
    period (synchronize_net): 4.3 ms a socket, 19 s of fattree,12's start.
    """
    return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)


def kernel_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped since the last call because ``sock``'s receive buffer was full.

    Reading the statistics resets them, so callers add the result up.
    """
    _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def last_receive_ns(sock: socket.socket) -> int | None:
    """When the kernel received the frame last read from ``sock`` (CLOCK_REALTIME ns; compare with time.time_ns).

    None before the first frame (ENOENT).  Not SO_TIMESTAMPNS: with it the
    kernel hands the stamp to recvmsg only and this ioctl has none to give.
    """
    try:
        seconds, nanoseconds = struct.unpack("qq", fcntl.ioctl(sock.fileno(), SIOCGSTAMPNS, bytes(16)))
    except OSError:
        return None
    return seconds * 1_000_000_000 + nanoseconds
