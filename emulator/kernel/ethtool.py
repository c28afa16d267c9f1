"""Turning off veth offloads with the legacy ethtool ioctls.

With TSO, GSO or GRO on, the kernel hands an AF_PACKET socket 64 KB
super-frames, and with TX checksum offload a host's TCP segments cross the
veth with their checksum unfilled; a user-space switch that forwards them
would deliver corrupt frames.  Each call here acts on an interface of the
namespace the calling thread is in when the socket is opened.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
# Legacy "set" commands (linux/ethtool.h); the kernel maps them to features.
ETHTOOL_STXCSUM = 0x17
ETHTOOL_SSG = 0x19
ETHTOOL_STSO = 0x1F
ETHTOOL_SGSO = 0x24
ETHTOOL_SGRO = 0x2C

OFFLOADS_OFF = (ETHTOOL_SGRO, ETHTOOL_SGSO, ETHTOOL_STSO, ETHTOOL_SSG, ETHTOOL_STXCSUM)


def _ethtool_set(sock: socket.socket, ifname: str, cmd: int, value: int) -> None:
    data = ctypes.create_string_buffer(struct.pack("II", cmd, value))
    ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(data))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def disable_offloads(ifnames: list[str]) -> None:
    """Turn off TX checksum, scatter-gather, TSO, GSO and GRO on ``ifnames``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for ifname in ifnames:
            for cmd in OFFLOADS_OFF:
                _ethtool_set(sock, ifname, cmd, 0)
