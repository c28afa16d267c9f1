"""Tables and plots from a results directory (``fabric-emu report DIR``).

``fabric-emu run`` writes a results directory (layout in docs/results.md);
this module reports on it, read back and checked by :mod:`emulator.study.results`,
and needs nothing else: no root, no fabric, no agents, so a directory copied
off the test machine reports the same.  It prints one comparison table
(with lossy/lossless ratios and, for the straggler experiment, measured
against predicted CCT, and for a training step its compute, communication
and exposed communication) and writes PNG plots (among them a timeline per
rank of each training step) into ``DIR/plots`` through
:class:`emulator.safefiles.Outputs`: never through a symbolic link, never
outside DIR, all plots or none.  Text from the directory is printed with
its control characters escaped.

Everything but :func:`make_plots` and :func:`main_report` is pure and works
on what :func:`load_results` returns, so the unit tests feed it synthetic
directories.

Occupancy telemetry is *change-only*: a switch writes a row for a (port,
priority) when one of its values changed since its last sample, so a value
holds until the next row for the same (switch, port, priority).  The queue
and pause computations here carry values forward accordingly.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, TextIO

from emulator.errors import FabricError, printable
from emulator.study.results import IterationRow, RateRow, Results, Sample, load_results
from emulator.safefiles import Outputs
from emulator.units import parse_rate

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Two variants that agree on these (and on ``params`` but for a swept fabric) differ only in
# the fabric: the ratio lines compare such pairs.  Keys a variant lacks count as equal.
SETUP_KEYS = ("collective", "topo", "hosts", "size", "senders", "link", "switch", "mtu", "backend")
MISSING = "-"
PLOT_DPI = 120
SHADE_RESOLUTION = 1000  # shaded spans per plot at most; finer detail is below a pixel


# --- the table -----------------------------------------------------------------------------------


def table(results: Results) -> str:
    """The comparison table, the lossy/lossless ratios and, for a straggler sweep, the prediction table."""
    lines = _heading(results)
    if not results.results.get("complete", True):
        lines.append("incomplete run: it was interrupted; results for the finished variants only")
    lines += _render(
        ["VARIANT", "FABRIC", "COLLECTIVE", "ITERS", "CCT p50 ms", "CCT p99 ms", "CCT max ms", "CCT mean ms",
         "x LINK TIME", "DROPS", "RETRANS", "PFC", "ECN", "CNP", "SKEW max us", "FAITHFUL"],
        [_variant_row(v) for v in results.variants], text_columns=3)
    sections = (fidelity_lines, ratio_lines, backend_lines, victim_lines, uplink_lines, deadlock_lines, fault_lines,
                prediction_lines)
    for section in sections:  # each a paragraph of its own, where it has anything to say
        section_lines = section(results.variants)
        if section_lines:
            lines += ["", *section_lines]
    modelled = modelled_lines(results.variants)
    if modelled:
        lines += ["", "in the modelled fabric's time (emulated times divided by D = modelled / emulated rate):",
                  *modelled]
    steps = workload_lines(results.variants)
    if steps:
        lines += ["", *steps]
    return "\n".join(lines)


def _heading(results: Results) -> list[str]:
    """What ran, when and on what, so a pasted table says where it came from."""
    config = results.config
    title = f"{results.experiment}: {len(results.variants)} variants"
    if config.get("description"):
        title += f" ({_listed(config['description'])})"
    facts = [f"{label} {_listed(config[key])}" for key, label in
             (("created_utc", "created"), ("git_commit", "git"), ("kernel", "kernel"), ("seeds", "seeds"),
              ("seed", "seed")) if config.get(key) is not None]
    return [title, ", ".join(facts)] if facts else [title]


def _listed(value: Any) -> str:
    """A value from the directory as printed: a list comma-separated, control characters escaped."""
    return printable(",".join(map(str, value)) if isinstance(value, list) else str(value))


def _variant_row(variant: dict[str, Any]) -> list[str]:
    return [variant["name"], _listed(variant.get("fabric", MISSING)), _listed(variant.get("collective", MISSING)),
            _fmt(variant.get("iterations")),
            *(_fmt(_cct(variant, stat), 2, 1e3) for stat in ("p50", "p99", "max", "mean")),
            _fmt(variant.get("cct_over_link_time"), 2),
            *(_fmt(variant.get(key)) for key in ("drops", "retransmissions", "pfc_sent", "ecn_marked", "cnps")),
            _fmt(variant.get("start_skew_us"), 1), {True: "yes", False: "NO", None: MISSING}[_faithful(variant)]]


def _faithful(variant: dict[str, Any]) -> bool | None:
    """The monitor's verdict on a variant; None where results.json has none (or not a boolean)."""
    fidelity = variant.get("fidelity")
    return fidelity.get("faithful") if isinstance(fidelity, dict) and isinstance(fidelity.get("faithful"), bool) \
        else None


def fidelity_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Why each unfaithful variant's figures are the machine's, not the fabric's: agent and reasons."""
    lines = []
    for variant in variants:
        if _faithful(variant) is not False:
            continue
        lines.append(f"{_listed(variant.get('name', MISSING))}: NOT faithful, its figures measure this machine, "
                     "not the fabric:")
        unfaithful = variant["fidelity"].get("unfaithful")
        for agent, reasons in (unfaithful.items() if isinstance(unfaithful, dict) else ()):
            shown = "; ".join(map(_listed, reasons)) if isinstance(reasons, list) else _listed(reasons)
            lines.append(f"  {_listed(agent)}: {shown}")
    return lines + list(UNFAITHFUL_ADVICE) if lines else lines


# Every measure the monitor has (wire stalls, processing lag, late timers, a collective off its link-time
# bound with nothing in the fabric to explain it) says the same: an agent did not get a CPU when its link
# needed it.
UNFAITHFUL_ADVICE = (
    "likely cause: the agents needed more CPU than they got (frames per second at this link rate, "
    "other work on the cores, or the hypervisor's steal)",
    "what to change: a lower link rate (link bw; `model` keeps the modelled rate and scales time), "
    "fewer hosts, or a quieter machine; `fabric-emu run fidelity` finds the fastest faithful rate here",
)


