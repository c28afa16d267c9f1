"""Whether this process may build a fabric: root, with the capabilities namespaces need."""

from __future__ import annotations

import os

from emulator.errors import NeedRootError

CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def _effective_capabilities() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def require_root() -> None:
    """Raise NeedRootError unless we may create namespaces and configure them.

    Root is not enough inside a container without CAP_SYS_ADMIN, and that
    case must fail the same clean way, not halfway through a build.
    """
    caps = _effective_capabilities()
    if os.geteuid() != 0 or not (caps >> CAP_SYS_ADMIN & 1 and caps >> CAP_NET_ADMIN & 1):
        raise NeedRootError("this command needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces; run it with sudo")
