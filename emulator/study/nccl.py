"""``fabric-emu nccl``: a size sweep of one collective, printed as nccl-tests prints it.

nccl-tests (``all_reduce_perf -b 8 -e 64M -f 2``) is how a fabric's collective
bandwidth is read: one row per size with the time, the algorithm bandwidth
and the bus bandwidth.  Here the sweep is an experiment built in memory
(one variant per size, :func:`sweep_experiment`) run by the experiment runner
(:func:`emulator.study.runner.run_experiment`), so it is built, run, checked
and cleaned up as ``fabric-emu run`` does it (a fresh fabric per size, the
fidelity verdict, the results directory, Ctrl-C); the rows are read back
from the run's ``results.json`` (:func:`rows`) and printed in nccl-tests'
columns (:func:`table`), or written as nccl-tests' ``-J`` JSON (:func:`json_report`).

What differs from nccl-tests, and is said in the header's comment lines:

- one column group, not two: the ring collectives run in place (the result
  lands in the buffer the data came from), the all-to-all out of place; the
  group is labelled with what ran.
- time is the mean of the measured iterations' completion times (CCT: from
  the common start to the last rank's last arrival), nccl-tests' average;
  with a modelled rate (``--model``) the modelled time (emulated / D).
- ``#wrong`` is 0 when every rank's all-reduce result was exact in every
  measured iteration, else 1: the ranks check their whole result, not
  element by element.  The all-gather and all-to-all are not checked (N/A).
- one more column, ``faithful``: the fidelity monitor's and the link-time
  bound check's verdict on the size (docs/architecture.md, "Fidelity"); a
  figure marked NO measures this machine, not the fabric.
- bandwidths in GB/s (10^9 bytes/s) as nccl-tests prints them, or in MB/s
  when the (modelled) link rate is below 8 Gbit/s, where two decimals of
  GB/s would print nothing; the JSON has GB/s always.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from emulator._core.rdma_params import MAX_MR_BYTES
from emulator.collectives.algorithms import ELEMENT, bus_factor, chunk_bytes
from emulator.errors import FabricError, printable
from emulator.fabric.plan import link_params
from emulator.safefiles import Outputs
from emulator.study.experiment import Experiment, build_experiment, host_count
from emulator.units import format_rate, format_size, parse_rate

COLLECTIVES = ("allreduce", "allgather", "alltoall")
# nccl-tests' names of each: its program, and its type and reduction columns
PROGRAMS = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "alltoall": "alltoall_perf"}
TYPES = {"allreduce": ("float", "sum"), "allgather": ("uint8", "none"), "alltoall": ("uint8", "none")}
PLACEMENT = {"allreduce": "in-place", "allgather": "in-place", "alltoall": "out-of-place"}
ROOT = -1  # none of them has a root
GB = 1e9  # nccl-tests' GB/s: 10^9 bytes a second
MB_BELOW_BPS = 8 * 10**9  # below a 1 GB/s link, bandwidths print in MB/s
JSON_VERSION = 2  # the nccl-tests JSON layout followed (its JSON_FILE_VERSION)


@dataclass(frozen=True)
class Sweep:
    """What the command line asked for, checked."""

    collective: str
    topo: str
    fabric: str
    backend: str
    minbytes: int
    maxbytes: int
    stepfactor: int
    iters: int
    warmup: int
    link: dict[str, str]  # --link options as written
    switch: dict[str, str]  # --switch options as written
    model: str | None  # the modelled link rate (time dilation), or None
    cc: str | None
    mtu: int | None  # the RDMA path MTU, or None: the largest the links take
    seed: int


def sizes(collective: str, ranks: int, minbytes: int, maxbytes: int, stepfactor: int) -> list[int]:
    """The sweep's sizes as nccl-tests makes them: ``minbytes`` times ``stepfactor`` until past ``maxbytes``, each cut
    to whole elements as nccl-tests counts them (an all-reduce's float32s; an all-to-all's equal share per peer), the
    same size once.  The all-gather splits any number of bytes (uneven chunks: algorithms.ring_chunks)."""
    unit = {"allreduce": ELEMENT, "alltoall": ranks}.get(collective, 1)
    if minbytes < unit:
        what = "a float32 (4 bytes)" if collective == "allreduce" else f"a byte for each of its {ranks} ranks"
        raise FabricError(f"-b/--minbytes {minbytes}: an {collective} needs at least {what}")
    if maxbytes < minbytes:
        raise FabricError(f"invalid sizes for -b/--minbytes and -e/--maxbytes: {minbytes} > {maxbytes}")
    if maxbytes > MAX_MR_BYTES:
        raise FabricError(f"-e/--maxbytes {maxbytes}: at most {format_size(MAX_MR_BYTES)} (a memory region's most)")
    if stepfactor < 2:
        raise FabricError(f"-f/--stepfactor {stepfactor}: a factor of at least 2 (sizes grow by it)")
    found: list[int] = []
    size = minbytes
    while size <= maxbytes:
        cut = size - size % unit
        if cut not in found:
            found.append(cut)
        size *= stepfactor
    return found


def sweep_experiment(sweep: Sweep, log: Callable[[str], None] | None = None) -> Experiment:
    """The sweep as an experiment (one variant per size), checked as an experiment file would be."""
    ranks = host_count(sweep.topo)
    data: dict[str, Any] = {
        "name": f"nccl-{sweep.collective}",
        "description": f"{PROGRAMS[sweep.collective]} on {sweep.topo}: a size sweep (fabric-emu nccl)",
        "collective": sweep.collective, "topo": sweep.topo, "fabric": sweep.fabric, "backend": sweep.backend,
        "iterations": sweep.iters, "warmup": sweep.warmup, "seed": sweep.seed,
        "link": dict(sweep.link), "switch": dict(sweep.switch),
        "sweep": {"size": sizes(sweep.collective, ranks, sweep.minbytes, sweep.maxbytes, sweep.stepfactor)},
        "variants": [{"name": "nccl"}],
    }
    for key in ("model", "cc", "mtu"):
        if getattr(sweep, key) is not None:
            data[key] = getattr(sweep, key)
    try:
        return build_experiment(data, "nccl", "fabric-emu nccl", log)
    except FabricError as err:
        raise FabricError(_as_flags(str(err))) from None


_VARIANT_KEY = re.compile(r'nccl: variant "[^"]*": key "([^"]+)": ')
_FLAGS = {"size": "-b/-e", "topo": "--topo", "switch": "--switch", "cc": "--cc", "model": "--model", "mtu": "--mtu",
          "bw": "--bw", "fabric": "--fabric"}


def _as_flags(message: str) -> str:
    """An experiment check's message (``nccl: variant "nccl-size8": key "cc": ...``) as the command line's: the
    flag that set the key (``--cc: ...``); ``link.delay`` is ``--link delay``."""
    found = _VARIANT_KEY.match(message)
    if found is None:
        return message
    key = found.group(1)
    flag = f"--link {key[len('link.'):]}" if key.startswith("link.") else _FLAGS.get(key, f"--{key}")
    rest = message[found.end():]
    return rest if rest.startswith(flag) else f"{flag}: {rest}"


@dataclass(frozen=True)
class Row:
    """One size's figures, from its results.json entry."""

    size: int
    count: int
    time_us: float  # mean CCT of the measured iterations (modelled time with a modelled rate)
    algbw_gbs: float  # GB/s: size / time
    busbw_gbs: float  # GB/s: algbw x bus factor
    wrong: int | None  # 0 or 1 (the all-reduce's check), None where nothing is checked
    faithful: bool | None  # None: the variant never finished
    unfaithful: tuple[tuple[str, tuple[str, ...]], ...]  # who did not keep up (an agent, the collective) and why
    iterations: int
    name: str


