"""Experiment files: which collectives to compare on which fabrics, as data.

An experiment is a TOML file (the built-ins are package data in
``emulator/study/experiments/``, installed with the package) listing
``[[variants]]`` to compare, such as one incast on a lossless and on a
lossy fabric, optionally multiplied by a ``[sweep]``.  Keys at the top
level are defaults for every variant; a variant's own keys override them
(``link`` and ``switch`` tables merge option by option); a swept key takes
each of its values in turn, over the top level (a variant may not set a
key it is swept over: one of the two would be ignored).  The shorthands ``loss``/``bw`` (link options)
and ``buffer``/``headroom`` (switch options) make sweeps one line.

Everything a run would trip over later (topology specs, link and switch
options and their combination on the topology's switches, message sizes,
sender counts, the RDMA path MTU) is checked here, before anything is
built: a typo should cost a second, not a half-finished experiment.  Each
mistake is a :class:`FabricError` of one line naming the file, the variant
and the key.  Nothing here needs root.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import math
import os
import platform
import pwd
import re
import subprocess
import time
import tomllib
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Callable, Iterator

from mininet.topo import Topo

from emulator import __version__, bounds
from emulator._core.rdma_params import MAX_MR_BYTES, PATHS_MTU, ROCE_OVERHEAD
from emulator.collectives.algorithms import COLLECTIVES, SENDER_COLLECTIVES, RankPlan, chunk_bytes
from emulator.collectives.algorithms import plan as rank_plans
from emulator.agents.config import SPRAYS
from emulator.errors import FabricError, one_line, printable, shown
from emulator.fabric.builder import PACKAGE_PARENT
from emulator.fabric.capacity import meminfo_bytes
from emulator.fabric.ib_subnet import ROUTINGS
from emulator.fabric.plan import (DEFAULT_LINK, IB_LOSS, IB_LOSS_SIM, FabricPlan, check_connected, dilated,
                                  link_params, make_plan, switch_graph)
from emulator.model.dcqcn import check_fabric, check_link, parse_cc
from emulator.model.nscc import parse_nscc
from emulator.model.switch_params import FABRICS, SWITCH_OPTIONS, derive_config, parse_overrides
from emulator.fabric.topospec import build_topo
from emulator.study import calibration
from emulator.collectives.workload_plan import parse_parallel, parse_placement
from emulator.study.workload_step import step_bytes, step_plan
from emulator.safefiles import read_bounded
from emulator.units import format_size, format_time, parse_size, parse_time

BUILTIN = resources.files("emulator.study") / "experiments"
MAX_FILE_BYTES = 1 << 20  # an experiment file is a page of text; refuse to read a disk image

VARIANT_KEYS = ("name", "fabric", "collective", "topo", "size", "iterations", "warmup", "senders",
                "link", "switch", "seed", "mtu", "capture", "model", "cc", "deadlock", "faults", "backend", "spray",
                "routing", "rccc", "workload", "parallel", "placement", "scale")
SHORTHANDS = {"loss": "link", "bw": "link", "buffer": "switch", "headroom": "switch"}
SWEEP_KEYS = ("loss", "bw", "buffer", "headroom", "size", "senders", "fabric", "collective", "topo", "model", "cc", "spray",
              "workload", "scale",
              "backend", "routing")
EXPERIMENT_KEYS = ("name", "description", "variants", "sweep")
TOP_LEVEL_KEYS = EXPERIMENT_KEYS + VARIANT_KEYS[1:] + tuple(SHORTHANDS)
REQUIRED = ("collective", "topo", "size")
DEFAULTS: dict[str, Any] = {"fabric": "lossless", "iterations": 10, "warmup": 1, "seed": 1, "capture": False,
                            "cc": "none", "backend": "emulator", "spray": "reps",
                            "routing": "static", "rccc": False, "parallel": "", "placement": "tp,dp,pp", "scale": 1.0}
WORKLOAD = "workload"  # the collective of a variant that replays a training step's file (key "workload")
WORKLOAD_KEYS = ("parallel", "placement", "scale")  # what only a workload variant takes
BUILTIN_WORKLOADS = BUILTIN / "workloads"  # where a built-in experiment's workload files are
# emulator: real frames through namespaces, veths and the agents, in real time; sim: the same models and frames
# in simulated time (the compiled core's emulator._core.sim), what one VM cannot hold.
BACKENDS = ("emulator", "sim")
SIM_FABRICS = ("lossless", "lossy", "ib", "uet")  # what the simulation backend runs
SIM_FAULTS = ("stall", "down")  # the faults it injects (crates/fabric-core/src/sim/faults.rs)
# Experiments run RoCE and IB at a 4096-byte path MTU, as most deployments do: a quarter of the frames of
# 1024 for the same bytes, so a quarter of the agents' work per byte.  4200 is the link MTU RoCE fabrics
# are usually given for it (4096 + 64 bytes of RoCEv2 headers, rounded up); without a `mtu` key the path
# MTU is the largest that fits the links.
EXPERIMENT_LINK_MTU = 4200
MIN_DEADLOCK_NS, MAX_DEADLOCK_NS = 500_000_000, 600 * 10**9  # the goodput watch samples every 100 ms

_EXPERIMENT_NAME = re.compile(r"[a-z0-9-]+")
# Variant names become directory names: no '/', no leading '.' or '-'.
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NAME = 100  # experiment and variant names (sweep suffixes included) name directories
MAX_VARIANTS = 256  # each runs on a fabric of its own, for minutes
_SCALARS = (str, int, float, bool)  # what a swept value may be: it becomes part of a name
_CHECK_RUN = "check"  # run name of the throw-away plan that validates a variant
PROGRESS_S = 2.0  # checks that take longer say how far they got, this often
_GIT_TIMEOUT_S = 10


FAULT_KINDS = ("stall", "slow", "down")
MAX_FAULTS = 16
MAX_FAULT_NS = 600 * 10**9


@dataclass(frozen=True)
class Fault:
    """A fault injected into every measured iteration: ``kind`` on ``host`` (``down``: on the link between the two
    switches of ``link``) from ``at_ns`` after the iteration's start, for ``duration_ns`` (None: until the
    fabric is torn down)."""

    at_ns: int
    host: str
    kind: str
    duration_ns: int | None = None
    fraction: float | None = None  # slow: the share of its link rate the NIC keeps up with
    link: tuple[str, str] | None = None  # down: the two switches

    @property
    def request(self) -> str:
        """What the host agent is asked (its control socket)."""
        return self.kind if self.fraction is None else f"{self.kind} {self.fraction}"


@dataclass(frozen=True)
class Variant:
    """One fabric and one collective, fully resolved: what one run executes."""

    name: str
    fabric: str
    collective: str
    topo: str
    size: int  # bytes, as nccl-tests counts them
    iterations: int
    warmup: int
    senders: int | None  # incast: how many hosts send (default all but the receiver); None otherwise
    link: dict[str, str]  # every link option as --link text, defaults included
    switch: dict[str, str]  # --switch overrides only: the rest is derived per switch
    seed: int
    mtu: int  # RDMA path MTU
    capture: bool
    params: dict[str, Any] = field(default_factory=dict)  # the swept values, as written
    model: str | None = None  # the modelled link rate as written (time dilation), or None: emulated = modelled
    dilation: float = 1.0  # D = modelled / emulated rate; link delays above are emulated (modelled x D)
    cc: str = "none"  # the RNICs' congestion control as written: none, or dcqcn[,key=value...]
    deadlock_ns: int | None = None  # watch goodput: a stall this long is a deadlock (None: not watched)
    faults: tuple[Fault, ...] = ()  # injected into every measured iteration
    backend: str = "emulator"  # BACKENDS
    spray: str = "reps"  # fabric uet: how each packet's entropy value is chosen (SPRAYS)
    routing: str = "static"  # fabric ib: the subnet manager's LFTs alone, or with adaptive routing (ROUTINGS)
    rccc: bool = False  # fabric uet: receiver credits (a sender sends what its receiver granted)
    workload: str | None = None  # a training step's file (absolute path), run instead of a collective
    parallel: str = ""  # its group sizes over the file's (tp=2,dp=4)
    placement: str = "tp,dp,pp"  # its dimensions innermost first
    scale: float = 1.0  # its messages and compute times are multiplied by this

    def to_json(self) -> dict[str, Any]:
        """Every field, for config.json and results files (lists, as JSON has them)."""
        return {**asdict(self), "faults": [asdict(fault) for fault in self.faults]}


@dataclass(frozen=True)
class Experiment:
    """A named list of variants, from a file or a built-in."""

    name: str
    description: str
    source: str  # absolute path of the TOML file, or "built-in:<name>"
    variants: list[Variant]


@dataclass
class _Settings:
    """A variant's keys after layering; link and switch options keep the
    key they were written as (``loss`` or ``link.loss``) for messages."""

    values: dict[str, Any] = field(default_factory=dict)
    link: dict[str, tuple[str, Any]] = field(default_factory=dict)
    switch: dict[str, tuple[str, Any]] = field(default_factory=dict)


def builtin_names() -> list[str]:
    """The experiments shipped with the package: file names without ``.toml``."""
    return sorted(entry.name[:-len(".toml")] for entry in BUILTIN.iterdir() if entry.name.endswith(".toml"))


def builtin_descriptions() -> dict[str, str]:
    """Each built-in's ``description``, for ``fabric-emu run --list``."""
    return {name: _parse((BUILTIN / f"{name}.toml").read_bytes(), f"{name}.toml").get("description", "")
            for name in builtin_names()}


