"""Fuzz the parsers of what users type and write: experiment files, topology
specs, units, link and switch options, and the command line's numbers.

Each target gets hostile input (any TOML value in any key, any bytes as a
file, any text as a spec or a number, integers of thousands of digits) and
must answer with a valid result or a FabricError of one line (naming the
file, for experiment files); any other exception fails the test.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import string
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from mininet.topo import Topo

from emulator import cli
from emulator.errors import FabricError
from emulator.study.experiment import EXPERIMENT_KEYS, SHORTHANDS, VARIANT_KEYS, Experiment, load_experiment
from emulator.fabric.plan import DEFAULT_LINK, link_params
from emulator.model.switch_params import SWITCH_OPTIONS, parse_overrides
from emulator.fabric.topospec import build_topo
from emulator.units import MAX_VALUE, parse_rate, parse_size, parse_time
from topologies import topos

LABEL = "fuzz.toml"


def one_line(err: FabricError) -> str:
    """The error's text, asserted to be exactly one printable line."""
    message = str(err)
    assert message.strip(), "an empty error message"
    assert len(message.splitlines()) == 1, message
    return message


# --- hostile values -------------------------------------------------------------------------------

class Digits(int):
    """An integer of ``digits`` nines; its repr stays short (Python cannot
    print integers of more than 4300 digits, and hypothesis prints examples)."""

    def __new__(cls, digits: int, sign: int = 1) -> "Digits":
        number = super().__new__(cls, sign * (10**digits - 1))
        number.digits, number.sign = digits, sign
        return number

    def __repr__(self) -> str:
        return f"Digits({self.digits}, {self.sign})"


HUGE_INTS = st.one_of(st.builds(Digits, st.sampled_from([20, 400, 4299, 4301, 5000]), st.sampled_from([1, -1])),
                      st.sampled_from([2**63, 2**63 - 1, 2**64 + 1, -1, 0, 2**32, 2**32 - 1]))
INTS = st.one_of(st.integers(), HUGE_INTS)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
TEXT = st.one_of(st.text(max_size=40),
                 st.sampled_from(["9" * 400, "9" * 5000, "star,100000", "fattree,k=40", "1e400", "nan", "inf",
                                  "-1", "64KiB", "20mbit", "5us", "1:2:3", "\u2028", "a\nb", "\ud800"]))
SCALARS = st.one_of(INTS, FLOATS, TEXT, st.booleans(), st.datetimes(), st.dates(), st.times())
TOML_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(list(DEFAULT_LINK) + list(SWITCH_OPTIONS) + ["x"]),
                                            inner, max_size=4)),
    max_leaves=8)


def toml_value(value: object) -> str:
    """A value as TOML text (tomllib reads but cannot write)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return value.isoformat()  # date, time, datetime


def _int_text(value: int) -> str:
    """str() refuses integers of more than 4300 digits; TOML files may hold them."""
    if isinstance(value, Digits):
        return ("-" if value.sign < 0 else "") + "9" * value.digits
    return str(value)


BASE = {"name": "fuzz", "topo": "star,3", "collective": "incast", "size": "64KiB", "iterations": 2}
VARIANT = {"name": "a"}
KEYS = list(EXPERIMENT_KEYS[1:-2]) + list(VARIANT_KEYS) + list(SHORTHANDS) + ["sweep", "unknown"]


def experiment_text(top: dict[str, object], variant: dict[str, object], sweep: dict[str, object]) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in top.items()]
    lines.append("[[variants]]")
    lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in variant.items()]
    if sweep:
        lines.append("[sweep]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in sweep.items()]
    return "\n".join(lines) + "\n"


def load(content: bytes) -> Experiment | str:
    """Load ``content`` as an experiment file: the experiment or the error's line."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / LABEL
        path.write_bytes(content)
        try:
            return load_experiment(str(path))
        except FabricError as err:
            message = one_line(err)
            assert message.startswith(f"{LABEL}: "), message
            return message


@given(top=st.dictionaries(st.sampled_from(KEYS), TOML_VALUES, max_size=3),
       variant=st.dictionaries(st.sampled_from(KEYS), TOML_VALUES, max_size=3),
       sweep=st.dictionaries(st.sampled_from(["loss", "bw", "size", "senders", "topo", "buffer", "x"]),
                             st.lists(SCALARS, min_size=1, max_size=3) | SCALARS, max_size=2))
def test_fuzz_experiment_file_values(top, variant, sweep):
    """Any TOML value in any key: a valid experiment, or one line naming the file."""
    result = load(experiment_text({**BASE, **top}, {**VARIANT, **variant}, sweep).encode())
    if isinstance(result, Experiment):
        for v in result.variants:
            assert 1 <= v.size <= 1 << 30 and 1 <= v.iterations <= 10_000 and 0 <= v.seed < 2**32


@given(st.binary(max_size=400) | st.text(alphabet=string.printable, max_size=400).map(str.encode))
def test_fuzz_experiment_file_bytes(content):
    """Any bytes as the file: almost always an error, always one line naming the file."""
    load(content)