def rows(collective: str, variants: Sequence[dict[str, Any]]) -> list[Row]:
    """The table's rows from results.json's variants (in the sweep's order): algbw = bytes / time, busbw = algbw x
    ``algorithms.bus_factor``; the time is the mean CCT (modelled when the variant has a modelled rate)."""
    found = []
    for variant in variants:
        ranks, size = variant["hosts"], variant["size"]
        if variant["cct_us"] is None:
            raise FabricError(f"size {size}: the collective never finished (deadlocked); no figures")
        model = variant.get("model")
        # modelled: the measured mean over D unrounded (results.json rounds the modelled one to 0.1 ns)
        time_us = variant["cct_us"]["mean"] / (model["dilation"] if model else 1)
        algbw = size / (time_us * 1e-6) / GB if time_us > 0 else math.inf
        fidelity = variant.get("fidelity") or {}
        unfaithful = tuple((who, tuple(why)) for who, why in (fidelity.get("unfaithful") or {}).items())
        found.append(Row(size, element_count(collective, size, ranks), time_us, algbw,
                         algbw * bus_factor(collective, ranks),
                         (0 if variant["verified"] else 1) if collective == "allreduce" else None,
                         fidelity.get("faithful"), unfaithful, variant["iterations"], variant["name"]))
    return found


def element_count(collective: str, size: int, ranks: int) -> int:
    """nccl-tests' count column: the all-reduce's float32s; the all-gather's per rank (its largest chunk) and the
    all-to-all's per peer, as nccl-tests counts both per rank."""
    if collective == "allreduce":
        return size // ELEMENT
    return chunk_bytes(collective, size, ranks)