def ratio_lines(variants: list[dict[str, Any]]) -> list[str]:
    """"incast: lossy p99 / lossless p99 = 2.71x" for each variant on another fabric whose setup a
    lossless one shares (lossy, the InfiniBand-like ib, and uet)."""
    lines = []
    for other in (v for v in variants if v.get("fabric") in ("lossy", "ib", "uet")):
        # uet's point is a lossy fabric of shallow buffers against PFC's headroom: its switch may differ
        but = ("switch",) if other.get("fabric") == "uet" else ()
        for lossless in (v for v in variants
                         if v.get("fabric") == "lossless" and _setup(v, but) == _setup(other, but)):
            for stat in ("p99", "mean"):
                num, den = _cct(other, stat), _cct(lossless, stat)
                if num is not None and den:
                    unfaithful = [_listed(v["name"]) for v in (other, lossless) if _faithful(v) is False]
                    differs = " (other switch settings)" if other.get("switch") != lossless.get("switch") else ""
                    lines.append(f"{_listed(other.get('collective', MISSING))}: {_fabric_and_cc(other)} {stat} / "
                                 f"{_fabric_and_cc(lossless)} {stat} = {num / den:.2f}x "
                                 f"({other['name']} / {lossless['name']}){differs}" +
                                 (f": the machine's ratio, not the fabrics' ({' and '.join(unfaithful)} NOT "
                                  "faithful)" if unfaithful else ""))
    return lines


def _fabric_and_cc(variant: dict[str, Any]) -> str:
    """The fabric as a ratio line names it, with the congestion control when there is one: ``lossless+dcqcn``
    is PFC and DCQCN, not the lossless fabric alone (multi-job's DCQCN variant was called "lossless")."""
    cc = variant.get("cc", "none")
    name = cc.split(",")[0] if isinstance(cc, str) else cc
    if variant["fabric"] == "uet":  # its spraying, not a congestion control, is what sets it apart
        name = variant.get("spray", "reps") + ("+rccc" if variant.get("rccc") is True else "") + (
            "+no-nscc" if variant.get("cc") == "none" else "")
    elif variant.get("routing") == "adaptive":  # ib: adaptive routing
        name = "ar"
    return _listed(variant["fabric"]) + ("" if name == "none" else f"+{_listed(name)}")


BACKEND_AGREEMENT = 0.10  # validate's bar: mean CCTs of the two backends within 10% of the emulator's
NO_DIFFERENCE = 0.02  # a fabric-vs-lossless difference below 2% of lossless is none (the emulator's iterations vary ~1%)


def backend_lines(variants: list[dict[str, Any]]) -> list[str]:
    """The same variants emulated and simulated side by side (``fabric-emu run validate``): mean and p99 CCT,
    drops, PFC frames, retransmissions, the differences, and whether the backends agree."""
    pairs = []
    for sim in (v for v in variants if v.get("backend") == "sim"):
        twins = [v for v in variants if v.get("backend") == "emulator" and _same_but_backend(v) == _same_but_backend(sim)]
        # A backend sweep's own twin first (its name less the suffix): variants that differ only in what the
        # summary does not show (faults, iterations) must not pair across (validate's pause-storm and multi-job).
        named = [v for v in twins if _base_name(v) == _base_name(sim)]
        if named or twins:
            pairs.append(((named or twins)[0], sim))
    if not pairs:
        return []
    rows, worst = [], None
    for emulated, sim in pairs:
        mean = _relative(_cct(sim, "mean"), _cct(emulated, "mean"))
        if mean is not None and (worst is None or abs(mean) > abs(worst[0])):
            worst = (mean, _base_name(emulated))
        rows.append([_base_name(emulated), _listed(emulated.get("fabric", MISSING)),
                     _fmt(_cct(emulated, "mean"), 2, 1e3), _fmt(_cct(sim, "mean"), 2, 1e3), _signed(mean),
                     _fmt(_cct(emulated, "p99"), 2, 1e3), _fmt(_cct(sim, "p99"), 2, 1e3),
                     _signed(_relative(_cct(sim, "p99"), _cct(emulated, "p99"))),
                     *(f"{_fmt(emulated.get(key))} / {_fmt(sim.get(key))}"
                       for key in ("drops", "pfc_sent", "retransmissions"))])
    lines = ["the same variants on both backends (difference: simulated / emulated - 1):"]
    lines += _render(["VARIANT", "FABRIC", "MEAN emu ms", "MEAN sim ms", "DIFF", "p99 emu ms", "p99 sim ms", "DIFF",
                      "DROPS emu / sim", "PFC emu / sim", "RETRANS emu / sim"], rows, text_columns=2)
    if worst is not None:
        agree = abs(worst[0]) <= BACKEND_AGREEMENT
        lines.append(f"mean CCT within {BACKEND_AGREEMENT:.0%} on every variant: {'yes' if agree else 'NO'} "
                     f"(largest difference {_signed(worst[0])}, {worst[1]})")
    for emulated, sim in pairs:  # the goodput watch's verdicts (deadlock experiments)
        if isinstance(emulated.get("deadlocked"), bool) and isinstance(sim.get("deadlocked"), bool):
            same = emulated["deadlocked"] == sim["deadlocked"]
            lines.append(f"{_base_name(emulated)}: deadlocked {str(emulated['deadlocked']).lower()} emulated, "
                         f"{str(sim['deadlocked']).lower()} simulated{'' if same else ': VERDICTS DIFFER'}")
    lines += _sign_lines(pairs)
    unfaithful = sorted({_listed(e["name"]) for e, _ in pairs if _faithful(e) is False})
    if unfaithful:
        lines.append(f"emulated variants NOT faithful (their figures are the machine's): {', '.join(unfaithful)}")
    return lines