def load_experiment(name_or_path: str, backend: str | None = None,
                    log: Callable[[str], None] | None = None) -> Experiment:
    """Load a built-in by name, or a TOML file by path; check and expand it.

    ``backend`` (the command line's ``--backend``) runs every variant on that backend, whatever the file says.
    ``log`` hears how far the checks got when they take longer than PROGRESS_S.
    """
    if name_or_path in builtin_names():
        label = f"{name_or_path}.toml"
        data = _parse((BUILTIN / label).read_bytes(), label)
        source = f"built-in:{name_or_path}"
    else:
        path = os.path.abspath(name_or_path)
        label = printable(os.path.basename(path))
        data, source = _parse(_read(path), label), path
    if backend is not None:
        if backend not in BACKENDS:
            raise FabricError(f"--backend {shown(backend)}: choose {' or '.join(BACKENDS)}")
        data = _forced_backend(data, backend)
    return _experiment(data, label, source, log)


def build_experiment(data: dict[str, Any], label: str, source: str,
                     log: Callable[[str], None] | None = None) -> Experiment:
    """An experiment from tables in memory (what a TOML file parses to), checked and expanded as a file is: a
    command that makes its own experiment (``fabric-emu nccl``'s size sweep) runs it through the same checks and
    the same runner.  ``label`` names it in messages, ``source`` in config.json."""
    return _experiment(data, label, source, log)


def _forced_backend(data: dict[str, Any], backend: str) -> dict[str, Any]:
    """The experiment with every variant on ``backend``: the key set at the top, taken out of variants and sweep."""
    forced = {**data, "backend": backend}
    if isinstance(data.get("variants"), list):
        forced["variants"] = [{k: v for k, v in table.items() if k != "backend"} if isinstance(table, dict) else table
                              for table in data["variants"]]
    if isinstance(data.get("sweep"), dict):
        forced["sweep"] = {k: v for k, v in data["sweep"].items() if k != "backend"}
    return forced


def host_count(topo_spec: str) -> int:
    """How many hosts (ranks) a topology spec has."""
    return len(topology(topo_spec).hosts(sort=False))


def results_directory(root: str, experiment: str, now: datetime) -> str:
    """``root/<experiment>/<UTC time>``: runs sort by time and never mix."""
    return os.path.join(root, experiment, _utc(now).strftime("%Y%m%dT%H%M%SZ"))


