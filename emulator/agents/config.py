"""The builder -> agent contract: what an agent is told when its process starts.

The fabric builder (:mod:`emulator.fabric.agent_config`) makes a
:class:`SwitchConfig` or :class:`HostConfig` per node and writes it with
:func:`dump` to the JSON file the agent is started with
(``python -m emulator.agents.worker READY_FD CPU KIND:CONFIG...``).  Its process
reads it back with :func:`read`, which checks every field once: its type, and the
ranges and cross-references that are cheap to check (a port index the
switch has, a route through a port it has, an SL-to-VL map of 16 data VLs).
After that the agents read typed attributes; a file that is not what the
builder writes ends the process with one line naming the file and the field, not with a
KeyError or a TypeError deep inside a constructor.

Each class checks its own invariants in ``__post_init__``, so a config the
builder makes wrong fails in the builder too, before any agent starts.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from emulator.errors import one_line, shown
from emulator._core.credits import FABRIC_REFRESH_NS
from emulator._core.ib import MANAGEMENT_VL, MAX_UNICAST_LID, SLS
from emulator._core.mac import mac_bytes
from emulator._core.pfc import PRIORITIES
from emulator._core.rc import MAX_REORDER
# Config types stay Python dataclasses (parsed and checked here); the compiled models read their fields once,
# when an agent builds its model.
from emulator.model.dcqcn import DcqcnParams
from emulator.model.mmu import MmuConfig

MAX_MTU = 65535  # an IPv4 packet's total length field
MAX_KEY_DIGITS = 18  # an integer key in the JSON (a DLID) has fewer digits; longer ones are not read
MAX_CPUS = 8192  # the kernel's largest NR_CPUS
# A transport time (UET's RTT and timeout, RC's reorder wait) is at most a day: longer is a mistake, and it bounds
# the arithmetic.
MAX_TIME_NS = 86_400 * 10**9

T = TypeVar("T")


class ConfigError(ValueError):
    """A config that is not what the builder writes; ``str(err)`` names the field, on one line."""


def _at_least(low: int | float) -> Any:
    """A field that must be ``low`` or more (checked in ``__post_init__``)."""
    return field(metadata={"range": (low, None)})


def _within(low: int | float, high: int | float) -> Any:
    """A field that must be ``low`` to ``high`` (checked in ``__post_init__``)."""
    return field(metadata={"range": (low, high)})


class _Checked:
    """Checks the ``range`` of every field that declares one, then the class's own :meth:`check`."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if "range" in f.metadata:
                value, (low, high) = getattr(self, f.name), f.metadata["range"]
                if value < low or (high is not None and value > high):
                    bound = f"at least {low}" if high is None else f"{low} to {high}"
                    raise ConfigError(f"{f.name}: {shown(value)} is out of range ({bound})")
        self.check()

    def check(self) -> None:
        """Invariants between fields; raise ConfigError naming the field."""


def _check_cpu(cpu: int | None) -> None:
    if cpu is not None and not 0 <= cpu < MAX_CPUS:
        raise ConfigError(f"rx_cpu: {shown(cpu)} is no CPU number (0 to {MAX_CPUS - 1})")


def _check_mac(name: str, text: str) -> None:
    try:
        mac_bytes(text)
    except ValueError:
        raise ConfigError(f"{name}: {shown(text)} is not a MAC address") from None


@dataclass(frozen=True)
class PortConfig(_Checked):
    """One switch port and the link cabled to it."""

    ifname: str
    mac: str
    peer_mac: str
    rate_bps: int = _at_least(1)
    mtu: int = _within(1, MAX_MTU)
    delay_ns: int = _at_least(0)
    host_facing: bool
    loss: float = _within(0.0, 1.0)  # probability a frame is lost, each direction
    drop: tuple[int, ...]  # frames (1-based, each direction) always lost
    rx_cpu: int | None = None  # the one CPU that receives its frames (the peer's process's), else spread by flow

    def check(self) -> None:
        _check_mac("mac", self.mac)
        _check_mac("peer_mac", self.peer_mac)
        _check_cpu(self.rx_cpu)


