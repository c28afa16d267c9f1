"""Switch MMU settings derived from the links, and ``--switch`` overrides.

The headroom is recomputed here from ../shared/reference.md's rule (2 x frame, the
cable both ways, rate x response time) with exact fractions.
"""

from fractions import Fraction

import pytest

from emulator.errors import FabricError
from emulator.model import switch_params as params
from emulator._core.mmu import Mmu
from emulator.model.switch_params import IB_OPTIONS, derive_config

GBIT = 1_000_000_000


def expected_headroom(rate_bps: int, delay_ns: int, mtu: int) -> Fraction:
    frame = mtu + 14
    cable_both_ways = Fraction(rate_bps * 2 * delay_ns, 8 * 10**9)
    response = Fraction(rate_bps * params.RESPONSE_NS, 8 * 10**9)
    return (2 + params.UPSTREAM_KERNEL_FRAMES) * frame + cable_both_ways + response


@pytest.mark.parametrize("rate, delay, mtu", [
    (10 * GBIT, 1_000, 1500),
    (100 * GBIT, 500, 9000),
    (50_000_000, 2_000_000, 1500),
    (1 * GBIT, 0, 1500),
    (3 * GBIT, 333, 4000),        # not a whole number of bytes: within one byte
])
def test_default_headroom_formula(rate, delay, mtu):
    config = derive_config("lossless", rate, delay, mtu, ports=4)
    want = expected_headroom(rate, delay, mtu)
    assert want - 1 < config.headroom <= want + 1, (config.headroom, float(want))
    assert config.headroom == params.default_headroom(rate, delay, mtu)


def test_default_headroom_worked_example():
    # 10 Gbit/s, 1 us cable, MTU 1500: 5 x 1514 + 10e9 x (2 us + RESPONSE_NS) / 8e9
    response_s = Fraction(params.RESPONSE_NS, 10**9)
    want = 7570 + 10 * GBIT * (Fraction(2, 10**6) + response_s) / 8
    assert want.denominator == 1
    assert derive_config("lossless", 10 * GBIT, 1_000, 1500, ports=2).headroom == want


def test_lossless_and_lossy_fabrics():
    assert derive_config("lossless", GBIT, 1000, 1500, 4).lossless == frozenset({3})
    assert derive_config("lossy", GBIT, 1000, 1500, 4).lossless == frozenset()


@pytest.mark.parametrize("fabric, lossless_count", [("lossless", 1), ("lossy", 0)])
@pytest.mark.parametrize("ports", [1, 3, 8])
def test_buffer_is_pool_plus_reserves_plus_headrooms(fabric, lossless_count, ports):
    rate, delay, mtu = 10 * GBIT, 5_000, 1500
    frame = 1514
    config = derive_config(fabric, rate, delay, mtu, ports)
    pool = 64 * frame * ports
    reserves = ports * 8 * frame
    headrooms = ports * lossless_count * config.headroom
    assert config.reserve == frame
    assert config.buffer == pool + reserves + headrooms
    assert config.shared_pool(ports) == pool
    Mmu(config, [rate] * ports)   # a usable MMU


def test_defaults():
    config = derive_config("lossless", 25 * GBIT, 1000, 1500, 4)
    frame = 1514
    assert config.alpha == 1.0
    assert config.quanta == 65535
    assert config.strict == frozenset({6, 7})
    assert config.ecn is True
    assert config.kmin == 10 * frame and config.kmax == 40 * frame
    assert config.pmax == pytest.approx(0.2)
    assert config.xon_delta == 2 * frame
    assert config.mtu_frame == frame
    assert config.fc_floor == 500_000  # IB grants: the agents' budget (emulator._core.credits)


def test_lossless_two_priorities_doubles_headroom_in_buffer():
    config = derive_config("lossless", GBIT, 1000, 1500, 2, {"lossless": "3:4"})
    assert config.lossless == frozenset({3, 4})
    assert config.buffer == 64 * 1514 * 2 + 2 * (8 * 1514 + 2 * config.headroom)


@pytest.mark.parametrize("key, text, field, value", [
    ("buffer", "64MiB", "buffer", 64 * 2**20),
    ("reserve", "64KiB", "reserve", 65536),
    ("headroom", "100KB", "headroom", 100_000),
    ("headroom", "2000", "headroom", 2000),
    ("threshold", "1MiB", "threshold", 2**20),
    ("xon_delta", "3k", "xon_delta", 3072),
    ("kmin", "10KiB", "kmin", 10240),
    ("alpha", "0.5", "alpha", 0.5),
    ("alpha", "0", "alpha", 0.0),
    ("pmax", "1", "pmax", 1.0),
    ("pmax", "0.05", "pmax", 0.05),
    ("quanta", "1000", "quanta", 1000),
    ("quanta", "65535", "quanta", 65535),
    ("lossless", "3:4", "lossless", frozenset({3, 4})),
    ("lossless", "none", "lossless", frozenset()),
    ("strict", "7", "strict", frozenset({7})),
    ("strict", "", "strict", frozenset()),
    ("ecn", "off", "ecn", False),
    ("ecn", "on", "ecn", True),
    ("fc_floor", "0", "fc_floor", 0),
    ("fc_floor", "20us", "fc_floor", 20_000),
    ("fc_floor", "50ms", "fc_floor", 50_000_000),
])
def test_overrides(key, text, field, value):
    config = derive_config("ib" if key in IB_OPTIONS else "lossless", 10 * GBIT, 1000, 1500, 4, {key: text})
    assert getattr(config, field) == value
    if isinstance(value, int) and not isinstance(value, bool):
        assert type(getattr(config, field)) is int


