"""The names a run gives to what it creates, and the rules they follow.

A run's name and its nodes' names end up in namespace names
(``<run>-<node>``), interface names (``<node>-eth<N>``) and file names under
the run's directory, and cleanup finds what to remove by them.  So they are
checked wherever they come in: ``--name``, ``--run``, a topology's nodes, a
state record, a directory found under the run root.

- A run name is 1 to 12 lowercase letters and digits, starting with a
  letter.  It has no hyphen, so the ``<run>-`` prefix of a namespace names
  exactly one run: run ``a`` can never claim run ``a-b``'s namespaces.
- A node name is 1 to 10 lowercase letters, digits and hyphens, starting
  with a letter (h1, s1, leaf-1).  Ten, because its interfaces are called
  ``<node>-eth<N>`` and Linux allows 15 bytes (IFNAMSIZ) for ``<node>-eth0``.
- A namespace name is ``<run>-<node>``: at most 23 characters.  The run's
  scratch namespace for the kernel probe is ``<run>--probe``: a node's name
  starts with a letter, so no node's namespace can have that name (it was
  ``<run>-probe``, which a node called ``probe`` had too).
"""

from __future__ import annotations

import re

from emulator.errors import FabricError, shown

IFNAMSIZ = 15  # bytes of an interface name, without the terminating NUL
RUN_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
NODE_NAME = re.compile(r"[a-z][a-z0-9-]{0,%d}" % (IFNAMSIZ - len("-eth0") - 1))
IFNAME = re.compile(r"(?P<node>[a-z][a-z0-9-]*)-eth[0-9]{1,3}")
PROBE = "-probe"  # what follows "<run>-" in the probe's namespace: not a node name (it starts with a hyphen)


def check_run_name(name: object) -> str:
    """``name`` if it is a run name, else FabricError naming the rule."""
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
        raise FabricError(f"bad run name {shown(name)}: use 1 to 12 lowercase letters and digits, "
                          "starting with a letter")
    return name


def check_node_name(name: object) -> str:
    """``name`` if it is a node name, else FabricError naming the rule."""
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise FabricError(f"bad node name {shown(name)}: use 1 to 10 lowercase letters, digits and hyphens, "
                          "starting with a letter")
    return name


def check_ifname(name: object) -> str:
    """``name`` if it is one of our interface names ``<node>-eth<N>``."""
    if not isinstance(name, str) or len(name) > IFNAMSIZ or not IFNAME.fullmatch(name):
        raise FabricError(f"bad interface name {shown(name)}: expected <node>-eth<N> of at most {IFNAMSIZ} characters")
    return name


def namespace_name(run: str, node: str) -> str:
    """The network namespace of ``node`` in ``run``."""
    return f"{run}-{node}"


def probe_namespace(run: str) -> str:
    """The scratch namespace where ``run`` probes the kernel's qdiscs."""
    return namespace_name(run, PROBE)


def owns_namespace(run: str, namespace: str) -> bool:
    """Whether ``namespace`` is one ``run`` may have created: ``<run>-<node name>``, or its probe's."""
    prefix = run + "-"
    return namespace == probe_namespace(run) or (namespace.startswith(prefix)
                                                 and NODE_NAME.fullmatch(namespace[len(prefix):]) is not None)
