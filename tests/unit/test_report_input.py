"""``fabric-emu report DIR`` on results directories someone else wrote: the reproducers of issue 10, and fuzzing.

The report either succeeds, writing nothing but DIR/plots, or prints one
line naming the file (and the line or JSON location) on stderr, exits
non-zero and changes nothing (tests/unit/untrusted_dirs.py checks both).
The directories start from test_report's valid ones.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from emulator.study import report, results
from emulator.errors import FabricError
from test_report import OCCUPANCY, PNG_SIGNATURE, RATES, straggler, variant, write_directory
from untrusted_dirs import assert_one_line_error, changed, run_cli, snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTSIDE_TEXT = "the user's own file, outside DIR"


def build(root: str, small: bool = False) -> str:
    """A valid results directory root/d (a lossless/lossy pair with telemetry, a straggler point, stats.json),
    with a file and a directory beside it for links to point at; returns root/d.

    ``small``: one variant without telemetry, for tests that render its two plots and need no more.
    """
    if small:
        d = write_directory(Path(root) / "d", [variant("incast-lossless", "lossless")])
    else:
        d = write_directory(Path(root) / "d", [variant("incast-lossless", "lossless"),
                                               variant("incast-lossy", "lossy", p99=2032.5, mean=1704.0),
                                               straggler("loss-1e-3", 0.001, 717000.0, 0.87)],
                            occupancy={"incast-lossless": OCCUPANCY})
        with open(os.path.join(d, "telemetry", "incast-lossless", "stats.json"), "w") as f:
            json.dump({"switches": {"s1": {"ports": {}}}, "hosts": {}, "totals": {"drops": 0}}, f)
        with open(os.path.join(d, "telemetry", "incast-lossless", "rates.csv"), "w") as f:
            f.write(RATES)
    with open(os.path.join(root, "outside.txt"), "w") as f:
        f.write(OUTSIDE_TEXT)
    os.mkdir(os.path.join(root, "elsewhere"))
    return d


@pytest.fixture
def sandbox(tmp_path):
    build(str(tmp_path))
    return str(tmp_path)


def report_fails(sandbox: str, *fragments: str) -> str:
    """Run the command on sandbox/d; it must fail with one line and change nothing; the line."""
    before = snapshot(sandbox)
    code, _, err = run_cli("report", os.path.join(sandbox, "d"))
    line = assert_one_line_error(code, err, *fragments)
    assert snapshot(sandbox) == before
    return line


def edit_json(sandbox: str, name: str, edit) -> None:
    path = os.path.join(sandbox, "d", name)
    with open(path) as f:
        data = json.load(f)
    edit(data)
    with open(path, "w") as f:
        json.dump(data, f)


def append(sandbox: str, name: str, data: bytes) -> None:
    with open(os.path.join(sandbox, "d", name), "ab") as f:
        f.write(data)


# --- writing: links and names ----------------------------------------------------------------------


def test_report_replaces_a_linked_plot_and_leaves_its_target_alone(tmp_path):
    sandbox = str(tmp_path)
    build(sandbox, small=True)
    plots = os.path.join(sandbox, "d", "plots")
    os.mkdir(plots)
    os.symlink(os.path.join(sandbox, "outside.txt"), os.path.join(plots, "cct_cdf.png"))
    code, out, err = run_cli("report", os.path.join(sandbox, "d"))
    assert (code, err) == (0, "")
    with open(os.path.join(sandbox, "outside.txt")) as f:
        assert f.read() == OUTSIDE_TEXT
    assert not os.path.islink(os.path.join(plots, "cct_cdf.png"))
    with open(os.path.join(plots, "cct_cdf.png"), "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


def test_report_refuses_a_linked_plots_directory(sandbox):
    os.symlink(os.path.join(sandbox, "elsewhere"), os.path.join(sandbox, "d", "plots"))
    report_fails(sandbox, "d/plots is a symbolic link: not followed")
    assert os.listdir(os.path.join(sandbox, "elsewhere")) == []


@pytest.mark.parametrize("name", ["a/../../x", "..", "../elsewhere", "/tmp/x", "", "a\nb", "$\\frac$", "x" * 201,
                                  "-rf", ".hidden", "a b"])
def test_report_refuses_a_variant_name_that_is_no_file_name(sandbox, name):
    edit_json(sandbox, "results.json", lambda data: data["variants"][1].update(name=name))
    report_fails(sandbox, "d/results.json: variants[1].name: expected 1 to 200 letters, digits")


def test_report_refuses_an_experiment_name_that_is_no_file_name(sandbox):
    edit_json(sandbox, "config.json", lambda data: data.update(experiment="$\\frac{$"))  # bad mathtext in a title
    report_fails(sandbox, "d/config.json: experiment: expected 1 to 200 letters")


def test_report_refuses_the_same_variant_twice(sandbox):
    edit_json(sandbox, "results.json", lambda data: data["variants"][1].update(name="incast-lossless"))
    report_fails(sandbox, "d/results.json: variants[1].name: 'incast-lossless' is used twice")


def test_report_refuses_too_many_variants(sandbox):
    edit_json(sandbox, "results.json",
              lambda data: data.update(variants=[{"name": f"v{i}"} for i in range(results.MAX_VARIANTS + 1)]))
    report_fails(sandbox, f"{results.MAX_VARIANTS + 1} variants, more than the {results.MAX_VARIANTS}")


def test_report_refuses_iterations_of_an_unknown_variant(sandbox):
    append(sandbox, "iterations.csv", b"ghost,5,0,1.0,0,h2,h1,pause,0,0\n")
    report_fails(sandbox, "d/iterations.csv line 11: bad value 'ghost' in column variant "
                          "(expected the name of a variant in results.json)")


def test_table_escapes_control_characters(sandbox):
    edit_json(sandbox, "config.json", lambda data: data.update(description="\x1b[2J\nrm -rf /", kernel="6\r1"))
    edit_json(sandbox, "results.json", lambda data: data["variants"][0].update(fabric="\x07lossless"))
    lines = report.table(results.load_results(os.path.join(sandbox, "d"))).splitlines()
    assert all(line.isprintable() for line in lines)
    assert "(\\x1b[2J\\nrm -rf /)" in lines[0] and "kernel 6\\r1" in lines[1]
    assert lines[3].split()[:2] == ["incast-lossless", "\\x07lossless"]


# --- reading: one line naming the file and the line ------------------------------------------------


def test_report_on_malformed_json(sandbox):
    with open(os.path.join(sandbox, "d", "config.json"), "w") as f:
        f.write('{"experiment": "headline",\n "seeds": [1,, 2]}')
    report_fails(sandbox, "d/config.json line 2 column 14: not valid JSON: Expecting value")


def test_report_on_a_byte_that_is_not_utf8(sandbox):
    append(sandbox, "iterations.csv", b"incast-lossy,5,0,1.0,0,h\xff2,h1,pause,0,0\n")
    report_fails(sandbox, "d/iterations.csv line 11: not UTF-8 text (byte 0xff)")


@pytest.mark.parametrize("field", [b"9" * 200_000, b'"' + b"a,\n" * 70_000 + b'"'])
def test_report_on_a_huge_csv_field(sandbox, field):
    append(sandbox, "iterations.csv", b"incast-lossy,5,0," + field + b",0\n")
    report_fails(sandbox, "d/iterations.csv line", "field larger than field limit (131072)")


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400, "-" + "9" * 20, "NaN", "Infinity", "-Infinity"])
def test_report_on_a_json_number_out_of_range(sandbox, number):
    path = os.path.join(sandbox, "d", "results.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"p50": 700.0', f'"p50": {number}', 1))
    report_fails(sandbox, "d/results.json: variants[0].cct_us.p50: number", "out of range (finite, at most 2^63-1")


@pytest.mark.parametrize("csv_name, row, fragment", [
    ("iterations.csv", "incast-lossy,5,0,1e400,0", "bad value '1e400' in column cct_us"),
    ("iterations.csv", "incast-lossy,5,0,nan,0", "bad value 'nan' in column cct_us"),
    ("iterations.csv", "incast-lossy,5,0,-1,0", "bad value '-1' in column cct_us"),
    ("iterations.csv", "incast-lossy,5,0,abc,0", "bad value 'abc' in column cct_us (expected a decimal number"),
    ("iterations.csv", "incast-lossy,1_0,0,1.0,0", "bad value '1_0' in column iteration"),
    ("iterations.csv", "incast-lossy," + "1" * 5000 + ",0,1.0,0",
     "bad value '" + "1" * 40 + "'... (5000 characters) in column iteration"),
    ("iterations.csv", "incast-lossy", "no value in column iteration (the row has 1)"),
    ("telemetry/incast-lossless/occupancy.csv", "9223372036854775808,s1,eth1,3,0,0,0,0",
     "bad value '9223372036854775808' in column time_ns (expected an integer from 0 to 2^63-1)"),
    ("telemetry/incast-lossless/occupancy.csv", "1,s1,eth1,8,0,0,0,0",
     "bad value '8' in column priority (expected an integer from 0 to 7)"),
    ("telemetry/incast-lossless/occupancy.csv", "1,s1,eth1,3,0,0,2,0",
     "bad value '2' in column egress_paused (expected 0 or 1)"),
    ("telemetry/incast-lossless/occupancy.csv", "1,s1,$x$,3,0,0,0,0", "bad value '$x$' in column port"),
    ("telemetry/incast-lossless/rates.csv", "5,h2,17,10.0.0.1,1000,2000,0.5,slowstart",
     "bad value 'slowstart' in column event (expected cnp, timer or bytes)"),
    ("telemetry/incast-lossless/rates.csv", "5,h2,16777216,10.0.0.1,1000,2000,0.5,cnp",
     "bad value '16777216' in column qpn (expected an integer from 0 to 16777215)"),
    ("telemetry/incast-lossless/rates.csv", "5,h/2,17,10.0.0.1,1000,2000,0.5,cnp", "bad value 'h/2' in column host"),
])
def test_bad_csv_value(sandbox, csv_name, row, fragment):
    """Through the loading layer: the command would render two plots before it reads the telemetry."""
    append(sandbox, csv_name, row.encode() + b"\n")
    with open(os.path.join(sandbox, "d", csv_name)) as f:
        line_number = len(f.readlines())  # the appended row is the last line
    with pytest.raises(FabricError) as err:
        loaded = results.load_results(os.path.join(sandbox, "d"))
        loaded.occupancy("incast-lossless")
        loaded.rates("incast-lossless")
    assert "\n" not in str(err.value)
    assert f"d/{csv_name} line {line_number}: {fragment}" in str(err.value)


def test_report_on_a_csv_without_a_column(sandbox):
    with open(os.path.join(sandbox, "d", "iterations.csv"), "w") as f:
        f.write("variant,cct_us\n")
    report_fails(sandbox, "d/iterations.csv: no column iteration in the header")


def test_report_on_a_results_file_over_the_limit(sandbox):
    with open(os.path.join(sandbox, "d", "results.json"), "w") as f:
        f.write(" " * (results.MAX_JSON_BYTES + 1))
    report_fails(sandbox, "d/results.json is larger than 16 MiB, the limit for this file")


def test_report_on_too_many_rows(sandbox, monkeypatch):
    monkeypatch.setattr(results, "MAX_CSV_ROWS", 5)  # a million rows would take the suite seconds
    report_fails(sandbox, "d/iterations.csv line 7: more than 5 rows")


def test_report_on_json_nested_too_deep(sandbox):
    for nesting in ("[" * 100_000, '{"a": ' * 33 + "1" + "}" * 33):
        with open(os.path.join(sandbox, "d", "config.json"), "w") as f:
            f.write(nesting)
        report_fails(sandbox, "d/config.json: nested deeper than 32 levels")


def test_report_on_missing_files(sandbox):
    code, _, err = run_cli("report", os.path.join(sandbox, "nope"))
    assert_one_line_error(code, err, "no such directory:", "nope")
    os.remove(os.path.join(sandbox, "d", "results.json"))
    report_fails(sandbox, "no results.json in", "d: not a results directory")


def test_report_without_the_optional_files(sandbox):
    for name in ("config.json", "iterations.csv", "flows.csv"):
        os.remove(os.path.join(sandbox, "d", name))
    shutil.rmtree(os.path.join(sandbox, "d", "telemetry"))
    code, out, err = run_cli("report", os.path.join(sandbox, "d"))
    assert (code, err) == (0, "")
    assert os.listdir(os.path.join(sandbox, "d", "plots")) == ["straggler.png"]


@pytest.mark.parametrize("kind", ["link", "fifo", "directory"])
def test_report_reads_no_link_fifo_or_directory(sandbox, kind):
    path = os.path.join(sandbox, "d", "config.json")
    os.remove(path)
    {"link": lambda: os.symlink(os.path.join(sandbox, "outside.txt"), path), "fifo": lambda: os.mkfifo(path),
     "directory": lambda: os.mkdir(path)}[kind]()
    report_fails(sandbox, "d/config.json is " +
                 ("a symbolic link: not followed" if kind == "link" else "not a regular file"))


def test_report_follows_no_linked_telemetry_directory(sandbox):
    telemetry = os.path.join(sandbox, "d", "telemetry")
    os.rename(telemetry, os.path.join(sandbox, "elsewhere", "telemetry"))
    os.symlink(os.path.join(sandbox, "elsewhere", "telemetry"), telemetry)
    with pytest.raises(FabricError) as err:
        results.load_results(os.path.join(sandbox, "d")).occupancy("incast-lossless")
    assert str(err.value) == f"{sandbox}/d/telemetry is a symbolic link: not followed"


def test_report_removes_the_temporary_files_a_sigkill_left_and_nothing_else(tmp_path):
    """A report killed with SIGKILL while writing its plots leaves a temporary file nothing would remove; the next
    report removes it.  A link or a directory of such a name, and other names, stay (nor is a link followed)."""
    sandbox = str(tmp_path)
    build(sandbox, small=True)
    plots = os.path.join(sandbox, "d", "plots")
    os.mkdir(plots)
    with open(os.path.join(plots, ".fabric-emu-0123456789abcdef.tmp"), "wb") as f:
        f.write(PNG_SIGNATURE)  # half a plot, as the killed report left it
    os.symlink(os.path.join(sandbox, "outside.txt"), os.path.join(plots, ".fabric-emu-aaaaaaaaaaaaaaaa.tmp"))
    os.mkdir(os.path.join(plots, ".fabric-emu-bbbbbbbbbbbbbbbb.tmp"))
    for name in (".fabric-emu-0123.tmp", "notes.tmp"):
        with open(os.path.join(plots, name), "w") as f:
            f.write("the user's")
    before = snapshot(sandbox)
    code, _, err = run_cli("report", os.path.join(sandbox, "d"))
    assert (code, err) == (0, "")
    plots_written = {os.path.join("d", "plots", name) for name in ("cct_cdf.png", "cct_per_iteration.png")}
    assert changed(before, snapshot(sandbox)) == {"d/plots/.fabric-emu-0123456789abcdef.tmp"} | plots_written
    assert not os.path.lexists(os.path.join(plots, ".fabric-emu-0123456789abcdef.tmp"))


def test_report_needs_no_root():
    """As nobody (in a forked child, when the suite runs as root) on a directory nobody owns."""
    root = tempfile.mkdtemp()
    try:
        d = build(root, small=True)
        if os.geteuid() == 0:
            for base, dirs, files in os.walk(root):
                for name in [base, *(os.path.join(base, n) for n in dirs + files)]:
                    os.lchown(name, 65534, 65534)
        code, out, err = _as_nobody(lambda: run_cli("report", d))
        assert (code, err) == (0, ""), err
        assert sorted(os.listdir(os.path.join(d, "plots"))) == ["cct_cdf.png", "cct_per_iteration.png"]
        assert os.stat(os.path.join(d, "plots", "cct_cdf.png")).st_uid == os.stat(d).st_uid
    finally:
        shutil.rmtree(root)


def _as_nobody(call):
    """``call()``'s (code, stdout, stderr) from a child that dropped root first; in this process if not root."""
    if os.geteuid() != 0:
        return call()
    import matplotlib.backends.backend_agg  # noqa: F401 -- imported while the files are still readable
    import matplotlib.ticker  # noqa: F401

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            payload = json.dumps(call()).encode()
        except BaseException as err:  # reported to the parent, which fails the test
            payload = json.dumps([99, "", repr(err)]).encode()
        os.write(write, payload)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        payload = f.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(payload))