@dataclass(frozen=True)
class SwitchIbConfig(_Checked):
    """A switch's part of the IB subnet: its LFT, SL-to-VL map and every port's credit sizes."""

    lft: dict[int, int]  # DLID -> port index
    sl2vl: tuple[int, ...]
    vls: int = _within(1, MANAGEMENT_VL)  # data VLs: 0 to vls - 1
    vl_buffer: int = _at_least(1)  # bytes each VL of each port receives into
    peer_capacity: tuple[int, ...]  # per port: the bytes each VL of the peer receives into
    fc_floor: int = _within(0, FABRIC_REFRESH_NS)  # ns: the least time a grown credit grant waits for more
    ar: dict[int, tuple[int, ...]] = field(default_factory=dict)  # adaptive routing: DLID -> port indices

    def check(self) -> None:
        _check_sl2vl(self.sl2vl, self.vls)
        if any(capacity < 1 for capacity in self.peer_capacity):
            raise ConfigError(f"peer_capacity: {shown(self.peer_capacity)} has a size below 1")
        for dlid, group in self.ar.items():
            if not 1 <= dlid <= MAX_UNICAST_LID or not group:
                raise ConfigError(f"ar: {shown({dlid: group})} is no group of ports for a unicast DLID")


@dataclass(frozen=True)
class HostIbConfig(_Checked):
    """A host's port on the IB subnet: its LID, every GID's LID, its SL and the credit sizes."""

    lid: int = _at_least(1)
    sl: int = _within(0, SLS - 1)
    sl2vl: tuple[int, ...]
    vls: int = _within(1, MANAGEMENT_VL)
    lids: dict[str, int]  # GID (a host's IPv4 address) -> LID
    capacity: int = _at_least(1)  # bytes each VL of the RNIC receives into
    peer_capacity: int = _at_least(1)  # bytes each VL of the switch port receives into
    fc_floor: int = _within(0, FABRIC_REFRESH_NS)  # ns: the switch's; the least time a grown grant waits
    reorder: int = field(default=0, metadata={"range": (0, MAX_REORDER)})  # requests held past a gap (AR)
    reorder_wait_ns: int = field(default=0, metadata={"range": (0, MAX_TIME_NS)})  # then NAKed (0: the QP's default)

    def check(self) -> None:
        _check_sl2vl(self.sl2vl, self.vls)


def _check_sl2vl(sl2vl: tuple[int, ...], vls: int) -> None:
    if len(sl2vl) != SLS or not all(0 <= vl < vls for vl in sl2vl):
        raise ConfigError(f"sl2vl: {shown(sl2vl)} is no map of {SLS} SLs onto VLs 0 to {vls - 1}")


@dataclass(frozen=True)
class AgentConfig(_Checked):
    """What every agent has: its node, namespace, control socket and where its final counters go."""

    name: str
    netns: str
    control: str  # the Unix control socket's path
    stats_file: str
    seed: int = _at_least(0)
    monitor: bool = field(default=True, kw_only=True)  # the fidelity monitor; off only to measure its cost


@dataclass(frozen=True)
class SwitchConfig(AgentConfig):
    """A switch agent: its MMU, ports, routes and, on ``--fabric ib``, its IB plane."""

    mmu: MmuConfig
    occupancy_file: str
    ports: tuple[PortConfig, ...]
    routes: dict[str, tuple[str, ...]]  # host IPv4 address -> ifnames of its equal-cost egress ports
    ib: SwitchIbConfig | None
    routes_file: str | None = None  # where new routes wait when a link goes down or up (``routes`` request)
    ib_sweeps_file: str | None = None  # ib: the subnet manager's tables with each link down (``ib-tables``)

    def check(self) -> None:
        check_routes(self.routes, {port.ifname for port in self.ports})
        for name in ("lossless", "strict"):
            if not set(getattr(self.mmu, name)) <= set(range(PRIORITIES)):
                raise ConfigError(f"mmu.{name}: {shown(sorted(getattr(self.mmu, name)))} holds a priority outside 0 to 7")
        if len(self.mmu.weights) != PRIORITIES:
            raise ConfigError(f"mmu.weights: {shown(self.mmu.weights)} is not one weight per priority")
        if self.ib is not None:
            if len(self.ib.peer_capacity) != len(self.ports):
                raise ConfigError(f"ib.peer_capacity: {len(self.ib.peer_capacity)} sizes for {len(self.ports)} ports")
            if not all(0 <= index < len(self.ports) for index in self.ib.lft.values()):
                raise ConfigError(f"ib.lft: {shown(self.ib.lft)} sends to a port this switch lacks")
            if not all(0 <= index < len(self.ports) for group in self.ib.ar.values() for index in group):
                raise ConfigError(f"ib.ar: {shown(self.ib.ar)} sends to a port this switch lacks")