def _sign_lines(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """Each other-fabric-vs-lossless difference of mean CCT on both backends, and whether its sign agrees."""
    lines = []
    for emulated, sim in pairs:
        if emulated.get("fabric") not in ("lossy", "ib"):
            continue
        partners = [(e, s) for e, s in pairs if e.get("fabric") == "lossless" and _setup(e) == _setup(emulated)
                    and e.get("cc", "none") == "none"]  # PFC alone: the lossless fabric without DCQCN
        for lossless_emulated, lossless_sim in partners[:1]:
            diffs = [_relative(_cct(a, "mean"), _cct(b, "mean")) for a, b in ((emulated, lossless_emulated),
                                                                              (sim, lossless_sim))]
            if None in diffs:
                continue
            signs = [0 if abs(d) < NO_DIFFERENCE else (1 if d > 0 else -1) for d in diffs]  # type: ignore[arg-type]
            lines.append(f"{_listed(emulated.get('collective', MISSING))}: {emulated['fabric']} vs lossless mean "
                         f"{_signed(diffs[0])} emulated, {_signed(diffs[1])} simulated: "
                         f"{'same sign' if signs[0] == signs[1] else 'SIGNS DIFFER'}")
    if lines:
        lines.append(f"(a difference under {NO_DIFFERENCE:.0%} of lossless counts as none)")
    return lines


def _relative(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference - 1


def _signed(fraction: float | None) -> str:
    return MISSING if fraction is None else f"{fraction * 100:+.1f}%"


def _base_name(variant: dict[str, Any]) -> str:
    """A variant's name without its backend sweep suffix."""
    name = _listed(variant.get("name", MISSING))
    for backend in ("emulator", "sim"):
        name = name.removesuffix(f"-backend{backend}")
    return name


def deadlock_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Each variant whose goodput was watched: deadlocked or not, and how long its longest ended stall was."""
    lines = []
    for variant in variants:
        deadlocked = variant.get("deadlocked")
        if not isinstance(deadlocked, bool):
            continue
        name = _listed(variant.get("name", MISSING))
        longest, recovered = _number(variant.get("longest_stall_ms")), _number(variant.get("recovered_after_ms"))
        watchdog = variant.get("pfcwd") if isinstance(variant.get("pfcwd"), dict) else {}
        storms = f"; PFC watchdog: {_fmt(watchdog.get('pfcwd_storms'))} storms, {_fmt(watchdog.get('pfcwd_drops'))} " \
                 "frames dropped" if watchdog.get("pfcwd_storms") else ""
        if deadlocked and recovered is None:
            state = f"DEADLOCKED: no goodput for {_fmt(longest, 0)} ms, never recovered"
        elif deadlocked:
            state = f"deadlocked, recovered after {_fmt(recovered, 0)} ms"
        else:
            state = f"no deadlock; longest stall {_fmt(longest, 0)} ms" + (
                f", recovered after {_fmt(recovered, 0)} ms" if recovered is not None else "")
        lines.append(f"{name}: {state}{storms}")
    return lines


def fault_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Each variant with injected faults: where the PFC watchdog found storms, and each host's paused time."""
    lines = []
    for variant in variants:
        paused = variant.get("paused_ms_by_host")
        if not isinstance(paused, dict):
            continue
        watchdog = variant.get("pfcwd") if isinstance(variant.get("pfcwd"), dict) else {}
        ports = watchdog.get("stormed_ports")
        stormed = f"watchdog storms at {_listed(ports)}" if isinstance(ports, list) and ports else "no watchdog storm"
        hosts = ", ".join(f"{_listed(host)} {_fmt(ms, 0)}" for host, ms in paused.items())
        lines.append(f"{_listed(variant.get('name', MISSING))}: {_fmt(variant.get('faults'))} faults injected; "
                     f"{stormed}; hosts paused (ms, whole run): {hosts}")
    return lines


def victim_lines(variants: list[dict[str, Any]]) -> list[str]:
    """The victim flow of each victim variant: its goodput and its share of its link."""
    lines = []
    for variant in variants:
        victim = variant.get("victim")
        if not isinstance(victim, dict) or not isinstance(victim.get("goodput_mbps"), dict):
            continue
        goodput, share = victim["goodput_mbps"], _number(victim.get("link_share"))
        lines.append(f"victim {_listed(victim.get('src', MISSING))}->{_listed(victim.get('dst', MISSING))} in "
                     f"{_listed(variant.get('name', MISSING))}: goodput mean {_fmt(goodput.get('mean'), 2)} Mbit/s, "
                     f"min {_fmt(goodput.get('min'), 2)} ({_fmt(None if share is None else share * 100, 0)}% of its link)")
    return lines


def uplink_lines(variants: list[dict[str, Any]]) -> list[str]:
    """How evenly each variant loaded the uplinks (busiest over mean bytes), and what the switches trimmed."""
    lines = []
    for variant in variants:
        balance = _number(variant.get("uplink_balance"))
        trimmed = variant.get("trimmed")
        trimmed = trimmed if isinstance(trimmed, int) and not isinstance(trimmed, bool) and trimmed > 0 else None
        facts = ([] if balance is None else [f"uplinks busiest / mean bytes {balance:.2f}"]) + \
            ([] if trimmed is None else [f"{_fmt(trimmed)} packets trimmed (their headers went on; resent at once)"])
        if facts:
            lines.append(f"{_listed(variant.get('name', MISSING))}: {', '.join(facts)}")
    return lines


def modelled_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Each variant run under time dilation, its CCT and link time in the modelled fabric's time."""
    lines = []
    for variant in variants:
        model = variant.get("model")
        factor = _number(model.get("dilation")) if isinstance(model, dict) else None
        if not factor or not isinstance(model.get("cct_us"), dict):
            continue
        cct = model["cct_us"]
        lines.append(f"  {_listed(variant.get('name', MISSING))}: modelled {_listed(model.get('rate', MISSING))}, "
                     f"D = {factor:g}: CCT p50 {_fmt(cct.get('p50'), 2)} us, p99 {_fmt(cct.get('p99'), 2)} us, "
                     f"mean {_fmt(cct.get('mean'), 2)} us; link time {_fmt(model.get('link_time_us'), 2)} us")
    return lines


def prediction_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Measured mean CCT against the two loss-recovery predictions, one row per swept loss rate p."""
    swept = [v for v in variants if isinstance(v.get("prediction"), dict)]
    if not swept:
        return []
    swept.sort(key=lambda v: _number(v["prediction"].get("p")) or 0.0)
    return ["straggler: loss p, packets n, P(hit)=1-(1-p)^n, measured mean CCT, predicted (go-back-N round), "
            "predicted (RTO), measured - baseline",
            "(times in ms; vs GBN, vs RTO: measured minus predicted, in percent of the prediction)",
            *_render(["VARIANT", "LOSS p", "PACKETS n", "P(hit)", "MEASURED ms", "GBN ms", "vs GBN", "RTO ms",
                      "vs RTO", "MEAS-BASE ms"], [_prediction_row(v) for v in swept], text_columns=1)]


def _prediction_row(variant: dict[str, Any]) -> list[str]:
    pred = variant["prediction"]
    p, measured = _number(pred.get("p")), _cct(variant, "mean")
    gbn, rto = _number(pred.get("predicted_gbn_us")), _number(pred.get("predicted_rto_us"))
    baseline = _number(pred.get("baseline_mean_us"))
    above_baseline = None if measured is None or baseline is None else measured - baseline
    return [variant["name"], MISSING if p is None else f"{p:g}", _fmt(pred.get("packets")),
            _fmt(pred.get("hit_probability"), 3), _fmt(measured, 2, 1e3),
            _fmt(gbn, 2, 1e3), _percent(measured, gbn), _fmt(rto, 2, 1e3), _percent(measured, rto),
            _fmt(above_baseline, 2, 1e3)]


# --- training steps (the workload collective) ----------------------------------------------------

MAX_STEP_TYPES = 50  # collective types and groups listed per step (a step has a handful)
MAX_TIMELINE_RANKS = 64  # ranks drawn in a timeline (the one that ended last among them)
MAX_TIMELINE_BARS = 100_000  # collectives drawn in one timeline: matplotlib draws some 100k bars a second
MAX_HATCHED_WAITS = 2000  # waits drawn hatched in a timeline (after joining those a pixel apart); more are pale
MAX_TIMELINE_KINDS = 10  # colours in a timeline; further collective types and groups share one


def workload_lines(variants: list[dict[str, Any]]) -> list[str]:
    """Each training step (a variant of the workload collective): its time, compute, communication and the
    exposed part of it, the rank that ended last, the collective that held the step, and the exposed time per
    collective type and group; in the modelled fabric's time too for a variant run under time dilation.

    A value of the wrong type prints as ``-``; an entry that is not an object is one line.
    """
    lines: list[str] = []
    for variant in variants:
        if "workload" not in variant or variant["workload"] is None:
            continue
        lines += _workload_block(variant)
    if not lines:
        return lines
    return ["training steps (the mean of the measured iterations in the backend's time; the compute, the "
            "communication and its exposed part, the time the compute waited for it, are those of the rank that "
            "ended last):", *lines]


def _workload_block(variant: dict[str, Any]) -> list[str]:
    name, step = _listed(variant.get("name", MISSING)), variant["workload"]
    if not isinstance(step, dict):
        return [f"{name}: its workload entry is not an object: not reported"]
    if not step:
        return [f"{name}: no figures of the step (no measured iteration)"]
    step_us, exposed_us = _number(step.get("step_us")), _number(step.get("exposed_us"))
    share = _number(step.get("exposed_share"))
    if share is None and step_us and exposed_us is not None:
        share = exposed_us / step_us
    held = step.get("held_by") if isinstance(step.get("held_by"), dict) else {}
    label = f" ({_listed(held['label'])})" if isinstance(held.get("label"), str) and held["label"] else ""
    held_in = _number(held.get("iterations"))
    iterations = _number(variant.get("iterations"))
    held_in_text = f" in {held_in:.0f} of {iterations:.0f} iterations" if held_in is not None and iterations else ""
    lines = [f"{name}: step {_fmt(step_us, 2, 1e3)} ms (compute {_fmt(step.get('compute_us'), 2, 1e3)}, "
             f"communication {_fmt(step.get('comm_us'), 2, 1e3)}, exposed {_fmt(exposed_us, 2, 1e3)} = "
             f"{_fmt(None if share is None else share * 100, 1)}% of the step) on rank "
             f"{_whole(step.get('critical_rank'))}; held by: {_text(held.get('kind'))} in {_text(held.get('group'))}"
             f"{label}, exposed {_fmt(held.get('exposed_us'), 2, 1e3)} ms{held_in_text}"]
    parallelism = step.get("parallelism")
    groups = ", ".join(f"{_listed(group)} {_whole(size)}" for group, size in parallelism.items()) \
        if isinstance(parallelism, dict) else MISSING
    lines.append(f"  {_whole(step.get('ranks'))} ranks ({groups}; placed {_text(step.get('placement'))}), "
                 f"{_whole(step.get('ops'))} collectives of {_whole(step.get('bytes'))} bytes, in "
                 f"{_backend_time(variant)} time")
    dilation, rate = _dilation(variant)
    if dilation:
        lines.append(f"  modelled {rate}, D = {dilation:g}: step {_fmt(_scaled(step_us, dilation), 2)} us "
                     f"(compute {_fmt(_scaled(step.get('compute_us'), dilation), 2)}, communication "
                     f"{_fmt(_scaled(step.get('comm_us'), dilation), 2)}, exposed "
                     f"{_fmt(_scaled(exposed_us, dilation), 2)}); held by: exposed "
                     f"{_fmt(_scaled(held.get('exposed_us'), dilation), 2)} us")
    by_type = step.get("by_type")
    if isinstance(by_type, dict) and by_type:
        headers = ["COLLECTIVE", "COUNT", "BYTES", "COMM ms", "EXPOSED ms"]
        if dilation:
            headers += ["COMM us modelled", "EXPOSED us modelled"]
        rows = []
        for kind, figures in list(by_type.items())[:MAX_STEP_TYPES]:
            figures = figures if isinstance(figures, dict) else {}
            row = [_listed(kind), _whole(figures.get("count")), _whole(figures.get("bytes")),
                   _fmt(figures.get("comm_us"), 2, 1e3), _fmt(figures.get("exposed_us"), 2, 1e3)]
            if dilation:
                row += [_fmt(_scaled(figures.get(key), dilation), 2) for key in ("comm_us", "exposed_us")]
            rows.append(row)
        lines += ["  " + line for line in _render(headers, rows, text_columns=1)]
        if len(by_type) > MAX_STEP_TYPES:
            lines.append(f"  ({len(by_type) - MAX_STEP_TYPES} more collective types and groups not listed)")
    if "timeline" in step:
        _, problem = step_timeline(step)
        if problem:
            lines.append(f"  no timeline plot: {problem}")
    return lines


def _whole(value: Any) -> str:
    """A count (collectives, bytes, ranks) as printed: an integer exactly, anything else as :func:`_fmt` does."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else _fmt(value)


def _text(value: Any) -> str:
    """A name from the directory (a collective's kind, group, placement) as printed; ``-`` when not text."""
    return printable(value) if isinstance(value, str) and value else MISSING


def _backend_time(variant: dict[str, Any]) -> str:
    return "simulated" if variant.get("backend") == "sim" else "emulated"


def _dilation(variant: dict[str, Any]) -> tuple[float | None, str]:
    """The variant's time dilation D (modelled = its times / D) and the modelled rate; None without a model."""
    model = variant.get("model")
    factor = _number(model.get("dilation")) if isinstance(model, dict) else None
    if factor is None or factor <= 0:
        return None, MISSING
    return factor, _listed(model.get("rate", MISSING))


def _scaled(value: Any, dilation: float) -> float | None:
    number = _number(value)
    return None if number is None else number / dilation


@dataclass
class StepTimeline:
    """One step's timeline as results.json has it: per rank its collectives (issued, begun, done in us from the
    step's start, and the collective's index in the step) and when the rank's step ended; per collective its
    type and group and whether the compute after it waits for it, and the compute after the last (None where
    results.json does not say: written before it did)."""

    ranks: list[list[tuple[float, float, float, int]]]
    ends_us: list[float]
    kinds: list[str] | None
    blocking: list[bool] | None
    tail_us: float | None


def step_timeline(step: dict[str, Any]) -> tuple[StepTimeline | None, str | None]:
    """A workload entry's timeline checked: (the timeline, None), or (None, what is wrong with it in a few
    words); (None, None) when it has none."""
    timeline = step.get("timeline")
    if timeline is None:
        return None, None
    if not isinstance(timeline, dict):
        return None, "its timeline is not an object"
    ranks, ends = timeline.get("ranks"), timeline.get("ends_us")
    if not isinstance(ranks, list) or not ranks:
        return None, "its timeline has no list of ranks"
    if not isinstance(ends, list) or len(ends) != len(ranks) or any(_number(e) is None or e < 0 for e in ends):
        return None, "its timeline's ends_us is not a time per rank"
    parsed: list[list[tuple[float, float, float, int]]] = []
    ops = 0
    for rank in ranks:
        if not isinstance(rank, list):
            return None, "a rank of its timeline is not a list"
        entries = []
        for entry in rank:
            if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[3], int)
                    and not isinstance(entry[3], bool) and entry[3] >= 0
                    and all(_number(t) is not None and t >= 0 for t in entry[:3])):
                return None, "a collective of its timeline is not [issued, begun, done, op]"
            entries.append((float(entry[0]), float(entry[1]), float(entry[2]), entry[3]))
            ops = max(ops, entry[3] + 1)
        parsed.append(entries)
    kinds, blocking = step.get("op_kinds"), step.get("op_blocking")
    kinds = kinds if isinstance(kinds, list) and len(kinds) >= ops and all(isinstance(k, str) for k in kinds) \
        else None
    blocking = blocking if isinstance(blocking, list) and len(blocking) >= ops and \
        all(isinstance(b, bool) for b in blocking) else None
    tail = _number(step.get("tail_us"))
    return StepTimeline(parsed, [float(e) for e in ends], kinds, blocking,
                        tail if tail is not None and tail >= 0 else None), None