def test_fuzz_experiment_file_reproducers():
    """The issue's reproducers, as fixed examples next to the random ones."""
    for extra in ('size = "' + "9" * 400 + '"', "seed = " + "9" * 5000, "seed = " + "9" * 400,
                  "iterations = " + "9" * 400, 'size = "' + "9" * 5000 + '"', "a = " + "[" * 5000 + "]" * 5000):
        text = experiment_text({**BASE}, VARIANT, {}).replace("[[variants]]", extra + "\n[[variants]]")
        assert isinstance(load(text.encode()), str), extra


# --- topology specs ----------------------------------------------------------------------------------

SPEC_ARGS = st.one_of(INTS.map(_int_text), FLOATS.map(repr), TEXT, st.integers(-3, 300).map(str))
SPEC_KEYS = st.sampled_from(["n", "k", "hosts", "leaves", "spines", "x", ""])


@st.composite
def specs(draw) -> str:
    name = draw(st.sampled_from(sorted(topos) + ["nosuch", ""]))
    args = draw(st.lists(SPEC_ARGS, max_size=3))
    kwargs = draw(st.lists(st.tuples(SPEC_KEYS, SPEC_ARGS), max_size=2))
    return ",".join([name, *args, *(f"{k}={v}" for k, v in kwargs)])


def check_topo(spec: str) -> None:
    try:
        topo = build_topo(spec)
    except FabricError as err:
        one_line(err)
    else:
        assert isinstance(topo, Topo) and 1 <= len(topo.nodes()) <= 2048


@given(specs())
def test_fuzz_topology_spec_structured(spec):
    """``name,arg,k=v`` with hostile arguments: a Topo within the node cap, or one line."""
    check_topo(spec)


@given(st.text(max_size=300))
def test_fuzz_topology_spec_text(spec):
    """Any text as a spec."""
    check_topo(spec)


# --- units, link and switch options -------------------------------------------------------------------

UNITS = ["", "b", "kib", "MiB", "GB", "g", "bit", "mbit", "Gbit/s", "tbps", "ns", "us", "ms", "s", "sec", "x"]
NUMBER_TEXT = st.builds("{}{}{}".format, st.text("0123456789.", min_size=1, max_size=80), st.sampled_from(["", " "]),
                        st.sampled_from(UNITS))
QUANTITIES = st.one_of(TEXT, NUMBER_TEXT, INTS, FLOATS, st.booleans(), st.none())


@pytest.mark.parametrize("parse", [parse_rate, parse_size, parse_time], ids=["rate", "size", "time"])
@given(value=QUANTITIES)
def test_fuzz_units(parse, value):
    """Rates, sizes and times: a whole number in [0, 2**63), or one line."""
    try:
        result = parse(value)
    except FabricError as err:
        one_line(err)
    else:
        assert isinstance(result, int) and 0 <= result <= MAX_VALUE


@given(key=st.sampled_from(list(DEFAULT_LINK)), value=QUANTITIES)
def test_fuzz_link_options(key, value):
    try:
        params = link_params({}, {key: value})
    except FabricError as err:
        one_line(err)
    else:
        assert 1_000 <= params.bw_bps <= 100 * 10**9 and 0 <= params.loss <= 1


@given(key=st.sampled_from(SWITCH_OPTIONS), value=TEXT | st.text("0123456789.:e+-", max_size=30))
def test_fuzz_switch_options(key, value):
    try:
        parse_overrides({key: value})
    except FabricError as err:
        one_line(err)


# --- the command line's numeric flags -----------------------------------------------------------------

FLAGS = [
    (["up", "--topo", "star"], "--seed"),
    (["pingall", "--topo", "star"], "--seed"),
    (["pingall", "--topo", "star"], "--timeout"),
    (["perf", "write", "h2"], "--iters"),
    (["perf", "write", "h2"], "--mtu"),
    (["perf", "write", "h2"], "--port"),
    (["perf", "write", "h2"], "--seed"),
    (["demo"], "--seconds"),
]
PARSER = cli.build_parser()  # built once: building it for every example would take most of the time
RANGES = {"--seed": (0, 2**32 - 1), "--timeout": (0.1, 60), "--iters": (1, 10**6), "--mtu": (256, 4096),
          "--port": (1, 65535), "--seconds": (1, 3600)}


@given(where=st.sampled_from(FLAGS),
       value=st.one_of(TEXT, INTS.map(_int_text), FLOATS.map(repr), st.text("0123456789+-. ", max_size=50)))
def test_fuzz_cli_numeric_flags(where, value):
    """A value for a numeric flag: parsed within its range, or one line (exit 1, or argparse's 2)."""
    command, flag = where
    assume("\x00" not in value)  # no command line can hold a NUL
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), mock.patch.object(cli, "build_parser", lambda: PARSER):
        try:
            args = cli._parse([*command, f"{flag}={value}"])
        except FabricError as err:
            one_line(err)
            return
        except SystemExit as exit_:
            assert exit_.code == 2
            assert len(stderr.getvalue().splitlines()) == 1, stderr.getvalue()
            assert stderr.getvalue().startswith("fabric-emu: ")
            return
    low, high = RANGES[flag]
    assert low <= getattr(args, flag[2:]) <= high