def test_cli_prints_one_line_and_no_traceback():
    """The installed entry point, end to end in a subprocess: a traceback would show here."""
    root = tempfile.mkdtemp()
    try:
        d = build(root)
        with open(os.path.join(d, "iterations.csv"), "ab") as f:
            f.write(b"incast-lossy,5,0,1e400,0\n")
        done = subprocess.run([sys.executable, "-m", "emulator", "report", d], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
        assert_one_line_error(done.returncode, done.stderr, "iterations.csv line 11: bad value '1e400'")
        assert done.stdout == "" and not os.path.exists(os.path.join(d, "plots"))
    finally:
        shutil.rmtree(root)


def test_visible_intervals_close_gaps_below_a_pixel():
    toggling = [(2.0 * i, 2.0 * i + 1) for i in range(100_000)]  # a flag that flips every sample
    assert report.visible_intervals(toggling, 200_000.0) == [(0.0, 199_999.0)]
    spaced = [(300.0 * i, 300.0 * i + 1) for i in range(1000)]  # gaps of 299: wider than 1/1000 of 299000
    assert report.visible_intervals(spaced, 299_000.0) == spaced
    assert len(report.visible_intervals(spaced, 600_000.0)) == 1


# --- fuzzing -----------------------------------------------------------------------------------------
# Mutations of a valid directory: a JSON value or raw number token replaced, a CSV cell replaced, bytes
# flipped/inserted/deleted/cut, a whole file replaced, a file turned into a link, FIFO, directory or
# nothing, and the plots directory prepared as a trap.

JSON_FILES = ("results.json", "config.json", "telemetry/incast-lossless/stats.json")
CSV_FILES = ("iterations.csv", "flows.csv", "telemetry/incast-lossless/occupancy.csv",
             "telemetry/incast-lossless/rates.csv")
FILES = JSON_FILES + CSV_FILES
KEYS = ("name", "variants", "experiment", "cct_us", "p50", "mean", "fabric", "prediction", "p", "params",
        "description", "predicted_gbn_us", "baseline_mean_us", "complete", "seeds")
HOSTILE_TEXT = st.sampled_from([
    "a/../../x", "..", ".", "", "/etc/passwd", "$\\frac{$", "x\x00y", "1e400", "-1", "NaN", "inf", "1" * 400,
    "9" * 25, "\x1b[31m", "a\nb", "a,b", '"', "x" * 300, "0", "1", "7", "8", "s1", "eth1", "1_000", " 1", "+1",
    "\u0661", "\ufeff", "incast-lossless", "incast-lossy", "loss-1e-3", "0.5e-3",
]) | st.text(max_size=20)
RAW_TOKENS = st.sampled_from(["1e400", "-1e400", "1" + "0" * 400, "NaN", "Infinity", "-Infinity", "9223372036854775808",
                              "-0", "1E-400", "5e-324", "[" * 40 + "]" * 40, '"\\ud800"', '"\\u0000"'])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | HOSTILE_TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4),
                                                                      children, max_size=3),
    max_leaves=8)