def compute_spans(entries: list[tuple[float, float, float, int]], blocking: list[bool],
                  tail_us: float | None) -> list[tuple[float, float]]:
    """A rank's compute stream, (start, length) in us: the compute before each collective ends at its issue and
    begins when the stream was free, at the previous collective's issue, or at its end when the compute waited
    for it (blocking); the compute after the last collective, ``tail_us`` long, likewise."""
    spans, free = [], 0.0
    for issue, _, done, op in entries:
        if issue > free:
            spans.append((free, issue - free))
        free = max(done, issue) if blocking[op] else issue
    if tail_us:
        spans.append((free, tail_us))
    return spans


def _render(headers: list[str], rows: list[list[str]], text_columns: int) -> list[str]:
    """Aligned columns: the first ``text_columns`` left-aligned, numbers right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) if i < text_columns else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _setup(variant: dict[str, Any], but: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """What must match for a lossy/lossless pair (less the keys in ``but``); ``params`` holds the swept values,
    the fabric among them when the experiment sweeps it."""
    params = variant.get("params")
    swept = {k: v for k, v in params.items() if k != "fabric"} if isinstance(params, dict) else params
    return (*(variant.get(key) for key in SETUP_KEYS if key not in but), swept)


def _same_but_backend(variant: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for the same variant on two backends: the setup, the fabric, the congestion control, the
    other swept values."""
    params = variant.get("params")
    swept = {k: v for k, v in params.items() if k != "backend"} if isinstance(params, dict) else params
    return (*(variant.get(key) for key in SETUP_KEYS if key != "backend"), variant.get("fabric"), variant.get("cc"),
            swept)


