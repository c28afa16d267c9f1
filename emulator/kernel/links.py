"""A veth end up or down inside a namespace (a cable pulled, or put back)."""

from __future__ import annotations

from pyroute2 import IPRoute

from emulator.errors import FabricError
from emulator.kernel.netns import entered


def set_link_up(netns: str, ifname: str, up: bool) -> None:
    """Bring ``ifname`` in namespace ``netns`` up or down; FabricError (one line) if it is not there."""
    with entered(netns):
        ipr = IPRoute()  # opened inside: its netlink socket belongs to this namespace
    try:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise FabricError(f"no interface {ifname} in namespace {netns}")
        ipr.link("set", index=found[0], state="up" if up else "down")
    finally:
        ipr.close()
