"""What one machine can hold: memory and network namespaces for a fabric.

Every node of a fabric is a network namespace with an agent (the switch,
or the host's RNIC; many agents share a data-plane process), and every
link a veth pair with tc on both ends.  Measured on this project's machine
(MemAvailable before ``up``, caches dropped, and while the fabric was up):
fattree,8 (208 nodes, 384 links) took 223 MiB, fattree,12 (612 nodes, 1296
links) 455 MiB: about 100 MiB for the processes and 0.6 MiB per node with
its links.  The estimate is generous, ``BASE_BYTES`` and 1 MiB per node and
512 KiB per link, and a fabric must fit in MemAvailable less
``KEEP_FREE_BYTES`` for everything else; it also needs a network namespace
per node (and a probe namespace) within the kernel's
``user.max_net_namespaces``.
"""

from __future__ import annotations

from emulator.bounds import check_nodes
from emulator.errors import FabricError
from emulator.kernel.netns import existing_namespaces
from emulator.units import format_size

BASE_BYTES = 256 << 20
NODE_BYTES = 1 << 20
LINK_BYTES = 512 << 10
KEEP_FREE_BYTES = 256 << 20


def fabric_bytes(nodes: int, links: int) -> int:
    """The memory a running fabric is estimated to take (see the module doc)."""
    return BASE_BYTES + nodes * NODE_BYTES + links * LINK_BYTES


def check_capacity(what: str, nodes: int, links: int, available: int | None = None,
                   namespaces: int | None = None) -> None:
    """Refuse a fabric this machine cannot hold, naming the limit.

    ``available`` (bytes) and ``namespaces`` (how many more network
    namespaces the kernel allows) default to what /proc says now.
    """
    check_nodes(what, nodes)
    need = fabric_bytes(nodes, links)
    if available is None:
        available = meminfo_bytes("MemAvailable")
    if available is not None and need > available - KEEP_FREE_BYTES:
        raise FabricError(
            f"{what} needs about {format_size(need)} of memory ({format_size(BASE_BYTES)}, {nodes} nodes x "
            f"{format_size(NODE_BYTES)}, {links} links x {format_size(LINK_BYTES)}); this machine has {format_size(max(available, 0))} "
            f"available and keeps {format_size(KEEP_FREE_BYTES)} free: use a smaller topology")
    if namespaces is None:
        namespaces = _namespaces_left()
    if namespaces is not None and nodes + 1 > namespaces:
        raise FabricError(f"{what} needs {nodes + 1} network namespaces; the kernel allows {namespaces} more "
                          "(sysctl user.max_net_namespaces)")


def meminfo_bytes(field: str, path: str = "/proc/meminfo") -> int | None:
    """One field of /proc/meminfo (``MemTotal``, ``MemAvailable``) in bytes; None if absent."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == field and rest.split() and rest.split()[0].isdigit():
                    return int(rest.split()[0]) * 1024  # the kernel prints kB
    except OSError:
        return None
    return None


def _namespaces_left() -> int | None:
    """``user.max_net_namespaces`` less the named namespaces that exist (an
    upper bound: unnamed ones count against the limit too)."""
    try:
        with open("/proc/sys/user/max_net_namespaces") as f:
            limit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return limit - len(existing_namespaces())