def float_text(value: float, width: int) -> str:
    """A figure in ``width`` characters as nccl-tests' getFloatStr writes it: two decimals while they fit, then one,
    then none, then an exponent."""
    if not math.isfinite(value):
        return f"{'inf':>{width}}"
    power, at = 0, 1
    while value >= at:
        power += 1
        at *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def bandwidth_unit(link_bps: int) -> tuple[str, float]:
    """The bandwidth columns' unit and its bytes a second: GB/s as nccl-tests, MB/s on links below 1 GB/s."""
    return ("MB/s", 1e6) if link_bps < MB_BELOW_BPS else ("GB/s", GB)


def header(sweep: Sweep, experiment: Experiment, directory: str) -> list[str]:
    """nccl-tests' comment lines above the table, ours: what ran where, and how each column is measured."""
    first = experiment.variants[0]
    ranks = host_count(sweep.topo)
    rate = link_params({}, first.link).bw_bps
    link = ", ".join(f"{key} {value}" for key, value in first.link.items() if value != "")
    modelled = f"; modelled at {first.model} (D = {first.dilation:g}): times and bandwidths are the modelled " \
               "fabric's (emulated / D)" if first.model is not None else ""
    switch = ", ".join(f"{k}={v}" for k, v in first.switch.items()) or "derived from the links"
    placement = PLACEMENT[sweep.collective]
    validation = "1 (every rank checks its whole all-reduce result)" if sweep.collective == "allreduce" else \
        "0 (the data is not checked)"
    return [
        f"# fabric-emu nccl: {sweep.collective} ({PROGRAMS[sweep.collective]}'s collective) on {sweep.topo}, "
        f"{ranks} ranks, one per host",
        f"# fabric {sweep.fabric}, backend {sweep.backend}, links: {link}{modelled}",
        f"# link rate {format_rate(rate)}, RDMA path MTU {first.mtu}, cc {first.cc}, switch: {switch}",
        f"# minBytes {sweep.minbytes} maxBytes {sweep.maxbytes} step: {sweep.stepfactor}(factor) warmup iters: "
        f"{sweep.warmup} iters: {sweep.iters} validation: {validation}",
        f"# one column group, {placement}: the ring collectives run in place, the all-to-all out of place",
        "# time: the mean of the measured iterations' completion times, from the common start to the last rank's "
        "last arrival (nccl-tests reports the average)",
        f"# algbw = size / time; busbw = algbw x {bus_factor(sweep.collective, ranks):g} (nccl-tests' bus factor "
        f"for {ranks} ranks)",
        "# faithful: the fidelity monitor's and the link-time bound's verdict on the size (NO: the figure is this "
        "machine's, not the fabric's)",
        f"# results: {printable(directory)}",
        "#",
    ]


def table(collective: str, found: Sequence[Row], unit: tuple[str, float]) -> list[str]:
    """The table with nccl-tests' columns and widths, one group, and the faithful column; then its closing lines."""
    name, scale = unit
    typename, redop = TYPES[collective]
    lines = [
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}  {PLACEMENT[collective]:^31}",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6}  {'#wrong':>6}  faithful",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {f'({name})':>6}  "
        f"{f'({name})':>6}  {'':>6}",
    ]
    for row in found:
        wrong = "   N/A" if row.wrong is None else f"{row.wrong:6g}"
        verdict = {True: "yes", False: "NO", None: "-"}[row.faithful]
        lines.append(f"{row.size:12d}  {row.count:12d}  {typename:>8}  {redop:>6}  {ROOT:6d}  "
                     f"{float_text(row.time_us, 7)}  {float_text(row.algbw_gbs * GB / scale, 6)}  "
                     f"{float_text(row.busbw_gbs * GB / scale, 6)}  {wrong}  {verdict}")
    wrong_sizes = sum(1 for row in found if row.wrong)
    lines.append(f"# {'Out of bounds values':<20} : {wrong_sizes} {'FAILED' if wrong_sizes else 'OK'}")
    lines.append(f"# {'Avg bus bandwidth':<20} : {average_busbw(found) * GB / scale:g} ({name})")
    unfaithful = [row for row in found if row.faithful is False]
    if unfaithful:
        lines.append(f"# not faithful: {len(unfaithful)} of {len(found)} sizes; why:")
        lines += [f"#   {row.size} B: {reason}" for row in unfaithful for reason in reasons(row)]
    lines.append("#")
    return lines