def run_config(experiment: Experiment, features: dict[str, bool] | None,
               now: datetime | None = None) -> dict[str, Any]:
    """What config.json records: enough to know what ran, where and on what.

    ``now`` defaults to the current time; pass the instant given to
    :func:`results_directory` so the two agree.
    """
    return {
        "experiment": experiment.name,
        "description": experiment.description,
        "source": experiment.source,
        "created_utc": _utc(now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "version": __version__,
        "git_commit": git_commit(PACKAGE_PARENT),
        "kernel": os.uname().release,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": meminfo_bytes("MemTotal"),
        "features": features,
        "seeds": sorted({variant.seed for variant in experiment.variants}),
        "variants": [variant.to_json() for variant in experiment.variants],
    }


def git_commit(repo: str) -> str:
    """HEAD of the checkout whose top directory is ``repo``, with ``-dirty``
    if it has changes; ``unknown`` without git or when ``repo`` is not the
    top of a checkout (an installed package in a venv that happens to sit
    inside some checkout is not that checkout's code)."""
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(repo):
        return "unknown"
    head = _git(repo, "rev-parse", "HEAD")
    if head is None:
        return "unknown"
    status = _git(repo, "--no-optional-locks", "status", "--porcelain")
    return f"{head}-dirty" if status else head


def _git(repo: str, *args: str) -> str | None:
    """Run git read-only; stdout, or None if it fails.

    Runs run as root, usually on a checkout some user owns.  git refuses
    such a repository ("dubious ownership"), and overriding that would let
    the repository's config run commands as root, so git runs as the owner.
    ``--no-optional-locks`` keeps ``status`` from rewriting the index.
    """
    try:
        done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, check=False, **_as_owner(repo))
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _as_owner(repo: str) -> dict[str, Any]:
    """subprocess arguments that run a command as the repository's owner when we are root."""
    owner = os.stat(repo)
    if os.geteuid() != 0 or owner.st_uid == 0:
        return {}
    return {"user": owner.st_uid, "group": owner.st_gid, "extra_groups": [],
            "env": {**os.environ, "HOME": _home(owner.st_uid)}}


def _home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:  # a uid without a passwd entry (e.g. a shared folder's)
        return "/nonexistent"