def _cct(variant: dict[str, Any], stat: str) -> float | None:
    cct = variant.get("cct_us")
    return _number(cct.get(stat)) if isinstance(cct, dict) else None


def _number(value: Any) -> float | None:
    """A JSON number as float; None for anything else (missing keys, null, text, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _fmt(value: Any, digits: int = 0, scale: float = 1.0) -> str:
    number = _number(value)
    return MISSING if number is None else f"{number / scale:.{digits}f}"


def _percent(measured: float | None, predicted: float | None) -> str:
    if measured is None or not predicted:
        return MISSING
    return f"{(measured - predicted) / predicted * 100:+.1f}%"


# --- queue occupancy -----------------------------------------------------------------------------


def busiest_port(rows: list[Sample]) -> tuple[str, str] | None:
    """The (switch, port) whose egress queue, all priorities together, reaches the highest maximum.

    One link's queue tells the story of a run (the incast bottleneck, the
    congested uplink); this picks it without the user naming it.  Ties go
    to the first (switch, port) in name order; None when there are no rows.
    """
    peaks = {key: max(total for _, total in _held_totals(series)) for key, series in _by_port(rows).items()}
    return max(sorted(peaks), key=peaks.__getitem__) if peaks else None


def port_series(rows: list[Sample], switch: str, port: str) -> dict[int, tuple[list[float], list[float]]]:
    """Per priority with a nonzero egress queue: (ms from the first sample, KiB) points of a step plot.

    Each series ends at the last sample of ``rows`` with its last value:
    change-only rows mean the value held until then.
    """
    first, last = _span(rows)
    series: dict[int, tuple[list[float], list[float]]] = {}
    mine = sorted((r for r in rows if r.switch == switch and r.port == port), key=lambda r: r.time_ns)
    for priority in sorted({r.priority for r in mine if r.egress_bytes}):
        points = [(r.time_ns, r.egress_bytes) for r in mine if r.priority == priority]
        points.append((last, points[-1][1]))
        series[priority] = ([(t - first) / 1e6 for t, _ in points], [b / 1024 for _, b in points])
    return series


def xoff_intervals(rows: list[Sample], switch: str) -> list[tuple[float, float]]:
    """When ``switch`` asserts PFC XOFF upstream on any port and priority, in ms from the first sample."""
    return _flag_intervals(rows, lambda r: r.switch == switch, lambda r: r.xoff)


def egress_paused_intervals(rows: list[Sample], switch: str, port: str) -> list[tuple[float, float]]:
    """When the port's egress is paused by PFC from downstream (any priority), in ms from the first sample."""
    return _flag_intervals(rows, lambda r: r.switch == switch and r.port == port, lambda r: r.egress_paused)