POSITION = st.integers(0, 10**6)
MUTATION = st.one_of(
    st.tuples(st.just("json_value"), st.sampled_from(JSON_FILES), POSITION, JSON_VALUES),
    st.tuples(st.just("json_raw"), st.sampled_from(JSON_FILES), POSITION, RAW_TOKENS),
    st.tuples(st.just("csv_cell"), st.sampled_from(CSV_FILES), POSITION, st.integers(0, 12), HOSTILE_TEXT),
    st.tuples(st.just("bytes"), st.sampled_from(FILES),
              st.lists(st.tuples(POSITION, st.sampled_from(["flip", "insert", "delete", "cut"]), st.integers(0, 255)),
                       min_size=1, max_size=4)),
    st.tuples(st.just("replace"), st.sampled_from(FILES), st.binary(max_size=200)),
    st.tuples(st.just("kind"), st.sampled_from(FILES + ("telemetry", "telemetry/incast-lossless")),
              st.sampled_from(["missing", "link_outside", "link_elsewhere", "directory", "fifo", "empty"])),
    st.tuples(st.just("plots"), st.sampled_from(["link_elsewhere", "file", "linked_pngs", "directory_at_png"])),
)
MARK = "\x00mark"


def _slots(data) -> list:
    """(container, key) of every value in a JSON document."""
    slots, stack = [], [data]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            slots.append((item, key))
            stack.append(child)
    return slots


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def mutate(root: str, mutation: tuple) -> None:
    """Apply one mutation to root/d; one that no longer applies (its file is gone, not a regular file, or no longer
    parses) does nothing."""
    kind, *args = mutation
    d = os.path.join(root, "d")
    if kind in ("json_value", "json_raw", "csv_cell", "bytes", "replace"):
        path = os.path.join(d, args[0])
        if not os.path.isfile(path) or os.path.islink(path):
            return  # an earlier mutation made it a link, FIFO or directory: opening a FIFO would block the test
    try:
        if kind in ("json_value", "json_raw"):
            name, position, value = args
            with open(os.path.join(d, name)) as f:
                data = json.load(f)
            slots = _slots(data)
            if slots:
                container, key = slots[position % len(slots)]
                container[key] = value if kind == "json_value" else MARK
                text = json.dumps(data)
                if kind == "json_raw":
                    text = text.replace(json.dumps(MARK), value)
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
        elif kind == "csv_cell":
            name, position, column, text = args
            with open(os.path.join(d, name), newline="") as f:
                rows = list(csv.reader(f))
            row = rows[position % len(rows)] if rows else []
            if row:
                row[column % len(row)] = text
                out = io.StringIO()
                csv.writer(out, lineterminator="\n").writerows(rows)
                with open(os.path.join(d, name), "w") as f:
                    f.write(out.getvalue())
        elif kind == "bytes":
            name, edits = args
            with open(os.path.join(d, name), "rb") as f:
                data = bytearray(f.read())
            for position, edit, byte in edits:
                at = position % (len(data) + 1)
                if edit == "flip" and at < len(data):
                    data[at] ^= byte or 0x80
                elif edit == "insert":
                    data[at:at] = bytes([byte])
                elif edit == "delete":
                    del data[at:at + 1 + byte % 8]
                elif edit == "cut":
                    del data[at:]
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        elif kind == "replace":
            name, data = args
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        elif kind == "kind":
            name, new = args
            path = os.path.join(d, name)
            _remove(path)
            if new == "link_outside":
                os.symlink(os.path.join(root, "outside.txt"), path)
            elif new == "link_elsewhere":
                os.symlink(os.path.join(root, "elsewhere"), path)
            elif new == "directory":
                os.mkdir(path)
            elif new == "fifo":
                os.mkfifo(path)
            elif new == "empty":
                open(path, "w").close()
        else:
            (trap,) = args
            plots = os.path.join(d, "plots")
            _remove(plots)
            if trap == "link_elsewhere":
                os.symlink(os.path.join(root, "elsewhere"), plots)
            elif trap == "file":
                open(plots, "w").close()
            else:
                os.mkdir(plots)
                for png in ("cct_cdf.png", "queue_incast-lossless.png"):
                    if trap == "linked_pngs":
                        os.symlink(os.path.join(root, "outside.txt"), os.path.join(plots, png))
                    else:
                        os.mkdir(os.path.join(plots, png))
    except (OSError, ValueError, csv.Error):  # ValueError: JSON or UTF-8 already broken by an earlier mutation
        pass