def test_kmax_override_above_default_kmin():
    config = derive_config("lossless", GBIT, 1000, 1500, 4, {"kmin": "20KiB", "kmax": "40KiB"})
    assert (config.kmin, config.kmax) == (20480, 40960)


def test_reserve_override_enters_the_default_buffer():
    config = derive_config("lossy", GBIT, 1000, 1500, 2, {"reserve": "2KiB"})
    assert config.buffer == 64 * 1514 * 2 + 2 * 8 * 2048


@pytest.mark.parametrize("overrides, words", [
    ({"colour": "red"}, ["colour", "unknown"]),
    ({"alpha": "lots"}, ["alpha", "number"]),
    ({"alpha": "-1"}, ["alpha"]),
    ({"alpha": "65"}, ["alpha"]),
    ({"pmax": "1.5"}, ["pmax"]),
    ({"pmax": "nan"}, ["pmax"]),
    ({"quanta": "0"}, ["quanta"]),
    ({"quanta": "65536"}, ["quanta"]),
    ({"quanta": "x"}, ["quanta"]),
    ({"lossless": "9"}, ["lossless", "0 to 7"]),
    ({"lossless": "3,4"}, ["lossless"]),
    ({"lossless": "-1"}, ["lossless"]),
    ({"strict": "8"}, ["strict"]),
    ({"ecn": "yes"}, ["ecn", "on or off"]),
    ({"buffer": "lots"}, ["lots"]),
    ({"reserve": "-5"}, ["-5"]),
    ({"kmin": "40KiB", "kmax": "10KiB"}, ["kmax", "kmin"]),
    ({"kmin": "10KiB", "kmax": "10KiB"}, ["kmax", "kmin"]),
    ({"fc_floor": "51ms"}, ["fc_floor", "at most 50"]),
    ({"fc_floor": "5"}, ["fc_floor", "unit"]),
    ({"fc_floor": "-1us"}, ["fc_floor"]),
])
def test_bad_overrides(overrides, words):
    with pytest.raises(FabricError) as err:
        derive_config("ib" if set(overrides) & set(IB_OPTIONS) else "lossless", GBIT, 1000, 1500, 4, overrides)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_lossless_contradicts_lossy_fabric():
    with pytest.raises(FabricError, match="lossy"):
        derive_config("lossy", GBIT, 1000, 1500, 4, {"lossless": "3"})
    # saying "none" is not a contradiction
    assert derive_config("lossy", GBIT, 1000, 1500, 4, {"lossless": "none"}).lossless == frozenset()


def test_buffer_too_small():
    config = derive_config("lossless", GBIT, 1000, 1500, 4)
    needed = 4 * (8 * 1514 + config.headroom)
    with pytest.raises(FabricError, match="buffer"):
        derive_config("lossless", GBIT, 1000, 1500, 4, {"buffer": str(needed)})
    with pytest.raises(FabricError, match="buffer"):
        derive_config("lossless", GBIT, 1000, 1500, 4, {"buffer": "64KiB"})
    assert derive_config("lossless", GBIT, 1000, 1500, 4, {"buffer": str(needed + 1)}).shared_pool(4) == 1


def test_unknown_fabric():
    with pytest.raises(FabricError) as err:
        derive_config("lossles", GBIT, 1000, 1500, 4)
    assert "lossles" in str(err.value) and "lossless" in str(err.value) and "lossy" in str(err.value)


@pytest.mark.parametrize("overrides", [
    {"alpha": "0", "threshold": "2KiB"},
    {"alpha": "0.01"},
])
def test_accepted_config_lets_a_drained_lossless_ingress_resume(overrides):
    """derive_config must not accept settings under which XON can never go out.

    XON needs the shared use to fall to threshold - xon_delta (2 x 1514 by
    default).  With a static 2 KiB threshold, or a dynamic one of 0.01 x the
    pool of two ports (0.01 x 193792 = 1937 B), that is below zero: after the
    XOFF the peer stays paused for ever (refreshed XOFFs, no XON).  Either
    reject the settings or send XON.
    """
    try:
        config = derive_config("lossless", GBIT, 1000, 1500, 2, overrides)
    except FabricError:
        return
    mmu = Mmu(config, [GBIT, GBIT])
    frame = bytes(1514)
    for _ in range(20):
        mmu.enqueue(0, 0, 1, 3, frame)
        if mmu.take_pfc():
            break
    else:
        pytest.fail("test setup: no XOFF")
    while (head := mmu.head(1)) is not None:
        mmu.pop(1, head[0])
    assert mmu.ingress_bytes(0, 3) == 0
    assert mmu.take_pfc() == [(0, {3: 0})], "ingress drained but no XON: the peer stays paused"


@pytest.mark.parametrize("fabric", ["lossless", "lossy"])
@pytest.mark.parametrize("key, text", [("fc_floor", "1ms"), ("vl_buffer", "64KiB"), ("vl_buffer", "1KiB")])
def test_the_credit_settings_are_refused_off_ib(fabric, key, text):
    """An Ethernet fabric has no credits: its switch would ignore them, so they are refused as pfcwd is off lossless."""
    with pytest.raises(FabricError, match=rf"^--switch {key}=\.\.\. sets IB's link credits: --fabric {fabric} has none$"):
        derive_config(fabric, GBIT, 1000, 1500, 4, {key: text})
    assert getattr(derive_config("ib", GBIT, 1000, 1500, 4, {key: "1ms" if key == "fc_floor" else "64KiB"}), key)
