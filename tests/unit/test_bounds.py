"""Bounds: what one machine holds, the ranges of numbers, and hostile values in messages."""

import pytest

from emulator import bounds
from emulator.fabric import capacity
from emulator.errors import FabricError, listed, printable, shown

GIB = 1 << 30


def error(call, *args, **kwargs) -> str:
    with pytest.raises(FabricError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    return message


# --- whole and real ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [(0, 0), (4294967295, 4294967295), ("17", 17), (" +5 ", 5), ("007", 7)])
def test_whole_accepts_its_range(value, expected):
    assert bounds.whole("seed", value, bounds.SEED) == expected


@pytest.mark.parametrize("value, message", [
    (-1, "seed -1: must be 0 to 4294967295"),
    (2**32, "seed 4294967296: must be 0 to 4294967295"),
    ("-1", "seed '-1': must be 0 to 4294967295"),
    ("9" * 400, "seed '9999999999999999999999999999999999999999'... (400 characters): must be 0 to 4294967295"),
    ("9" * 5000, "(5000 characters): must be 0 to 4294967295"),
    ("1.5", "seed '1.5': expected a whole number, 0 to 4294967295"),
    ("", "seed '': expected a whole number"),
    (True, "seed True: expected a whole number"),
    (1.0, "seed 1.0: expected a whole number"),
    ("0x10", "seed '0x10': expected a whole number"),
])
def test_whole_refuses_in_one_line(value, message):
    assert message in error(bounds.whole, "seed", value, bounds.SEED)


def test_whole_refuses_an_integer_too_long_to_print():
    message = error(bounds.whole, "seed", 10**5000 - 1, bounds.SEED)
    assert message == "seed 999999999999... (5000 digits): must be 0 to 4294967295"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", float("nan"), 0.05, 61, "x", None, True, 10**300])
def test_real_refuses_what_is_not_a_finite_number_in_range(value):
    message = error(bounds.real, "--timeout", value, bounds.PING_TIMEOUT_S)
    assert message.startswith("--timeout ") and "0.1 to 60" in message


def test_real_accepts_its_range():
    assert bounds.real("--timeout", "0.1", bounds.PING_TIMEOUT_S) == 0.1
    assert bounds.real("--timeout", 60, bounds.PING_TIMEOUT_S) == 60.0


# --- capacity ------------------------------------------------------------------------------------

def test_the_estimate_covers_what_fabrics_measured():
    """fattree,8 took 223 MiB of MemAvailable, fattree,12 455 MiB; the estimate must not be below that."""
    assert capacity.fabric_bytes(208, 384) >= 223 << 20
    assert capacity.fabric_bytes(612, 1296) >= 455 << 20
    message = error(capacity.check_capacity, "topology 'fattree,16'", 1344, 3072, available=2 * GIB,
                    namespaces=10**5)
    assert message == ("topology 'fattree,16' needs about 3.06 GiB of memory (256 MiB, 1344 nodes x 1 MiB, "
                       "3072 links x 512 KiB); this machine has 2 GiB available and keeps 256 MiB free: "
                       "use a smaller topology")


def test_a_fabric_that_fits_passes():
    capacity.check_capacity("star,8", 9, 8, available=GIB, namespaces=100)
    need = capacity.fabric_bytes(9, 8)
    capacity.check_capacity("star,8", 9, 8, available=need + capacity.KEEP_FREE_BYTES, namespaces=10)
    error(capacity.check_capacity, "star,8", 9, 8, available=need + capacity.KEEP_FREE_BYTES - 1, namespaces=10)


def test_namespaces_are_a_limit_too():
    assert "needs 10 network namespaces; the kernel allows 9 more" in error(
        capacity.check_capacity, "star,8", 9, 8, available=100 * GIB, namespaces=9)


def test_the_node_cap_comes_first():
    assert "2049 nodes (hosts and switches); at most 2048 on one machine" in error(
        capacity.check_capacity, "big", 2049, 0, available=10**6 * GIB, namespaces=10**6)


# --- each backend's caps on a topology ------------------------------------------------------------------

@pytest.mark.parametrize("hosts, switches, backend", [
    (2047, 1, "emulator"), (1024, 1024, "emulator"), (16383, 1, "sim"), (2828, 2828, "sim"), (16000, 384, None),
    (2829, 2829, None),  # the route cap is the simulation backend's
])
def test_a_topology_within_its_backends_caps_passes(hosts, switches, backend):
    bounds.check_topology("t", hosts, switches, backend)
    assert bounds.over_caps(hosts, switches, backend) is None


@pytest.mark.parametrize("hosts, switches, backend, message", [
    (2048, 1, "emulator", "t: 2049 nodes (2048 hosts, 1 switches); at most 2048 on one machine (the emulator)"),
    (16384, 1, "sim", "t: 16385 nodes (16384 hosts, 1 switches); the simulation backend runs at most 16384"),
    (16384, 1, None, "t: 16385 nodes (16384 hosts, 1 switches); at most 16384 on any backend (the emulator runs "
                     "2048)"),
    (2829, 2829, "sim", "t: 2,829 switches x 2,829 hosts = 8,003,241 routes; the simulation backend plans and "
                        "builds at most 8,000,000"),
    (10**400, 1, "sim", "t: 100000000000... (401 digits) nodes (100000000000... (401 digits) hosts, 1 switches); "
                        "the simulation backend runs at most 16384"),
])
def test_a_topology_over_its_backends_caps_is_one_line_naming_the_cap(hosts, switches, backend, message):
    assert error(bounds.check_topology, "t", hosts, switches, backend) == message


def test_the_widest_node_cap_is_the_simulation_backends():
    assert bounds.NODE_CAPS == {"emulator": bounds.MAX_NODES, "sim": bounds.SIM_MAX_NODES}
    assert bounds.MOST_NODES == bounds.SIM_MAX_NODES > bounds.MAX_NODES


def test_check_capacity_reads_this_machine():
    """With nothing injected it reads /proc: a star,2 fits on any machine that runs the tests."""
    capacity.check_capacity("star,2", 3, 2)
    assert capacity.meminfo_bytes("MemAvailable") > 0


def test_meminfo_bytes(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684448 kB\nMemAvailable:    1024 kB\nBroken:\n")
    assert capacity.meminfo_bytes("MemTotal", str(meminfo)) == 24684448 * 1024
    assert capacity.meminfo_bytes("MemAvailable", str(meminfo)) == 1024 * 1024
    assert capacity.meminfo_bytes("Broken", str(meminfo)) is None
    assert capacity.meminfo_bytes("MemFree", str(meminfo)) is None
    assert capacity.meminfo_bytes("MemTotal", str(tmp_path / "absent")) is None


# --- hostile values in messages -------------------------------------------------------------------

@pytest.mark.parametrize("digits", [40, 41, 400, 4300, 4301, 5000, 12345])
def test_shown_counts_the_digits_of_integers_too_long_to_print(digits):
    assert shown(10**digits - 1) == f"999999999999... ({digits} digits)"
    assert shown(-(10 ** (digits - 1))) == f"-100000000000... ({digits} digits)"


def test_shown_keeps_short_values_as_repr_and_shortens_long_ones():
    assert shown(1500) == "1500" and shown("64KiB") == "'64KiB'" and shown(1.5) == "1.5"
    assert shown("x" * 100) == repr("x" * 40) + "... (100 characters)"
    assert shown([1, 2, 3, 4]) == "[1, 2, 3, ...]"
    assert shown({"a": 10**5000}) == "{'a': 100000000000... (5001 digits)}"
    deep = []
    for _ in range(5000):
        deep = [deep]
    assert shown(deep) == "[[[...]]]"


def test_printable_escapes_what_would_break_the_line():
    assert printable("a\nb\u2028c\x85d\ud800") == "a\\nb\\u2028c\\x85d\\ud800"
    assert printable("plain é ü") == "plain é ü"


def test_long_lists_in_output_are_cut_with_a_count():
    names = [f"r-h{i}" for i in range(1, 1345)]
    assert listed(names[:16]) == ", ".join(names[:16])
    assert listed(names) == ", ".join(names[:16]) + ", ... and 1328 more"
    assert listed(["a", "b", "c"], limit=2, sep=" ") == "a b ... and 1 more"
