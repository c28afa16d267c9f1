"""Units: what users type, what the emulator stores, what it prints."""

import pytest

from emulator.errors import FabricError, shown
from emulator.units import (format_rate, format_size, format_time,
                            parse_rate, parse_size, parse_time)


@pytest.mark.parametrize("text, bps", [
    ("100mbit", 100_000_000),
    ("1gbit", 1_000_000_000),
    ("50Mbit", 50_000_000),
    ("10kbit", 10_000),
    ("1.5gbit", 1_500_000_000),
    ("800bit", 800),
    ("2tbit", 2_000_000_000_000),
    ("400 Gbit", 400_000_000_000),
    (" 25gbit ", 25_000_000_000),
    ("50 Mbit/s", 50_000_000),
    # tc: *bps is bytes per second
    ("1bps", 8),
    ("1kbps", 8_000),
    ("1mbps", 8_000_000),
    ("1gbps", 8_000_000_000),
    ("1GBPS", 8_000_000_000),
    # Mininet TCLink: a bare number is Mbit/s
    (10, 10_000_000),
    (0.5, 500_000),
    (0.1, 100_000),
    (100.0, 100_000_000),
])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text, message", [
    ("fast", "bad rate 'fast': expected a number with a unit such as "
             "100mbit or 1gbit"),
    ("100", "bad rate '100': missing unit"),
    ("0mbit", "bad rate '0mbit': must be greater than 0"),
    (0, "bad rate 0: must be greater than 0"),
    ("-5mbit", "bad rate '-5mbit': expected a number"),
    (-5, "bad rate -5: must not be negative"),
    ("10mbits", "unknown unit 'mbits'; use one of bit, kbit"),
    ("0.5bit", "not a whole number of bit/s (0.5)"),
    ("", "bad rate '': expected"),
    ("1e9bit", "bad rate '1e9bit'"),
    (float("inf"), "bad rate inf"),
    (True, "bad rate True"),
    (None, "bad rate None"),
])
def test_parse_rate_rejects(text, message):
    with pytest.raises(FabricError) as err:
        parse_rate(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, size", [
    ("64KiB", 65_536),
    ("1MiB", 1_048_576),
    ("1GiB", 1_073_741_824),
    ("1500", 1500),
    ("1500B", 1500),
    ("1500 b", 1500),
    ("64KB", 64_000),
    ("64kb", 64_000),
    ("2MB", 2_000_000),
    ("64k", 65_536),
    ("2m", 2_097_152),
    ("1.5KiB", 1536),
    ("0", 0),
    (9000, 9000),
    (0, 0),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, message", [
    ("big", "bad size 'big': expected a number of bytes such as 1500"),
    ("1.1KiB", "bad size '1.1KiB': not a whole number of bytes (1126.4)"),
    ("1.5", "not a whole number of bytes"),
    ("64kbit", "unknown unit 'kbit'"),
    ("-1", "bad size '-1'"),
    (-1, "bad size -1: must not be negative"),
    (1.5, "bad size 1.5"),
    (False, "bad size False"),
])
def test_parse_size_rejects(text, message):
    with pytest.raises(FabricError, match="^bad size") as err:
        parse_size(text)
    assert message in str(err.value)


@pytest.mark.parametrize("text, ns", [
    ("5us", 5_000),
    ("1.5ms", 1_500_000),
    ("2s", 2_000_000_000),
    ("100ns", 100),
    ("10usec", 10_000),
    ("3msec", 3_000_000),
    ("1sec", 1_000_000_000),
    ("7nsec", 7),
    ("5 MS", 5_000_000),
    ("0", 0),
    ("0us", 0),
    (0, 0),
    (0.0, 0),
])
def test_parse_time(text, ns):
    assert parse_time(text) == ns