@dataclass(frozen=True)
class IbTables(_Checked):
    """A switch's IB forwarding: its LFT (DLID -> port index) and adaptive routing groups (DLID -> indices)."""

    lft: dict[int, int]
    ar: dict[int, tuple[int, ...]]

    def check(self) -> None:
        for dlid in (*self.lft, *self.ar):
            if not 1 <= dlid <= MAX_UNICAST_LID:
                raise ConfigError(f"{shown(dlid)} is no unicast DLID")


@dataclass(frozen=True)
class IbSweeps(_Checked):
    """A switch's IB tables as the subnet manager sweeps them with no link down (key "-") and with each
    switch-to-switch link down (key "a-b", its switches' names sorted): the builder's ib sweeps file."""

    tables: dict[str, IbTables]


@dataclass(frozen=True)
class RouteTable(_Checked):
    """A switch's routes after a link went down or up (the builder's routes file; checked by the switch)."""

    routes: dict[str, tuple[str, ...]]


def check_routes(routes: dict[str, tuple[str, ...]], ports: set[str]) -> None:
    """Every key an IPv4 address, every route a non-empty list of the switch's own ports."""
    for ip, ifnames in routes.items():
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            raise ConfigError(f"routes: {shown(ip)} is no IPv4 address") from None
        if not ifnames or not ports.issuperset(ifnames):
            raise ConfigError(f"routes[{shown(ip)}]: {shown(ifnames)} names no port or a port this switch lacks")


SPRAYS = ("reps", "oblivious", "flow")  # how a UET sender chooses each packet's entropy value (model::spray)
MAX_EVS = 16384  # the UDP source ports an entropy value may take (wire::uet)


@dataclass(frozen=True)
class UetTransport(_Checked):
    """The uet fabric's transport on every RNIC (``emulator.fabric.uet_transport`` derives it from the plan)."""

    spray: str
    evs: int = _within(1, MAX_EVS)
    network_rtt_ns: int = _within(1, MAX_TIME_NS)  # the empty fabric's longest round trip: NSCC's base RTT, scale
    timeout_ns: int = _within(1, MAX_TIME_NS)  # a packet not acknowledged this long is sent again
    rccc: bool = False  # receiver credits: a sender sends what its receiver granted (model::rccc)
    nscc: bool = True  # NSCC's window (else a fixed one)
    target_delay_ns: int | None = None  # NSCC's target queueing delay (None: the path's default)
    gamma: float | None = None  # NSCC's multiplicative decrease factor (None: 0.8)

    def check(self) -> None:
        if self.spray not in SPRAYS:
            raise ConfigError(f"spray: {shown(self.spray)} is not one of {', '.join(SPRAYS)}")
        if self.target_delay_ns is not None and not 1 <= self.target_delay_ns <= MAX_TIME_NS:
            raise ConfigError(f"target_delay_ns: {shown(self.target_delay_ns)} is out of range (1 to {MAX_TIME_NS})")
        if self.gamma is not None and not 0 < self.gamma <= 1:
            raise ConfigError(f"gamma: {shown(self.gamma)} is out of range (above 0, at most 1)")