def _flag_intervals(rows: list[Sample], select: Callable[[Sample], bool],
                    flag: Callable[[Sample], bool]) -> list[tuple[float, float]]:
    """Union of the times a flag is set on any selected (port, priority); one still set ends at the last sample."""
    if not rows:
        return []
    first, last = _span(rows)
    active: set[tuple[str, int]] = set()
    intervals, start = [], None
    for time_ns, group in groupby(sorted(filter(select, rows), key=lambda r: r.time_ns), key=lambda r: r.time_ns):
        for r in group:
            (active.add if flag(r) else active.discard)((r.port, r.priority))
        if active and start is None:
            start = time_ns
        elif not active and start is not None:
            intervals.append(((start - first) / 1e6, (time_ns - first) / 1e6))
            start = None
    if start is not None:
        intervals.append(((start - first) / 1e6, (last - first) / 1e6))
    return intervals


def _by_port(rows: Iterable[Sample]) -> dict[tuple[str, str], list[Sample]]:
    ports: dict[tuple[str, str], list[Sample]] = {}
    for r in rows:
        ports.setdefault((r.switch, r.port), []).append(r)
    for series in ports.values():
        series.sort(key=lambda r: r.time_ns)
    return ports


def _held_totals(series: list[Sample]) -> list[tuple[int, int]]:
    """(time, egress bytes of all priorities) after each sample time of one port, values carried forward."""
    held: dict[int, int] = {}
    totals = []
    for time_ns, group in groupby(series, key=lambda r: r.time_ns):
        for r in group:
            held[r.priority] = r.egress_bytes
        totals.append((time_ns, sum(held.values())))
    return totals


def _span(rows: list[Sample]) -> tuple[int, int]:
    return min(r.time_ns for r in rows), max(r.time_ns for r in rows)


# --- plots ---------------------------------------------------------------------------------------


def make_plots(results: Results) -> list[str]:
    """Write the PNG plots into ``DIR/plots``; the paths written, in order.

    All or none (:class:`Outputs`): a telemetry file found malformed half-way
    leaves the plots of an earlier report as they were.  Figures are drawn
    on the Agg canvas directly (no pyplot): nothing global changes for a
    caller with its own matplotlib backend, and no display is needed.
    matplotlib is imported here, not at module level, so the rest of the
    command line does not pay for it.
    """
    written: list[str] = []
    with Outputs(results.directory, "plots") as outputs:

        def save(filename: str, fig: Figure | None) -> None:
            if fig is not None:  # saved at once: a sweep's queue figures need not all be in memory together
                written.append(outputs.write(filename, lambda f: _save_png(fig, f)))

        cct = cct_by_variant(results.iterations)
        if cct:
            save("cct_cdf.png", _cct_cdf(cct, results.experiment))
            save("cct_per_iteration.png", _cct_per_iteration(cct, results.experiment))
        for variant in results.variants:
            rows = results.occupancy(variant["name"]) or []
            busiest = busiest_port(rows)
            if busiest:
                save(f"queue_{variant['name']}.png", _queue(variant["name"], rows, *busiest))
            rates = results.rates(variant["name"])
            if rates:
                save(f"rates_{variant['name']}.png", _rates(variant["name"], rates))
        for variant in results.variants:
            step = variant.get("workload")
            timeline = step_timeline(step)[0] if isinstance(step, dict) else None
            if timeline is not None:
                save(f"timeline_{variant['name']}.png", _timeline(variant, step, timeline))
        save("uplinks.png", _uplinks(results.variants))
        save("straggler.png", _straggler(results.variants))
        save("envelope.png", _envelope(results.variants))
    return written


def _save_png(fig: Figure, f: BinaryIO) -> None:
    fig.savefig(f, format="png", dpi=PLOT_DPI)


def cct_by_variant(iterations: list[IterationRow]) -> dict[str, tuple[list[int], list[float]]]:
    """Per variant (in file order): iteration numbers and their CCT in ms, by iteration."""
    series: dict[str, list[IterationRow]] = {}
    for it in iterations:
        series.setdefault(it.variant, []).append(it)
    cct = {}
    for name, its in series.items():
        its.sort(key=lambda it: it.iteration)
        cct[name] = ([it.iteration for it in its], [it.cct_us / 1e3 for it in its])
    return cct


def _figure(title: str, xlabel: str, ylabel: str, height: float = 5) -> tuple[Figure, Axes]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _legend(ax: Axes, loc: str = "best") -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc=loc, fontsize="small")


def _cct_cdf(cct: dict[str, tuple[list[int], list[float]]], experiment: str) -> Figure:
    fig, ax = _figure(f"{experiment}: CCT distribution", "collective completion time (ms)",
                      "fraction of iterations (CDF)")
    for name, (_, ms) in cct.items():
        xs = sorted(ms)
        ax.step([xs[0], *xs], [0.0, *((i + 1) / len(xs) for i in range(len(xs)))], where="post", label=name)
    ax.set_ylim(0, 1.02)
    _legend(ax, "lower right")
    return fig


