"""The report on a training step (the workload collective): its block of text and its timeline plot.

The results directories are written by hand in the format ``fabric-emu run`` writes (the workload entry of
emulator/study/workload_step.py's ``step_figures``), so nothing here needs root or a fabric.
"""

from __future__ import annotations

import copy
import io
import json

import pytest

from emulator.study import report
from emulator.study.results import load_results
from test_report import PNG_SIGNATURE, variant, write_directory


def timeline_rank(rank: int) -> list[list[float]]:
    """Three collectives as the executors run them: a tp all-reduce after 100 us of compute, which the compute
    after it does not wait for; a dp reduce-scatter issued 50 us later (more on later ranks) that waits for the
    all-reduce to end (its issue to its begin hatched) and does not block either; a tp all-gather after 750 us
    more compute, which blocks: the step's 50 us of compute after it begin at its end."""
    late = 30.0 * rank  # the last rank ends last
    return [[100.0, 100.0, 400.0 + late, 0], [150.0 + late, 400.0 + late, 700.0 + late, 1],
            [900.0 + late, 900.0 + late, 1200.0 + late, 2]]


def workload(ranks: int = 2, **extra) -> dict:
    return {
        "ops": 3, "ranks": ranks, "parallelism": {"tp": 2, "dp": ranks // 2, "pp": 1}, "placement": "tp,dp,pp",
        "bytes": 460358276, "step_us": 9807.1, "compute_us": 1634.8, "comm_us": 8172.3, "exposed_us": 8172.3,
        "exposed_share": 0.8333, "critical_rank": ranks - 1,
        "by_type": {"all_reduce tp": {"count": 139, "bytes": 143720836, "comm_us": 3810.8, "exposed_us": 3810.8},
                    "reduce_scatter dp": {"count": 1, "bytes": 211091456, "comm_us": 3271.6,
                                          "exposed_us": 3271.6}},
        "held_by": {"op": 1, "kind": "reduce_scatter", "group": "dp", "bytes": 211091456,
                    "label": "weight_gradient.grad_norm", "exposed_us": 3271.6, "iterations": 2},
        "timeline": {"ranks": [timeline_rank(r) for r in range(ranks)],
                     "ends_us": [1250.0 + 30.0 * r for r in range(ranks)]},
        "op_kinds": ["all_reduce tp", "reduce_scatter dp", "all_gather tp"], "op_blocking": [False, False, True],
        "tail_us": 50.0, **extra}


def step_variant(name: str = "wl", model: float | None = None, **extra) -> dict:
    v = variant(name, "lossless", collective="workload", p50=9807.1, p99=9810.0, mean=9807.1, iterations=2,
                workload=workload(**extra))
    if model:
        v["model"] = {"rate": "400gbit", "dilation": model, "link_time_us": 1.0,
                      "cct_us": {"p50": 1.0, "p99": 1.0, "max": 1.0, "mean": 1.0, "min": 1.0}}
    return v


def run_report(directory: str) -> str:
    out = io.StringIO()
    assert report.main_report(directory, out) == 0
    return out.getvalue()


def test_the_block_has_the_step_its_holder_and_a_row_per_type_and_group(tmp_path):
    text = run_report(write_directory(tmp_path / "d", [step_variant()]))
    assert ("wl: step 9.81 ms (compute 1.63, communication 8.17, exposed 8.17 = 83.3% of the step) on rank 1; "
            "held by: reduce_scatter in dp (weight_gradient.grad_norm), exposed 3.27 ms in 2 of 2 iterations"
            in text)
    assert "  2 ranks (tp 2, dp 1, pp 1; placed tp,dp,pp), 3 collectives of 460358276 bytes, in emulated time" \
        in text
    lines = text.splitlines()
    header = lines.index("  COLLECTIVE         COUNT      BYTES  COMM ms  EXPOSED ms")
    assert lines[header + 1].split() == ["all_reduce", "tp", "139", "143720836", "3.81", "3.81"]
    assert lines[header + 2].split() == ["reduce_scatter", "dp", "1", "211091456", "3.27", "3.27"]
    assert "modelled" not in text.split("training steps")[1]
    # after the main table, which keeps its row for the variant
    assert text.index("training steps") > text.index("wl  ") and "timeline_wl.png" in text


def test_a_dilated_variant_has_its_figures_in_the_modelled_time_too(tmp_path):
    text = run_report(write_directory(tmp_path / "d", [step_variant(model=1000.0)]))
    assert ("  modelled 400gbit, D = 1000: step 9.81 us (compute 1.63, communication 8.17, exposed 8.17); "
            "held by: exposed 3.27 us") in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("  COLLECTIVE"))
    assert lines[header].split()[-6:] == ["COMM", "us", "modelled", "EXPOSED", "us", "modelled"]
    assert lines[header + 1].split()[-2:] == ["3.81", "3.81"]


