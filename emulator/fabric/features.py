"""Probing what this kernel offers, before a run relies on it.

Kernels differ (this project's CI kernel has htb and tbf but no netem and
no loadable modules; users' VMs have more), so each run tries the qdiscs it
may use on a veth pair in a scratch namespace of its own, uses what works,
and says plainly what it could not apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from emulator.errors import FabricError
from emulator.kernel.netns import create_namespace, entered, remove_namespace
from emulator.fabric.names import probe_namespace
from emulator.fabric.plan import FabricPlan
from emulator.units import format_time

REQUIRED = ("htb", "tbf")


@dataclass(frozen=True)
class Features:
    """Which optional kernel features a run found and used."""

    htb: bool
    tbf: bool
    netem: bool

    def as_dict(self) -> dict[str, bool]:
        return asdict(self)

    def notice(self, plan: FabricPlan) -> str:
        """A plain sentence on what the run uses for shaping and delay.

        Link delay is modelled by the switch agents on every kernel, even
        where netem exists: netem orphans a frame from its socket at
        enqueue, so a delayed switch port would hide the switch's backlog
        in the kernel and break its buffer accounting and PFC.
        """
        found = ", ".join(k for k, v in self.as_dict().items() if v)
        delays = sorted({p.params.delay_ns for p, _ in plan.links if p.params.delay_ns})
        if not delays:
            return f"kernel features: {found}"
        shown = ", ".join(format_time(d) for d in delays)
        return f"kernel features: {found}; link delay {shown} modelled by the switch agents"


def probe_features(plan: FabricPlan) -> Features:
    """Try each qdisc on a scratch veth; raise if a required one is missing."""
    scratch = probe_namespace(plan.run)
    create_namespace(scratch)
    try:
        with entered(scratch):
            ipr = IPRoute()
        with ipr:
            ipr.link("add", ifname="probe0", kind="veth", peer={"ifname": "probe1"})
            index = ipr.link_lookup(ifname="probe0")[0]
            found = {
                "htb": _try(ipr, index, "htb", default=0x10),
                "tbf": _try(ipr, index, "tbf", rate="1mbit", burst=1600, limit=16000),
                "netem": _try(ipr, index, "netem", delay=1000),
            }
    finally:
        remove_namespace(scratch)
    missing = [k for k in REQUIRED if not found[k]]
    if missing:
        raise FabricError(f"this kernel lacks the {', '.join(missing)} qdisc(s) that fabric-emu needs for link shaping")
    return Features(**found)


def _try(ipr: IPRoute, index: int, kind: str, **kwargs: object) -> bool:
    try:
        ipr.tc("add", kind, index, handle=0x10000, **kwargs)
    except NetlinkError:
        return False
    ipr.tc("del", index=index, handle=0x10000, parent=0xFFFFFFFF)
    return True