def _cpu_model() -> str | None:
    """The CPU's name from /proc/cpuinfo: timings only compare on like hardware."""
    for line in _proc_lines("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return None


def _proc_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readlines()
    except OSError:
        return []


def _utc(now: datetime) -> datetime:
    """A naive datetime could be local or UTC; refuse to guess."""
    if now.tzinfo is None:
        raise ValueError("pass a timezone-aware datetime, e.g. datetime.now(timezone.utc)")
    return now.astimezone(timezone.utc)


def _read(path: str) -> bytes:
    """The file's bytes, at most MAX_FILE_BYTES of them."""
    label = os.path.basename(path)
    if not os.path.isfile(path):
        raise FabricError(f"{printable(path)}: no such experiment file or built-in experiment "
                          f"(built-in: {', '.join(builtin_names())})")
    unreadable = f"{printable(label)}: cannot read"
    try:
        f = open(path, "rb")
    except OSError as err:
        raise FabricError(f"{unreadable}: {err.strerror}") from err
    return read_bounded(f, MAX_FILE_BYTES, unreadable,
                        f"{printable(label)}: larger than {format_size(MAX_FILE_BYTES)}; not an experiment file")


def _parse(data: bytes, label: str) -> dict[str, Any]:
    """TOML to tables; every way it can fail is one line naming the file."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise FabricError(f"{printable(label)}: bad TOML: not UTF-8 text") from err
    except tomllib.TOMLDecodeError as err:
        raise FabricError(f"{printable(label)}: bad TOML: {one_line(str(err))}") from err
    except ValueError as err:  # tomllib's int() of an integer over 4300 digits
        raise FabricError(f"{printable(label)}: bad TOML: {one_line(str(err)).split(';')[0]}") from err
    except RecursionError as err:
        raise FabricError(f"{printable(label)}: bad TOML: arrays or tables nested too deeply") from err


def _experiment(data: dict[str, Any], label: str, source: str, log: Callable[[str], None] | None) -> Experiment:
    """Check the top level, then expand and check every variant."""
    _check_keys(data, TOP_LEVEL_KEYS, label)
    name = _name(data, _EXPERIMENT_NAME, "lowercase letters, digits and '-'", label)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise FabricError(f'{label}: key "description": expected text, got {shown(description)}')
    defaults = {key: value for key, value in data.items() if key not in EXPERIMENT_KEYS}
    sweep = _sweep(data.get("sweep", {}), label)
    tables = _variant_tables(data, label)
    count = len(tables) * math.prod(len(values) for values in sweep.values())
    if count > MAX_VARIANTS:
        raise FabricError(f"{label}: {count} variants ({len(tables)} [[variants]] x the sweep's values); "
                          f"at most {MAX_VARIANTS}")
    progress = _Progress(count, log)
    base = str(BUILTIN_WORKLOADS) if source.startswith("built-in:") else os.path.dirname(source)
    variants = [variant for index, table in enumerate(tables, start=1)
                for variant in _expand(table, index, defaults, sweep, label, progress, base)]
    _check_unique(variants, label)
    return Experiment(name, description, source, variants)


def _variant_tables(data: dict[str, Any], label: str) -> list[dict[str, Any]]:
    tables = data.get("variants")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise FabricError(f'{label}: expected one or more [[variants]] tables, each with a "name"')
    return tables


def _sweep(table: Any, label: str) -> dict[str, list[Any]]:
    if not isinstance(table, dict):
        raise FabricError(f"{label}: sweep: expected a [sweep] table of key = [values]")
    _check_keys(table, SWEEP_KEYS, f"{label}: sweep")
    for key, values in table.items():
        if not isinstance(values, list) or not values or not all(isinstance(v, _SCALARS) for v in values):
            raise FabricError(f"{label}: sweep: key {_q(key)}: expected a list of values, e.g. {key} = [1, 2]")
        with _key(f"{label}: sweep", key):
            for value in values:
                _text(value)  # a swept value becomes part of a name: it must have a text
            if key == "bw" and calibration.CALIBRATED in values:
                raise FabricError(f'{_q(calibration.CALIBRATED)} is no rate to sweep: a bw sweep measures the rates '
                                  "the calibration records; set bw = \"calibrated\" outside [sweep]")
    return table


def _expand(table: dict[str, Any], index: int, defaults: dict[str, Any], sweep: dict[str, list[Any]],
            label: str, progress: "_Progress", base: str) -> list[Variant]:
    """One variant per point of the sweep (just one without a sweep)."""
    name = _name(table, _VARIANT_NAME, "letters, digits, '.', '_' and '-'", f"{label}: variant {index}")
    context = f"{label}: variant {_q(name)}"
    _check_keys(table, VARIANT_KEYS + tuple(SHORTHANDS), context)
    clash = [key for key in sweep if key in _written(table)]
    if clash:
        raise FabricError(f"{context}: key {_q(clash[0])} is also swept; set it in one place")
    variants = []
    for values in itertools.product(*sweep.values()):
        point = dict(zip(sweep, values))
        full = name + "".join(f"-{key}{_name_text(value)}" for key, value in point.items())
        if len(full) > MAX_NAME:
            raise FabricError(f"{context}: name {_q(full[:MAX_NAME])}... with its sweep suffixes is longer than "
                              f"{MAX_NAME} characters (it names a directory)")
        variants.append(_variant(full, [defaults, table, point], point, f"{label}: variant {_q(full)}", base))
        progress.checked()
    return variants


class _Progress:
    """Says how far the checks got, every PROGRESS_S once they have taken that long: a large sweep on a large
    topology checks for a while (each distinct fabric plan and collective plan once), and says so."""

    def __init__(self, total: int, log: Callable[[str], None] | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.log, self.clock = total, log, clock
        self.done = 0
        self.began = clock()
        self.next = self.began + PROGRESS_S

    def checked(self) -> None:
        self.done += 1
        now = self.clock()
        if self.log is not None and now >= self.next:
            self.log(f"checking the experiment: {self.done}/{self.total} variants in {now - self.began:.0f} s")
            self.next = now + PROGRESS_S


def _written(table: dict[str, Any]) -> set[str]:
    """The keys a table sets, with ``link.loss`` counted as ``loss`` and so on."""
    keys = set(table)
    for key, target in SHORTHANDS.items():
        if isinstance(table.get(target), dict) and key in table[target]:
            keys.add(key)
    return keys


def _name_text(value: Any) -> str:
    """A swept value as part of a variant (directory) name: ``star,8`` -> ``star-8``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", _text(value)).strip("-")


def _variant(name: str, layers: list[dict[str, Any]], params: dict[str, Any], context: str, base: str) -> Variant:
    """Layer the tables, then check every key in the order they depend on each other.  ``base``: the directory
    a workload file's relative path starts from (the experiment file's)."""
    settings = _Settings()
    for table in layers:
        _layer(settings, table, context)
    values = {**DEFAULTS, **settings.values}
    workload = _workload_keys(values, settings.values, context)
    for key in REQUIRED:
        if key not in values and not (workload and key in ("collective", "size")):
            raise FabricError(f"{context}: missing key {_q(key)}")
    fabric = _choice(values, "fabric", FABRICS, context)
    if fabric == "uet" and "cc" not in settings.values:
        values["cc"] = "nscc"  # the uet fabric's congestion control, with its defaults
    collective = WORKLOAD if workload else _choice(values, "collective", COLLECTIVES, context)
    link, model, factor = _dilated(values, _calibrated(_link(settings.link, context), values, fabric, collective,
                                                         context), context)
    switch = _switch(settings.switch, context)
    backend = _choice(values, "backend", BACKENDS, context)
    spray = _choice(values, "spray", SPRAYS, context)
    if fabric != "uet" and "spray" in settings.values:
        raise FabricError(f'{context}: key "spray" chooses UET\'s entropy values: fabric {fabric!r} sends each '
                          'flow on one path (set fabric = "uet", or remove spray)')
    rccc = values["rccc"]
    if not isinstance(rccc, bool):
        raise FabricError(f'{context}: key "rccc": expected true or false, got {shown(rccc)}')
    if fabric != "uet" and "rccc" in settings.values:
        raise FabricError(f'{context}: key "rccc" turns on UET\'s receiver credits: fabric {fabric!r} has none '
                          '(set fabric = "uet", or remove rccc)')
    routing = _choice(values, "routing", ROUTINGS, context)
    if fabric != "ib" and "routing" in settings.values:
        raise FabricError(f'{context}: key "routing" chooses the IB subnet manager\'s routing: fabric {fabric!r} '
                          'routes by ECMP (set fabric = "ib", or remove routing)')
    topo, cabling = _topology(values["topo"], collective, backend, context)
    plan, links = cabling.plan, cabling.links(link)
    with _key(context, "switch"):
        _check_switches(links, fabric, switch)
    hosts = len(plan.hosts())
    with _key(context, "cc"):
        _check_cc(values["cc"], fabric, links, factor if model is not None else None)
    capture = values["capture"]
    if not isinstance(capture, bool):
        raise FabricError(f'{context}: key "capture": expected true or false, got {shown(capture)}')
    faults = _faults(values, plan, context)
    if backend == "sim":
        _check_sim(fabric, capture, faults, context)
    wire = link_params({}, link)
    if fabric == "ib" and (wire.loss or wire.drop):
        if backend != "sim":
            raise FabricError(f"{context}: {IB_LOSS}: remove loss and drop, or run it simulated on one switch")
        if len(plan.switches()) > 1:
            raise FabricError(f"{context}: {IB_LOSS_SIM}")
    step = None
    if workload:
        path = os.path.join(base, _text(values["workload"]))
        scale = values["scale"]
        for key, parse in (("parallel", parse_parallel), ("placement", parse_placement)):
            with _key(context, key):  # a bad one is its key's mistake, not the file's
                if _text(values[key]):
                    parse(_text(values[key]))
        with _key(context, "workload"):
            step = step_plan(path, hosts, _text(values["parallel"]), _text(values["placement"]), scale,
                             factor if model is not None else 1.0)
        size, senders = step_bytes(step), None
        needs = needs_of(step.ranks)
    else:
        size = _size(values["size"], collective, hosts, context)
        senders = _senders(values, collective, hosts, backend, context)
        with _key(context, "topo"):  # a collective the hosts cannot make (shift, victim and multijob need 3)
            needs = plan_needs(collective, hosts, size, senders)
    _check_regions(needs, collective, plan, context)
    return Variant(
        name=name, fabric=fabric, collective=collective, topo=topo, size=size,
        iterations=_integer(values, "iterations", bounds.ITERATIONS, context),
        warmup=_integer(values, "warmup", bounds.WARMUP, context),
        senders=senders, link=link, switch=switch,
        seed=_integer(values, "seed", bounds.SEED, context), mtu=_path_mtu(values, links.mtu, context), capture=capture,
        params=dict(params), model=model, dilation=factor, cc=values["cc"],
        deadlock_ns=_deadlock(values, context), faults=faults, backend=backend, spray=spray,
        routing=routing, rccc=rccc, workload=os.path.abspath(path) if step is not None else None,
        parallel=_text(values["parallel"]), placement=_text(values["placement"]), scale=float(values["scale"]),
    )


MIN_SCALE = 1e-9  # a step a billion times smaller than its file's is no step


def _workload_keys(values: dict[str, Any], written: dict[str, Any], context: str) -> bool:
    """Whether the variant replays a workload file; refuses the keys that do not go with its choice."""
    if "workload" not in values:
        if set(WORKLOAD_KEYS) & set(written):
            key = next(k for k in WORKLOAD_KEYS if k in written)
            raise FabricError(f"{context}: key {_q(key)} places a workload's step: set workload = FILE, or remove it")
        return False
    if not isinstance(values["workload"], str) or not values["workload"].strip():
        raise FabricError(f'{context}: key "workload": expected a file\'s path, got {shown(values["workload"])}')
    for key in ("collective", "size", "senders"):
        if key in written and not (key == "collective" and written[key] == WORKLOAD):
            raise FabricError(f"{context}: key {_q(key)}: a workload variant runs its file's collectives "
                              "(scale its sizes with scale)")
    scale = values["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not MIN_SCALE <= scale <= 1:
        raise FabricError(f'{context}: key "scale": expected a number from {MIN_SCALE:g} to 1, got {shown(scale)}')
    return True


def _check_cc(text: Any, fabric: str, links: "_Links", factor: float | None) -> None:
    """The congestion control as every host's RNIC would run it: on a RoCE fabric, and within its ranges once
    scaled to the host's link (dcqcn.check_link), as the emulator's agents and the simulated RNICs scale it."""
    if fabric == "uet":
        parse_nscc(text)
        return
    params = parse_cc(text)
    check_fabric(params, fabric)
    if params is not None:
        for rate, mtu in sorted(links.hosts):
            check_link(params, rate, mtu, factor)


@dataclass(frozen=True)
class PlanNeeds:
    """What a collective's plan asks of the RNICs: each rank's two memory regions, and the QPs of all ranks."""

    regions: tuple[tuple[int, int], ...]  # per rank: (data, staging) bytes
    qps: int  # one per rank and peer


@functools.lru_cache(maxsize=64)
def plan_needs(collective: str, ranks: int, size: int, senders: int | None) -> PlanNeeds:
    """The plan's needs, once per distinct plan: a sweep over the link rate or the fabric has the same plan in
    every variant.  The ring collectives and the all-to-all give every rank the same regions and as many peers,
    and their plans grow with the square of the ranks (a 3,456-rank all-reduce has 24 million steps: 124 s and
    11 GB to make), so their needs are counted, not read off a plan (:func:`_uniform_needs`).  The others' plans
    grow with the ranks and are made; the collector is paused meanwhile: a plan is acyclic (ints and tuples), and
    the collections that millions of new objects set off found nothing and took half the time."""
    if collective in _UNIFORM and ranks >= 2:
        return _uniform_needs(collective, ranks, size)
    collecting = gc.isenabled()
    gc.disable()
    try:
        plans = rank_plans(collective, ranks, size, senders)
        return needs_of(plans)
    finally:
        if collecting:
            gc.enable()


def needs_of(plans: list[RankPlan]) -> PlanNeeds:
    """What made plans ask: every rank's regions, and a QP per rank and peer."""
    return PlanNeeds(tuple((p.data_bytes, p.staging_bytes) for p in plans), sum(len(p.peers) for p in plans))


_UNIFORM = ("allreduce", "allgather", "alltoall")


def _uniform_needs(collective: str, ranks: int, size: int) -> PlanNeeds:
    """What :func:`~emulator.collectives.algorithms.plan` gives every rank of a ring or all-to-all, counted:
    a ring rank holds the whole vector (all-reduce: and N-1 slots of its largest chunk staged) and talks to the
    next and the previous rank (one when there are two); an all-to-all rank holds a chunk for and from every rank
    and talks to all the others."""
    chunk = chunk_bytes(collective, size, ranks)  # a ring's largest
    if collective == "alltoall":
        return PlanNeeds(((2 * ranks * chunk, 0),) * ranks, ranks * (ranks - 1))
    staging = (ranks - 1) * chunk if collective == "allreduce" else 0
    return PlanNeeds(((size, staging),) * ranks, ranks * min(ranks - 1, 2))


def _check_regions(needs: PlanNeeds, collective: str, fabric_plan: FabricPlan, context: str) -> None:
    """Every rank's regions within what the RNIC registers (MAX_MR_BYTES): an incast's receiver holds every
    sender's message, so 1 GiB from two senders is 2 GiB in one region."""
    hosts = fabric_plan.hosts()  # rank order
    for rank, sizes in enumerate(needs.regions):
        for region, length in zip(("data", "staging"), sizes):
            if length > MAX_MR_BYTES:
                also = " or senders" if collective in SENDER_COLLECTIVES else ""
                key = "scale" if collective == WORKLOAD else "size"
                raise FabricError(f'{context}: key "{key}": {collective} gives rank {rank} ({hosts[rank].name}) a '
                                  f"{region} region of {format_size(length)}; the RNIC registers at most "
                                  f"{format_size(MAX_MR_BYTES)} a region: lower {key}{also}")


def _check_sim(fabric: str, capture: bool, faults: tuple[Fault, ...], context: str) -> None:
    """What the simulation backend does not do yet, refused before anything runs."""
    if fabric not in SIM_FABRICS:
        raise FabricError(f'{context}: backend "sim" runs the {" and ".join(SIM_FABRICS)} fabrics, not {fabric!r} (yet)')
    if capture:
        raise FabricError(f'{context}: backend "sim" writes no captures; set capture = false')
    if unsupported := sorted({fault.kind for fault in faults} - set(SIM_FAULTS)):
        raise FabricError(f'{context}: backend "sim" injects the {" and ".join(SIM_FAULTS)} faults, not '
                          f'{", ".join(map(repr, unsupported))} (yet)')


def _faults(values: dict[str, Any], plan: FabricPlan, context: str) -> tuple[Fault, ...]:
    """``faults = [{ at = "100ms", host = "h8", fault = "stall", for = "1s" }, ...]``: each checked."""
    if "faults" not in values:
        return ()
    with _key(context, "faults"):
        items = values["faults"]
        if not isinstance(items, list) or len(items) > MAX_FAULTS:
            raise FabricError(f"expected a list of at most {MAX_FAULTS} tables such as "
                              '{ at = "100ms", host = "h1", fault = "stall", for = "1s" }')
        hosts = {node.name for node in plan.hosts()}
        faults = []
        for number, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise FabricError(f"fault {number}: expected a table, got {shown(item)}")
            unknown = sorted(set(item) - {"at", "host", "link", "fault", "for", "fraction"})
            if unknown:
                raise FabricError(f"fault {number}: unknown key {_q(unknown[0])} (known: at, host, link, fault, "
                                  "for, fraction)")
            if "fault" not in item:
                raise FabricError(f"fault {number}: missing key \"fault\"")
            if item["fault"] not in FAULT_KINDS:
                raise FabricError(f"fault {number}: {shown(item['fault'])} is not one of {', '.join(FAULT_KINDS)}")
            target = "link" if item["fault"] == "down" else "host"
            missing = [key for key in ("at", target) if key not in item]
            if missing:
                raise FabricError(f"fault {number}: {item['fault']} needs key {_q(missing[0])}")
            if ("host" if target == "link" else "link") in item:
                raise FabricError(f"fault {number}: {item['fault']} takes {_q(target)}, not "
                                  f"{_q('host' if target == 'link' else 'link')}")
            link = None
            if target == "link":
                link = _fault_link(item["link"], plan, number)
                if values.get("fabric") == "ib" and any(f.link is not None for f in faults):
                    raise FabricError(f"fault {number}: the ib fabric takes one link down per variant (its subnet "
                                      "manager is swept for one link down at a time)")
            elif not isinstance(item["host"], str):
                raise FabricError(f"fault {number}: host: expected one host's name such as \"h1\", "
                                  f"got {shown(item['host'])}")
            elif item["host"] not in hosts:
                raise FabricError(f"fault {number}: {shown(item['host'])} is no host of {shown(values['topo'])}")
            times = []
            for key in ("at", "for"):
                if key not in item:
                    times.append(None)
                    continue
                if not isinstance(item[key], str):
                    raise FabricError(f"fault {number}: {key}: expected a time such as \"1s\", got {shown(item[key])}")
                ns = parse_time(item[key])
                if ns > MAX_FAULT_NS or (key == "for" and ns == 0):
                    raise FabricError(f"fault {number}: {key} {format_time(ns)}: choose "
                                      f"{'0' if key == 'at' else '1 ns'} to {format_time(MAX_FAULT_NS)}")
                times.append(ns)
            fraction = item.get("fraction")
            if (fraction is not None) != (item["fault"] == "slow"):
                raise FabricError(f"fault {number}: " + ("slow needs a fraction of the link rate, e.g. fraction = 0.25"
                                                         if fraction is None else "only slow takes a fraction"))
            if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                         or not 0 < fraction < 1):
                raise FabricError(f"fault {number}: fraction {shown(fraction)}: above 0 and below 1")
            faults.append(Fault(times[0], item.get("host", ""), item["fault"], times[1],
                                None if fraction is None else float(fraction), link))
    return tuple(faults)


def _fault_link(text: Any, plan: FabricPlan, number: int) -> tuple[str, str]:
    """``"s1-s3"``: two switches of the topology with a link between them."""
    parts = text.split("-") if isinstance(text, str) else []
    if len(parts) != 2 or switch_graph(plan).link(*parts) is None:
        raise FabricError(f"fault {number}: link {shown(text)}: expected two linked switches such as \"s1-s3\"")
    return parts[0], parts[1]


def _deadlock(values: dict[str, Any], context: str) -> int | None:
    """``deadlock = "5s"``: goodput at zero that long is a deadlock (the run gives up some seconds later)."""
    if "deadlock" not in values:
        return None
    with _key(context, "deadlock"):
        value = values["deadlock"]
        if not isinstance(value, str):
            raise FabricError(f"expected a time such as \"5s\", got {shown(value)}")
        ns = parse_time(value)
        if not MIN_DEADLOCK_NS <= ns <= MAX_DEADLOCK_NS:
            raise FabricError(f"{format_time(ns)}: choose {format_time(MIN_DEADLOCK_NS)} to {format_time(MAX_DEADLOCK_NS)}")
    return ns


def _dilated(values: dict[str, Any], link: dict[str, str], context: str) -> tuple[dict[str, str], str | None, float]:
    """With ``model``, the link delay written is modelled time: the emulator waits it D times (model.dilation)."""
    if "model" not in values:
        return link, None, 1.0
    with _key(context, "model"):
        scaled, factor = dilated(link, values["model"])
    return scaled, _text(values["model"]), factor


def _layer(settings: _Settings, table: dict[str, Any], context: str) -> None:
    """Lay one table over the settings: later tables win, key by key."""
    for key, value in table.items():
        if key in ("link", "switch"):
            if not isinstance(value, dict):
                raise FabricError(f"{context}: key {_q(key)}: expected a table, e.g. {key} = {{ ... }}")
            options = settings.link if key == "link" else settings.switch
            options.update({option: (f"{key}.{option}", text) for option, text in value.items()})
        elif key in SHORTHANDS:
            target = SHORTHANDS[key]
            if isinstance(table.get(target), dict) and key in table[target]:
                raise FabricError(f"{context}: key {_q(key)} is also set as {target}.{key}; set it once")
            (settings.link if target == "link" else settings.switch)[key] = (key, value)
        else:
            settings.values[key] = value


def _link(options: dict[str, tuple[str, Any]], context: str) -> dict[str, str]:
    """Every link option as --link text, each checked on its own so the
    message can name it."""
    link = {option: _text(value) for option, value in {**DEFAULT_LINK, "mtu": EXPERIMENT_LINK_MTU}.items()}
    for option, (written, value) in options.items():
        if option not in DEFAULT_LINK:
            raise FabricError(f"{context}: unknown key {_q(written)} (known link options: {', '.join(DEFAULT_LINK)})")
        with _key(context, written):
            link[option] = _text(value)
            if not (option == "bw" and link[option] == calibration.CALIBRATED):  # resolved by _calibrated
                link_params({}, {option: link[option]})
    return link


def _calibrated(link: dict[str, str], values: dict[str, Any], fabric: str, collective: str,
                context: str) -> dict[str, str]:
    """``bw = "calibrated"``: the fastest rate this machine's calibration found faithful for the shape."""
    if link["bw"] != calibration.CALIBRATED:
        return link
    with _key(context, "bw"):
        topo = values["topo"].strip() if isinstance(values["topo"], str) else values["topo"]
        mtu = values.get("mtu")  # checked with the plan; until then a bad one is just not the key
        if mtu not in PATHS_MTU or isinstance(mtu, bool):
            mtu = _largest_path_mtu(parse_size(link["mtu"]))
        return {**link, "bw": f"{calibration.calibrated_rate(str(topo), collective, fabric, mtu)}bit"}


def _switch(options: dict[str, tuple[str, Any]], context: str) -> dict[str, str]:
    switch = {}
    for option, (written, value) in options.items():
        if option not in SWITCH_OPTIONS:
            raise FabricError(f"{context}: unknown key {_q(written)} "
                              f"(known switch options: {', '.join(SWITCH_OPTIONS)})")
        with _key(context, written):
            switch[option] = _text(value)
            parse_overrides({option: switch[option]})
    return switch


def _topology(spec: Any, collective: str, backend: str, context: str) -> tuple[str, "_Cabling"]:
    """The spec, within its backend's caps, and the fabric it would build (pure), made once per spec."""
    with _key(context, "topo"):
        if not isinstance(spec, str):
            raise FabricError(f'expected a spec such as "star,8", got {shown(spec)}')
        topo = topology(spec)
        bounds.check_topology(f"topology {shown(spec.strip())}", len(topo.hosts(sort=False)),
                              len(topo.switches(sort=False)), backend)
        cabling = _cabling(spec)
        if len(cabling.plan.hosts()) < 2:
            raise FabricError(f"{collective} needs at least 2 hosts, {shown(spec)} has {len(cabling.plan.hosts())}")
    return spec.strip(), cabling


@functools.lru_cache(maxsize=32)
def topology(spec: str) -> Topo:
    """The topology of ``spec`` within the widest caps (each variant checks its backend's), built once: every
    variant's checks, and the runner's, read it (fattree,24 takes 0.1 s).  Read only: a fabric is built from a
    topology of its own."""
    return build_topo(spec)


@dataclass(frozen=True)
class _Links:
    """A variant's links as its checks read them."""

    hosts: frozenset[tuple[int, int]]  # each host link's rate and MTU
    switches: frozenset[tuple[int, int, int, int]]  # each kind of switch: fastest port, longest delay, largest MTU, ports
    mtu: int  # the smallest link MTU


@dataclass(frozen=True)
class _Cabling:
    """A topology as every variant on it is checked: its plan without routes, and its links grouped by the options
    they carry of their own (none on the built-in topologies).  Every link of a group takes a variant's link
    options alike, so a variant parses each group's once, not each of a fattree,16's 3,072 links in a plan of its
    own (a second of CPU, and a sweep of the link options made one per variant)."""

    plan: FabricPlan  # names, hosts, switches, switch graph; its ports' links are the defaults', no variant's
    groups: tuple[dict[str, Any], ...]  # each group's own link options
    host_groups: frozenset[int]  # the groups of the hosts' links
    switch_groups: frozenset[tuple[tuple[int, ...], int]]  # each kind of switch: the groups of its links, its ports

    def links(self, link: dict[str, str]) -> _Links:
        """The links of a variant with ``link`` options, each as make_plan gives it (``link_params``)."""
        params = [link_params(own, link) for own in self.groups]
        return _Links(
            frozenset((params[g].bw_bps, params[g].mtu) for g in self.host_groups),
            frozenset((max(params[g].bw_bps for g in groups), max(params[g].delay_ns for g in groups),
                       max(params[g].mtu for g in groups), ports) for groups, ports in self.switch_groups),
            min(p.mtu for p in params))


@functools.lru_cache(maxsize=32)
def _cabling(spec: str) -> _Cabling:
    """Refused if some switch cannot reach some host: a search over the switches, not the routes (fattree,24:
    0.3 s with the plan)."""
    topo = topology(spec)
    plan = make_plan(topo, _CHECK_RUN, routes=False)
    check_connected(switch_graph(plan))
    options: dict[str, int] = {}  # a group's own options (as text) -> its number
    groups: list[dict[str, Any]] = []
    group_of: dict[tuple[str, int], int] = {}  # (node, port number) -> the group of its link
    for _, _, info in topo.links(withInfo=True):
        own = {key: value for key, value in info.items() if key in DEFAULT_LINK}
        number = options.setdefault(repr(sorted(own.items())), len(groups))
        if number == len(groups):
            groups.append(own)
        group_of[info["node1"], info["port1"]] = group_of[info["node2"], info["port2"]] = number
    return _Cabling(
        plan, tuple(groups), frozenset(group_of[host.name, host.ports[0].number] for host in plan.hosts()),
        frozenset((tuple(sorted({group_of[node.name, port.number] for port in node.ports})), len(node.ports))
                  for node in plan.switches() if node.ports))


def _check_switches(links: _Links, fabric: str, switch: dict[str, str]) -> None:
    """Derive each switch's settings as the fabric builder does
    (:func:`emulator.fabric.agent_config.switch_mmu`), so combinations fail now: a buffer too
    small for the reserves and headroom of its ports, kmax <= kmin, ...  Switches alike (their fastest port,
    longest delay, largest MTU and port count) are derived once: a fattree,16 has 320 switches of two kinds."""
    for rate, delay, mtu, ports in sorted(links.switches):
        derive_config(fabric, rate, delay, mtu, ports, switch)


def _size(value: Any, collective: str, hosts: int, context: str) -> int:
    with _key(context, "size"):
        size = parse_size(value)
        if not 1 <= size <= MAX_MR_BYTES:
            raise FabricError(f"{format_size(size)}: messages are 1 B to {format_size(MAX_MR_BYTES)}")
        chunk_bytes(collective, size, hosts)
    return size


def _senders(values: dict[str, Any], collective: str, hosts: int, backend: str, context: str) -> int | None:
    """Incast, victim and multijob only; by default every host but the receiver (and the victim's idle one)
    sends; multijob's incast is among the odd ranks, and 0 senders leaves its all-reduce alone.  At most the
    backend's node cap, then as many as the topology has."""
    if collective == "multijob":
        most = len(range(1, hosts, 2)) - 1
        if "senders" not in values:
            return most
        return _integer(values, "senders", (0, most), context)
    others = 1 if collective == "incast" else 2  # the receiver, and the victim flow's receiver
    if "senders" not in values:
        return hosts - others if collective in SENDER_COLLECTIVES else None
    if collective not in SENDER_COLLECTIVES:
        raise FabricError(f'{context}: key "senders": only incast and victim have senders, this variant runs '
                          f'{collective}')
    senders = _integer(values, "senders", (1, bounds.NODE_CAPS[backend]), context)
    if senders > hosts - others:
        raise FabricError(f'{context}: key "senders": {senders} senders and {"a receiver" if others == 1 else "two receivers"} '
                          f'need {senders + others} hosts, {shown(values["topo"])} has {hosts} '
                          f'(choose 1 to {hosts - others})')
    return senders


def _path_mtu(values: dict[str, Any], link_mtu: int, context: str) -> int:
    """The RDMA path MTU must be one verbs knows and fit every link's MTU (``link_mtu``, the smallest); unset,
    the largest that fits."""
    if "mtu" not in values:
        return _largest_path_mtu(link_mtu)
    mtu = values["mtu"]
    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu not in PATHS_MTU:
        raise FabricError(f'{context}: key "mtu": RDMA path MTU {shown(mtu)}: choose one of '
                          f'{", ".join(map(str, PATHS_MTU))}')
    if mtu + ROCE_OVERHEAD > link_mtu:
        raise FabricError(f'{context}: key "mtu": path MTU {mtu} needs a link MTU of {mtu + ROCE_OVERHEAD}, '
                          f'the links have {link_mtu}; set link = {{ mtu = {mtu + ROCE_OVERHEAD} }} or lower mtu')
    return mtu


def _largest_path_mtu(link_mtu: int) -> int:
    """The largest path MTU whose packets fit a link MTU (links are at least 576 bytes: 256 always fits)."""
    return max(mtu for mtu in PATHS_MTU if mtu + ROCE_OVERHEAD <= link_mtu)


def _integer(values: dict[str, Any], key: str, allowed: tuple[int, int], context: str) -> int:
    """A whole number within its range (a TOML integer, not text)."""
    value = values[key]
    if isinstance(value, str):
        raise FabricError(f"{context}: key {_q(key)}: expected a whole number, got {shown(value)}")
    return bounds.whole(f"{context}: key {_q(key)} =", value, allowed)


def _choice(values: dict[str, Any], key: str, choices: tuple[str, ...], context: str) -> str:
    value = values[key]
    if not isinstance(value, str) or value not in choices:
        raise FabricError(f"{context}: key {_q(key)}: {shown(value)} is not one of {', '.join(choices)}")
    return value


def _name(table: dict[str, Any], pattern: re.Pattern[str], allowed: str, context: str) -> str:
    if "name" not in table:
        raise FabricError(f'{context}: missing key "name"')
    name = table["name"]
    if not isinstance(name, str) or not pattern.fullmatch(name) or len(name) > MAX_NAME:
        raise FabricError(f'{context}: key "name": expected {allowed}, at most {MAX_NAME}, got {shown(name)}')
    return name


def _check_keys(table: dict[str, Any], known: tuple[str, ...], context: str) -> None:
    for key in table:
        if key not in known:
            raise FabricError(f"{context}: unknown key {_q(key)} (known: {', '.join(known)})")


def _check_unique(variants: list[Variant], label: str) -> None:
    seen: set[str] = set()
    for variant in variants:
        if variant.name in seen:
            raise FabricError(f"{label}: variant {_q(variant.name)}: name used twice "
                              "(names must be unique, sweep suffixes included)")
        seen.add(variant.name)


def _text(value: Any) -> str:
    """A link or switch option as --link/--switch text: booleans are on/off,
    lists are joined by ':' (drop=100:250, lossless=3:4)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and abs(value) >= 2**63:  # str() of it may fail, and nothing takes it
        raise FabricError(f"number {shown(value)} is too large")
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return ":".join(map(_text, value))
    raise FabricError(f"expected text, a number or a list, got {shown(value)}")


@contextmanager
def _key(context: str, key: str) -> Iterator[None]:
    """Prefix a FabricError raised while checking one key with where it is."""
    try:
        yield
    except FabricError as err:
        raise FabricError(f"{context}: key {_q(key)}: {one_line(str(err))}") from err


def _q(text: str) -> str:
    """Quote a key or name for a message: double quotes, always one line."""
    return printable(json.dumps(text, ensure_ascii=False))