@pytest.mark.parametrize("text, message", [
    (5, "bad time 5: missing unit; expected a number with a unit such as "
        "5us or 1.5ms"),
    (1.5, "bad time 1.5: missing unit"),
    ("5", "bad time '5': missing unit"),
    ("0.5ns", "not a whole number of ns (0.5)"),
    ("-5ms", "bad time '-5ms'"),
    (-1, "bad time -1: must not be negative"),
    ("5 minutes", "unknown unit 'minutes'; use one of ns, nsec, us"),
    ("soon", "bad time 'soon'"),
])
def test_parse_time_rejects(text, message):
    with pytest.raises(FabricError) as err:
        parse_time(text)
    assert message in str(err.value)


@pytest.mark.parametrize("bps, text", [
    (50_000_000, "50 Mbit/s"),
    (1_500_000_000, "1.50 Gbit/s"),
    (100_000_000_000, "100 Gbit/s"),
    (800, "800 bit/s"),
    (10_000, "10 kbit/s"),
    (2_000_000_000_000, "2 Tbit/s"),
])
def test_format_rate(bps, text):
    assert format_rate(bps) == text


@pytest.mark.parametrize("n, text", [
    (65_536, "64 KiB"),
    (1500, "1500 B"),
    (9000, "9000 B"),
    (0, "0 B"),
    (1_048_576, "1 MiB"),
    (1_572_864, "1.50 MiB"),
    (100_000, "97.66 KiB"),
])
def test_format_size(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("ns, text", [
    (1_500_000, "1.50 ms"),
    (27_000, "27 us"),
    (999, "999 ns"),
    (0, "0 ns"),
    (2_000_000_000, "2 s"),
    (1_234_567, "1.23 ms"),
    (-1_500, "-1.50 us"),
])
def test_format_time(ns, text):
    assert format_time(ns) == text


@pytest.mark.parametrize("bps", [800, 10_000, 50_000_000, 1_500_000_000,
                                 400_000_000_000, 1_000_000_000_000])
def test_rate_round_trip(bps):
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize("n", [0, 64, 1500, 9000, 65_536, 1_048_576,
                               1_572_864, 3 * 2**30])
def test_size_round_trip(n):
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize("ns", [0, 100, 27_000, 1_500_000, 2_000_000_000])
def test_time_round_trip(ns):
    assert parse_time(format_time(ns)) == ns


# --- huge and long values: one line, never a traceback -------------------------------------------------

@pytest.mark.parametrize("parse", [parse_rate, parse_size, parse_time])
def test_text_over_64_characters_is_refused_unread(parse):
    with pytest.raises(FabricError) as err:
        parse("9" * 5000 + "k")
    assert str(err.value).endswith("(5001 characters): longer than 64 characters")


@pytest.mark.parametrize("parse, value, message", [
    (parse_size, 10**5000, "bad size 100000000000... (5001 digits): too large (at most 2**63 - 1 bytes)"),
    (parse_size, 2**63, "bad size 9223372036854775808: too large"),
    (parse_size, "9000000000g", "bad size '9000000000g': too large"),
    (parse_rate, 10**400, "bad rate 100000000000... (401 digits): too large"),
    (parse_rate, 1e300, "bad rate 1e+300: too large"),
    (parse_rate, "99999999999tbit", "bad rate '99999999999tbit': too large"),
    (parse_time, "9999999999999s", "bad time '9999999999999s': too large"),
], ids=lambda v: getattr(v, "__name__", None) or shown(v)[:20])
def test_values_of_2_63_and_up_are_refused(parse, value, message):
    with pytest.raises(FabricError) as err:
        parse(value)
    assert str(err.value).startswith(message)


def test_the_largest_values_parse_exactly():
    assert parse_size(2**63 - 1) == 2**63 - 1
    assert parse_size("9223372036854775807") == 2**63 - 1
    assert parse_rate("9223372036854775.807kbit") == 2**63 - 1


def test_long_fractions_are_not_rounded_into_whole_numbers():
    """Decimal's default context keeps 28 digits: 1024.000...0001 would round to 1024."""
    with pytest.raises(FabricError, match="not a whole number of bytes"):
        parse_size("1." + "0" * 40 + "1kib")
