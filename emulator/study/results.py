"""A results directory read back and checked, for ``fabric-emu report DIR``.

``fabric-emu run`` writes a results directory (layout in docs/results.md),
but the report is meant for directories copied from elsewhere, so
everything here treats the directory as hostile (docs/results.md, "What
report accepts"):

- files are read through :mod:`emulator.safefiles`: regular files only, no
  symbolic link below DIR followed, at most :data:`MAX_JSON_BYTES` of a
  JSON file and :data:`MAX_CSV_BYTES` (and :data:`MAX_CSV_ROWS` rows) of a
  CSV file;
- text must be UTF-8; JSON may nest :data:`MAX_JSON_DEPTH` levels; every
  number, in JSON or CSV, must be finite and at most :data:`MAX_NUMBER` in
  magnitude, and a CSV column the report uses must hold what it says
  (an integer in its range, a decimal number, 0 or 1, a name);
- names that become file names or plot labels (variants, the experiment,
  switches and ports) must match :data:`NAME`: they are refused, not
  rewritten, so a plot is never silently attributed to another name.

Any violation raises :class:`FabricError` with one line naming the file
and, where there is one, the line (CSV, JSON syntax) or the JSON location.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, TypeVar

from emulator.errors import SHOWN_CHARS, FabricError, printable, shown
from emulator.safefiles import read_inside

MAX_JSON_BYTES = 16 << 20  # results.json and config.json are kilobytes
MAX_CSV_BYTES = 64 << 20  # iterations.csv and occupancy.csv: megabytes for long runs
MAX_CSV_ROWS = 1_000_000
MAX_VARIANTS = 1000  # an experiment runs tens; each is a line in a plot and may have a plot of its own
MAX_JSON_DEPTH = 32  # what run writes nests 4 deep
MAX_NUMBER = 2**63 - 1  # every number, JSON or CSV, lies within +-MAX_NUMBER
_MAX_NUMBER_TEXT = "2^63-1"
# Variant, experiment, switch and port names: file names and plot labels (no '/', no '..', no '$' of mathtext).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
NAME_RULE = "1 to 200 letters, digits, '.', '_' or '-', the first a letter or digit"
_INTEGER_DIGITS = len(str(MAX_NUMBER))
_FLAGS = {"0": False, "1": True}
_DECIMAL = re.compile(r"(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][-+]?[0-9]{1,3})?")


Row = TypeVar("Row")


class Sample(NamedTuple):
    """One occupancy row: the values of a (switch, port, priority) from ``time_ns`` on."""

    time_ns: int
    switch: str
    port: str
    priority: int
    ingress_bytes: int
    egress_bytes: int
    egress_paused: bool
    xoff: bool


class RateRow(NamedTuple):
    """One row of a DCQCN rate trace: a QP's current rate after an event."""

    time_ns: int
    host: str
    qpn: int
    rate_bps: int
    event: str


class IterationRow(NamedTuple):
    """The columns of iterations.csv that the report uses."""

    variant: str
    iteration: int
    cct_us: float


class Column(NamedTuple):
    """A CSV column the report uses: ``parse`` raises ValueError (or KeyError) on text that is not ``expected``."""

    name: str
    parse: Callable[[str], Any]
    expected: str