def read_everything(d: str) -> list[str]:
    """What the report computes before it draws: the table's lines, every variant's telemetry and plot data."""
    loaded = results.load_results(d)
    lines = report.table(loaded).splitlines()
    report.cct_by_variant(loaded.iterations)
    for v in loaded.variants:
        rows = loaded.occupancy(v["name"]) or []
        busiest = report.busiest_port(rows)
        if busiest:
            first, last = rows and (min(r.time_ns for r in rows), max(r.time_ns for r in rows))
            report.port_series(rows, *busiest)
            report.visible_intervals(report.xoff_intervals(rows, busiest[0]), (last - first) / 1e6)
            report.visible_intervals(report.egress_paused_intervals(rows, *busiest), (last - first) / 1e6)
        report.rate_series(loaded.rates(v["name"]) or [])
    return lines


@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_fuzz_results_directory_is_read_or_refused_in_one_line(mutations):
    with tempfile.TemporaryDirectory() as root:
        d = build(root)
        for mutation in mutations:
            mutate(root, mutation)
        before = snapshot(root)
        try:
            lines = read_everything(d)
        except FabricError as err:
            assert "\n" not in str(err) and str(err).isprintable(), str(err)
            event("refused in one line")
        else:
            assert all(line.isprintable() for line in lines)
            event("read")
        assert snapshot(root) == before


# A slow target: rendering the four plots takes about a second per directory that passes, so it runs a thirtieth
# of the profile's examples, at least 10 (10 by default, 666 under scripts/fuzz.sh 20000); the target above fuzzes
# everything before the drawing with the full count.
@settings(max_examples=max(10, settings().max_examples // 30))
@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_fuzz_report_writes_only_its_plots_or_fails_in_one_line(mutations):
    with tempfile.TemporaryDirectory() as root:
        d = build(root)
        for mutation in mutations:
            mutate(root, mutation)
        before = snapshot(root)
        code, out, err = run_cli("report", d)
        after = snapshot(root)
        if code == 0:
            assert err == ""
            assert all(line.isprintable() for line in out.splitlines())
            assert all(path.startswith(os.path.join("d", "plots")) for path in changed(before, after))
            for path, (kind, *_) in after.items():
                if path.startswith(os.path.join("d", "plots", "")) and changed(before, after) & {path}:
                    assert kind == "file"
                    with open(os.path.join(root, path), "rb") as f:
                        assert f.read(8) == PNG_SIGNATURE
            event("reported")
        else:
            assert_one_line_error(code, err)
            assert after == before
            event("refused in one line")