def reasons(row: Row) -> list[str]:
    """Why a size is not faithful, one line per reason: the agents that gave the same one named together (eight
    hosts late alike are one line, not eight)."""
    grouped: dict[str, list[str]] = {}
    for who, why in row.unfaithful:
        grouped.setdefault("; ".join(why), []).append(who)
    return [f"{', '.join(who)}: {why}" for why, who in grouped.items()]


def average_busbw(found: Sequence[Row]) -> float:
    """nccl-tests' closing "Avg bus bandwidth": the mean of every size's busbw, GB/s."""
    return statistics.fmean(row.busbw_gbs for row in found) if found else 0.0


def json_report(sweep: Sweep, experiment: Experiment, found: Sequence[Row], directory: str, args: Sequence[str],
                started: datetime, ended: datetime) -> dict[str, Any]:
    """The same figures as nccl-tests' ``-J`` JSON (its field names where they fit; ``in_place`` or ``out_of_place``
    as what ran, the other null), with our run's settings and each size's fidelity verdict added."""
    first = experiment.variants[0]
    typename, redop = TYPES[sweep.collective]
    group = "in_place" if PLACEMENT[sweep.collective] == "in-place" else "out_of_place"
    other = "out_of_place" if group == "in_place" else "in_place"
    return {
        "version": JSON_VERSION, "start_time": _stamp(started), "args": list(args),
        "config": {"minimum_bytes": sweep.minbytes, "maximum_bytes": sweep.maxbytes, "step_factor": sweep.stepfactor,
                   "warmup_iters": sweep.warmup, "iterations": sweep.iters,
                   "validation": int(sweep.collective == "allreduce"), "collective": sweep.collective,
                   "topology": sweep.topo, "ranks": host_count(sweep.topo), "fabric": sweep.fabric,
                   "backend": sweep.backend, "link": first.link, "switch": first.switch, "path_mtu": first.mtu,
                   "cc": first.cc, "model": first.model, "dilation": first.dilation,
                   "results_directory": directory},
        "results": [{"size": row.size, "count": row.count, "type": typename, "redop": redop, "root": f"{ROOT:6d}",
                     group: {"time": row.time_us, "alg_bw": row.algbw_gbs, "bus_bw": row.busbw_gbs,
                             "nwrong": row.wrong},
                     other: None, "actual_iterations": row.iterations, "experiment_name": row.name,
                     "faithful": row.faithful, "unfaithful": {who: list(why) for who, why in row.unfaithful}}
                    for row in found],
        "out_of_bounds": {"count": sum(1 for row in found if row.wrong),
                          "okay": not any(row.wrong for row in found)},
        "average_bus_bandwidth": {"bandwidth": average_busbw(found), "okay": "unchecked"},
        "errors": [], "end_time": _stamp(ended),
    }


def _stamp(when: datetime) -> str:
    """nccl-tests' time format, in UTC (it writes local time)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def check_json_path(path: str) -> None:
    """``--json FILE`` can be written, checked before the sweep runs for minutes: its directory exists."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise FabricError(f"--json {printable(path)}: no such directory {printable(directory)}")
    if os.path.isdir(path):
        raise FabricError(f"--json {printable(path)}: a directory, not a file")


def write_json(path: str, report: dict[str, Any]) -> None:
    """The report whole or not at all, replacing ``path`` (never written through a link: safefiles.Outputs)."""
    with Outputs(os.path.dirname(path) or ".") as outputs:
        outputs.write(os.path.basename(path), lambda f: f.write(json.dumps(report, indent=1).encode()))


def run_sweep(sweep: Sweep, out_root: str, json_path: str | None, args: Sequence[str],
              log: Callable[[str], None], require_root: Callable[[], None]) -> int:
    """Check the sweep, run it through the experiment runner, print the table (and write the JSON); 1 if a size's
    all-reduce came out wrong, as nccl-tests fails on wrong data."""
    from emulator.study.results import load_results
    from emulator.study.runner import run_experiment

    if json_path is not None:
        check_json_path(json_path)
    experiment = sweep_experiment(sweep, log)
    if sweep.backend == "emulator":
        require_root()
    started = datetime.now(timezone.utc)
    directory = run_experiment(experiment, out_root, log)
    found = rows(sweep.collective, load_results(directory).results["variants"])
    first = experiment.variants[0]
    link_bps = parse_rate(first.model) if first.model is not None else link_params({}, first.link).bw_bps
    print("\n".join(header(sweep, experiment, directory) + table(sweep.collective, found, bandwidth_unit(link_bps))),
          file=sys.stdout, flush=True)
    if json_path is not None:
        write_json(json_path, json_report(sweep, experiment, found, directory, args, started,
                                          datetime.now(timezone.utc)))
        log(f"JSON written to {printable(json_path)}")
    return 1 if any(row.wrong for row in found) else 0