def _integer(high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if len(text) > _INTEGER_DIGITS or not (text.isascii() and text.isdigit()):  # int() takes "+1", "1_0", " 1"
            raise ValueError(text)
        value = int(text)
        if value > high:
            raise ValueError(text)
        return value

    return parse


def _decimal(text: str) -> float:
    value = float(text) if _DECIMAL.fullmatch(text) else math.inf
    if not value <= MAX_NUMBER:
        raise ValueError(text)
    return value


def _flag(text: str) -> bool:
    return _FLAGS[text]  # KeyError for anything but 0 and 1


@functools.lru_cache(maxsize=4096)  # occupancy repeats a few switch and port names a million times
def _name(text: str) -> str:
    if not NAME.fullmatch(text):
        raise ValueError(text)
    return sys.intern(text)


def _integer_column(name: str, high: int = MAX_NUMBER) -> Column:
    return Column(name, _integer(high), f"an integer from 0 to {_MAX_NUMBER_TEXT if high == MAX_NUMBER else high}")


def _name_column(name: str) -> Column:
    return Column(name, _name, f"a name of {NAME_RULE}")


def _iteration_columns(variants: set[str]) -> tuple[Column, ...]:
    """iterations.csv's columns; the variant must be one of results.json's."""
    def variant(text: str) -> str:
        if text not in variants:
            raise ValueError(text)
        return text

    return (Column("variant", variant, "the name of a variant in results.json"), _integer_column("iteration"),
            Column("cct_us", _decimal, f"a decimal number from 0 to {_MAX_NUMBER_TEXT}"))


OCCUPANCY_COLUMNS = (_integer_column("time_ns"), _name_column("switch"), _name_column("port"),
                     _integer_column("priority", 7), _integer_column("ingress_bytes"), _integer_column("egress_bytes"),
                     Column("egress_paused", _flag, "0 or 1"), Column("xoff", _flag, "0 or 1"))


RATE_EVENTS = {"cnp": "cnp", "timer": "timer", "bytes": "bytes"}
RATE_COLUMNS = (_integer_column("time_ns"), _name_column("host"), _integer_column("qpn", (1 << 24) - 1),
                _integer_column("rate_bps"), Column("event", RATE_EVENTS.__getitem__, "cnp, timer or bytes"))


@dataclass(frozen=True)
class Results:
    """A loaded results directory; occupancy is read per variant on demand because it can be large."""

    directory: str
    config: dict[str, Any]
    results: dict[str, Any]
    iterations: list[IterationRow]

    @property
    def variants(self) -> list[dict[str, Any]]:
        return self.results["variants"]

    @property
    def experiment(self) -> str:
        """The experiment's name (checked against :data:`NAME` at loading), or "experiment" when neither file has it."""
        return self.results.get("experiment") or self.config.get("experiment") or "experiment"

    def occupancy(self, variant: str) -> list[Sample] | None:
        """The variant's occupancy rows, or None when it has no telemetry."""
        if not NAME.fullmatch(variant):
            raise ValueError(f"not a variant name: {variant!r}")  # names are checked at loading
        return _read_csv(self.directory, f"telemetry/{variant}/occupancy.csv", OCCUPANCY_COLUMNS, Sample)

    def rates(self, variant: str) -> list[RateRow] | None:
        """The variant's DCQCN rate trace, or None when it ran without DCQCN (or without telemetry)."""
        if not NAME.fullmatch(variant):
            raise ValueError(f"not a variant name: {variant!r}")
        return _read_csv(self.directory, f"telemetry/{variant}/rates.csv", RATE_COLUMNS, RateRow)


def load_results(directory: str) -> Results:
    """Read DIR's results.json, config.json and iterations.csv, and check them.

    results.json is what makes a directory a results directory; config.json
    and iterations.csv may be missing (a run interrupted early), and the
    report then shows what there is.
    """
    results = _read_json(directory, "results.json")
    if results is None:
        raise FabricError(f"no results.json in {printable(directory)}: not a results directory")
    results_path = printable(os.path.join(directory, "results.json"))
    variants = results.get("variants")
    if not isinstance(variants, list) or not all(isinstance(v, dict) and "name" in v for v in variants):
        raise FabricError(f"{results_path}: \"variants\" must be a list of objects with a \"name\"")
    if len(variants) > MAX_VARIANTS:
        raise FabricError(f"{results_path}: {len(variants)} variants, more than the {MAX_VARIANTS} a report shows")
    seen = set()
    for i, variant in enumerate(variants):
        _check_name(results_path, f"variants[{i}].name", variant["name"])
        if variant["name"] in seen:
            raise FabricError(f"{results_path}: variants[{i}].name: {variant['name']!r} is used twice")
        seen.add(variant["name"])
    config = _read_json(directory, "config.json") or {}
    for path, data in ((results_path, results), (printable(os.path.join(directory, "config.json")), config)):
        if data.get("experiment") is not None:
            _check_name(path, "experiment", data["experiment"])
    iterations = _read_csv(directory, "iterations.csv", _iteration_columns(seen), IterationRow) or []
    return Results(directory, config, results, iterations)


def _check_name(path: str, where: str, name: Any) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise FabricError(f"{path}: {where}: expected {NAME_RULE}, got {shown(name)}")


def _decode(path: str, data: bytes) -> str:
    """UTF-8 text (a byte-order mark dropped); a bad byte is named with its line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise FabricError(f"{path} line {line}: not UTF-8 text (byte {data[err.start]:#04x})") from None


# --- JSON ----------------------------------------------------------------------------------------


class _Refused(NamedTuple):
    """A JSON number out of range, or NaN/Infinity, as written: :func:`_check_json` names where it is."""

    text: str


def _json_int(text: str) -> int | _Refused:
    if len(text.lstrip("-")) > len(str(MAX_NUMBER)) or abs(int(text)) > MAX_NUMBER:
        return _Refused(text)
    return int(text)


def _json_float(text: str) -> float | _Refused:
    value = float(text)  # JSON's syntax always converts; 1e400 becomes inf
    return value if abs(value) <= MAX_NUMBER else _Refused(text)


def _read_json(directory: str, name: str) -> dict[str, Any] | None:
    """DIR/name as a JSON object, its numbers checked; None when the file is missing."""
    data = read_inside(directory, name, MAX_JSON_BYTES)
    if data is None:
        return None
    path = printable(os.path.join(directory, name))
    text = _decode(path, data)
    try:
        value = json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_Refused)
    except json.JSONDecodeError as err:
        raise FabricError(f"{path} line {err.lineno} column {err.colno}: not valid JSON: {err.msg}") from None
    except RecursionError:
        raise FabricError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    _check_json(path, value)
    if not isinstance(value, dict):
        raise FabricError(f"{path}: expected a JSON object")
    return value


def _check_json(path: str, value: Any) -> None:
    """Refuse the first out-of-range number and any nesting deeper than :data:`MAX_JSON_DEPTH`."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, _Refused):
            raise FabricError(f"{path}: {where.lstrip('.') or 'the document'}: number {shown(item.text)} out of "
                              f"range (finite, at most {_MAX_NUMBER_TEXT} in magnitude)")
        children = (item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ())
        for key, child in children:
            if isinstance(child, (dict, list)) and depth + 1 >= MAX_JSON_DEPTH:
                raise FabricError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels")
            label = f"[{key}]" if isinstance(key, int) else f".{printable(key[:SHOWN_CHARS])}"
            stack.append((where + label, child, depth + 1))


# --- CSV -----------------------------------------------------------------------------------------


def _read_csv(directory: str, relative: str, columns: tuple[Column, ...],
              row_type: Callable[..., Row]) -> list[Row] | None:
    """``row_type`` of the named columns of every row of DIR/relative, checked; None when the file is missing.

    Columns are found by name, so extra ones do no harm; empty lines are skipped.
    """
    data = read_inside(directory, relative, MAX_CSV_BYTES)
    if data is None:
        return None
    path = printable(os.path.join(directory, relative))
    reader = csv.reader(io.StringIO(_decode(path, data), newline=""))
    try:
        header = next(reader, [])
        missing = [c.name for c in columns if c.name not in header]
        if missing:
            raise FabricError(f"{path}: no column {', '.join(missing)} in the header")
        parsers = [(column.parse, header.index(column.name)) for column in columns]
        rows = []
        for row in reader:
            if not row:
                continue
            if len(rows) == MAX_CSV_ROWS:
                raise FabricError(f"{path} line {reader.line_num}: more than {MAX_CSV_ROWS} rows")
            try:
                rows.append(row_type(*[parse(row[i]) for parse, i in parsers]))
            except (ValueError, KeyError, IndexError):
                raise _bad_row(path, reader.line_num, columns, parsers, row) from None
        return rows
    except csv.Error as err:
        raise FabricError(f"{path} line {reader.line_num}: {err}") from None


def _bad_row(path: str, line: int, columns: tuple[Column, ...], parsers: list[tuple[Callable[[str], Any], int]],
             row: list[str]) -> FabricError:
    """The one-line error for a row that failed: its first missing or bad value."""
    for column, (parse, i) in zip(columns, parsers):
        if i >= len(row):
            return FabricError(f"{path} line {line}: no value in column {column.name} (the row has {len(row)})")
        try:
            parse(row[i])
        except (ValueError, KeyError):
            return FabricError(f"{path} line {line}: bad value {shown(row[i])} in column {column.name} "
                               f"(expected {column.expected})")
    raise AssertionError(f"{path} line {line}: a row failed that checks again as good")