def test_the_simulator_says_simulated_time(tmp_path):
    v = step_variant()
    v["backend"] = "sim"
    text = run_report(write_directory(tmp_path / "d", [v]))
    assert "in simulated time" in text


def test_a_timeline_plot_per_workload_variant(tmp_path):
    d = write_directory(tmp_path / "d", [step_variant("one"), step_variant("two", model=20000.0),
                                         variant("plain", "lossless")])
    text = run_report(d)
    for name in ("one", "two"):
        png = tmp_path / "d" / "plots" / f"timeline_{name}.png"
        assert png.read_bytes().startswith(PNG_SIGNATURE)
        assert f"  {png}" in text.splitlines()
    assert not (tmp_path / "d" / "plots" / "timeline_plain.png").exists()


def test_without_workload_variants_the_report_has_no_block_and_no_timeline(tmp_path):
    variants = [variant("a", "lossless"), variant("b", "lossy")]
    text = run_report(write_directory(tmp_path / "d", variants))
    assert "training steps" not in text and "timeline" not in text
    assert report.workload_lines(variants) == []
    # the table is the same with a workload variant beside them, but for that variant's row and block
    with_step = report.table(load_results(write_directory(tmp_path / "e", [*variants, step_variant()])))
    assert report.table(load_results(str(tmp_path / "d"))).splitlines()[3:5] == with_step.splitlines()[3:5]


def test_the_compute_stream_waits_for_blocking_collectives_only():
    entries = [(t[0], t[1], t[2], int(t[3])) for t in timeline_rank(0)]
    # 0-100 before the all-reduce; it does not block: 100-150 before the reduce-scatter, nor does that one:
    # 150-900 before the all-gather; that one blocks: the tail from its end
    spans = report.compute_spans(entries, [False, False, True], 50.0)
    assert spans == [(0.0, 100.0), (100.0, 50.0), (150.0, 750.0), (1200.0, 50.0)]
    # read as all blocking, the reduce-scatter's issue (150) would come before the stream was free (400), and the
    # all-gather's compute would begin at the reduce-scatter's end: the flags are what tells them apart
    assert report.compute_spans(entries, [True, True, True], 0.0) == [(0.0, 100.0), (700.0, 200.0)]


