"""Turn a Mininet-style topology spec (``fattree,4``) into a ``Topo``.

The spec grammar and the custom-file convention are Mininet's own
(``mn --topo NAME,ARG,KEY=VALUE --custom FILE``), so existing Mininet
topology files work unchanged.  Unlike Mininet, every mistake a user can
make here (blank spec, unknown name, wrong arguments, a bad value, a broken
custom file, a topology over its backend's caps) becomes a one-line
:class:`FabricError` instead of a traceback.  Whatever a custom file's
code raises, when the file runs or when its topology is built, is the
file's problem and reported as one line naming the file; an exception
from a built-in topology other than its ``ValueError`` is our bug and
stays a traceback.

A ``topos`` entry may be a ``Topo`` subclass or any callable returning a
``Topo`` (Mininet's own example uses ``lambda: MyTopo()``).
"""

from __future__ import annotations

import inspect
import os
import runpy
from typing import Any, Callable

from mininet.topo import Topo
from mininet.util import splitArgs

from emulator.bounds import check_topology
from emulator.errors import FabricError, one_line, shown
from topologies import topos as builtin_topos

TopoFactory = Callable[..., Topo]
MAX_SPEC = 200  # characters of a topology spec


def parse_spec(spec: str) -> tuple[str, list, dict]:
    """Split ``name,arg,key=value`` into name, args and kwargs.

    Numbers are converted by Mininet's ``splitArgs``; empty fields are
    rejected because they would silently become an empty-string argument.
    """
    text = spec.strip()
    if not text:
        raise FabricError("empty topology spec: expected a name with "
                          "optional arguments, such as fattree,4")
    if len(text) > MAX_SPEC:
        raise FabricError(f"bad topology spec {shown(text)}: longer than {MAX_SPEC} characters")
    fields = [field.strip() for field in text.split(",")]
    if not all(fields):
        raise FabricError(f"bad topology spec {shown(spec)}: empty name or "
                          "argument (expected e.g. leafspine,4,spines=2)")
    return splitArgs(",".join(fields))


def load_custom(path: str) -> dict[str, TopoFactory]:
    """Run a Mininet custom file as ``mn --custom`` does; return ``topos``."""
    if not os.path.isfile(path):
        raise FabricError(f"custom topology file {path!r} not found")
    try:
        namespace = runpy.run_path(path)
    except (Exception, SystemExit) as exc:  # any failure of user code is the user's to fix
        raise FabricError(f"custom topology file {path!r} failed: {_described(exc)}") from exc
    custom = namespace.get("topos")
    if not isinstance(custom, dict):
        raise FabricError(f"custom topology file {path!r} defines no "
                          "'topos' dict (name -> Topo class)")
    for name, factory in custom.items():
        if not isinstance(name, str) or not callable(factory):
            raise FabricError(f"custom topology file {path!r}: topos entry "
                              f"{shown(name)} must map a name to a Topo class")
    return custom


def build_topo(spec: str, custom: str | None = None, backend: str | None = None) -> Topo:
    """Build the topology a spec names; a custom file's names win.

    ``backend`` (``emulator`` or ``sim``) is the one that will run it: its caps
    (:func:`emulator.bounds.check_topology`) are checked now, before any plan.  Without one, only the
    widest caps are: for a caller that checks its backend's later, or whose builder does (the emulator's
    checks its capacity, caps included)."""
    name, args, kwargs = parse_spec(spec)
    known: dict[str, TopoFactory] = dict(builtin_topos)
    if custom is not None:
        known.update(load_custom(custom))
    factory = known.get(name)
    if factory is None:
        raise FabricError(f"unknown topology {shown(name)}; "
                          f"known: {', '.join(sorted(known))}")
    mine = builtin_topos.get(name) is factory
    origin = "" if mine else f"custom topology file {custom!r}: "
    _check_arguments(name, factory, args, kwargs, origin)
    try:
        topo = factory(*args, **kwargs)
    except ValueError as exc:
        raise FabricError(f"{origin}topology {shown(spec.strip())}: {one_line(str(exc))}") from exc
    except (Exception, SystemExit) as exc:
        if mine:
            raise
        raise FabricError(f"{origin}topology {shown(spec.strip())} failed: {_described(exc)}") from exc
    if not isinstance(topo, Topo):
        raise FabricError(f"{origin}topology {shown(name)} returned "
                          f"{type(topo).__name__}, not a Topo")
    check_topology(f"{origin}topology {shown(spec.strip())}", len(topo.hosts(sort=False)),
                   len(topo.switches(sort=False)), backend)
    return topo


def topo_parameters(factory: TopoFactory) -> str:
    """Show what a topology accepts, e.g. ``(leaves=2, spines=2, hosts=2)``."""
    shown = []
    for param in _signature(factory).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            shown.append(f"*{param.name}")
        elif param.kind is param.VAR_KEYWORD:
            shown.append(f"**{param.name}")
        elif param.default is param.empty:
            shown.append(param.name)
        else:
            shown.append(f"{param.name}={param.default!r}")
    return f"({', '.join(shown)})"


def _described(exc: BaseException) -> str:
    """An exception from someone else's code as one line: its type and text."""
    return f"{type(exc).__name__}: {one_line(str(exc))}"[:2 * MAX_SPEC]


def _signature(factory: TopoFactory) -> inspect.Signature:
    """The parameters a spec can pass: those of ``build()`` for a Topo class
    (``Topo.__init__`` forwards everything to it), else the callable's."""
    if isinstance(factory, type) and issubclass(factory, Topo):
        params = list(inspect.signature(factory.build).parameters.values())
        return inspect.Signature(params[1:])  # drop self
    return inspect.signature(factory)


def _check_arguments(name: str, factory: TopoFactory, args: list[Any],
                     kwargs: dict[str, Any], origin: str) -> None:
    """Check the spec's arguments against the signature before calling, so a
    mismatch reads as a spec error, not a TypeError from inside build()."""
    try:
        signature = _signature(factory)
    except (TypeError, ValueError) as exc:  # a callable without one, e.g. a C function
        raise FabricError(f"{origin}topology {shown(name)}: cannot read its parameters: {_described(exc)}") from exc
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        params = signature.parameters.values()
        takes_var_args = any(p.kind is p.VAR_POSITIONAL for p in params)
        takes_var_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
        positional = [p for p in params if p.kind in
                      (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        unknown = [key for key in kwargs if key not in signature.parameters]
        if not takes_var_args and len(args) > len(positional):
            plural = "" if len(args) == 1 else "s"
            reason = f"got {len(args)} positional argument{plural}"
        elif not takes_var_kwargs and unknown:
            reason = f"got unknown keyword {shown(unknown[0])}"
        else:
            reason = one_line(str(exc))
        raise FabricError(f"{origin}topology {shown(name)} takes "
                          f"{topo_parameters(factory)}; {reason}") from exc