def _cct_per_iteration(cct: dict[str, tuple[list[int], list[float]]], experiment: str) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure(f"{experiment}: CCT per iteration (warm-up excluded)", "iteration",
                      "collective completion time (ms)")
    for name, (iters, ms) in cct.items():
        ax.plot(iters, ms, marker="o", markersize=3, label=name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(ax)
    return fig


def _queue(variant: str, rows: list[Sample], switch: str, port: str) -> Figure:
    fig, ax = _figure(f"{variant}: egress queue of {switch} port {port} (the fullest)",
                      "time (ms from the first sample)", "egress queue (KiB)")
    series = port_series(rows, switch, port)
    for priority, (ms, kib) in series.items():
        ax.step(ms, kib, where="post", label=f"priority {priority}")
    if not series:
        ax.text(0.5, 0.5, "the queue stayed empty", transform=ax.transAxes, ha="center")
    first, last = _span(rows)
    span_ms = (last - first) / 1e6
    _shade(ax, visible_intervals(xoff_intervals(rows, switch), span_ms), "tab:red",
           f"PFC XOFF asserted (by {switch}, any port)")
    _shade(ax, visible_intervals(egress_paused_intervals(rows, switch, port), span_ms), "tab:purple", "egress paused")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # room above the queue for the legend
    _legend(ax, "upper right")
    return fig


MAX_RATE_LINES = 16  # QPs drawn in a rate plot (the ones cut most often); the rest are named in the title


def rate_series(rows: list[RateRow]) -> dict[tuple[str, int], tuple[list[float], list[float], int]]:
    """Per QP (host, QPN), most CNPs first: times (ms from the trace's first row), rates (Mbit/s), CNPs."""
    if not rows:
        return {}
    first = min(row.time_ns for row in rows)
    series: dict[tuple[str, int], tuple[list[float], list[float], int]] = {}
    for row in sorted(rows, key=lambda r: r.time_ns):
        ms, mbps, cnps = series.get((row.host, row.qpn), ([], [], 0))
        ms.append((row.time_ns - first) / 1e6)
        mbps.append(row.rate_bps / 1e6)
        series[(row.host, row.qpn)] = (ms, mbps, cnps + (row.event == "cnp"))
    return dict(sorted(series.items(), key=lambda item: -item[1][2]))


def _rates(variant: str, rows: list[RateRow]) -> Figure:
    series = rate_series(rows)
    shown_qps = list(series)[:MAX_RATE_LINES]
    more = f" ({len(series) - len(shown_qps)} more QPs not drawn)" if len(series) > len(shown_qps) else ""
    fig, ax = _figure(f"{variant}: DCQCN current rate per QP{more}", "time (ms from the first rate change)",
                      "current rate (Mbit/s)")
    for key in shown_qps:
        ms, mbps, cnps = series[key]
        ax.step(ms, mbps, where="post", label=f"{key[0]} QP {key[1]} ({cnps} CNPs)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.3)
    _legend(ax, "upper right")
    return fig


def timeline_ranks(timeline: StepTimeline, critical: Any) -> list[int]:
    """The ranks a timeline plot draws: all, or the first :data:`MAX_TIMELINE_RANKS` with the rank that ended
    last among them, fewer when their collectives are more than :data:`MAX_TIMELINE_BARS`."""
    shown = list(range(min(len(timeline.ranks), MAX_TIMELINE_RANKS)))
    if isinstance(critical, int) and not isinstance(critical, bool) and shown[-1] < critical < len(timeline.ranks):
        shown[-1] = critical
    bars = 0
    for i, rank in enumerate(shown):
        bars += len(timeline.ranks[rank])
        if bars > MAX_TIMELINE_BARS:
            return shown[:i]
    return shown


def _joined(spans: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, end) spans sorted, those that overlap or lie closer than ``gap`` joined into one."""
    joined: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if joined and start - joined[-1][1] < gap:
            joined[-1] = (joined[-1][0], max(joined[-1][1], end))
        else:
            joined.append((start, end))
    return joined


def _plot_text(text: str, limit: int = 40) -> str:
    """Text from the directory as a plot label: printable, short, no mathtext (a '$' drawn as itself)."""
    text = printable(text)
    return (text if len(text) <= limit else text[:limit - 3] + "...").replace("$", r"\$")


def _timeline(variant: dict[str, Any], step: dict[str, Any], timeline: StepTimeline) -> Figure | None:
    """One step per rank (a row each, the measured iteration of median step time): its compute stream in grey
    (on top), each collective from its begin to its end in its type and group's colour (below), between them
    hatched from its issue to its begin (waiting for the collective before it), and a tick where the rank's step
    ended."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    shown = timeline_ranks(timeline, step.get("critical_rank"))
    if not shown:
        return None
    name, clock = variant["name"], _backend_time(variant)
    more = len(timeline.ranks) - len(shown)
    fig, ax = _figure(f"{name}: one step per rank (the iteration of median step time)"
                      + (f", {more} more ranks not drawn" if more else ""),
                      f"{clock} time (ms from the step's start)", "rank", height=min(20.0, 2.5 + 0.3 * len(shown)))
    colours: dict[str, str] = {}
    palette = [f"C{i}" for i in range(MAX_TIMELINE_KINDS)]
    other = "0.35"

    def colour(op: int) -> str:
        if timeline.kinds is None:
            return "C0"
        kind = timeline.kinds[op]
        if kind not in colours:
            colours[kind] = palette[len(colours)] if len(colours) < len(palette) else other
        return colours[kind]

    span_us = max([*(timeline.ends_us[rank] for rank in shown),
                   *(max(entry[:3]) for rank in shown for entry in timeline.ranks[rank])], default=0.0)
    all_waits = []
    for y, rank in enumerate(shown):
        entries = timeline.ranks[rank]
        if timeline.blocking is not None:
            ax.broken_barh([(start / 1e3, length / 1e3) for start, length in
                            compute_spans(entries, timeline.blocking, timeline.tail_us)],
                           (y - 0.42, 0.28), facecolors="0.75", linewidth=0)
        by_colour: dict[str, list[tuple[float, float]]] = {}
        waits: dict[str, list[tuple[float, float]]] = {}
        for issue, begun, done, op in entries:
            c = colour(op)
            by_colour.setdefault(c, []).append((begun / 1e3, max(0.0, done - begun) / 1e3))
            if begun > issue:
                waits.setdefault(c, []).append((issue, begun))
        for c, bars in by_colour.items():
            ax.broken_barh(bars, (y + 0.08, 0.34), facecolors=c, linewidth=0)
        all_waits += [(y, c, _joined(spans, span_us / SHADE_RESOLUTION)) for c, spans in waits.items()]
    # A strip of their own between the two streams (the collective before is still running); hatching costs
    # matplotlib half a millisecond a bar, so past MAX_HATCHED_WAITS they are drawn pale instead.
    hatched = sum(len(spans) for _, _, spans in all_waits) <= MAX_HATCHED_WAITS
    wait_style = {"facecolors": "none", "hatch": "////"} if hatched else {"alpha": 0.35}
    for y, c, spans in all_waits:
        ax.broken_barh([(start / 1e3, (end - start) / 1e3) for start, end in spans], (y - 0.11, 0.16),
                       edgecolors=c, linewidth=0, **({"facecolors": c} | wait_style))
    ax.plot([timeline.ends_us[rank] / 1e3 for rank in shown], range(len(shown)), "|", color="black",
            markersize=max(4.0, 160 / len(shown)), markeredgewidth=2)
    critical = step.get("critical_rank")
    ax.set_yticks(range(len(shown)), [f"{rank}" + (" (last)" if rank == critical else "") for rank in shown],
                  fontsize="small" if len(shown) <= 16 else "xx-small")
    ax.set_ylim(len(shown) - 0.5, -0.5)  # rank 0 at the top
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    dilation, rate = _dilation(variant)
    if dilation:
        top = ax.secondary_xaxis("top", functions=(lambda ms: ms * 1e3 / dilation, lambda us: us * dilation / 1e3))
        top.set_xlabel(f"modelled {rate} time (us: {clock} / D, D = {dilation:g})")
    handles = [Patch(facecolor="0.75", label="compute")] if timeline.blocking is not None else []
    if timeline.kinds is None:
        handles.append(Patch(facecolor="C0", label="collective"))
    else:
        handles += [Patch(facecolor=c, label=_plot_text(kind)) for kind, c in colours.items() if c != other]
        if other in colours.values():
            handles.append(Patch(facecolor=other, label="other collectives"))
    handles += [Patch(facecolor="none", edgecolor="0.3", hatch="////", label="issued, waiting for the one before")
                if hatched else Patch(facecolor="0.3", alpha=0.35, label="issued, waiting for the one before"),
                Line2D([], [], color="black", marker="|", linestyle="none", markersize=10, markeredgewidth=2,
                       label="the rank's step ends")]
    if timeline.blocking is None:
        handles.append(Patch(facecolor="none", edgecolor="none", label="compute not drawn (not in results.json)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize="small")
    return fig


def visible_intervals(intervals: list[tuple[float, float]], span: float) -> list[tuple[float, float]]:
    """``intervals`` (sorted, disjoint) with every gap narrower than 1/:data:`SHADE_RESOLUTION` of ``span``
    closed: at most that many remain.

    A plot is about a thousand pixels wide, so nothing visible is lost, and
    telemetry whose flag toggles every sample (a million rows) cannot make
    the plot take minutes: matplotlib draws a span in about a millisecond.
    """
    merged: list[tuple[float, float]] = []
    for start, end in intervals:
        if merged and start - merged[-1][1] < span / SHADE_RESOLUTION:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _shade(ax: Axes, intervals: list[tuple[float, float]], color: str, label: str) -> None:
    """Shaded spans; only the first carries the label so the legend lists it once."""
    for i, (start, end) in enumerate(intervals):
        ax.axvspan(start, end, color=color, alpha=0.18, linewidth=0, label=label if i == 0 else None)


def _uplinks(variants: list[dict[str, Any]]) -> Figure | None:
    """Each variant's bytes per uplink, each uplink's share of the variant's mean: a flat line is an even load."""
    series = []
    for v in variants:
        uplinks = v.get("uplinks")
        if not isinstance(uplinks, dict) or not uplinks:
            continue
        values = [_number(b) for b in uplinks.values()]
        if any(b is None for b in values) or not sum(values):
            continue
        mean = sum(values) / len(values)
        series.append((_listed(v.get("name", MISSING)), [_listed(name) for name in uplinks], [b / mean for b in values]))
    if not series:
        return None
    fig, ax = _figure("uplink load: each uplink's bytes over the variant's mean (1 = even)", "uplink",
                      "bytes / mean")
    width = 0.8 / len(series)
    for i, (name, links, shares) in enumerate(series):
        ax.bar([x + i * width for x in range(len(shares))], shares, width, label=name)
        if i == 0:
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(links))], links, rotation=90, fontsize="x-small")
    ax.axhline(1.0, color="gray", linestyle=":")
    _legend(ax, "upper right")
    return fig


def _straggler(variants: list[dict[str, Any]]) -> Figure | None:
    """Measured mean CCT against p with the two predictions; p = 0 has no place on a log axis (it is the baseline)."""
    points, baselines = [], []
    for v in variants:
        pred = v.get("prediction")
        if isinstance(pred, dict):
            baselines.append(_number(pred.get("baseline_mean_us")))
            p, measured = _number(pred.get("p")), _cct(v, "mean")
            gbn, rto = _number(pred.get("predicted_gbn_us")), _number(pred.get("predicted_rto_us"))
            if p is not None and p > 0 and measured is not None and gbn is not None and rto is not None:
                points.append((p, measured / 1e3, gbn / 1e3, rto / 1e3))
    if not points:
        return None
    p, measured, gbn, rto = zip(*sorted(points))
    baseline = next((b for b in baselines if b is not None), None)
    fig, ax = _figure("straggler: mean CCT against random loss", "link loss probability p per frame (log scale)",
                      "mean collective completion time (ms)")
    ax.set_xscale("log")
    ax.plot(p, gbn, "-", color="tab:blue", label="predicted: baseline + P(hit) x go-back-N round")
    ax.plot(p, rto, "--", color="tab:orange", label="predicted: baseline + P(hit) x RTO")
    ax.plot(p, measured, "o", color="black", label="measured mean")
    if baseline is not None:
        ax.axhline(baseline / 1e3, color="gray", linestyle=":", label="baseline (no loss)")
    _legend(ax, "upper left")
    return fig


def envelope_points(variants: list[dict[str, Any]]) -> dict[str, list[tuple[float, float, bool | None]]]:
    """For a sweep over the link rate: per collective and fabric, (Mbit/s, CCT / link-time bound, faithful)."""
    series: dict[str, list[tuple[float, float, bool | None]]] = {}
    for v in variants:
        params, ratio = v.get("params"), _number(v.get("cct_over_link_time"))
        if not isinstance(params, dict) or "bw" not in params or ratio is None:
            continue
        try:
            rate = parse_rate(params["bw"]) / 1e6
        except (FabricError, TypeError):
            continue
        label = f"{_listed(v.get('collective', MISSING))} {_listed(v.get('fabric', MISSING))}"
        series.setdefault(label, []).append((rate, ratio, _faithful(v)))
    return {label: sorted(points) for label, points in series.items()}


def _envelope(variants: list[dict[str, Any]]) -> Figure | None:
    """This machine's faithful envelope: CCT over its link-time bound against the emulated rate, with verdicts."""
    series = envelope_points(variants)
    if not series:
        return None
    fig, ax = _figure("fidelity envelope: CCT / link-time bound against the emulated link rate",
                      "emulated link rate (Mbit/s, log scale)", "mean CCT / link-time bound")
    ax.set_xscale("log")
    for label, points in sorted(series.items()):
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], "-", label=label)
        for rate, ratio, faithful in points:
            ax.plot([rate], [ratio], "o" if faithful else "x", color=line.get_color(),
                    markerfacecolor=line.get_color() if faithful else "none", markersize=8)
    ax.axhline(1.0, color="gray", linestyle=":", label="link-time bound")
    ax.plot([], [], "o", color="black", label="faithful (monitor)")
    ax.plot([], [], "x", color="black", label="NOT faithful")
    _legend(ax, "upper left")
    return fig


# --- the command ---------------------------------------------------------------------------------


def main_report(directory: str, out: TextIO | None = None) -> int:
    """``fabric-emu report DIR``: print the table, write DIR/plots, list them.

    ``out`` defaults to the sys.stdout of the moment of the call (not of the
    import), so output captured by a test or redirected by a caller lands
    where they expect.
    """
    out = out or sys.stdout
    results = load_results(directory)
    print(table(results), file=out)
    paths = make_plots(results)
    print("\nplots:" if paths else "\nplots: none (no iterations, telemetry or prediction to plot)", file=out)
    for path in paths:
        print(f"  {printable(path)}", file=out)
    return 0