def test_results_written_before_op_kinds_still_plot_without_compute(tmp_path):
    v = step_variant()
    for key in ("op_kinds", "op_blocking", "tail_us"):
        del v["workload"][key]
    timeline, problem = report.step_timeline(v["workload"])
    assert problem is None and timeline.kinds is None and timeline.blocking is None and timeline.tail_us is None
    run_report(write_directory(tmp_path / "d", [v]))
    assert (tmp_path / "d" / "plots" / "timeline_wl.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_large_job_draws_a_bounded_number_of_ranks_with_the_last_to_end():
    timeline, _ = report.step_timeline(workload(ranks=200))
    shown = report.timeline_ranks(timeline, 199)
    assert len(shown) == report.MAX_TIMELINE_RANKS and shown[-1] == 199 and shown[:3] == [0, 1, 2]
    crowded = report.StepTimeline([[(0.0, 0.0, 1.0, 0)] * 60_000] * 3, [1.0] * 3, None, None, None)
    assert report.timeline_ranks(crowded, 0) == [0]


def test_many_kinds_share_one_colour_past_the_palette(tmp_path):
    v = step_variant()
    ops = 30
    v["workload"]["op_kinds"] = [f"kind{i} $x^{i}$ g" for i in range(ops)]  # '$' is no mathtext in a label
    v["workload"]["op_blocking"] = [i % 2 == 0 for i in range(ops)]
    v["workload"]["timeline"]["ranks"] = [[[10.0 * i, 10.0 * i + 1, 10.0 * i + 5, i] for i in range(ops)]] * 2
    run_report(write_directory(tmp_path / "d", [v]))
    assert (tmp_path / "d" / "plots" / "timeline_wl.png").read_bytes().startswith(PNG_SIGNATURE)


BAD_TIMELINES = [
    ("x", "its timeline is not an object"),
    ({"ranks": "x", "ends_us": []}, "its timeline has no list of ranks"),
    ({"ranks": [], "ends_us": []}, "its timeline has no list of ranks"),
    ({"ranks": [[]], "ends_us": [1.0, 2.0]}, "its timeline's ends_us is not a time per rank"),
    ({"ranks": [[]], "ends_us": ["late"]}, "its timeline's ends_us is not a time per rank"),
    ({"ranks": [[]], "ends_us": [-1]}, "its timeline's ends_us is not a time per rank"),
    ({"ranks": [5], "ends_us": [1.0]}, "a rank of its timeline is not a list"),
    ({"ranks": [[[1, 2, 3]]], "ends_us": [1.0]}, "a collective of its timeline is not [issued, begun, done, op]"),
    ({"ranks": [[[1, 2, 3, 1.5]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
    ({"ranks": [[[1, 2, 3, True]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
    ({"ranks": [[[1, 2, 3, -1]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
    ({"ranks": [[[1, "2", 3, 0]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
    ({"ranks": [[[1, None, 3, 0]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
    ({"ranks": [[[1, -2, 3, 0]]], "ends_us": [1.0]}, "a collective of its timeline is not"),
]


@pytest.mark.parametrize("timeline,problem", BAD_TIMELINES)
def test_a_malformed_timeline_is_one_line_and_no_plot(tmp_path, timeline, problem):
    v = step_variant()
    v["workload"]["timeline"] = timeline
    text = run_report(write_directory(tmp_path / "d", [v]))
    assert f"  no timeline plot: {problem}" in text
    assert "wl: step 9.81 ms" in text and "timeline_wl.png" not in text


def hostile_entries() -> list:
    """Workload entries of the wrong types, each where step_figures writes something else."""
    good = workload()
    entries: list = ["fast", 5, [], [1, 2], True, {}]
    for key, value in (("step_us", "9 ms"), ("step_us", None), ("exposed_share", [1]), ("critical_rank", "7"),
                       ("by_type", [1, 2]), ("by_type", {"all_reduce tp": 5}), ("by_type", {"x": {"count": "many"}}),
                       ("held_by", 3), ("held_by", {"kind": 1, "group": [], "label": {"a": 1}}),
                       ("parallelism", "tp2"), ("parallelism", {"tp": "two"}), ("placement", 7),
                       ("op_kinds", "abc"), ("op_kinds", [1, 2, 3]), ("op_kinds", ["a"]), ("op_blocking", [1, 0, 1]),
                       ("op_blocking", [True]), ("tail_us", "long"), ("tail_us", -5), ("ranks", {"r": 1}),
                       ("bytes", 2 ** 63 - 1), ("step_us", 0), ("label", "\x1b[31mred\n")):
        entry = copy.deepcopy(good)
        entry[key] = value
        entries.append(entry)
    huge = copy.deepcopy(good)
    huge["timeline"]["ranks"][0][0] = [2 ** 63 - 1, 2 ** 63 - 1, 2 ** 63 - 1, 0]
    huge["timeline"]["ends_us"][0] = 2 ** 63 - 1
    entries.append(huge)
    backwards = copy.deepcopy(good)  # done before begun before issue: bars of no width, no hatch
    backwards["timeline"]["ranks"][0] = [[500.0, 300.0, 100.0, 0], [0.0, 0.0, 0.0, 2]]
    entries.append(backwards)
    return entries


@pytest.mark.parametrize("entry", hostile_entries())
def test_hostile_workload_entries_report_without_a_traceback(tmp_path, entry):
    v = step_variant()
    v["workload"] = entry
    text = run_report(write_directory(tmp_path / "d", [v, variant("plain", "lossless")]))
    block = text.split("training steps", 1)[1].split("\nplots:")[0]
    assert block.count("\n") <= 12 and "\x1b" not in text
    if not isinstance(entry, dict):
        assert "wl: its workload entry is not an object: not reported" in block
    elif not entry:
        assert "wl: no figures of the step (no measured iteration)" in block


def test_a_variant_without_a_workload_entry_or_a_null_one_has_no_block():
    assert report.workload_lines([variant("a", "lossless"), variant("b", "lossless", workload=None)]) == []


def test_the_results_json_as_run_writes_it_round_trips(tmp_path):
    d = write_directory(tmp_path / "d", [step_variant()])
    data = json.loads((tmp_path / "d" / "results.json").read_text())
    assert data["variants"][0]["workload"]["op_kinds"][1] == "reduce_scatter dp"
    assert "timeline_wl.png" in run_report(d)


def test_waits_a_pixel_apart_are_joined_and_many_are_drawn_pale(tmp_path, monkeypatch):
    assert report._joined([(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (3.5, 4.0)], 1.0) == [(0.0, 4.0), (5.0, 6.0)]
    assert report._joined([(0.0, 1.0), (3.0, 4.0)], 1.0) == [(0.0, 1.0), (3.0, 4.0)]
    monkeypatch.setattr(report, "MAX_HATCHED_WAITS", 1)  # the fabricated step has one wait per rank
    run_report(write_directory(tmp_path / "d", [step_variant(ranks=4)]))
    assert (tmp_path / "d" / "plots" / "timeline_wl.png").read_bytes().startswith(PNG_SIGNATURE)