@dataclass(frozen=True)
class HostConfig(AgentConfig):
    """A host agent: its NIC (for the pause gates) and its RNIC."""

    ifname: str
    rate_bps: int = _at_least(1)
    mtu: int = _within(1, MAX_MTU)
    mac: str
    peer_mac: str  # the switch port's: the host's gateway
    ip: str
    verbs: str  # the verbs socket's path
    ib: HostIbConfig | None
    rx_cpu: int | None = None  # as PortConfig's
    cc: DcqcnParams | None = None  # DCQCN in the emulated link's units, or no congestion control
    rates_file: str | None = None  # where the RNIC writes its QPs' DCQCN rate trace (CSV) when it stops
    uet: UetTransport | None = None  # the uet fabric: UET's transport on UET frames instead of RC on RoCEv2

    def check(self) -> None:
        _check_mac("mac", self.mac)
        _check_mac("peer_mac", self.peer_mac)
        _check_cpu(self.rx_cpu)


# --- the wire format: JSON ---------------------------------------------------------------------------


def dump(config: AgentConfig) -> str:
    """``config`` as the JSON text of an agent's config file."""
    return json.dumps(_plain(config))


def _plain(value: Any) -> Any:
    """JSON's types: dataclasses as objects, sets sorted, keys as text."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def read(path: str, config_type: type[T]) -> T:
    """The config file at ``path``, checked; ConfigError (one line) if it is not one."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {one_line(err.strerror or str(err))}") from None
    return load(config_type, text)


def load(config_type: type[T], text: str) -> T:
    """A config of ``config_type`` from JSON text; ConfigError naming the first bad field."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting deeper than Python's stack
        raise ConfigError(f"not JSON: {one_line(str(err))}") from None
    return _parse(config_type, data, "")


def _parse(kind: Any, value: Any, where: str) -> Any:
    """``value`` (from JSON) as type ``kind``; ``where`` is its path in the config, for messages."""
    if dataclasses.is_dataclass(kind):
        return _parse_dataclass(kind, value, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType:  # X | None
        if value is None:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _parse(inner, value, where)
    if kind is bool:
        return _expect(isinstance(value, bool), value, where, "true or false")
    if kind is int:
        return _expect(isinstance(value, int) and not isinstance(value, bool), value, where, "a whole number")
    if kind is float:
        number = _finite(value)
        _expect(number is not None, value, where, "a finite number")
        return number
    if kind is str:
        return _expect(isinstance(value, str), value, where, "text")
    if origin in (tuple, frozenset):
        _expect(isinstance(value, list), value, where, "a list")
        return origin(_parse(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        _expect(isinstance(value, dict), value, where, "an object")
        return {_key(args[0], key, where): _parse(args[1], item, f"{where}[{shown(key)}]") for key, item in value.items()}
    raise TypeError(f"{where}: no parser for {kind!r}")  # a field of a type this module does not know: a bug


@functools.cache
def _fields(kind: Any) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """A config class's field types and fields (get_type_hints evaluates the annotations each call)."""
    return typing.get_type_hints(kind), {f.name: f for f in dataclasses.fields(kind)}


def _parse_dataclass(kind: Any, value: Any, where: str) -> Any:
    _expect(isinstance(value, dict), value, where, "an object")
    hints, fields = _fields(kind)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(f"{where or 'the config'}: unknown field {shown(unknown[0])}")
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in value:
            raise ConfigError(f"{_joined(where, name)}: missing")
    parsed = {name: _parse(hints[name], item, _joined(where, name)) for name, item in value.items()}
    try:
        return kind(**parsed)
    except ValueError as err:  # the class's own checks (ConfigError, or a model's ValueError) name the field
        raise ConfigError(_joined(where, str(err))) from None


def _finite(value: Any) -> float | None:
    """``value`` as a finite float if it is a JSON number that is one, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _key(kind: Any, key: str, where: str) -> Any:
    if kind is str:
        return key
    if kind is int and re.fullmatch(rf"[0-9]{{1,{MAX_KEY_DIGITS}}}", key):
        return int(key)
    raise ConfigError(f"{where}: key {shown(key)} is not a whole number")


def _expect(ok: bool, value: Any, where: str, what: str) -> Any:
    """``value`` if ``ok``; else ConfigError naming ``where``."""
    if not ok:
        raise ConfigError(f"{where or 'the config'}: expected {what}, got {shown(value)}")
    return value


def _joined(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
